/**
 * `SpaceSaving`: the keys counted most in bounded memory. Every kept key's
 * true count lies in [count - error, count]; a key seen more than total /
 * capacity times is kept; a key not kept was seen at most `floor` times; and
 * no more than `capacity` keys are ever kept. Traces are seeded, so every run
 * replays the same events.
 */
import { describe, expect, it } from "vitest";
import { type Counted, SpaceSaving } from "../src/core/heavy-hitters.ts";
import { randomGenerator } from "./support/random.ts";

type Exact = Map<string, number>;

const countOf = (trace: readonly string[]): Exact => {
  const exact: Exact = new Map();
  for (const key of trace) exact.set(key, (exact.get(key) ?? 0) + 1);
  return exact;
};

const sketchOf = (capacity: number, trace: readonly string[]): SpaceSaving => {
  const sketch = new SpaceSaving(capacity);
  for (const key of trace) sketch.add(key);
  return sketch;
};

/** Every way the sketch breaks its guarantees against the exact counts of a stream of `total` events; none is `[]`. */
function violations(sketch: SpaceSaving, exact: Exact, total: number): string[] {
  const out: string[] = [];
  if (sketch.size > sketch.capacity) out.push(`size ${sketch.size} > capacity ${sketch.capacity}`);
  const kept = new Set<string>();
  for (const { key, count, error } of sketch.entries()) {
    kept.add(key);
    const truth = exact.get(key) ?? 0;
    if (count - error > truth || truth > count) out.push(`${key}: true ${truth} outside [${count - error}, ${count}]`);
  }
  for (const [key, truth] of exact) {
    if (kept.has(key)) continue;
    if (truth > total / sketch.capacity)
      out.push(`${key}: seen ${truth} > ${total}/${sketch.capacity} times, not kept`);
    if (truth > sketch.floor) out.push(`${key}: seen ${truth} > floor ${sketch.floor} times, not kept`);
  }
  return out;
}

