/**
 * @module
 * Calls in flight: while one request's call that may bring a lease is on its
 * way, concurrent requests for the same key wait for it and spend its lease,
 * instead of each calling (a burst would otherwise have the object count many
 * leases at once, and refuse requests while their units sat unspent here).
 *
 * Requests that waited for a call and still need the object once it has
 * landed (near a limit, where no lease covers them) go together: the first
 * of them to look sends one call that decides all of them (batch.ts).
 *
 * A waiter never awaits anything that belongs to the request that called:
 * if that request's client hangs up, the runtime cancels its call, and a
 * promise tied to it may never settle. A waiter reads the flight's plain
 * state on its own timers, gives up at a deadline counted from its own
 * start, and then decides on its own.
 */

import { LruMap } from "../core/lru.ts";
import type { FailureReason } from "../object/protocol.ts";
import { Batch } from "./batch.ts";

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
  /** The requests waiting for this call that go to the object together once it lands, unless it decides them. */
  private next: Batch | null = null;

  constructor(departedAtMs: number, staleAtMs: number) {
    this.departedAtMs = departedAtMs;
    this.staleAtMs = staleAtMs;
  }

  /** The batch that forms behind this call. */
  batch(): Batch {
    this.next ??= new Batch();
    return this.next;
  }
}

/** A call is presumed lost after this many typical call times … */
const STALE_AFTER_TYPICAL = 4;
/** … but never sooner than this. */
const MIN_STALE_MS = 25;
/**
 * A waiter looks at its flight at most this far apart while calls are
 * quick, and at most a sixteenth of the flight's expected call time apart
 * when they are slow (up to {@link MAX_SLOW_POLL_MS}): at a slow object,
 * hundreds of requests wait at once, and each look costs a timer.
 */
const MAX_POLL_MS = 4;
const MAX_SLOW_POLL_MS = 64;
const POLLS_PER_CALL = 16;

export class CallsInFlight {
  private readonly flights: LruMap<string, Flight>;
  /** A moving average of how long calls take, in milliseconds. */
  private typicalMs = 50;
  /**
   * Per key, how long its next call is waited for before it is presumed
   * lost, when that key's own calls say to wait longer than the typical
   * call: four times its last call, or, after a call presumed lost, twice
   * the wait for that one. A hot key's object that is slower than the
   * isolate's other objects (it is overloaded) is then not sent a new call
   * every few typical call times, each queueing behind the last.
   */
  private readonly patienceMs: LruMap<string, number>;

  constructor(maxKeys: number) {
    this.flights = new LruMap(maxKeys);
    this.patienceMs = new LruMap(maxKeys);
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
    // Presumed lost: the key's next call is waited for twice as long, in case this one was only slow (then
    // each next one would queue behind it), until a call of the key lands and says how long they take. Not
    // longer: the request of the next call may be cancelled too (its client hung up), and its waiters then
    // need time for a call of their own.
    if (flight.landing === null) this.patienceMs.set(key, 2 * (flight.staleAtMs - flight.departedAtMs));
    return undefined;
  }

  /** Registers a call about to be sent, so concurrent requests for the key can wait for it. */
  depart(key: string, nowMs: number, timeoutMs: number): Flight {
    const typical = Math.max(MIN_STALE_MS, STALE_AFTER_TYPICAL * this.typicalMs);
    const lostAfterMs = Math.min(timeoutMs, Math.max(typical, this.patienceMs.peek(key) ?? 0));
    const flight = new Flight(nowMs, nowMs + lostAfterMs);
    this.flights.set(key, flight);
    return flight;
  }

  /** Records how a call ended; its waiters read it on their next look. */
  land(key: string, flight: Flight, landing: Landing, nowMs: number): void {
    flight.landing = landing;
    const tookMs = nowMs - flight.departedAtMs;
    if (landing.ok) this.typicalMs += (tookMs - this.typicalMs) / 8;
    this.patienceMs.set(key, STALE_AFTER_TYPICAL * tookMs);
    if (this.flights.peek(key) === flight) this.flights.delete(key);
  }

  /**
   * Waits, on this request's own timers, until `flight` lands or `untilMs`
   * (isolate time) passes. Returns the landing, or null when it gave up.
   */
  async await(flight: Flight, untilMs: number, clock: () => number): Promise<Landing | null> {
    // This flight's expected call time: what its wait before it is presumed lost was made of.
    const expectedMs = (flight.staleAtMs - flight.departedAtMs) / STALE_AFTER_TYPICAL;
    const maxStepMs = Math.min(MAX_SLOW_POLL_MS, Math.max(MAX_POLL_MS, expectedMs / POLLS_PER_CALL));
    for (let stepMs = 1; flight.landing === null; stepMs = Math.min(stepMs * 2, maxStepMs)) {
      const leftMs = untilMs - clock();
      if (leftMs <= 0) return null;
      await new Promise((resolve) => setTimeout(resolve, Math.min(stepMs, leftMs)));
    }
    return flight.landing;
  }
}
