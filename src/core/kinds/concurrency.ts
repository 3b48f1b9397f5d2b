/**
 * @module
 * Concurrency: at most `concurrency` of a client's requests in flight at
 * once, each holding a place from when it is forwarded until its response
 * has been sent (core/places.ts), a place not renewed for `place_timeout`
 * taken back. Its client's object gives places (`place` protocol), once the
 * request's counted rules admit it; with `max_delay`, a request waits in
 * line for one.
 */
import { formatDuration, parseDurationMs } from "../duration.ts";
import { parseIntegerFrom1 } from "../fields.ts";
import { fail, ok, type Result } from "../result.ts";
import { show } from "../show.ts";
import { type Fields, grouped, type Quota, type RuleKind, type TakeField } from "./kind.ts";

/** The most places a concurrency rule may give one client. */
export const MAX_CONCURRENCY = 10_000;
/** A place not renewed is taken back after this long by default, and within these bounds. */
export const DEFAULT_PLACE_TIMEOUT_MS = 60_000;
const MIN_PLACE_TIMEOUT_MS = 5_000;
const MAX_PLACE_TIMEOUT_MS = 3_600_000;

/** A concurrency rule's own fields, compiled: `limit` is its places (`concurrency`). */
export type ConcurrencyFields = {
  /** The client's places: requests in flight at once (`concurrency`); a tier or an override gives another. */
  limit: number;
  /** How long a place not renewed stays counted (`place_timeout`). */
  placeTimeoutMs: number;
  /** A request takes one place. */
  cost?: undefined;
};

/** Requests in flight renew with no time: no `w`, no `t`, and the draft's unit. */
const inFlight = (limit: number): string => `${limit} request${limit === 1 ? "" : "s"} in flight at once`;
const QUOTA: Quota = { unit: "concurrent-requests", words: inFlight };

export const concurrencyKind: RuleKind<ConcurrencyFields> = {
  name: "concurrency",
  protocol: "place",
  fields: ["concurrency", "place_timeout"],
  marks: ["concurrency"],
  required: ["concurrency"],
  maxLimit: MAX_CONCURRENCY,
  limitNoun: "places",
  limitField: "concurrency",
  foreignField: (field) =>
    field === "limit" || field === "period"
      ? 'a rule has either "limit" and "period" (requests per period) or "concurrency" (requests in flight at once), not both'
      : "does not apply to a concurrency rule, which counts requests in flight, each holding one place until it ends; remove it",
  ownField: () =>
    'only a concurrency rule has places; add "concurrency" (and remove "limit" and "period"), or remove it',

  parse(fields: Fields, take: TakeField): ConcurrencyFields {
    const limit = take("concurrency", parseIntegerFrom1(fields.concurrency, MAX_CONCURRENCY), 1);
    const placeTimeoutMs = take("place_timeout", parsePlaceTimeout(fields.place_timeout), 0);
    return { limit, placeTimeoutMs };
  },

  quota: () => QUOTA,

  view: (rule: ConcurrencyFields) => ({
    limit: {
      concurrency: rule.limit,
      place_timeout: formatDuration(rule.placeTimeoutMs),
      placeTimeoutMs: rule.placeTimeoutMs,
    },
    summary: `${grouped(rule.limit)} in flight at once`,
  }),

  warnings: () => [],

  // Requests in flight, whatever the place timeout: concurrency rules compare only with each other.
  measure: () => "in flight",

  overlap: (a, b, looser, same) =>
    same
      ? `${a} and ${b}: are the same limit on the same requests in flight and key; remove one`
      : `${a} and ${b}: limit the same requests in flight with the same key, so ${looser}, the looser, never refuses anything; remove it`,
};

/** `place_timeout`: 60 s when absent, from 5 s to 1 h. */
function parsePlaceTimeout(value: unknown): Result<number> {
  if (value === undefined) return ok(DEFAULT_PLACE_TIMEOUT_MS);
  const outOfRange = fail(
    `must be from ${formatDuration(MIN_PLACE_TIMEOUT_MS)} to ${formatDuration(MAX_PLACE_TIMEOUT_MS)}; got ${show(value)}`,
  );
  if (typeof value === "number" && value < 0) return outOfRange;
  const parsed = parseDurationMs(value);
  return parsed.ok && (parsed.value < MIN_PLACE_TIMEOUT_MS || parsed.value > MAX_PLACE_TIMEOUT_MS)
    ? outOfRange
    : parsed;
}
