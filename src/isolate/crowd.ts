/**
 * @module
 * What an isolate's own requests in flight at the origin say, at once,
 * before any report: whether they crowd it (docs/adaptive.md, "Sheddable
 * requests in a crowd"). The isolate learns the most requests it had in
 * flight under a rule when one of them was still answered within the
 * rule's latency target (a request's level: how many were in flight when
 * it started, itself included), over the last {@link CROWD.spanMs} to
 * twice that; its requests in flight crowd the origin from
 * {@link CROWD.times} that many (and at least {@link CROWD.minimum}). A
 * reported queue takes a report and an answer to reach the controller; a
 * surge of requests fills the origin's queue in less. Nothing is crowded
 * before the isolate has seen one answer within the target. No I/O and no
 * clock: test/crowd.test.ts drives it on plain numbers.
 */

/** The crowd's parameters. */
export const CROWD = {
  /** Requests in flight crowd the origin from this many times the most answered within the target (2 let p99 rise further for no more goodput, in the simulation)… */
  times: 1.5,
  /** …and never below this many. */
  minimum: 4,
  /** The most answered within the target is kept for this span and the next. */
  spanMs: 10_000,
} as const;

export class Crowd {
  /** The requests in flight now, from their last byte passed on to their response's headers (or their client's hang-up). */
  flying = 0;
  /** The most in flight at a request's start, of those answered within the target: this span's, the one before's. */
  private most: [number, number] = [0, 0];
  private spanStartMs = Number.NEGATIVE_INFINITY;
  private learned = false;

  /** A request's last byte went on to the origin: its level, the requests in flight with it. */
  started(): number {
    return ++this.flying;
  }

  /** A request started at `level` ended at `nowMs` (its headers, or its client gone); `inTime`: answered within the target. */
  ended(level: number, inTime: boolean, nowMs: number): void {
    this.flying = Math.max(0, this.flying - 1);
    this.turn(nowMs);
    if (inTime && level > this.most[0]) {
      this.most[0] = level;
      this.learned = true;
    }
  }

  /** Whether one more request would crowd the origin at `nowMs`. */
  crowded(nowMs: number): boolean {
    if (!this.learned) return false;
    this.turn(nowMs);
    return this.flying >= this.bound;
  }

  /** The requests in flight from which the origin is crowded; Infinity before one was answered within the target. */
  get bound(): number {
    return this.learned ? Math.max(CROWD.minimum, CROWD.times * Math.max(this.most[0], this.most[1])) : Infinity;
  }

  /** A new span once this one is over: what the one before learned is forgotten. */
  private turn(nowMs: number): void {
    const since = nowMs - this.spanStartMs;
    if (since < CROWD.spanMs) return;
    this.most = since < 2 * CROWD.spanMs ? [0, this.most[0]] : [0, 0];
    this.spanStartMs = nowMs;
  }
}
