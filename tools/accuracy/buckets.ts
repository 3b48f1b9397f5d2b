/**
 * @module
 * The token bucket on the same traces: the production GCRA core (`check`
 * from src/core/gcra.ts) beside an exact token bucket written here, both at
 * the traces' sustained rate (`SETUP.limit` per `SETUP.periodMs`) and a
 * burst per variant, each measured against the exact bucket fed with its
 * own admissions.
 */
import { type BucketLimit, type BucketState, check, fullState } from "../../src/core/gcra.ts";
import { queueOf, type TimeQueue } from "./time-queue.ts";
import { SETUP, type Trace } from "./traces.ts";

/** The bursts the report replays. */
export const BURSTS = [100, 20] as const;

/** Decides a request from `source` at `nowMs`, and counts it when admitted. */
type Limiter = { admit(source: number, nowMs: number): boolean };

/**
 * The reference: a token bucket refilled continuously, counted exactly in
 * whole `1 / periodMs` parts of a unit (a unit is `periodMs` of them, and
 * `limit` of them come back each millisecond). It holds `burst` units when
 * full, admits a request when it holds one unit, and takes it; tokens fed
 * with admissions it would refuse go below zero. Everything stays far below
 * 2⁵³ (burst × period is 6 × 10⁶).
 */
class ExactBucket {
  private readonly tokens: number[] = [];
  private readonly atMs: number[] = [];
  private readonly full: number;

  constructor(burst: number) {
    this.full = burst * SETUP.periodMs;
  }

  private refill(source: number, nowMs: number): number {
    const before = this.tokens[source];
    const tokens =
      before === undefined ? this.full : Math.min(this.full, before + SETUP.limit * (nowMs - this.atMs[source]!));
    this.tokens[source] = tokens;
    this.atMs[source] = nowMs;
    return tokens;
  }

  /** Whether it holds one unit for `source` at `nowMs`. */
  holds(source: number, nowMs: number): boolean {
    return this.refill(source, nowMs) >= SETUP.periodMs;
  }

  /** Takes one unit, whether it holds it or not; returns what is then spent, in units (above `burst` after an over-admission). */
  take(source: number, nowMs: number): number {
    this.tokens[source] = this.refill(source, nowMs) - SETUP.periodMs;
    return (this.full - this.tokens[source]!) / SETUP.periodMs;
  }
}

/** The exact bucket as a limiter. */
function exactBucket(burst: number): Limiter {
  const bucket = new ExactBucket(burst);
  return {
    admit(source, nowMs) {
      if (!bucket.holds(source, nowMs)) return false;
      bucket.take(source, nowMs);
      return true;
    },
  };
}

/** The production core. */
function gcra(burst: number): Limiter {
  const rule: BucketLimit = { limit: SETUP.limit, periodMs: SETUP.periodMs, burst };
  const states: BucketState[] = [];
  return {
    admit(source, nowMs) {
      const { state, decision } = check(states[source] ?? fullState(nowMs, rule), nowMs, rule);
      states[source] = state;
      return decision.allowed;
    },
  };
}

export type BucketRow = {
  algorithm: string;
  label: string;
  burst: number;
  requests: number;
  admitted: number;
  /** Admitted as a share of what the exact bucket of the same burst admits on the same trace. */
  shareOfExact: number;
  /** Decisions that differ from the exact bucket's on the same admitted history, as a share of all requests. */
  differing: number;
  /** Admitted although the exact bucket, given the same admitted history, would have refused. */
  overAdmits: number;
  /**
   * The most any interval of one source held beyond the rate, `max(admitted in [s, t] − rate × (t − s))`,
   * ÷ burst: at most 1 is within the conformance bound `burst + rate × t`.
   */
  maxExcessRatio: number;
  /** Most admitted of one source in any window `(t − periodMs, t]`, ÷ limit: the window's measure, for comparison. */
  maxInWindowRatio: number;
};

function measure(trace: Trace, limiter: Limiter, burst: number) {
  const judge = new ExactBucket(burst);
  const windows: TimeQueue[] = [];
  let admitted = 0;
  let overAdmits = 0;
  let overRefusals = 0;
  let maxExcess = 0;
  let maxInWindow = 0;
  for (let i = 0; i < trace.timesMs.length; i++) {
    const nowMs = trace.timesMs[i]!;
    const source = trace.sourceOf[i]!;
    const exactWould = judge.holds(source, nowMs);
    const allowed = limiter.admit(source, nowMs);
    if (allowed && !exactWould) overAdmits++;
    if (!allowed && exactWould) overRefusals++;
    if (!allowed) continue;
    admitted++;
    // What is spent is the largest excess over the rate of any interval ending now (Lindley's recursion).
    maxExcess = Math.max(maxExcess, judge.take(source, nowMs));
    const window = queueOf(windows, source);
    window.dropThrough(nowMs - SETUP.periodMs);
    window.push(nowMs);
    maxInWindow = Math.max(maxInWindow, window.size);
  }
  return { admitted, overAdmits, overRefusals, maxExcess, maxInWindow };
}

/** The trace through the exact bucket and the production core, for every burst of {@link BURSTS}. */
export function replayBuckets(trace: Trace): BucketRow[] {
  return BURSTS.flatMap((burst) => {
    const exact = measure(trace, exactBucket(burst), burst);
    const variants = [
      { algorithm: `exact-bucket-b${burst}`, label: `exact token bucket, burst ${burst} (reference)`, m: exact },
      { algorithm: `gcra-b${burst}`, label: `GCRA, burst ${burst}`, m: measure(trace, gcra(burst), burst) },
    ];
    return variants.map(({ algorithm, label, m }) => ({
      algorithm,
      label,
      burst,
      requests: trace.timesMs.length,
      admitted: m.admitted,
      shareOfExact: m.admitted / exact.admitted,
      differing: (m.overAdmits + m.overRefusals) / trace.timesMs.length,
      overAdmits: m.overAdmits,
      maxExcessRatio: m.maxExcess / burst,
      maxInWindowRatio: m.maxInWindow / SETUP.limit,
    }));
  });
}
