/**
 * @module
 * The refusals this isolate knows of for one client key, per rule, and when
 * each rule was last forgotten. Once the object refuses a key under a rule,
 * it keeps refusing it until `retryAfter` (a refused request changes
 * nothing), so until then the isolate answers 429 itself, as the object
 * would, for as long as the object says its refusal holds (`holdsForMs`),
 * capped. Its clock starts when the call was sent, so it ends early rather
 * than late. An admin reset or an override change forgets a rule: a refusal
 * (or a lease) from a call sent before then rests on counts that are gone.
 */
import type { Rule } from "../core/rules.ts";
import type { RuleVerdict } from "../object/protocol.ts";
import { KnownRefusal } from "./vocabulary.ts";

export class KnownRefusals {
  /** Per rule, the refusal the object gave last, while it holds. */
  private entries: Map<Rule, KnownRefusal> | null = null;
  /** Per rule, the stamp of the last call sent before it was last forgotten (see `ClientKeys.stamp`). */
  private forgottenAfter: Map<Rule, number> | null = null;

  /** The live refusal under this rule, if the object refused the key recently. */
  get(rule: Rule, nowMs: number): KnownRefusal | undefined {
    const entry = this.entries?.get(rule);
    if (entry === undefined) return undefined;
    if (nowMs < entry.untilMs) return entry;
    this.entries!.delete(rule);
    return undefined;
  }

  /**
   * Remembers a refusal from a call sent at `sentAtMs` (stamped `sent`), for
   * as long as the object says it holds, at most `maxHoldMs`, unless the rule
   * was forgotten since. Returns whether it did.
   */
  remember(rule: Rule, name: string, sentAtMs: number, sent: number, verdict: RuleVerdict, maxHoldMs: number): boolean {
    if (this.forgottenSince(rule, sent)) return false;
    const holdMs = Math.min(verdict.holdsForMs, maxHoldMs);
    if (holdMs <= 0) {
      this.entries?.delete(rule);
      return false;
    }
    const { limit, override, tier, reduced, never, remaining, own } = verdict;
    this.entries ??= new Map();
    this.entries.set(
      rule,
      new KnownRefusal(sentAtMs + verdict.retryAfterMs, sentAtMs + holdMs, verdict.weighted, name, {
        limit,
        override,
        tier,
        reduced,
        never,
        remaining,
        own,
      }),
    );
    return true;
  }

  /**
   * Forgets the rule (an admin reset, an override change): its refusal
   * goes, and any a call sent until now (stamped `lastSent` or before) brings.
   * By stamps, not times: a call sent after the change in the same
   * millisecond is after it (found while reproducing a report from outside:
   * with the clock standing still, every lease after a reset was written
   * off, and a limit of 50 admitted 25).
   */
  forget(rule: Rule, lastSent: number): void {
    this.forgottenAfter ??= new Map();
    this.forgottenAfter.set(rule, lastSent);
    this.entries?.delete(rule);
  }

  /** Whether the rule was forgotten since the call stamped `sent` went: what it brings is not to be kept. */
  forgottenSince(rule: Rule, sent: number): boolean {
    const last = this.forgottenAfter?.get(rule);
    return last !== undefined && sent <= last;
  }

  /** Drops the refusals under every variant (tier) of a rule: an adaptive rule's factor changed. */
  dropRule(ruleId: string): void {
    if (this.entries !== null)
      for (const rule of this.entries.keys()) if (rule.id === ruleId) this.entries.delete(rule);
  }

  /** Drops every refusal (the isolate keeps no more of them for this key); forget times stay. */
  clear(): void {
    this.entries = null;
  }

  /** Whether any refusal is kept. */
  get any(): boolean {
    return this.entries !== null && this.entries.size > 0;
  }
}
