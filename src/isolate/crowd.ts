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
 * before the isolate has seen one answer within the target. A request
 * whose client left stays in the crowd until the origin has got to it.
 * One client's requests count for at most half the bound, so that a client
 * holding requests at the origin (slow ones it chose) never crowds it alone.
 * No I/O and no clock: test/crowd.test.ts drives it on plain numbers.
 */

/** The crowd's parameters. */
export const CROWD = {
  /** Requests in flight crowd the origin from this many times the most answered within the target (2 let p99 rise further for no more goodput, in the simulation)… */
  times: 1.5,
  /** …and never below this many. */
  minimum: 8,
  /** The most answered within the target is kept for this span and the next. */
  spanMs: 10_000,
  /** One client's requests count for at most this share of the bound (rounded down, at least one): one alone never crowds it. */
  perClient: 0.5,
} as const;

/** A request in the crowd: how many were in flight when it started, itself included, and its place in the order they started. */
export type Start = { level: number; seq: number; key?: string | undefined };

export class Crowd {
  /**
   * The requests at the origin now: from their last byte passed on to their
   * response's headers, and those whose clients left before the headers,
   * until a request started after them is answered (the origin got to
   * them) or for {@link CROWD.spanMs} at most.
   */
  flying = 0;
  private seq = 0;
  /** Requests whose clients left before their answers, in the order they started, and when they left. */
  private behind: { seq: number; atMs: number; key: string | undefined }[] = [];
  /** The requests in the crowd of each client whose key is known. */
  private readonly byKey = new Map<string, number>();
  /** The most in flight at a request's start, of those answered within the target: this span's, the one before's. */
  private most: [number, number] = [0, 0];
  private spanStartMs = Number.NEGATIVE_INFINITY;
  private learned = false;

  /** A request's last byte went on to the origin: its level and place. */
  started(key?: string): Start {
    if (key !== undefined) this.byKey.set(key, (this.byKey.get(key) ?? 0) + 1);
    return { level: ++this.flying, seq: ++this.seq, key };
  }

  /**
   * A request was answered at `nowMs`, within the target (`inTime`) or not:
   * out of the crowd, and so is every request left behind that started
   * before it (the origin answers in order: it has got to them).
   */
  answered(request: Start, inTime: boolean, nowMs: number): void {
    this.flying = Math.max(0, this.flying - 1);
    this.drop(request.key);
    const behind = this.behind;
    let gone = 0;
    while (gone < behind.length && behind[gone]!.seq < request.seq) gone++;
    if (gone > 0) this.leave(gone);
    this.turn(nowMs);
    if (inTime && request.level > this.most[0]) {
      this.most[0] = request.level;
      this.learned = true;
    }
  }

  /**
   * A request's client left at `nowMs`, before its answer: the origin goes
   * on with it (an origin does not notice a client gone), so it stays in
   * the crowd until a request started after it is answered.
   */
  left(request: Start, nowMs: number): void {
    const behind = this.behind;
    let at = behind.length;
    while (at > 0 && behind[at - 1]!.seq > request.seq) at--;
    behind.splice(at, 0, { seq: request.seq, atMs: nowMs, key: request.key });
  }

  /** Whether one more request would crowd the origin at `nowMs`. */
  crowded(nowMs: number): boolean {
    if (!this.learned) return false;
    this.turn(nowMs);
    const behind = this.behind;
    let expired = 0;
    while (expired < behind.length && nowMs - behind[expired]!.atMs >= CROWD.spanMs) expired++;
    if (expired > 0) this.leave(expired);
    const bound = this.bound;
    if (this.flying < bound) return false;
    const cap = Math.max(1, Math.floor(bound * CROWD.perClient));
    let over = 0;
    for (const held of this.byKey.values()) if (held > cap) over += held - cap;
    return this.flying - over >= bound;
  }

  /** A request of client `key` is out of the crowd. */
  private drop(key: string | undefined): void {
    if (key === undefined) return;
    const held = (this.byKey.get(key) ?? 0) - 1;
    if (held > 0) this.byKey.set(key, held);
    else this.byKey.delete(key);
  }

  /** The requests in flight from which the origin is crowded; Infinity before one was answered within the target. */
  get bound(): number {
    return this.learned ? Math.max(CROWD.minimum, CROWD.times * Math.max(this.most[0], this.most[1])) : Infinity;
  }

  /** The first `n` requests left behind are out of the crowd. */
  private leave(n: number): void {
    for (const gone of this.behind.splice(0, n)) this.drop(gone.key);
    this.flying = Math.max(0, this.flying - n);
  }

  /** A new span once this one is over: what the one before learned is forgotten. */
  private turn(nowMs: number): void {
    const since = nowMs - this.spanStartMs;
    if (since < CROWD.spanMs) return;
    this.most = since < 2 * CROWD.spanMs ? [0, this.most[0]] : [0, 0];
    this.spanStartMs = nowMs;
  }
}
