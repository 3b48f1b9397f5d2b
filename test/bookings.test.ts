import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type BookedCount,
  type Booking,
  dueBy,
  type Pace,
  type Rows,
  repack,
  tailsOf,
  turnOf,
} from "../src/core/bookings.ts";
import {
  admitAt,
  earliestAdmission,
  emptyState,
  type WindowLimit,
  type WindowState,
} from "../src/core/sliding-window.ts";
import { firstOverLimit, oracleAdmits } from "./support/window-oracle.ts";

/** A window start in late 2026, so instants have realistic magnitudes; whole seconds, so buckets start on it. */
const T0 = 1_795_000_000_000;

/** How a sliding window paces held requests in its rows: the window's own arithmetic. */
const WINDOW_PACE: Pace = {
  start: (count, atMs) => emptyState(atMs, count.window as WindowLimit),
  admitAt: (state, count, atMs) => admitAt(state as WindowState, count.window as WindowLimit, atMs),
  earliestAdmission: (state, count, fromMs) =>
    earliestAdmission(state as WindowState, count.window as WindowLimit, fromMs),
};

/**
 * One key's rows and held requests, decided the way the object decides them,
 * with the core's functions: the turns due are counted first, then a request
 * is admitted now, held until its turn, or refused. Every admission, at the
 * instant it is counted, is logged for the replay.
 */
class Key {
  readonly states = new Map<string, WindowState>();
  queue: Booking[] = [];
  readonly admitted: { row: string; atMs: number; cost: number; window: WindowLimit }[] = [];
  private ids = 0;
  readonly rows: Rows = { stateOf: (row) => this.states.get(row), pace: WINDOW_PACE };

  /** Counts the bookings whose turn has come, in order. */
  settle(nowMs: number): void {
    const { due, ahead } = dueBy(this.queue, nowMs);
    for (const booking of due) this.count(booking.counts, booking.atMs);
    this.queue = ahead;
  }

  /** A request counting in `counts` at `nowMs`, held for at most `maxDelayMs`. */
  arrive(nowMs: number, counts: BookedCount[], maxDelayMs: number): "admitted" | "held" | "refused" {
    this.settle(nowMs);
    const turn = turnOf(counts, nowMs, tailsOf(this.queue, this.rows), this.rows);
    if (turn.atMs === nowMs) {
      this.count(counts, nowMs);
      return "admitted";
    }
    if (turn.atMs - nowMs > maxDelayMs) return "refused";
    this.queue.push({ id: `b${++this.ids}`, atMs: turn.atMs, counts });
    return "held";
  }

  cancel(nowMs: number, id: string): void {
    this.settle(nowMs);
    this.queue = repack(
      this.queue.filter((b) => b.id !== id),
      nowMs,
      this.rows,
    );
  }

  private count(counts: readonly BookedCount[], atMs: number): void {
    for (const { row, window: written } of counts) {
      const window = written as WindowLimit;
      const state = this.states.get(row) ?? { bucket: 0, counts: new Array<number>(window.precision + 1).fill(0) };
      this.states.set(row, admitAt(state, window, atMs));
      this.admitted.push({ row, atMs, cost: window.cost ?? 1, window });
    }
  }
}

const perSecond = (limit: number, over: Partial<WindowLimit> = {}): WindowLimit => ({
  limit,
  periodMs: 1_000,
  precision: 1,
  strict: false,
  ...over,
});

/** The turns of the queue, as milliseconds after T0. */
const turns = (key: Key) => key.queue.map((b) => b.atMs - T0);

