/**
 * @module
 * Blocked keys, remembered by the isolate so that refused traffic costs no
 * Durable Object call.
 *
 * Once the object refuses a key under a rule, it keeps refusing it until
 * `retryAfter`: a refused request changes nothing, and no request can be
 * admitted before then (that is what `retryAfter` means). So until then the
 * isolate can answer 429 itself, as the object would. The entry expires
 * early rather than late: its clock starts when the call was sent, before
 * the object decided. A size cap bounds memory under a flood of keys, and a
 * cap on how long an entry lives bounds how long an admin reset takes to
 * reach every isolate.
 */
import type { Rule } from "./core/rules.ts";
import { CappedMap, ruleUid } from "./isolate-cache.ts";
import type { ProblemParts } from "./problem.ts";

/** What the isolate remembers of one refusal. */
export type BlockedEntry = {
  /** Isolate time (Unix ms) at which the object admits this key again, if nothing else is admitted. */
  retryAtMs: number;
  /** Isolate time (Unix ms) until which this entry answers: `retryAtMs`, or sooner under the age cap. */
  untilMs: number;
  /** The weighted count the object saw when it refused. */
  weighted: number;
  /** Refusals answered from this entry, not yet logged. */
  repeats: number;
  /** The last refusal answered from this entry, ready to send again while its wait reads the same. */
  ready?: { key: string; parts: ProblemParts };
};

export const DEFAULT_MAX_ENTRIES = 10_000;
/** Entries live at most this long, however far off `retryAfter` is. */
export const MAX_ENTRY_MS = 10_000;

export class BlockedCache {
  private readonly entries: CappedMap<string, BlockedEntry>;
  readonly maxEntryMs: number;

  constructor(maxEntries = DEFAULT_MAX_ENTRIES, maxEntryMs = MAX_ENTRY_MS) {
    this.entries = new CappedMap(maxEntries);
    this.maxEntryMs = maxEntryMs;
  }

  get size(): number {
    return this.entries.size;
  }

  /** The live entry for this rule and canonical key, if the object refused it recently. */
  get(rule: Rule, canonicalKey: string, nowMs: number): BlockedEntry | undefined {
    const entry = this.entries.get(`${ruleUid(rule)}\u0000${canonicalKey}`);
    // An expired entry stays until it is replaced or evicted, so its unlogged repeats are not lost.
    return entry !== undefined && nowMs < entry.untilMs ? entry : undefined;
  }

  /**
   * Remembers a refusal decided by a call sent at `sentAtMs` that answered
   * `retryAfterMs`. Returns the refusals the previous entry answered unlogged.
   */
  remember(rule: Rule, canonicalKey: string, sentAtMs: number, retryAfterMs: number, weighted: number): number {
    const key = `${ruleUid(rule)}\u0000${canonicalKey}`;
    const previous = this.entries.get(key);
    this.entries.set(key, {
      retryAtMs: sentAtMs + retryAfterMs,
      untilMs: sentAtMs + Math.min(retryAfterMs, this.maxEntryMs),
      weighted,
      repeats: 0,
    });
    return previous?.repeats ?? 0;
  }

  /** Forgets a key under a rule (after an admin reset). */
  forget(rule: Rule, canonicalKey: string): void {
    this.entries.delete(`${ruleUid(rule)}\u0000${canonicalKey}`);
  }
}

/** The isolate's cache, shared by every `rateLimit()` in it. */
export const blockedKeys = new BlockedCache();
