/**
 * @module
 * One timer for the next instant an object has something due: the head of
 * its held requests' queue, a place taken back, a waiting request's
 * deadline. Never one timer per waiter, and never polling: whoever changes
 * what is due sets it again.
 */

/**
 * The longest delay a timer is given at once (2^31 − 1 ms, about 24.8 days):
 * a runtime that takes delays as 32-bit integers would fire a longer one at
 * once. An instant further ahead (an override expiring in years) is reached
 * by waking then and setting the timer again: `fire` sets the next one.
 */
const LONGEST_DELAY_MS = 2 ** 31 - 1;

export class Wake {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private atMs: number | null = null;

  private readonly fire: () => void;

  /** `fire` runs at (or just after) the instant set; it should set the next one. */
  constructor(fire: () => void) {
    this.fire = fire;
  }

  /** The one timer, for `atMs` (null: none), replacing the one set before. */
  set(atMs: number | null, nowMs: number): void {
    if (atMs === this.atMs) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.atMs = atMs;
    if (atMs === null) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.atMs = null;
        this.fire();
      },
      Math.min(LONGEST_DELAY_MS, Math.max(0, atMs - nowMs)),
    );
  }

  /** The instant the timer is set for, or null. */
  get dueAtMs(): number | null {
    return this.atMs;
  }
}
