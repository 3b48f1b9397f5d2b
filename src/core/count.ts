/**
 * @module
 * A rule's `count`: which responses count against it. Every matched request
 * is counted before it is forwarded, so concurrent requests can never
 * overshoot; once the origin answers, a count whose response does not match
 * is given back.
 *
 * - `"all"` (default): every request counts;
 * - `"failed"`: responses with status 400 and above;
 * - `"successful"`: responses below 400;
 * - a list of statuses and classes, such as `[401, 403, "5xx"]`.
 */
import { fail, ok, type Result } from "./result.ts";
import { show } from "./show.ts";

/** Which response statuses count: every one, or those listed and those in the listed classes (4 for `4xx`). */
export type CountWhen =
  | { all: true }
  | { all: false; statuses: ReadonlySet<number>; classes: ReadonlySet<number>; source: unknown };

export const COUNT_ALL: CountWhen = { all: true };

const FAILED: CountWhen = { all: false, statuses: new Set(), classes: new Set([4, 5]), source: "failed" };
const SUCCESSFUL: CountWhen = { all: false, statuses: new Set(), classes: new Set([1, 2, 3]), source: "successful" };
const CLASS = /^([1-5])xx$/;

/** Whether a response with this status counts. */
export const countsResponse = (when: CountWhen, status: number): boolean =>
  when.all || when.statuses.has(status) || when.classes.has(Math.floor(status / 100));

export function parseCount(value: unknown): Result<CountWhen> {
  if (value === undefined || value === "all") return ok(COUNT_ALL);
  if (value === "failed") return ok(FAILED);
  if (value === "successful") return ok(SUCCESSFUL);
  const usage = `must be "all", "failed", "successful", or a list of statuses and classes such as [401, 403, "5xx"]`;
  if (!Array.isArray(value) || value.length === 0) return fail(`${usage}; got ${show(value)}`);
  const statuses = new Set<number>();
  const classes = new Set<number>();
  for (const item of value) {
    const klass = typeof item === "string" ? CLASS.exec(item) : null;
    if (klass) classes.add(Number(klass[1]));
    else if (typeof item === "number" && Number.isInteger(item) && item >= 100 && item <= 599) statuses.add(item);
    else return fail(`${usage}; ${show(item)} is neither a status from 100 to 599 nor a class from "1xx" to "5xx"`);
  }
  return ok({ all: false, statuses, classes, source: value });
}

/** The field as wrangler.toml would spell it. */
export const countAsWritten = (when: CountWhen): unknown => (when.all ? "all" : when.source);
