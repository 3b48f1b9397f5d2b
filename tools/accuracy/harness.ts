/**
 * @module
 * Runs every trace through every algorithm. Pure: no files, no clock, so the
 * Node script and the workerd test share it.
 */
import { ALGORITHMS, type Algorithm } from "./algorithms.ts";
import { type BucketRow, replayBuckets } from "./buckets.ts";
import { type Measured, replay } from "./replay.ts";
import { allTraces, SETUP, type Trace } from "./traces.ts";

export type Row = Measured & {
  label: string;
  neverOver: boolean;
  /** `maxInWindow ÷ limit`. */
  maxRatio: number;
  /** Admitted as a share of what the exact log admits on the same trace. */
  shareOfExact: number;
  /** Decisions that differ from an exact log's on the same admitted history, as a share of all requests. */
  differing: number;
};

export type TraceResult = { trace: Trace; rows: Row[] };

/** A trace in the report: the windows' rows, and the token buckets' beside them. */
export type ReportedTrace = TraceResult & { buckets: BucketRow[] };

/** One trace through `algorithms` (the exact log must be among them: the others are measured against it). */
export function runTrace(trace: Trace, algorithms: Algorithm[] = ALGORITHMS, keepAdmitted = false): TraceResult {
  const measured = algorithms.map((a) => ({
    a,
    m: replay(trace, a, SETUP.limit, SETUP.periodMs, keepAdmitted && trace.sources === 1),
  }));
  const exact = measured.find(({ a }) => a.id === "exact-log");
  if (!exact) throw new Error("runTrace: the exact sliding log must be one of the algorithms");
  const rows = measured.map(({ a, m }) => ({
    ...m,
    label: a.label,
    neverOver: a.neverOver,
    maxRatio: m.maxInWindow / SETUP.limit,
    shareOfExact: m.admitted / exact.m.admitted,
    differing: (m.overAdmits + m.overRefusals) / m.requests,
  }));
  return { trace, rows };
}

/** Every trace of the report through every algorithm, and through the token buckets. */
export const runAll = (keepAdmitted = false): ReportedTrace[] =>
  allTraces().map((trace) => ({ ...runTrace(trace, ALGORITHMS, keepAdmitted), buckets: replayBuckets(trace) }));
