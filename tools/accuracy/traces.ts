/**
 * @module
 * Seeded synthetic request traces: who asks when. Every trace is checked
 * against one rule, `SETUP.limit` requests per `SETUP.periodMs`, per source.
 */
import { type Random, seededRandom } from "./random.ts";

/** The rule every trace is replayed against, and where time starts. */
export const SETUP = {
  limit: 100,
  periodMs: 60_000,
  /** A whole minute, so windows and buckets line up with the trace's own minutes. */
  startMs: Date.UTC(2026, 10, 21, 12, 0, 0),
} as const;

export type Trace = {
  id: string;
  /** One line for the report: what traffic this is. */
  description: string;
  /** Request instants in Unix milliseconds, ascending. */
  timesMs: Float64Array;
  /** The source (client key) of each request, 0 ≤ source < `sources`. */
  sourceOf: Int32Array;
  sources: number;
  startMs: number;
  endMs: number;
};

/** Requests per millisecond that make `load` times the limit. */
const rateAt = (load: number): number => (load * SETUP.limit) / SETUP.periodMs;

/** Collects (instant, source) pairs, then sorts them once into a trace. */
class TraceBuilder {
  private readonly offsets: number[] = [];
  private static readonly SOURCE_BITS = 4096;

  private readonly startMs: number;
  private readonly endMs: number;

  constructor(startMs: number, endMs: number) {
    this.startMs = startMs;
    this.endMs = endMs;
  }

  /** A request from `source` at `timeMs` (rounded down to the millisecond); ignored outside the trace. */
  add(source: number, timeMs: number): void {
    const t = Math.floor(timeMs);
    if (t < this.startMs || t >= this.endMs) return;
    // Offset and source packed in one number, so one numeric sort orders by time, then source.
    this.offsets.push((t - this.startMs) * TraceBuilder.SOURCE_BITS + source);
  }

  /** Poisson arrivals from `source` at `ratePerMs` over [fromMs, toMs). */
  poisson(random: Random, source: number, ratePerMs: number, fromMs: number, toMs: number): void {
    for (let t = fromMs + random.exponential(ratePerMs); t < toMs; t += random.exponential(ratePerMs)) {
      this.add(source, t);
    }
  }

  /** `count` requests from `source`, uniformly at random in [fromMs, toMs). */
  burst(random: Random, source: number, count: number, fromMs: number, toMs: number): void {
    for (let i = 0; i < count; i++) this.add(source, random.uniform(fromMs, toMs));
  }

  build(id: string, description: string, sources: number): Trace {
    if (sources > TraceBuilder.SOURCE_BITS) throw new Error(`trace ${id}: at most ${TraceBuilder.SOURCE_BITS} sources`);
    const packed = Float64Array.from(this.offsets).sort();
    const timesMs = new Float64Array(packed.length);
    const sourceOf = new Int32Array(packed.length);
    packed.forEach((value, i) => {
      timesMs[i] = this.startMs + Math.floor(value / TraceBuilder.SOURCE_BITS);
      sourceOf[i] = value % TraceBuilder.SOURCE_BITS;
    });
    return { id, description, timesMs, sourceOf, sources, startMs: this.startMs, endMs: this.endMs };
  }
}

const span = (periods: number) => ({ startMs: SETUP.startMs, endMs: SETUP.startMs + periods * SETUP.periodMs });

/** One client sending Poisson traffic at `load` times the limit. */
export function steadyPoisson(load: number, periods = 120, seed = 1): Trace {
  const { startMs, endMs } = span(periods);
  const b = new TraceBuilder(startMs, endMs);
  b.poisson(seededRandom(seed + Math.round(load * 1000)), 0, rateAt(load), startMs, endMs);
  return b.build(`poisson-${load}x`, `Poisson at ${load}× the limit, ${periods} periods`, 1);
}

/** One client alternating bursts at 8× the limit (mean 10 s) with silence (mean 50 s). */
export function onOffBursts(periods = 120, seed = 2): Trace {
  const { startMs, endMs } = span(periods);
  const random = seededRandom(seed);
  const b = new TraceBuilder(startMs, endMs);
  let t = startMs;
  while (t < endMs) {
    const onMs = random.exponential(1 / 10_000);
    b.poisson(random, 0, rateAt(8), t, t + onMs);
    t += onMs + random.exponential(1 / 50_000);
  }
  return b.build("on-off", `On/off: bursts at 8× the limit (mean 10 s), silences (mean 50 s), ${periods} periods`, 1);
}