const shuffle = <T>(items: T[], random: ReturnType<typeof randomGenerator>): T[] => {
  for (let i = items.length - 1; i > 0; i--) {
    const j = random.int(i + 1);
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
};

/** The 10 offenders, most refused first: 14,000 refusals down to 5,000. */
const OFFENDERS = Array.from({ length: 10 }, (_, i) => ({ key: `offender-${i}`, count: 14_000 - 1_000 * i }));

/**
 * 100,000 clients seen once (80%), twice or three times, and the
 * {@link OFFENDERS}, all interleaved at random: about 225,000 events.
 */
const offenderTrace: string[] = (() => {
  const random = randomGenerator(20_240_601);
  const trace: string[] = [];
  for (let i = 0; i < 100_000; i++) {
    const times = random.next() < 0.8 ? 1 : 2 + random.int(2);
    for (let t = 0; t < times; t++) trace.push(`client-${i}`);
  }
  for (const { key, count } of OFFENDERS) for (let t = 0; t < count; t++) trace.push(key);
  return shuffle(trace, random);
})();

/** `events` events over `keys` keys, skewed (key i about as likely as 1 / (i + 1)^0.75), so a few stand out. */
function skewedTrace(seed: number, events: number, keys: number): string[] {
  const random = randomGenerator(seed);
  return Array.from({ length: events }, () => `key-${Math.floor(keys * random.next() ** 4)}`);
}

describe("finding the heavy hitters", () => {
  it("names exactly the 10 offenders, in order, among 100,000 clients seen a few times each (capacity 64)", () => {
    const total = offenderTrace.length;
    // The premise: each offender is seen more than total / capacity times, so it must be kept.
    for (const { count } of OFFENDERS) expect(count).toBeGreaterThan(total / 64);

    const sketch = new SpaceSaving(64);
    const exact: Exact = new Map();
    const broken: string[] = [];
    offenderTrace.forEach((key, i) => {
      sketch.add(key);
      exact.set(key, (exact.get(key) ?? 0) + 1);
      if (i % 1_000 === 0 && sketch.size > 64) broken.push(`size ${sketch.size} after ${i + 1} events`);
      if (i % 25_000 === 0) broken.push(...violations(sketch, exact, i + 1));
    });
    broken.push(...violations(sketch, exact, total));
    expect(broken).toEqual([]);

    const top = sketch.top(10);
    expect(top.map(({ key }) => key)).toEqual(OFFENDERS.map(({ key }) => key));
    top.forEach(({ count, error }, i) => {
      expect(count - error).toBeLessThanOrEqual(OFFENDERS[i]!.count);
      expect(count).toBeGreaterThanOrEqual(OFFENDERS[i]!.count);
    });
    expect(sketch.size).toBe(64);
  });

  it("keeps its guarantees for every key at every point of a skewed trace (20,000 events over 2,000 keys, capacity 50)", () => {
    const trace = skewedTrace(7, 20_000, 2_000);
    const sketch = new SpaceSaving(50);
    const exact: Exact = new Map();
    const broken: string[] = [];
    trace.forEach((key, i) => {
      sketch.add(key);
      exact.set(key, (exact.get(key) ?? 0) + 1);
      if (i % 500 === 499) broken.push(...violations(sketch, exact, i + 1));
    });
    expect(broken).toEqual([]);
    // The premise: some keys are seen more than total / capacity times, and none is missed.
    const heavy = [...exact].filter(([, n]) => n > 20_000 / 50).map(([key]) => key);
    expect(heavy.length).toBeGreaterThanOrEqual(2);
    expect(sketch.top(heavy.length).map(({ key }) => key)).toEqual(
      heavy.sort((a, b) => exact.get(b)! - exact.get(a)! || (a < b ? -1 : 1)),
    );
  });
});

describe("restoring: SpaceSaving.from", () => {
  it("restored from its entries and floor (through JSON), goes on exactly as a sketch that never stopped", () => {
    const trace = skewedTrace(11, 20_000, 2_000);
    const whole = sketchOf(50, trace);

    const first = sketchOf(50, trace.slice(0, 8_000));
    const stored = JSON.parse(JSON.stringify({ entries: first.entries(), floor: first.floor }));
    const restored = SpaceSaving.from(50, stored.entries, stored.floor);
    expect(restored.entries()).toEqual(first.entries());
    for (const key of trace.slice(8_000)) restored.add(key);

    expect(restored.entries()).toEqual(whole.entries());
    expect(restored.floor).toBe(whole.floor);
  });

  it("given more entries than its capacity, keeps the largest, and the largest dropped becomes its floor", () => {
    const entries: Counted[] = [
      { key: "d", count: 2, error: 0 },
      { key: "a", count: 9, error: 1 },
      { key: "c", count: 5, error: 0 },
      { key: "b", count: 7, error: 3 },
      { key: "e", count: 1, error: 0 },
    ];
    const sketch = SpaceSaving.from(3, entries, 1);
    expect(sketch.entries()).toEqual([
      { key: "a", count: 9, error: 1 },
      { key: "b", count: 7, error: 3 },
      { key: "c", count: 5, error: 0 },
    ]);
    expect(sketch.floor).toBe(2);
    // A new key takes the smallest's place, starting from its count.
    sketch.add("f");
    expect(sketch.entries()).toContainEqual({ key: "f", count: 6, error: 5 });
    expect(sketch.entries().map(({ key }) => key)).not.toContain("c");
  });

  it("with room to spare, starts a new key from the floor it was given", () => {
    const sketch = SpaceSaving.from(4, [{ key: "a", count: 9, error: 0 }], 3);
    sketch.add("b", 2);
    expect(sketch.entries()).toEqual([
      { key: "a", count: 9, error: 0 },
      { key: "b", count: 5, error: 3 },
    ]);
  });

  it("refuses a repeated key, a count below 1, an error above the count, or a negative floor", () => {
    const a = { key: "a", count: 3, error: 0 };
    expect(() => SpaceSaving.from(2, [a, a])).toThrow(RangeError);
    expect(() => SpaceSaving.from(2, [{ key: "a", count: 0, error: 0 }])).toThrow(RangeError);
    expect(() => SpaceSaving.from(2, [{ key: "a", count: 2, error: 3 }])).toThrow(RangeError);
    expect(() => SpaceSaving.from(2, [{ key: "a", count: 2.5, error: 0 }])).toThrow(RangeError);
    expect(() => SpaceSaving.from(2, [a], -1)).toThrow(RangeError);
    expect(() => new SpaceSaving(2).merge([a, a], 0)).toThrow(RangeError);
  });
});

describe("merging: merge(entries, floor)", () => {
  it("of two sketches of the two halves of a trace, names the same 10 offenders in order, guarantees kept", () => {
    const half = offenderTrace.length / 2;
    const first = sketchOf(64, offenderTrace.slice(0, half));
    const second = sketchOf(64, offenderTrace.slice(half));
    first.merge(second.entries(), second.floor);

    expect(first.top(10).map(({ key }) => key)).toEqual(OFFENDERS.map(({ key }) => key));
    expect(violations(first, countOf(offenderTrace), offenderTrace.length)).toEqual([]);
  });

  it("of 8 isolates' sketches, each flushed every 1,000 events, keeps the guarantees against the exact counts", () => {
    const trace = skewedTrace(23, 20_000, 2_000);
    const random = randomGenerator(5);
    const isolates = Array.from({ length: 8 }, () => new SpaceSaving(50));
    const merged = new SpaceSaving(50);
    const exact: Exact = new Map();
    const broken: string[] = [];
    trace.forEach((key, i) => {
      isolates[random.int(8)]!.add(key);
      exact.set(key, (exact.get(key) ?? 0) + 1);
      if (i % 1_000 !== 999) return;
      isolates.forEach((isolate, n) => {
        merged.merge(isolate.entries(), isolate.floor);
        isolates[n] = new SpaceSaving(50);
      });
      broken.push(...violations(merged, exact, i + 1));
    });
    expect(broken).toEqual([]);
    expect(merged.size).toBe(50);
  });

  it("of a sketch that evicted nothing (floor 0), adds its counts and errors as they are", () => {
    const sketch = SpaceSaving.from(4, [
      { key: "a", count: 5, error: 1 },
      { key: "b", count: 3, error: 0 },
    ]);
    sketch.merge(
      [
        { key: "a", count: 2, error: 0 },
        { key: "c", count: 4, error: 0 },
      ],
      0,
    );
    expect(sketch.entries()).toEqual([
      { key: "a", count: 7, error: 1 },
      { key: "c", count: 4, error: 0 },
      { key: "b", count: 3, error: 0 },
    ]);
    expect(sketch.floor).toBe(0);
  });

  it("counts the other sketch's floor, as count and error, for a key it does not keep, and keeps the largest", () => {
    const sketch = SpaceSaving.from(
      2,
      [
        { key: "a", count: 10, error: 0 },
        { key: "b", count: 6, error: 2 },
      ],
      2,
    );
    sketch.merge(
      [
        { key: "b", count: 5, error: 1 },
        { key: "c", count: 4, error: 3 },
      ],
      3,
    );
    // a: 10 + 3 (err 0 + 3); b: 6 + 5 (err 2 + 1); c: 2 + 4 (err 2 + 3), dropped, so the floor is 6.
    expect(sketch.entries()).toEqual([
      { key: "a", count: 13, error: 3 },
      { key: "b", count: 11, error: 3 },
    ]);
    expect(sketch.floor).toBe(6);
  });
});

describe("edge cases", () => {
  it("with capacity 1, keeps the last key, everything before it counted as its error", () => {
    const sketch = new SpaceSaving(1);
    for (const key of ["a", "a", "b"]) sketch.add(key);
    expect(sketch.entries()).toEqual([{ key: "b", count: 3, error: 2 }]);
    expect(sketch.floor).toBe(2);
    sketch.add("b", 4);
    expect(sketch.top(5)).toEqual([{ key: "b", count: 7, error: 2 }]);
  });

  it("counts add(key, n) as n adds of key", () => {
    const trace = skewedTrace(3, 2_000, 300);
    const one = sketchOf(20, trace);
    const weighted = new SpaceSaving(20);
    for (let i = 0; i < trace.length; ) {
      let run = 1;
      while (trace[i + run] === trace[i]) run++;
      weighted.add(trace[i]!, run);
      i += run;
    }
    expect(weighted.entries()).toEqual(one.entries());

    const sketch = new SpaceSaving(2);
    sketch.add("a", 5);
    sketch.add("b", 3);
    sketch.add("c", 4);
    expect(sketch.entries()).toEqual([
      { key: "c", count: 7, error: 3 },
      { key: "a", count: 5, error: 0 },
    ]);
  });

  it("ranks equal counts by key, and of the smallest evicts the last by key, whatever order they came in", () => {
    for (const order of [
      ["a", "b", "c"],
      ["c", "b", "a"],
      ["b", "c", "a"],
    ]) {
      const sketch = new SpaceSaving(3);
      for (const key of order) sketch.add(key, 2);
      expect(sketch.top(3).map(({ key }) => key)).toEqual(["a", "b", "c"]);
      sketch.add("d");
      expect(sketch.entries()).toEqual([
        { key: "d", count: 3, error: 2 },
        { key: "a", count: 2, error: 0 },
        { key: "b", count: 2, error: 0 },
      ]);
    }
  });

  it("gives copies: changing what top or entries returned changes nothing kept", () => {
    const sketch = new SpaceSaving(3);
    sketch.add("a", 2);
    sketch.top(1)[0]!.count = 100;
    sketch.entries()[0]!.key = "z";
    expect(sketch.entries()).toEqual([{ key: "a", count: 2, error: 0 }]);
    expect(sketch.top(0)).toEqual([]);
    expect(sketch.top(-1)).toEqual([]);
  });

  it("refuses a capacity or a count that is not a positive integer", () => {
    expect(() => new SpaceSaving(0)).toThrow(RangeError);
    expect(() => new SpaceSaving(1.5)).toThrow(RangeError);
    const sketch = new SpaceSaving(1);
    expect(() => sketch.add("a", 0)).toThrow(RangeError);
    expect(() => sketch.add("a", -1)).toThrow(RangeError);
    expect(() => sketch.add("a", Number.NaN)).toThrow(RangeError);
    expect(sketch.size).toBe(0);
  });
});
