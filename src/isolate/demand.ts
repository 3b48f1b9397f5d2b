/**
 * @module
 * One client key's demand, as this isolate sees it: the requests it saw for
 * the key in the current and the previous demand window, since when it has
 * seen the key, and what a call asks of a lease from that. Leases are sized
 * by demand: the object leases no more than the requests seen lately
 * (scaled to the lease's life), or a share of the limit too small to
 * matter, so a key this isolate sees rarely gets few units or none.
 */
import type { LeaseRequest } from "../object/protocol.ts";

/** The demand window: a lease is no larger than the requests this isolate saw for the key in the last this many milliseconds. */
export const DEMAND_WINDOW_MS = 60_000;
/** The shortest span a demand is measured over: requests in one instant say little about their rate. */
export const MIN_SEEN_MS = 1_000;

export class Demand {
  /** The demand window (`floor(nowMs / DEMAND_WINDOW_MS)`) `current` counts in. */
  private window = 0;
  /** Requests seen in the current and the previous demand window. */
  private current = 0;
  private previous = 0;
  /** Isolate time of the first request for the key since it was last forgotten. */
  private sinceMs: number;

  constructor(nowMs: number) {
    this.sinceMs = nowMs;
  }

  /** Counts a request for the key. */
  note(nowMs: number): void {
    const window = Math.floor(nowMs / DEMAND_WINDOW_MS);
    if (window !== this.window) {
      this.previous = window === this.window + 1 ? this.current : 0;
      this.current = 0;
      this.window = window;
    }
    this.current++;
  }

  /**
   * What to ask of a lease of at most `maxUnits` with a call at `nowMs`
   * (none when `maxUnits` is 0: leases are off): the requests seen in the
   * last demand window, the previous one's weighted by the part of it still
   * inside, as in the sliding window.
   */
  leaseRequest(maxUnits: number, nowMs: number): LeaseRequest | undefined {
    if (maxUnits === 0) return undefined;
    const { window, current, previous } = this;
    const elapsed = (nowMs % DEMAND_WINDOW_MS) / DEMAND_WINDOW_MS;
    const recent = Math.floor(
      current + (window === Math.floor(nowMs / DEMAND_WINDOW_MS) ? previous * (1 - elapsed) : 0),
    );
    // Even one request seen asks: the object leases a key seen once only units too few to matter.
    // Over how long they were seen: since the key was first seen, if that is less than a window, so a key
    // busy for a few seconds is not taken for one that came a few times a minute.
    const seenInMs = Math.max(MIN_SEEN_MS, Math.min(DEMAND_WINDOW_MS, nowMs - this.sinceMs));
    return { units: maxUnits, seen: recent, seenInMs };
  }

  /** Forgets every request seen: the key is seen anew from `nowMs`. */
  reset(nowMs: number): void {
    this.window = 0;
    this.current = 0;
    this.previous = 0;
    this.sinceMs = nowMs;
  }
}
