/**
 * @module
 * Replays a trace through one algorithm and measures it against an exact
 * sliding log kept over the algorithm's own admitted requests.
 */
import type { Algorithm } from "./algorithms.ts";
import { queueOf, type TimeQueue } from "./time-queue.ts";
import type { Trace } from "./traces.ts";

export type Measured = {
  trace: string;
  algorithm: string;
  requests: number;
  admitted: number;
  /** Most admitted requests of one source in any window `(t − periodMs, t]`. */
  maxInWindow: number;
  /** Admitted although an exact log, given the same admitted history, would have refused. */
  overAdmits: number;
  /** Refused although an exact log, given the same admitted history, would have admitted. */
  overRefusals: number;
  /** Admitted instants, in order; only when asked for (single-source traces, for the plot). */
  admittedMs: number[] | null;
};

/** Runs `trace` through `algorithm` under `limit` per `periodMs`. */
export function replay(
  trace: Trace,
  algorithm: Algorithm,
  limit: number,
  periodMs: number,
  keepAdmitted = false,
): Measured {
  const limiter = algorithm.create(limit, periodMs);
  const history: TimeQueue[] = [];
  const admittedMs: number[] | null = keepAdmitted ? [] : null;
  let admitted = 0;
  let maxInWindow = 0;
  let overAdmits = 0;
  let overRefusals = 0;
  for (let i = 0; i < trace.timesMs.length; i++) {
    const nowMs = trace.timesMs[i]!;
    const source = trace.sourceOf[i]!;
    const own = queueOf(history, source);
    own.dropThrough(nowMs - periodMs);
    const exactWould = own.size < limit;
    const allowed = limiter.admit(source, nowMs);
    if (allowed && !exactWould) overAdmits++;
    if (!allowed && exactWould) overRefusals++;
    if (!allowed) continue;
    admitted++;
    own.push(nowMs);
    // The count in the window only rises at an admission, so its maximum is seen here.
    if (own.size > maxInWindow) maxInWindow = own.size;
    admittedMs?.push(nowMs);
  }
  return {
    trace: trace.id,
    algorithm: algorithm.id,
    requests: trace.timesMs.length,
    admitted,
    maxInWindow,
    overAdmits,
    overRefusals,
    admittedMs,
  };
}
