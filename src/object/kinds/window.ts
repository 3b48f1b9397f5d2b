/**
 * @module
 * The sliding window in its client's object (core/sliding-window.ts): a row
 * is the window's buckets, in the layout of its rule's period and
 * precision; a count goes in the current bucket, a refund comes out of the
 * bucket it was counted in while that bucket is still in the window, and a
 * held request's turn is the window's exact earliest admission.
 */
import {
  admit,
  admitAt,
  bucketIndex,
  bucketStartMs,
  describe,
  earliestAdmission,
  emptyState,
  evaluate,
  msToBucketEnd,
  type WindowLimit,
  type WindowState,
} from "../../core/sliding-window.ts";
import { costOf, type RuleCheck } from "../protocol.ts";
import type { Counter, Seen, Stored } from "./counter.ts";

/** A window's row: the layout of its buckets, and their counts. */
export type WindowData = { periodMs: number; precision: number; state: WindowState };

/** The window a check counts in. */
const windowOf = (check: RuleCheck): WindowLimit => check as WindowLimit;

/** A row's layout as a window of `limit` (for the arithmetic that reads only the layout). */
const layoutOf = (data: WindowData, limit = 1): WindowLimit => ({
  limit,
  periodMs: data.periodMs,
  precision: data.precision,
  strict: false,
});

export const windowCounter: Counter<WindowData> = {
  rowOf: (check) => `${check.id}|${windowOf(check).periodMs}|${windowOf(check).precision}`,

  fresh(nowMs, check, previous) {
    const window = windowOf(check);
    const state = emptyState(nowMs, window);
    // The rule's period or precision changed: the new row starts with the old one's weighted count.
    if (previous !== undefined && previous.counter === (windowCounter as Counter<unknown>)) {
      const old = previous.data as WindowData;
      const carried = evaluate(old.state, nowMs, { ...layoutOf(old, check.limit), strict: window.strict });
      state.counts[window.precision] = Math.ceil(carried.weighted);
    }
    return { periodMs: window.periodMs, precision: window.precision, state };
  },

  see(data, nowMs, check): Seen<WindowData> {
    const ev = evaluate(data.state, nowMs, windowOf(check));
    return { allowed: ev.allowed, weighted: ev.weighted, data: { ...data, state: ev.state } };
  },

  admit: (seen, cost) => ({ ...seen, state: admit(seen.state, cost) }),

  describe(seen, nowMs, check, counted) {
    return describe(
      { state: seen.data.state, weighted: seen.weighted, allowed: seen.allowed },
      nowMs,
      windowOf(check),
      counted,
    );
  },

  where: (seen) => seen.state.bucket,

  whereAt: (atMs, check) => bucketIndex(atMs, windowOf(check)),

  roomFor(seen, units, nowMs, check) {
    const counts = seen.state.counts.slice();
    counts[counts.length - 1]! += units;
    return evaluate({ bucket: seen.state.bucket, counts }, nowMs, windowOf(check)).allowed;
  },

  earliestAdmission: (data, check, fromMs) => earliestAdmission(data.state, windowOf(check), fromMs),

  admitAt: (data, check, atMs) => ({
    ...data,
    state: admitAt(data.state, { ...windowOf(check), cost: costOf(check) }, atMs),
  }),

  countAhead(seen, units) {
    const counts = seen.state.counts.slice();
    counts[counts.length - 1]! += units;
    return { data: { ...seen, state: { bucket: seen.state.bucket, counts } }, where: seen.state.bucket };
  },

  leaseEndsInMs: (nowMs, check) => msToBucketEnd(nowMs, windowOf(check)),

  takeBack(data, { bucket: where }, units) {
    const { state } = data;
    const index = where - (state.bucket - data.precision);
    const count = state.counts[index];
    if (count === undefined || count <= 0) return null;
    const counts = state.counts.slice();
    counts[index] = count - Math.min(count, units);
    return { ...data, state: { bucket: state.bucket, counts } };
  },

  addAt(data, { bucket: where }, units) {
    const { state } = data;
    const index = where - (state.bucket - data.precision);
    if (index < 0 || index >= state.counts.length) return null;
    const counts = state.counts.slice();
    counts[index] = counts[index]! + units;
    return { ...data, state: { bucket: state.bucket, counts } };
  },

  // Its newest bucket and the `precision` before it have rotated out: every count is gone.
  expiresAtMs: (data) => bucketStartMs(data.state.bucket + data.precision + 1, layoutOf(data)),

  encode: (data): Stored => ({
    periodMs: data.periodMs,
    precision: data.precision,
    bucket: data.state.bucket,
    counts: JSON.stringify(data.state.counts),
  }),

  decode: (stored) => ({
    periodMs: stored.periodMs,
    precision: stored.precision,
    state: { bucket: stored.bucket, counts: JSON.parse(stored.counts) as number[] },
  }),
};
