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
 * promise tied to it may never settle. A waiter awaits a promise of its own,
 * made in its own request, with a timer of its own at its deadline; the
 * call's landing settles it early (the runtime runs what follows in the
 * waiter's request). So a waiter costs one timer, however long it waits,
 * and when the call never lands it gives up on its own time and decides on
 * its own.
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
  /** How to wake each request waiting for this call: each settles a promise its own request made. */
  readonly waiters = new Set<() => void>();

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

  /** Records how a call ended, and wakes its waiters to read it. */
  land(key: string, flight: Flight, landing: Landing, nowMs: number): void {
    flight.landing = landing;
    for (const wake of flight.waiters) wake();
    flight.waiters.clear();
    const tookMs = nowMs - flight.departedAtMs;
    if (landing.ok) this.typicalMs += (tookMs - this.typicalMs) / 8;
    this.patienceMs.set(key, STALE_AFTER_TYPICAL * tookMs);
    if (this.flights.peek(key) === flight) this.flights.delete(key);
  }

  /**
   * Waits, on this request's own timer, until `flight` lands or `untilMs`
   * (isolate time) passes. Returns the landing, or null when it gave up.
   * `gone` is the request's signal that its client hung up: the runtime
   * cancels the request, and its wake-up is taken off the flight (woken
   * anyway, a cancelled request's promise makes the runtime print a warning).
   */
  async await(flight: Flight, untilMs: number, clock: () => number, gone?: AbortSignal): Promise<Landing | null> {
    for (;;) {
      if (flight.landing !== null) return flight.landing;
      const leftMs = untilMs - clock();
      if (leftMs <= 0) return null;
      let wake!: () => void;
      const woken = new Promise<void>((resolve) => {
        wake = resolve;
      });
      const timer = setTimeout(wake, leftMs);
      const forget = () => {
        flight.waiters.delete(wake);
      };
      flight.waiters.add(wake);
      gone?.addEventListener("abort", forget);
      try {
        await woken;
      } finally {
        clearTimeout(timer);
        forget();
        gone?.removeEventListener("abort", forget);
      }
    }
  }
}
