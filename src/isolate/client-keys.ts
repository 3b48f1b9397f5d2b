/**
 * @module
 * The client keys this isolate remembers: one {@link KeyState} per key,
 * found by the key's digest, under two caps. Keys in use (seen by a
 * request, or answered by their object) are kept by recency, at most
 * `maxKeys`; a key pushed out hands back every unit it holds. Keys with a
 * refusal the isolate knows of are kept at most `maxKeys` too, apart: a
 * flood of refused keys never pushes out the leases of keys in use, and
 * answering a known refusal does not make a key recent. A key's state lives
 * while either keeps it.
 */
import { LruMap } from "../core/lru.ts";
import type { Rule } from "../core/rules.ts";
import { type Refund, type RuleVerdict, unitsOf } from "../object/protocol.ts";
import type { IsolateCounters } from "./counters.ts";
import { CallTimes } from "./flight.ts";
import { type KeyHost, KeyState } from "./key-state.ts";
import type { KnownRefusal } from "./vocabulary.ts";

/** Units asked for at most with one call. */
export const DEFAULT_MAX_LEASE_UNITS = 64;
/** Known refusals answer at most this long, however far off `retryAfter` is. */
export const DEFAULT_MAX_REFUSAL_MS = 10_000;
/** Under attack, at most one log line per key and rule per this many milliseconds. */
export const DEFAULT_LOG_EVERY_MS = 10_000;
/** Units waiting to be handed back for keys no longer kept; more are written off. */
const MAX_OUTBOX = 1_000;
const NO_RETURNS: readonly Return[] = Object.freeze([]);

/** Units to hand back for a key no longer kept. */
export type Return = { name: string; refunds: Refund[] };

export type ClientKeysOptions = {
  /** Keys kept at most, in use and refused each. */
  maxKeys: number;
  /** Units asked for at most with one call; 0 turns leases off. */
  maxUnits: number;
  /** How long a known refusal answers at most; 0 keeps none. */
  maxHoldMs: number;
  /** At most one log line per key and rule per this many milliseconds. */
  logEveryMs: number;
  counters: IsolateCounters;
};

export class ClientKeys implements KeyHost {
  private readonly inUse: LruMap<string, KeyState>;
  private readonly withRefusals: LruMap<string, KeyState>;
  private readonly outbox: Return[] = [];
  readonly maxUnits: number;
  readonly maxHoldMs: number;
  readonly logEveryMs: number;
  readonly counters: IsolateCounters;
  readonly times = new CallTimes();
  /** The latest isolate time the keys were told of, for evictions, which come without one. */
  private lastNowMs = 0;
  /** The stamp of the last call sent (see {@link stamp}). */
  private sent = 0;

  constructor(options: ClientKeysOptions) {
    this.maxUnits = options.maxUnits;
    this.maxHoldMs = options.maxHoldMs;
    this.logEveryMs = options.logEveryMs;
    this.counters = options.counters;
    this.inUse = new LruMap(options.maxKeys, (digest, state) => {
      state.evicted(this.lastNowMs);
      if (state.refusals.any && this.withRefusals.peek(digest) === state) return;
      state.refusals.clear();
    });
    this.withRefusals = new LruMap(options.maxHoldMs > 0 ? options.maxKeys : 0, (_digest, state) =>
      state.refusals.clear(),
    );
  }

  /** Keys kept as in use. */
  get size(): number {
    return this.inUse.size;
  }

  /** Keys kept for their refusals. */
  get refusedSize(): number {
    return this.withRefusals.size;
  }

  /** Whether leases are on (maxUnits above 0). */
  get leasing(): boolean {
    return this.maxUnits > 0;
  }

  /** The digests of every key kept (for inspection). */
  digests(): Set<string> {
    return new Set([...this.inUse.keys(), ...this.withRefusals.keys()]);
  }

  /** The key's state, if the isolate keeps any, without making the key recent. */
  peek(digest: string): KeyState | undefined {
    return this.inUse.peek(digest) ?? this.withRefusals.peek(digest);
  }

  /** The key's state, made if missing, kept as in use and most recent at `nowMs`. */
  use(digest: string, nowMs: number): KeyState {
    if (nowMs > this.lastNowMs) this.lastNowMs = nowMs;
    let state = this.inUse.get(digest);
    if (state !== undefined) return state;
    state = this.withRefusals.peek(digest);
    if (state !== undefined) state.revived(nowMs);
    else state = new KeyState(this, nowMs);
    this.inUse.set(digest, state);
    return state;
  }