/**
 * The boundary attack, every two windows: 2 × limit requests in the last
 * `burstMs` of window 2m, 2 × limit in the first `burstMs` of window 2m + 1,
 * then Poisson at 3× the limit for the rest of window 2m + 1. A fixed window
 * admits both bursts (2×); the seeds' counter assumes the first burst was
 * spread over its window and lets the follow-up traffic through (close to 2×).
 */
function addBoundaryAttack(
  b: TraceBuilder,
  random: Random,
  source: number,
  burstMs: number,
  startMs: number,
  endMs: number,
): void {
  const P = SETUP.periodMs;
  for (let w = startMs; w + 2 * P <= endMs; w += 2 * P) {
    b.burst(random, source, 2 * SETUP.limit, w + P - burstMs, w + P);
    b.burst(random, source, 2 * SETUP.limit, w + P, w + P + burstMs);
    b.poisson(random, source, rateAt(3), w + P + burstMs, w + 2 * P);
  }
}

export function boundaryAttack(periods = 60, seed = 3): Trace {
  const { startMs, endMs } = span(periods);
  const b = new TraceBuilder(startMs, endMs);
  addBoundaryAttack(b, seededRandom(seed), 0, 1_000, startMs, endMs);
  return b.build(
    "boundary",
    `Boundary attack: 2× the limit in the last second of a window and 2× in the first second of the next, then 3× Poisson to its end; every 2 windows, ${periods} periods`,
    1,
  );
}

/**
 * An adversary who knows where buckets end, against any precision: 2 × limit
 * in the last 10 ms of window 2m, then 2 × limit from 30 to 20 ms before the
 * end of window 2m + 1. By then the first burst sits in the oldest bucket,
 * weighted by 1 − elapsed (2% at k = 60, less at smaller k), yet it is still
 * entirely inside the sliding window.
 */
export function bucketEdgeAttack(periods = 60, seed = 5): Trace {
  const { startMs, endMs } = span(periods);
  const random = seededRandom(seed);
  const b = new TraceBuilder(startMs, endMs);
  const P = SETUP.periodMs;
  for (let w = startMs; w + 2 * P <= endMs; w += 2 * P) {
    b.burst(random, 0, 2 * SETUP.limit, w + P - 10, w + P);
    b.burst(random, 0, 2 * SETUP.limit, w + 2 * P - 30, w + 2 * P - 20);
  }
  return b.build(
    "bucket-edge",
    `Bucket-edge attack: 2× the limit in the last 10 ms of a window, 2× again 30–20 ms before the end of the next; every 2 windows, ${periods} periods`,
    1,
  );
}

/**
 * 3,000 clients with heavy-tailed rates (Pareto, tail index 1.3, at least 1
 * request a period, at most 20× the limit); 1% of them abusive: 20 flood at
 * 3–10× the limit, 10 run the boundary attack.
 */
export function population(periods = 10, seed = 4): Trace {
  const sources = 3_000;
  const abusive = 30;
  const { startMs, endMs } = span(periods);
  const random = seededRandom(seed);
  const b = new TraceBuilder(startMs, endMs);
  for (let source = 0; source < sources - abusive; source++) {
    const load = Math.min(20, random.pareto(1, 1.3) / SETUP.limit);
    b.poisson(random, source, rateAt(load), startMs, endMs);
  }
  for (let i = 0; i < abusive; i++) {
    const source = sources - abusive + i;
    if (i < 20) b.poisson(random, source, rateAt(random.uniform(3, 10)), startMs, endMs);
    else addBoundaryAttack(b, random, source, 1_000, startMs, endMs);
  }
  return b.build(
    "population",
    `3,000 clients, heavy-tailed rates (Pareto α 1.3), 1% abusive (20 flood at 3–10×, 10 boundary attackers), ${periods} periods`,
    sources,
  );
}

/** Every trace of the report, in its order. */
export const allTraces = (): Trace[] => [
  steadyPoisson(0.5),
  steadyPoisson(0.9),
  steadyPoisson(1.1),
  steadyPoisson(3),
  onOffBursts(),
  boundaryAttack(),
  bucketEdgeAttack(),
  population(),
];
