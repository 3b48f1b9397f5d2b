/**
 * @module
 * Netflix's Gradient2 concurrency limit, written for the benchmark from its
 * published description: the class comment and builder defaults of
 * Gradient2Limit, and WindowedLimit and SimpleLimiter, in
 * Netflix/concurrency-limits v0.5.4 (concurrency-limits-core), as its
 * README's server example composes them (`WindowedLimit` around
 * `Gradient2Limit`, each with its defaults). Node-only benchmark code.
 *
 * - The limiter (SimpleLimiter) lets a request through while fewer than
 *   `limit` are in flight, else refuses it at once.
 * - Each request ends with a sample: its round-trip time and how many were
 *   in flight when it was let through. The window (WindowedLimit) gathers
 *   them; the first sample to end over a second after the previous window
 *   closed closes it, and a window of at least 10 samples passes on their mean RTT
 *   and their highest in-flight count (a shorter one is dropped).
 * - Gradient2 keeps a long-term RTT: the mean of its first 10 windows, then
 *   an exponential average over 600 (weight 2 ÷ 601), cut by 5 % whenever it
 *   is more than twice the window's RTT (the load has passed). While the
 *   in-flight count stays under half the limit the limit stays (nothing is
 *   learnt from a limit that does not bind). Otherwise
 *   `g = clamp(tolerance · long ÷ short, 0.5, 1)`,
 *   `estimate ← 0.8 · estimate + 0.2 · (g · estimate + queueSize)`, kept
 *   within [minLimit, maxLimit]; the limit is the estimate rounded down.
 * - A client that gives up ends its request with a sample of the time it
 *   waited, as the library's gRPC server interceptor reports a cancelled
 *   call (`onDropped`: a sample like any other, to Gradient2).
 */
import type { ConcurrencyLimiter, Flight } from "./concurrency-limiter.ts";

export type Gradient2Params = {
  initialLimit: number;
  minLimit: number;
  maxLimit: number;
  /** The weight of a new estimate against the current one. */
  smoothing: number;
  /** How far the limit may grow over the gradient's share while latency holds (the library's default ignores the limit). */
  queueSize: (limit: number) => number;
  /** Windows the long-term RTT averages over, after its first `warmupWindows`. */
  longWindow: number;
  warmupWindows: number;
  /** How much the short-term RTT may exceed the long-term one before the limit is cut. */
  rttTolerance: number;
  /** WindowedLimit: a window closes no sooner than this after it opened… */
  minWindowMs: number;
  /** …and no later (with twice its shortest RTT in between). */
  maxWindowMs: number;
  /** …and is passed on only with at least this many samples. */
  windowSamples: number;
  /** Samples shorter than this are ignored. */
  minRttMs: number;
};

/** Gradient2Limit.Builder's and WindowedLimit.Builder's defaults, v0.5.4. */
export const GRADIENT2_DEFAULTS: Gradient2Params = {
  initialLimit: 20,
  minLimit: 20,
  maxLimit: 200,
  smoothing: 0.2,
  queueSize: () => 4,
  longWindow: 600,
  warmupWindows: 10,
  rttTolerance: 1.5,
  minWindowMs: 1_000,
  maxWindowMs: 1_000,
  windowSamples: 10,
  minRttMs: 0.1,
};

/** The long-term RTT: a plain mean while warming up, then an exponential average. */
class LongTermRtt {
  valueMs = 0;
  private count = 0;
  private sum = 0;
  private readonly window: number;
  private readonly warmup: number;
  constructor(window: number, warmup: number) {
    this.window = window;
    this.warmup = warmup;
  }
  add(ms: number): number {
    if (this.count < this.warmup) {
      this.count++;
      this.sum += ms;
      this.valueMs = this.sum / this.count;
    } else {
      const weight = 2 / (this.window + 1);
      this.valueMs = this.valueMs * (1 - weight) + ms * weight;
    }
    return this.valueMs;
  }
}

export class Gradient2 implements ConcurrencyLimiter {
  limit: number;
  estimate: number;
  readonly longRtt: LongTermRtt;
  private inFlight = 0;
  private readonly params: Gradient2Params;
  /** The window being gathered. */
  private window = { count: 0, sumMs: 0, minMs: Number.POSITIVE_INFINITY, maxInFlight: 0 };
  private windowEndsMs = 0;

  constructor(params: Partial<Gradient2Params> = {}) {
    this.params = { ...GRADIENT2_DEFAULTS, ...params };
    this.estimate = this.params.initialLimit;
    this.limit = this.params.initialLimit;
    this.longRtt = new LongTermRtt(this.params.longWindow, this.params.warmupWindows);
  }

  admit(nowMs: number): Flight | null {
    if (this.inFlight >= this.limit) return null;
    this.inFlight++;
    return { sentMs: nowMs, inFlightAtSend: this.inFlight };
  }

  answered(flight: Flight, nowMs: number): void {
    this.inFlight--;
    this.sample(nowMs - flight.sentMs, flight.inFlightAtSend, nowMs);
  }

  abandoned(flight: Flight, nowMs: number): void {
    this.answered(flight, nowMs);
  }

  /** WindowedLimit: one sample into the window, and the window passed on when it is over. */
  private sample(rttMs: number, inFlight: number, endMs: number): void {
    if (rttMs < this.params.minRttMs) return;
    const w = this.window;
    w.count++;
    w.sumMs += rttMs;
    w.minMs = Math.min(w.minMs, rttMs);
    w.maxInFlight = Math.max(w.maxInFlight, inFlight);
    if (endMs <= this.windowEndsMs) return;
    const { minWindowMs, maxWindowMs, windowSamples } = this.params;
    this.window = { count: 0, sumMs: 0, minMs: Number.POSITIVE_INFINITY, maxInFlight: 0 };
    this.windowEndsMs = endMs + Math.min(Math.max(2 * w.minMs, minWindowMs), maxWindowMs);
    if (w.count >= windowSamples) this.update(w.sumMs / w.count, w.maxInFlight);
  }

  /** Gradient2Limit: the limit from one window's mean RTT and highest in-flight count. */
  private update(shortMs: number, inFlight: number): void {
    const { smoothing, rttTolerance, minLimit, maxLimit } = this.params;
    const queueSize = this.params.queueSize(Math.floor(this.estimate));
    const longMs = this.longRtt.add(shortMs);
    // The long-term RTT well above the current one: the load has passed; let the long-term RTT come down sooner.
    if (longMs / shortMs > 2) this.longRtt.valueMs *= 0.95;
    // A limit the traffic does not reach says nothing about the origin.
    if (inFlight < this.estimate / 2) return;
    const gradient = Math.max(0.5, Math.min(1, (rttTolerance * longMs) / shortMs));
    const target = this.estimate * gradient + queueSize;
    const next = this.estimate * (1 - smoothing) + target * smoothing;
    this.estimate = Math.max(minLimit, Math.min(maxLimit, next));
    this.limit = Math.floor(this.estimate);
  }
}
