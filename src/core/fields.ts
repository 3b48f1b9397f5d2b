/**
 * @module
 * Parsers of the values a rule's fields take, shared by the common fields
 * (rules.ts) and each kind's own (kinds/): a flag, a whole number in a
 * range, one of some choices, a header name, a duration. Each answers a
 * `Result`, its message saying what the field must be and what it got.
 */
import { parseDurationMs } from "./duration.ts";
import { fail, ok, type Result } from "./result.ts";
import { show } from "./show.ts";

/** An HTTP token: a header's or a method's name. */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export const parseFlag = (value: unknown): Result<boolean> =>
  typeof value === "boolean" ? ok(value) : fail(`must be true or false; got ${show(value)}`);

/** An integer from 1 to `max`: a rule's `limit` or `precision`. */
export const parseIntegerFrom1 = (value: unknown, max: number): Result<number> =>
  typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= max
    ? ok(value)
    : fail(`must be an integer from 1 to ${max}; got ${show(value)}`);

/** One of `choices`, such as `"block"` or `"log"`. */
export function parseChoice<const C extends string>(value: unknown, choices: readonly C[]): Result<C> {
  if ((choices as readonly unknown[]).includes(value)) return ok(value as C);
  return fail(`must be ${choices.map((choice) => `"${choice}"`).join(" or ")}; got ${show(value)}`);
}

/** A response header's name, lower-cased; null when absent. */
export const parseHeaderName = (value: unknown): Result<string | null> =>
  value === undefined
    ? ok(null)
    : typeof value === "string" && TOKEN.test(value)
      ? ok(value.toLowerCase())
      : fail(`must be a header name such as "x-tokens-used"; got ${show(value)}`);

/** `0`, or a zero written with a unit, such as `"0s"`. */
export const isZero = (value: unknown): boolean =>
  value === 0 || (typeof value === "string" && /^0+(?:\.0+)?\s*(?:ms|s|m|h|d)$/.test(value.trim()));

/** A required period: seconds as a number, or a string such as `"10s"`. */
export const parsePeriod = (value: unknown): Result<number> =>
  value === undefined ? fail('is required: seconds, or a string like "10s", "1m", "1h", "1d"') : parseDurationMs(value);
