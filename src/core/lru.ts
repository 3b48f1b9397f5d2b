/**
 * @module
 * A map with a size cap that evicts its least recently used entry, and says
 * so: whoever owns the values learns of every eviction, so state held in an
 * evicted value (leased units, refunds owed) is handed back, never dropped.
 */

export class LruMap<K, V> {
  private readonly entries = new Map<K, V>();
  readonly capacity: number;
  private readonly onEvict: (key: K, value: V) => void;

  /**
   * @param capacity entries kept at most; 0 keeps none
   * @param onEvict called with every entry pushed out by the cap (not with deleted ones)
   */
  constructor(capacity: number, onEvict: (key: K, value: V) => void = () => {}) {
    this.capacity = capacity;
    this.onEvict = onEvict;
  }

  get size(): number {
    return this.entries.size;
  }

  /** The value, now the most recently used. */
  get(key: K): V | undefined {
    const value = this.entries.get(key);
    if (value === undefined) return undefined;
    // Re-inserted last: a Map iterates in insertion order, so the first key is the least recently used.
    this.entries.delete(key);
    this.entries.set(key, value);
    return value;
  }

  /** The value, leaving the order as it is. */
  peek(key: K): V | undefined {
    return this.entries.get(key);
  }

  /** Stores `value` as the most recently used; past the cap, evicts the least recently used. */
  set(key: K, value: V): void {
    this.entries.delete(key);
    this.entries.set(key, value);
    while (this.entries.size > this.capacity) {
      const [oldestKey, oldest] = this.entries.entries().next().value as [K, V];
      this.entries.delete(oldestKey);
      this.onEvict(oldestKey, oldest);
    }
  }

  delete(key: K): boolean {
    return this.entries.delete(key);
  }

  keys(): IterableIterator<K> {
    return this.entries.keys();
  }
}
