/**
 * @module
 * One call in flight, as the requests that wait for it see it: when it left,
 * when it is presumed lost, how it landed, and whom to wake when it does;
 * and how long calls take in this isolate, which says when a call is
 * presumed lost.
 */
import type { Landing } from "./vocabulary.ts";

/** A call is presumed lost after this many typical call times … */
export const STALE_AFTER_TYPICAL = 4;
/** … but never sooner than this. */
export const MIN_STALE_MS = 25;

/** One call in flight. */
export class Flight {
  landing: Landing | null = null;
  readonly departedAtMs: number;
  /** After this, the call is presumed lost (its request was cancelled): nobody waits for it any more. */
  readonly staleAtMs: number;
  /** How to wake each request waiting for this call: each settles a promise its own request made. */
  readonly waiters = new Set<() => void>();

  constructor(departedAtMs: number, staleAtMs: number) {
    this.departedAtMs = departedAtMs;
    this.staleAtMs = staleAtMs;
  }

  /** Records how the call ended, and wakes its waiters to read it. */
  land(landing: Landing): void {
    this.landing = landing;
    for (const wake of this.waiters) wake();
    this.waiters.clear();
  }
}

/** How long this isolate's calls take: a moving average, the same for every key. */
export class CallTimes {
  /** A moving average of how long calls take, in milliseconds. */
  typicalMs = 50;

  /** How long a call is waited for before it is presumed lost, at least `patienceMs` (the key's own), at most `timeoutMs`. */
  lostAfterMs(patienceMs: number, timeoutMs: number): number {
    const typical = Math.max(MIN_STALE_MS, STALE_AFTER_TYPICAL * this.typicalMs);
    return Math.min(timeoutMs, Math.max(typical, patienceMs));
  }

  /** A call that landed with an answer took `tookMs`. */
  took(tookMs: number): void {
    this.typicalMs += (tookMs - this.typicalMs) / 8;
  }
}
