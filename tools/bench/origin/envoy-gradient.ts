/**
 * @module
 * Envoy's adaptive concurrency filter with its gradient controller, written
 * for the benchmark from its published description: the filter's docs
 * (envoyproxy.io, configuration/http/http_filters/adaptive_concurrency_filter),
 * the defaults in api/envoy/extensions/filters/http/adaptive_concurrency/v3/
 * adaptive_concurrency.proto, and where the docs leave a detail open,
 * source/extensions/filters/http/adaptive_concurrency/controller/
 * gradient_controller.cc (commit c35f67fb). Node-only benchmark code.
 *
 * - A request is forwarded while fewer than `limit` are outstanding, else
 *   refused at once (the filter answers 503).
 * - Every `sampleIntervalMs` the latencies of the requests that completed
 *   in the window are summarised by their `percentile` (sampleRTT), and
 *   `limit ← ⌊g·limit + √(g·limit)⌋` with `g = minRTT·(1 + buffer) ÷ sampleRTT`
 *   clamped to [0.5, 2], the limit kept within [minConcurrency, maxLimit]. A
 *   window without samples changes nothing. (The docs call the headroom
 *   "the square root of the concurrency limit"; the source takes it of
 *   `g·limit`, as here.)
 * - minRTT is measured at the start, then `minRttIntervalMs` plus a random
 *   jitter of up to `jitter` of it after each measurement ends, and at once
 *   when the limit has been set to `minConcurrency` five windows in a row:
 *   the limit is pinned to `minConcurrency`, the samples of requests sent
 *   from then on are gathered until there are `minRttRequests`, minRTT is
 *   their `percentile`, and the limit goes back to what it was. No update
 *   runs meanwhile.
 * - A request that ends without an answer (its client gave up) frees its
 *   place and gives no sample. A request sent before the latest measurement
 *   began gives none either.
 */
import type { Random } from "../../accuracy/random.ts";
import { type ConcurrencyLimiter, type Flight, quantile, type Schedule } from "./concurrency-limiter.ts";

export type EnvoyGradientParams = {
  /** `concurrency_limit_params.concurrency_update_interval`: required, no default. */
  sampleIntervalMs: number;
  /** `min_rtt_calc_params.interval`: required (unless a fixed minRTT is given), no default. */
  minRttIntervalMs: number;
  /** `min_rtt_calc_params.request_count`. */
  minRttRequests: number;
  /** `min_rtt_calc_params.jitter`, as a share of the interval. */
  jitter: number;
  /** `min_rtt_calc_params.min_concurrency`: the limit while minRTT is measured, and (with no `min_concurrency_limit`) its floor. */
  minConcurrency: number;
  /** `min_rtt_calc_params.buffer`, as a share of minRTT. */
  buffer: number;
  /** `sample_aggregate_percentile`, as a fraction. */
  percentile: number;
  /** `concurrency_limit_params.max_concurrency_limit`. */
  maxLimit: number;
};

/**
 * The proto's defaults (jitter 15 %, request_count 50, min_concurrency 3,
 * buffer 25 %, p50, max 1000). The two intervals have none: these are the
 * docs' example configuration's (0.1 s and 60 s).
 */
export const ENVOY_DEFAULTS: EnvoyGradientParams = {
  sampleIntervalMs: 100,
  minRttIntervalMs: 60_000,
  minRttRequests: 50,
  jitter: 0.15,
  minConcurrency: 3,
  buffer: 0.25,
  percentile: 0.5,
  maxLimit: 1000,
};

/** How many updates in a row at the floor start a new minRTT measurement. */
const REMEASURE_AFTER_AT_FLOOR = 5;

export class EnvoyGradient implements ConcurrencyLimiter {
  limit: number;
  /** The latest minRTT, ms (NaN until the first measurement ends). */
  minRttMs = Number.NaN;
  private outstanding = 0;
  /** The limit to go back to after a measurement; 0 while none is running. */
  private limitAfterMeasurement = 0;
  private measurementStartMs = Number.NEGATIVE_INFINITY;
  private samples: number[] = [];
  private updatesAtFloor = 0;
  /** Re-arming a timer cancels its earlier arming: each names the arming it belongs to. */
  private sampleTimer = 0;
  private measurementTimer = 0;
  private readonly params: EnvoyGradientParams;
  private readonly schedule: Schedule;
  private readonly random: Random;

