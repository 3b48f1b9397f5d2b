/**
 * @module
 * The counted kinds' arithmetic in the object, listed once, and the pace of
 * held requests in their rows: the object reaches a rule's counter through
 * `counterOf(check)` and asks nothing else of its kind.
 */
import type { BookedCount, Pace, RowState } from "../../core/bookings.ts";
import type { RuleCheck } from "../protocol.ts";
import { bucketCounter } from "./bucket.ts";
import type { Counter } from "./counter.ts";
import { quotaCounter } from "./quota.ts";
import { windowCounter } from "./window.ts";

/** The counted kinds: a check names its own (one that names none is a window's, as before kinds). */
export type CountedKind = NonNullable<RuleCheck["kind"]>;

/** Every counted kind's counter, by kind. */
const COUNTERS: Record<CountedKind, Counter<unknown>> = {
  window: windowCounter as Counter<unknown>,
  bucket: bucketCounter as Counter<unknown>,
  quota: quotaCounter as Counter<unknown>,
};

/** The kind a check counts by. */
export const kindOfCheck = (check: RuleCheck): CountedKind => check.kind ?? "window";

/** The counter of a kind; a row stored by a kind this version does not know is read as a window's. */
export const counterOfKind = (kind: string): Counter<unknown> => COUNTERS[kind as CountedKind] ?? COUNTERS.window;

/** The counter of a rule's kind. */
export const counterOf = (check: RuleCheck): Counter<unknown> => COUNTERS[kindOfCheck(check)];

/** A booking's count is the rule's check as it applied when booked. */
const checkOf = (count: BookedCount): RuleCheck => count.window as RuleCheck;

/** How held requests are paced in a row: by its rule's counter. */
export const PACE: Pace = {
  start: (count, atMs) => counterOf(checkOf(count)).fresh(atMs, checkOf(count)),
  admitAt: (state: RowState, count, atMs) => counterOf(checkOf(count)).admitAt(state, checkOf(count), atMs),
  earliestAdmission: (state: RowState, count, fromMs) =>
    counterOf(checkOf(count)).earliestAdmission(state, checkOf(count), fromMs),
};

/** How long a booked count taken at `atMs` stays in its row: nothing is left to refund after. */
export function countedUntilMs(count: BookedCount, atMs: number): number {
  const check = checkOf(count);
  const counter = counterOf(check);
  const data = counter.admitAt(counter.fresh(atMs, check), check, atMs);
  return counter.refundableUntilMs?.(data) ?? counter.expiresAtMs(data);
}
