/**
 * @module
 * Refusals the isolate knows of, so refused traffic costs no Durable Object
 * call.
 *
 * Once the object refuses a key under a rule, it keeps refusing it until
 * `retryAfter`: a refused request changes nothing, and no request can be
 * admitted before then (that is what `retryAfter` means). So until then the
 * isolate answers 429 itself, as the object would. The object says how long
 * its refusal holds (`holdsForMs`): not at all while counts it may be given
 * back weigh in on it. An entry's clock starts when the call was sent, so it
 * ends early rather than late, and a cap on its life bounds how long an
 * admin reset takes to reach every isolate.
 */

import { LruMap } from "../core/lru.ts";
import type { Rule } from "../core/rules.ts";
import type { RuleVerdict } from "../object/protocol.ts";
import { ruleUid } from "./rule-ids.ts";

/** Entries live at most this long, however far off `retryAfter` is. */
export const DEFAULT_MAX_REFUSAL_MS = 10_000;

/** The parts of a verdict that say what applied to the client. */
export type Applied = Pick<RuleVerdict, "limit" | "override" | "tier">;

/** One refusal the isolate knows of. */
export class KnownRefusal {
  private memo: { seconds: number; rules: readonly Rule[]; value: unknown } | null = null;
  /** Isolate time (Unix ms) at which the object admits this key again, if nothing else is admitted. */
  readonly retryAtMs: number;
  /** Isolate time until which this entry answers: `retryAtMs`, or sooner under the cap. */
  readonly untilMs: number;
  /** The weighted count the object saw when it refused. */
  readonly weighted: number;
  /** The key's object name (SHA-256 hex), for log lines. */
  readonly name: string;
  /** What applied to this client when it was refused: the limit, and an override and its tier, if any. */
  readonly applied: Applied;

  constructor(retryAtMs: number, untilMs: number, weighted: number, name: string, applied: Applied) {
    this.retryAtMs = retryAtMs;
    this.untilMs = untilMs;
    this.weighted = weighted;
    this.name = name;
    this.applied = applied;
  }

  /**
   * A value derived from this refusal (the 429 sent again), made once and
   * reused while the wait reads the same whole `seconds` and the request
   * matched the same `rules`, the same objects in the same order.
   */
  reuse<T>(seconds: number, rules: readonly Rule[], make: () => T): T {
    const memo = this.memo;
    if (memo !== null && memo.seconds === seconds && sameRules(memo.rules, rules)) return memo.value as T;
    const value = make();
    this.memo = { seconds, rules, value };
    return value;
  }
}

function sameRules(a: readonly Rule[], b: readonly Rule[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export type KnownRefusalsOptions = {
  /** Entries kept at most. */
  maxKeys: number;
  /** How long an entry answers at most; 0 keeps none. */
  maxHoldMs: number;
};

export class KnownRefusals {
  private readonly entries: LruMap<string, KnownRefusal>;
  /**
   * When a key under a rule was last forgotten (an admin reset or an override
   * change): a refusal from a call sent before then rests on what was
   * forgotten, and is not remembered even when it answers after.
   */
  private readonly forgottenAt: LruMap<string, number>;
  readonly maxHoldMs: number;

  constructor(options: KnownRefusalsOptions) {
    const cap = options.maxHoldMs > 0 ? options.maxKeys : 0;
    this.entries = new LruMap(cap);
    this.forgottenAt = new LruMap(cap);
    this.maxHoldMs = options.maxHoldMs;
  }

  get size(): number {
    return this.entries.size;
  }

  keys(): IterableIterator<string> {
    return this.entries.keys();
  }

  /** The live refusal of this key under this rule, if the object refused it recently. */
  lookup(rule: Rule, digest: string, nowMs: number): KnownRefusal | undefined {
    const key = `${ruleUid(rule)}:${digest}`;
    // Looked at without moving it: an entry lives at most maxHoldMs and is set anew each time the object
    // refuses again, which keeps a key under attack among the recent, without a reordering per request.
    const entry = this.entries.peek(key);
    if (entry === undefined) return undefined;
    if (nowMs < entry.untilMs) return entry;
    this.entries.delete(key);
    return undefined;
  }

  /** Remembers a refusal from a call sent at `sentAtMs`, for as long as the object says it holds. */
  remember(rule: Rule, digest: string, name: string, sentAtMs: number, verdict: RuleVerdict): void {
    const key = `${ruleUid(rule)}:${digest}`;
    const holdMs = Math.min(verdict.holdsForMs, this.maxHoldMs);
    const forgottenAtMs = this.forgottenAt.peek(key);
    if (forgottenAtMs !== undefined && sentAtMs <= forgottenAtMs) return;
    if (holdMs <= 0) {
      this.entries.delete(key);
      return;
    }
    const { limit, override, tier } = verdict;
    const applied: Applied = { limit, override, tier };
    this.entries.set(
      key,
      new KnownRefusal(sentAtMs + verdict.retryAfterMs, sentAtMs + holdMs, verdict.weighted, name, applied),
    );
  }

  /** Forgets a key under a rule (an admin reset, an override change), and any refusal from a call sent until now. */
  forget(rule: Rule, digest: string, nowMs: number): void {
    const key = `${ruleUid(rule)}:${digest}`;
    this.entries.delete(key);
    this.forgottenAt.set(key, nowMs);
  }
}
