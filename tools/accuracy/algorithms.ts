/**
 * @module
 * The limiters the harness compares. The sliding-window variants are the
 * production core itself (`check` from src/core/sliding-window.ts); the exact
 * sliding log and the fixed window are references written here.
 */
import { check, emptyState, type WindowLimit, type WindowState } from "../../src/core/sliding-window.ts";
import { queueOf, type TimeQueue } from "./time-queue.ts";

/** One limiter's counters for every source of a trace. */
export type Limiter = {
  /** Decides a request from `source` at `nowMs`, and counts it when admitted. */
  admit(source: number, nowMs: number): boolean;
};

export type Algorithm = {
  id: string;
  label: string;
  /** Promises that no window of length `periodMs` admits more than `limit`. */
  neverOver: boolean;
  create(limit: number, periodMs: number): Limiter;
};

/** The reference: admits iff fewer than `limit` were admitted in `(now − periodMs, now]`. */
const exactLog: Algorithm = {
  id: "exact-log",
  label: "exact sliding log (reference)",
  neverOver: true,
  create(limit, periodMs) {
    const logs: TimeQueue[] = [];
    return {
      admit(source, nowMs) {
        const log = queueOf(logs, source);
        log.dropThrough(nowMs - periodMs);
        if (log.size >= limit) return false;
        log.push(nowMs);
        return true;
      },
    };
  },
};

/** Counts per `floor(now / periodMs)` window; the count starts from 0 in each window. */
const fixedWindow: Algorithm = {
  id: "fixed-window",
  label: "fixed window",
  neverOver: false,
  create(limit, periodMs) {
    const windows: number[] = [];
    const counts: number[] = [];
    return {
      admit(source, nowMs) {
        const window = Math.floor(nowMs / periodMs);
        if (windows[source] !== window) {
          windows[source] = window;
          counts[source] = 0;
        }
        if (counts[source]! >= limit) return false;
        counts[source]!++;
        return true;
      },
    };
  },
};

/** The production sliding-window counter with `precision` buckets, strict or not. */
function slidingWindow(precision: number, strict: boolean): Algorithm {
  const name = precision === 1 && !strict ? "sliding window, k = 1 (the seeds')" : `sliding window, k = ${precision}`;
  return {
    id: `${strict ? "strict" : "sliding"}-k${precision}`,
    label: strict ? `strict, k = ${precision}` : name,
    neverOver: strict,
    create(limit, periodMs) {
      const rule: WindowLimit = { limit, periodMs, precision, strict };
      const states: WindowState[] = [];
      return {
        admit(source, nowMs) {
          const { state, decision } = check(states[source] ?? emptyState(nowMs, rule), nowMs, rule);
          states[source] = state;
          return decision.allowed;
        },
      };
    },
  };
}

/** Every algorithm of the report, in its order; the exact log first. */
export const ALGORITHMS: Algorithm[] = [
  exactLog,
  fixedWindow,
  slidingWindow(1, false),
  slidingWindow(10, false),
  slidingWindow(60, false),
  slidingWindow(1, true),
  slidingWindow(10, true),
  slidingWindow(60, true),
];