  constructor(schedule: Schedule, random: Random, params: Partial<EnvoyGradientParams> = {}, startMs = 0) {
    this.params = { ...ENVOY_DEFAULTS, ...params };
    this.schedule = schedule;
    this.random = random;
    this.limit = this.params.minConcurrency;
    this.startMeasurement(startMs);
    this.armSampleTimer(startMs);
  }

  get measuring(): boolean {
    return this.limitAfterMeasurement > 0;
  }

  admit(nowMs: number): Flight | null {
    if (this.outstanding >= this.limit) return null;
    this.outstanding++;
    return { sentMs: nowMs, inFlightAtSend: this.outstanding };
  }

  answered(flight: Flight, nowMs: number): void {
    this.outstanding--;
    if (flight.sentMs < this.measurementStartMs) return;
    this.samples.push(nowMs - flight.sentMs);
    if (this.measuring && this.samples.length >= this.params.minRttRequests) this.endMeasurement(nowMs);
  }

  abandoned(_flight: Flight, _nowMs: number): void {
    this.outstanding--;
  }

  private armSampleTimer(nowMs: number): void {
    const arming = ++this.sampleTimer;
    this.schedule(nowMs + this.params.sampleIntervalMs, () => {
      // A measurement began since: its end arms this timer again.
      if (arming !== this.sampleTimer || this.measuring) return;
      const atMs = nowMs + this.params.sampleIntervalMs;
      this.update(atMs);
      this.armSampleTimer(atMs);
    });
  }

  private armMeasurementTimer(atMs: number): void {
    const arming = ++this.measurementTimer;
    this.schedule(atMs, () => arming === this.measurementTimer && this.startMeasurement(atMs));
  }

  private startMeasurement(nowMs: number): void {
    if (this.measuring) return;
    this.limitAfterMeasurement = this.limit;
    this.setLimit(this.params.minConcurrency, nowMs);
    this.samples = [];
    this.measurementStartMs = nowMs;
  }

  private endMeasurement(nowMs: number): void {
    this.minRttMs = quantile(this.samples, this.params.percentile);
    this.samples = [];
    // Restored while the measurement still counts as running, so the restoring is no update at the floor.
    this.setLimit(this.limitAfterMeasurement, nowMs);
    this.limitAfterMeasurement = 0;
    const { minRttIntervalMs, jitter } = this.params;
    const jitterMs = jitter > 0 ? Math.floor(this.random.next() * Math.ceil(minRttIntervalMs * jitter)) : 0;
    this.armMeasurementTimer(nowMs + minRttIntervalMs + jitterMs);
    this.armSampleTimer(nowMs);
  }

  /** One window's samples summarised, and the limit updated from them. */
  private update(nowMs: number): void {
    if (this.samples.length === 0) return;
    const sampleRttMs = quantile(this.samples, this.params.percentile);
    this.samples = [];
    const { buffer, minConcurrency, maxLimit } = this.params;
    // A window of instant answers (an origin refusing at once) has sampleRTT 0: the gradient's upper bound.
    const raw = sampleRttMs > 0 ? (this.minRttMs * (1 + buffer)) / sampleRttMs : Number.POSITIVE_INFINITY;
    const gradient = Math.min(2, Math.max(0.5, raw));
    const scaled = this.limit * gradient;
    const next = Math.floor(scaled + Math.sqrt(scaled));
    this.setLimit(Math.max(minConcurrency, Math.min(maxLimit, next)), nowMs);
  }

  private setLimit(next: number, nowMs: number): void {
    const floor = this.params.minConcurrency;
    const atFloorAgain = !this.measuring && this.limit === floor && next === floor;
    this.limit = next;
    this.updatesAtFloor = atFloorAgain ? this.updatesAtFloor + 1 : 0;
    // Pinned at the floor five windows running: minRTT may be wrong, measure it again now.
    if (this.updatesAtFloor >= REMEASURE_AFTER_AT_FLOOR) this.armMeasurementTimer(nowMs);
  }
}
