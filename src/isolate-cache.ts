/**
 * @module
 * What the isolate's caches share: a map with a size cap that evicts its
 * oldest entries, and a stable number per rule object.
 */
import type { Rule } from "./core/rules.ts";

/** A Map that never holds more than `maxEntries`: setting past the cap evicts the oldest entry. */
export class CappedMap<K, V> {
  private readonly entries = new Map<K, V>();
  readonly maxEntries: number;

  constructor(maxEntries: number) {
    this.maxEntries = maxEntries;
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: K): V | undefined {
    return this.entries.get(key);
  }

  /** Stores `value` as the newest entry; stores nothing when the cap is 0. */
  set(key: K, value: V): void {
    if (this.maxEntries <= 0) return;
    this.entries.delete(key); // re-inserted last, so the oldest entries go first
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(key, value);
  }

  delete(key: K): void {
    this.entries.delete(key);
  }
}

const ruleIds = new WeakMap<Rule, number>();
let nextRuleId = 0;

/** A number per rule object: rules with equal ids but different limits never share cache entries. */
export function ruleUid(rule: Rule): number {
  let uid = ruleIds.get(rule);
  if (uid === undefined) {
    uid = nextRuleId++;
    ruleIds.set(rule, uid);
  }
  return uid;
}