describe("a burst of 5 against 2 per second, held up to 5 s", () => {
  it.each([
    // Prev 2 weighs 2 × (1 − f) in the next second: the third fits from 1 ms in, the fourth past half-way.
    { mode: "the seeds' window", over: {}, turns: [1_001, 1_501, 2_001] },
    // Strict counts the previous second whole: nothing fits until it has left.
    { mode: "strict", over: { strict: true }, turns: [2_000, 2_000, 4_000] },
    // Ten buckets of 100 ms: the burst's bucket is weighed by its kept share from 1 000 ms, and the third and
    // fourth then fill the bucket after 1 000 ms, which counts whole until 2 000 ms.
    { mode: "precision 10", over: { precision: 10 }, turns: [1_001, 1_051, 2_001] },
  ])("books the three over the limit at their exact turns in arrival order ($mode)", ({ over, turns: expected }) => {
    const key = new Key();
    const counts = [{ row: "r", window: perSecond(2, over) }];
    const outcomes = Array.from({ length: 5 }, () => key.arrive(T0, counts, 5_000));
    expect(outcomes).toEqual(["admitted", "admitted", "held", "held", "held"]);
    expect(turns(key)).toEqual(expected);
  });

  it("refuses one whose turn is past its delay, and a request with no delay behind those held", () => {
    const key = new Key();
    const counts = [{ row: "r", window: perSecond(2) }];
    for (let i = 0; i < 4; i++) key.arrive(T0, counts, 5_000);
    expect(key.arrive(T0, counts, 1_000)).toBe("refused"); // its turn is 2 001 ms away
    // 1.2 s on, the window alone would admit it; its place is promised to the one held for 1 501 ms.
    expect(key.arrive(T0 + 1_200, counts, 0)).toBe("refused");
    expect(turns(key)).toEqual([1_501]);
  });

  it("moves the next in line up to a cancelled booking's place, and the rest after it", () => {
    const key = new Key();
    const counts = [{ row: "r", window: perSecond(2) }];
    for (let i = 0; i < 5; i++) key.arrive(T0, counts, 5_000);
    key.cancel(T0 + 10, key.queue[0]!.id);
    expect(turns(key)).toEqual([1_001, 1_501]);
  });

  it("books a request two rules count at the later of their turns, and queues each rule's next request behind it", () => {
    const key = new Key();
    const tight = { row: "tight", window: perSecond(1) };
    const loose = { row: "loose", window: perSecond(10) };
    key.arrive(T0, [tight, loose], 5_000);
    expect(key.arrive(T0, [tight, loose], 5_000)).toBe("held");
    // The loose rule has room now, but its next count is promised for 1 001 ms: a later request goes after it.
    expect(key.arrive(T0, [loose], 0)).toBe("refused");
    expect(key.arrive(T0, [loose], 5_000)).toBe("held");
    expect(turns(key)).toEqual([1_001, 1_001]);
  });

  it("tells which rules make a request wait: each rule's own earliest admission, behind its own bookings only", () => {
    const key = new Key();
    const tight = { row: "tight", window: perSecond(1) };
    const loose = { row: "loose", window: perSecond(10) };
    const other = { row: "other", window: perSecond(10) };
    key.arrive(T0, [tight], 0);
    key.arrive(T0, [tight, other], 5_000); // books "other" at 1 001 ms too
    const turn = turnOf([tight, loose, other], T0 + 10, tailsOf(key.queue, key.rows), key.rows);
    // "tight" waits for its next second; "loose" has room now; "other" waits behind its booking.
    expect(turn.earliestMs.map((ms) => ms - T0)).toEqual([2_001, 10, 1_001]);
    expect(turn.atMs - T0).toBe(2_001);
  });
});

/** A rule's mode: short periods and small limits, so a few dozen requests contend. */
const mode = fc
  .record({
    limit: fc.integer({ min: 1, max: 8 }),
    periodMs: fc.oneof(fc.constantFrom(100, 250, 1_000), fc.integer({ min: 7, max: 400 })),
    precision: fc.integer({ min: 1, max: 4 }),
    strict: fc.boolean(),
  })
  .map((m): WindowLimit => m);

/** What happens to a key: requests arriving (counting in some of its rules, with a cost and a delay), and hang-ups. */
const event = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("arrive" as const),
      gapMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 60 })),
      rules: fc.uniqueArray(fc.integer({ min: 0, max: 2 }), { minLength: 1, maxLength: 3 }),
      cost: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 8 })),
      /** Thousandths of the longest period: 0 is a plain request, refused rather than held. */
      delay: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2_500 })),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("cancel" as const),
      gapMs: fc.integer({ min: 0, max: 60 }),
      pick: fc.nat(),
    }),
  },
);

