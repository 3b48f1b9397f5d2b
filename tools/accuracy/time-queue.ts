/**
 * @module
 * The admitted instants of one client inside the sliding window: a growable
 * ring buffer, the exact sliding log both as a limiter and as the yardstick.
 */

export class TimeQueue {
  private items = new Float64Array(16);
  private head = 0;
  /** How many instants are held. */
  size = 0;

  /** Forgets instants at or before `cutoffMs`: at `t` the window is `(t − periodMs, t]`. */
  dropThrough(cutoffMs: number): void {
    const mask = this.items.length - 1;
    while (this.size > 0 && this.items[this.head]! <= cutoffMs) {
      this.head = (this.head + 1) & mask;
      this.size--;
    }
  }

  /** Adds an instant no earlier than every instant held. */
  push(timeMs: number): void {
    if (this.size === this.items.length) this.grow();
    this.items[(this.head + this.size) & (this.items.length - 1)] = timeMs;
    this.size++;
  }

  private grow(): void {
    const bigger = new Float64Array(this.items.length * 2);
    for (let i = 0; i < this.size; i++) bigger[i] = this.items[(this.head + i) & (this.items.length - 1)]!;
    this.items = bigger;
    this.head = 0;
  }
}

/** The queue of `source`, created on first use. */
export function queueOf(queues: TimeQueue[], source: number): TimeQueue {
  let queue = queues[source];
  if (!queue) {
    queue = new TimeQueue();
    queues[source] = queue;
  }
  return queue;
}
