/**
 * @module
 * Calls in flight: while one request's call that may bring a lease is on its
 * way, concurrent requests for the same key wait for it and spend its lease,
 * instead of each calling (a burst would otherwise have the object count many
 * leases at once, and refuse requests while their units sat unspent here).
 *
 * A waiter never awaits anything that belongs to the request that called:
 * if that request's client hangs up, the runtime cancels its call, and a
 * promise tied to it may never settle. A waiter reads the flight's plain
 * state on its own timers, gives up at a deadline counted from its own
 * start, and then decides on its own.
 */

import { LruMap } from "../core/lru.ts";
import type { FailureReason } from "../object/protocol.ts";

/** How a call ended, as waiters read it. */
export type Landing =
  | { ok: true }
  /** `name` is the key's object name, for the waiters' log lines. */
  | { ok: false; reason: FailureReason; message: string; attempts: number; name: string };

/** One call in flight. */
export class Flight {
  landing: Landing | null = null;
  readonly departedAtMs: number;
  /** After this, the call is presumed lost (its request was cancelled): nobody waits for it any more. */
  readonly staleAtMs: number;

  constructor(departedAtMs: number, staleAtMs: number) {
    this.departedAtMs = departedAtMs;
    this.staleAtMs = staleAtMs;
  }
}

/** A call is presumed lost after this many typical call times … */
const STALE_AFTER_TYPICAL = 4;
/** … but never sooner than this. */
const MIN_STALE_MS = 25;
/** A waiter looks at its flight at most this far apart. */
const MAX_POLL_MS = 4;

export class CallsInFlight {
  private readonly flights: LruMap<string, Flight>;
  /** A moving average of how long calls take, in milliseconds. */
  private typicalMs = 50;

  constructor(maxKeys: number) {
    this.flights = new LruMap(maxKeys);
  }

  get size(): number {
    return this.flights.size;
  }

  /** The call in flight for this key, unless it has landed or is presumed lost. */
  current(key: string, nowMs: number): Flight | undefined {
    const flight = this.flights.peek(key);
    if (flight === undefined) return undefined;
    if (flight.landing === null && nowMs < flight.staleAtMs) return flight;
    this.flights.delete(key);
    return undefined;
  }

  /** Registers a call about to be sent, so concurrent requests for the key can wait for it. */
  depart(key: string, nowMs: number, timeoutMs: number): Flight {
    const lostAfterMs = Math.min(timeoutMs, Math.max(MIN_STALE_MS, STALE_AFTER_TYPICAL * this.typicalMs));
    const flight = new Flight(nowMs, nowMs + lostAfterMs);
    this.flights.set(key, flight);
    return flight;
  }

  /** Records how a call ended; its waiters read it on their next look. */
  land(key: string, flight: Flight, landing: Landing, nowMs: number): void {
    flight.landing = landing;
    if (landing.ok) this.typicalMs += (nowMs - flight.departedAtMs - this.typicalMs) / 8;
    if (this.flights.peek(key) === flight) this.flights.delete(key);
  }

  /**
   * Waits, on this request's own timers, until `flight` lands or `untilMs`
   * (isolate time) passes. Returns the landing, or null when it gave up.
   */
  async await(flight: Flight, untilMs: number, clock: () => number): Promise<Landing | null> {
    for (let stepMs = 1; flight.landing === null; stepMs = Math.min(stepMs * 2, MAX_POLL_MS)) {
      const leftMs = untilMs - clock();
      if (leftMs <= 0) return null;
      await new Promise((resolve) => setTimeout(resolve, Math.min(stepMs, leftMs)));
    }
    return flight.landing;
  }
}