describe("held requests never push a window over its limit, and keep their order", () => {
  it("replaying every admission, immediate and booked, in time order finds no window over, in every mode", () => {
    let held = 0;
    let cancelled = 0;
    fc.assert(
      fc.property(
        fc.array(mode, { minLength: 3, maxLength: 3 }),
        fc.array(event, { minLength: 20, maxLength: 80 }),
        (modes, events) => {
          const key = new Key();
          let nowMs = T0;
          const longest = Math.max(...modes.map((m) => m.periodMs));
          for (const e of events) {
            nowMs += e.gapMs;
            const before = new Map(key.queue.map((b) => [b.id, b.atMs]));
            if (e.kind === "arrive") {
              const counts = e.rules.map((i) => {
                const window = modes[i]!;
                return { row: `r${i}`, window: { ...window, cost: Math.min(e.cost, window.limit) } };
              });
              if (key.arrive(nowMs, counts, Math.floor((e.delay * longest) / 1_000)) === "held") held++;
            } else if (key.queue.length > 0) {
              key.cancel(nowMs, key.queue[e.pick % key.queue.length]!.id);
              cancelled++;
            }
            // A cancellation moves bookings up, never back; nothing else moves them at all.
            for (const booking of key.queue) {
              const was = before.get(booking.id);
              if (was !== undefined) expect(booking.atMs).toBeLessThanOrEqual(was);
              if (e.kind === "arrive" && was !== undefined) expect(booking.atMs).toBe(was);
            }
            expectInOrderAndEarliest(key, nowMs);
          }
          key.settle(Number.MAX_SAFE_INTEGER);
          expect(key.queue).toEqual([]);
          expectNeverOver(key.admitted);
        },
      ),
      { numRuns: 400 },
    );
    // The modes and traffic above make many requests wait, and many of those hang up.
    expect(held).toBeGreaterThan(1_500);
    expect(cancelled).toBeGreaterThan(600);
  });
});

/**
 * Per row, turns never go down in arrival order; and each booking's turn is
 * the earliest it could be: one millisecond earlier (if that is no earlier
 * than now and the bookings before it in its rows), some row it counts in
 * would refuse it, by the oracle, on everything counted or booked before it.
 */
function expectInOrderAndEarliest(key: Key, nowMs: number) {
  const last = new Map<string, number>();
  const booked: { row: string; atMs: number; cost: number }[] = [];
  for (const booking of key.queue) {
    let lowerMs = nowMs;
    for (const { row } of booking.counts) {
      expect(booking.atMs).toBeGreaterThanOrEqual(last.get(row) ?? nowMs);
      lowerMs = Math.max(lowerMs, last.get(row) ?? nowMs);
    }
    if (booking.atMs > lowerMs) {
      const t = booking.atMs - 1;
      const refusedBySome = booking.counts.some(({ row, window }) => {
        const history = [...key.admitted, ...booked].filter((a) => a.row === row);
        return !oracleAdmits(history, t, window.cost ?? 1, window as WindowLimit);
      });
      expect(refusedBySome, `booking ${booking.id} at +${booking.atMs - T0} ms could go 1 ms earlier`).toBe(true);
    }
    for (const { row, window } of booking.counts) {
      last.set(row, booking.atMs);
      booked.push({ row, atMs: booking.atMs, cost: window.cost ?? 1 });
    }
  }
}

/** Every admission, replayed per row in time order: no instant finds its window over the limit. */
function expectNeverOver(admitted: Key["admitted"]) {
  for (const row of new Set(admitted.map((a) => a.row))) {
    const mine = admitted.filter((a) => a.row === row);
    // The window is the same for every admission of a row here.
    const over = firstOverLimit(mine, mine[0]!.window);
    expect(over === null ? null : `${row} over at +${over - T0} ms`).toBeNull();
  }
}
