/**
 * @module
 * The heavy hitters of a stream in bounded memory: Space-Saving (Metwally,
 * Agrawal and El Abbadi, "Efficient Computation of Frequent and Top-k
 * Elements in Data Streams", 2005), over a min-heap with a key → slot map,
 * so `add` costs O(log capacity). Isolates keep the clients they refused
 * since their last flush in one per rule; the statistics object merges the
 * flushes into one per rule that lives as long as it does.
 *
 * With N the total of the counts added (and merged), for every kept key:
 *
 * - `count - error <= true count <= count`;
 * - a key whose true count exceeds N / capacity is kept (for sketches built
 *   by `add`, and merged or restored from sketches of at least the same
 *   capacity);
 * - a key not kept was seen at most `floor` times;
 * - at most `capacity` keys are kept.
 *
 * Everything is deterministic: equal counts are ranked by key (code-unit
 * order), and of those the one ranked last is the one evicted, so the same
 * adds give the same sketch however it was stored and restored in between.
 */

/** A key with its estimated count: at least the true count, and at most `error` more than it. */
export type Counted = { key: string; count: number; error: number };

/** Whether `a` ranks before `b`: the larger count, then the smaller key. */
const ranksBefore = (a: Counted, b: Counted): boolean => a.count > b.count || (a.count === b.count && a.key < b.key);

/** For `Array.prototype.sort`: largest count first, ties by key. */
const byRank = (a: Counted, b: Counted): number => (ranksBefore(a, b) ? -1 : ranksBefore(b, a) ? 1 : 0);

const isCount = (n: number, least: number): boolean => Number.isSafeInteger(n) && n >= least;

function checkEntries(entries: readonly Counted[]): void {
  const seen = new Set<string>();
  for (const { key, count, error } of entries) {
    if (!isCount(count, 1) || !isCount(error, 0) || error > count || seen.has(key)) {
      throw new RangeError(`heavy hitters: bad or repeated entry ${JSON.stringify({ key, count, error })}`);
    }
    seen.add(key);
  }
}

/** A Space-Saving sketch: the keys counted most, at most `capacity` of them. */
export class SpaceSaving {
  /** Keys kept at most. */
  readonly capacity: number;
  /** A min-heap by rank: `heap[0]` ranks last, and is the one a new key evicts. */
  private heap: Counted[] = [];
  /** Each kept key's slot in `heap`. */
  private slots = new Map<string, number>();
  private bound = 0;

  /** @param capacity keys kept at most: a positive integer */
  constructor(capacity: number) {
    if (!isCount(capacity, 1)) {
      throw new RangeError(`heavy hitters: capacity must be a positive integer, not ${capacity}`);
    }
    this.capacity = capacity;
  }

  /** Keys kept: never more than `capacity`. */
  get size(): number {
    return this.heap.length;
  }

  /**
   * The most any key not kept can have been seen: 0 until a key is evicted,
   * then the largest count evicted (or dropped by a merge or restore).
   * Store it with {@link entries}, and send it with them to be merged.
   */
  get floor(): number {
    return this.bound;
  }

  /**
   * Counts `key` `count` more times. A key not kept takes the slot of the one
   * ranked last when full, and starts from the count it evicts (or `floor`),
   * which becomes its error. O(log capacity).
   *
   * @param count a positive integer; 1 by default
   */
  add(key: string, count = 1): void {
    if (!isCount(count, 1)) throw new RangeError(`heavy hitters: count must be a positive integer, not ${count}`);
    const slot = this.slots.get(key);
    if (slot !== undefined) {
      this.heap[slot]!.count += count;
      this.siftDown(slot);
    } else if (this.heap.length < this.capacity) {
      this.heap.push({ key, count: this.bound + count, error: this.bound });
      this.slots.set(key, this.heap.length - 1);
      this.siftUp(this.heap.length - 1);
    } else {
      const last = this.heap[0]!;
      this.slots.delete(last.key);
      this.bound = Math.max(this.bound, last.count);
      this.heap[0] = { key, count: this.bound + count, error: this.bound };
      this.slots.set(key, 0);
      this.siftDown(0);
    }
  }

