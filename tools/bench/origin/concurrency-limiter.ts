/**
 * @module
 * What the published controllers of `npm run bench:origin -- --simulate`
 * (Envoy's gradient controller, Netflix's Gradient2) are to the simulation:
 * a limit on the requests in flight at one proxy in front of the origin,
 * which sees every request go out and every answer come back. A request
 * over the limit is refused at once: both published designs refuse (Envoy
 * answers 503; the library's SimpleLimiter refuses, its server examples
 * answer 429 or UNAVAILABLE), neither queues.
 */

/** Runs `run` at `atMs` on the simulation's clock (the controllers' timers). */
export type Schedule = (atMs: number, run: () => void) => void;

/** A request the limiter let through, from when it went to the origin until it ends. */
export type Flight = {
  sentMs: number;
  /** Requests in flight when it was admitted, itself included. */
  inFlightAtSend: number;
};

export interface ConcurrencyLimiter {
  /** The current limit on requests in flight. */
  readonly limit: number;
  /** A request arriving at `nowMs`: its flight if admitted, null if refused. */
  admit(nowMs: number): Flight | null;
  /** The origin answered the flight at `nowMs` (a success or the origin's own error alike). */
  answered(flight: Flight, nowMs: number): void;
  /** The client gave up at `nowMs`: the proxy drops the request, though the origin may still be working on it. */
  abandoned(flight: Flight, nowMs: number): void;
}

/** The `q` quantile of `values` by nearest rank (NaN for none). */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}
