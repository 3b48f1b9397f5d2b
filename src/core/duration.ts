/**
 * @module
 * Durations: a rule's `period` parsed (seconds as a number, or a string
 * such as "10s"), and milliseconds written back as people and wrangler.toml
 * spell them.
 */
import { fail, ok, type Result } from "./result.ts";
import { show } from "./show.ts";

export type Unit = "ms" | "s" | "m" | "h" | "d";
/** A number of seconds, or a count and a unit: `"500ms"`, `"10s"`, `"1m"`, `"1h"`, `"1d"`. */
export type Duration = number | `${number}${Unit}`;

const unitMs: Record<Unit, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const pattern = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$/;

/** The longest period a rule may have: 365 days. */
export const MAX_PERIOD_MS = 365 * unitMs.d;

/**
 * Converts a duration to whole milliseconds.
 * @returns the milliseconds, or an error message that quotes the bad value.
 */
export function parseDurationMs(value: unknown): Result<number> {
  let ms: number;
  if (typeof value === "number" && Number.isFinite(value)) ms = value * 1_000;
  else if (typeof value === "string" && pattern.test(value.trim())) {
    const [, amount = "", unit = "s"] = pattern.exec(value.trim()) ?? [];
    ms = Number(amount) * unitMs[unit as Unit];
  } else {
    return fail(`must be seconds as a number or a string like "10s", "1m", "1h", "1d"; got ${show(value)}`);
  }
  // Decimal seconds such as 1.1 are not exact in binary; snap what is within rounding error.
  if (Math.abs(ms - Math.round(ms)) < 1e-6) ms = Math.round(ms);
  if (!Number.isInteger(ms)) return fail(`must be a whole number of milliseconds; got ${show(value)}`);
  if (ms < 1) return fail(`must be at least 1ms; got ${show(value)}`);
  if (ms > MAX_PERIOD_MS) return fail(`must be at most 365d; got ${show(value)}`);
  return ok(ms);
}

/** The units a period is written in, largest first: its milliseconds, its suffix and its name. */
const UNITS: [number, Unit, string][] = [
  [86_400_000, "d", "day"],
  [3_600_000, "h", "hour"],
  [60_000, "m", "minute"],
  [1_000, "s", "second"],
  [1, "ms", "millisecond"],
];

/** The largest unit that divides `ms` exactly. */
const exactUnit = (ms: number) => UNITS.find(([size]) => ms % size === 0) ?? UNITS[UNITS.length - 1]!;

/** `60000` → `"1 minute"`, `90000` → `"90 seconds"`. */
export function describePeriod(ms: number): string {
  const [size, , name] = exactUnit(ms);
  const n = ms / size;
  return n === 1 ? name : `${n} ${name}s`;
}

/** `60000` → `"1m"`, `90000` → `"90s"`, `1500` → `"1500ms"`: as wrangler.toml would spell it. */
export function formatDuration(ms: number): string {
  const [size, suffix] = exactUnit(ms);
  return `${ms / size}${suffix}`;
}