  /** The `n` keys counted most (fewer if fewer are kept), largest count first, equal counts by key. Copies. */
  top(n: number): Counted[] {
    return this.entries().slice(0, Math.max(0, n));
  }

  /** Every key kept, in {@link top}'s order: with {@link floor}, what {@link SpaceSaving.from} restores. Copies. */
  entries(): Counted[] {
    return this.heap.map(({ key, count, error }) => ({ key, count, error })).sort(byRank);
  }

  /**
   * Adds another sketch's counts, as if its stream had been added here:
   * a key kept in one sketch only counts the other's floor as both count and
   * error; past `capacity`, the largest are kept. O((size + entries) log).
   *
   * @param entries the other sketch's {@link entries}, every one of them
   * @param floor the other sketch's {@link floor}: the most a key missing
   *   from `entries` can have been seen there (0 if none was evicted; to
   *   merge only its `top(n)`, the larger of its floor and the `n`th count)
   * @throws RangeError on a repeated key or a count that is not a positive integer
   */
  merge(entries: readonly Counted[], floor: number): void {
    checkEntries(entries);
    if (!isCount(floor, 0)) throw new RangeError(`heavy hitters: floor must be a non-negative integer, not ${floor}`);
    const merged = new Map<string, Counted>();
    for (const { key, count, error } of this.heap) merged.set(key, { key, count: count + floor, error: error + floor });
    for (const { key, count, error } of entries) {
      const mine = merged.get(key);
      if (mine === undefined) merged.set(key, { key, count: count + this.bound, error: error + this.bound });
      else merged.set(key, { key, count: mine.count - floor + count, error: mine.error - floor + error });
    }
    this.load([...merged.values()], this.bound + floor);
  }

  /**
   * A sketch restored from stored {@link entries} and {@link floor}; past
   * `capacity`, keeps the largest, and the floor rises to the largest dropped.
   * Restored with what a sketch held, it goes on exactly as that sketch would.
   *
   * @param floor the stored sketch's {@link floor}; 0 by default
   * @throws RangeError on a bad capacity, a repeated key or a count that is not a positive integer
   */
  static from(capacity: number, entries: readonly Counted[], floor = 0): SpaceSaving {
    checkEntries(entries);
    if (!isCount(floor, 0)) throw new RangeError(`heavy hitters: floor must be a non-negative integer, not ${floor}`);
    const sketch = new SpaceSaving(capacity);
    sketch.load(
      entries.map(({ key, count, error }) => ({ key, count, error })),
      floor,
    );
    return sketch;
  }

  /** Keeps the `capacity` largest of `entries` (owned, unchecked), with `floor` raised to the largest dropped. */
  private load(entries: Counted[], floor: number): void {
    entries.sort(byRank);
    const dropped = entries[this.capacity];
    this.bound = Math.max(floor, dropped?.count ?? 0);
    // Smallest first: an array sorted that way is already a min-heap.
    this.heap = entries.slice(0, this.capacity).reverse();
    this.slots = new Map(this.heap.map(({ key }, slot) => [key, slot]));
  }

  private swap(i: number, j: number): void {
    const a = this.heap[i]!;
    const b = this.heap[j]!;
    this.heap[i] = b;
    this.heap[j] = a;
    this.slots.set(b.key, i);
    this.slots.set(a.key, j);
  }

  /** Moves the entry at `i` toward the root while it ranks after its parent. */
  private siftUp(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!ranksBefore(this.heap[parent]!, this.heap[i]!)) return;
      this.swap(i, parent);
      i = parent;
    }
  }

  /** Moves the entry at `i` toward the leaves while a child ranks after it. */
  private siftDown(i: number): void {
    const size = this.heap.length;
    for (;;) {
      const left = 2 * i + 1;
      let last = i;
      if (left < size && ranksBefore(this.heap[last]!, this.heap[left]!)) last = left;
      if (left + 1 < size && ranksBefore(this.heap[last]!, this.heap[left + 1]!)) last = left + 1;
      if (last === i) return;
      this.swap(i, last);
      i = last;
    }
  }
}