  /** Counts a request for this key toward its demand, when leases are on. */
  noteRequest(digest: string, nowMs: number): void {
    if (this.maxUnits > 0) this.use(digest, nowMs).demand.note(nowMs);
  }

  /** The live refusal of this key under this rule, if the object refused it recently. */
  refusal(digest: string, rule: Rule, nowMs: number): KnownRefusal | undefined {
    return this.peek(digest)?.refusals.get(rule, nowMs);
  }

  /** Remembers a refusal from a call sent at `sentAtMs`, for as long as the object says it holds. */
  remember(digest: string, rule: Rule, name: string, sentAtMs: number, sent: number, verdict: RuleVerdict): void {
    if (this.maxHoldMs <= 0) return;
    const state = this.peek(digest) ?? this.use(digest, sentAtMs);
    if (state.refusals.remember(rule, name, sentAtMs, sent, verdict, this.maxHoldMs))
      this.withRefusals.set(digest, state);
  }

  /**
   * A stamp for a call sent now: later than every call sent before it, and
   * than every forgetting ({@link forget}, {@link overridden}) before it,
   * where isolate times may be the same millisecond.
   */
  stamp(): number {
    return ++this.sent;
  }

  /**
   * Forgets, at once, what this isolate remembers of a key under these
   * rules (an admin reset or an override change, at `nowMs`): its known
   * refusals and its leases, and any that a call sent until now brings.
   */
  forget(digest: string, rules: Rule[], nowMs: number): void {
    const state = this.use(digest, nowMs);
    for (const rule of rules) state.forget(rule, this.sent);
  }

  /** The key's override changed under these rules (see `KeyState.overridden`). */
  overridden(digest: string, rules: Rule[], nowMs: number): void {
    const state = this.use(digest, nowMs);
    for (const rule of rules) state.overridden(rule, this.sent);
  }

  /**
   * An adaptive rule's factor changed: every key's leases and known
   * refusals under the rule go at once (see `KeyState.dropRule`).
   */
  dropRule(ruleId: string, nowMs: number): void {
    if (nowMs > this.lastNowMs) this.lastNowMs = nowMs;
    for (const digest of [...this.inUse.keys()]) this.inUse.peek(digest)?.dropRule(ruleId);
    for (const digest of [...this.withRefusals.keys()]) this.withRefusals.peek(digest)?.dropRule(ruleId);
  }

  /** The digest of the key whose object is `name`, found through a live refusal of it under one of `rules`. */
  digestByName(rules: Rule[], name: string, nowMs: number): string | null {
    for (const digest of [...this.withRefusals.keys()]) {
      const state = this.withRefusals.peek(digest)!;
      for (const rule of rules) if (state.refusals.get(rule, nowMs)?.name === name) return digest;
    }
    return null;
  }

  /**
   * Notes one refusal (`refusal`) or one ignored `cost_header` value
   * (`cost`) of this key under this rule. Returns the repeats to log with
   * it, or null when a line went out less than `logEveryMs` ago.
   */
  noteLine(digest: string, line: "refusal" | "cost", rule: Rule, nowMs: number): { repeats: number } | null {
    const state = this.peek(digest);
    return state === undefined ? { repeats: 0 } : state.lines.note(line, rule, nowMs, this.logEveryMs);
  }

  /** The units held here for this key, unspent, with where each was counted. */
  holdings(digest: string): Refund[] {
    return this.inUse.peek(digest)?.leases.holdings() ?? [];
  }

  /** Units held here, unspent, for this key: live leases and returns owed. */
  heldUnits(digest: string): number {
    return unitsOf(this.holdings(digest));
  }

  handBack(name: string, refunds: Refund[]): void {
    if (this.outbox.length < MAX_OUTBOX) this.outbox.push({ name, refunds });
    else this.counters.writeOff("outbox full", unitsOf(refunds));
  }

  /** Returns for keys no longer kept, to hand back in the background; they leave the isolate. */
  takeOutbox(): readonly Return[] {
    return this.outbox.length === 0 ? NO_RETURNS : this.outbox.splice(0);
  }
}
