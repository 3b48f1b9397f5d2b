/**
 * @module
 * What one isolate remembers between requests, as one value: its clock, the
 * secret its key digests are made with, leases, known refusals, calls in
 * flight, how often refusals were logged, what it counted about itself,
 * the bearer tokens it verified, and its adaptive rules' factors.
 * The Worker makes one per isolate; a library user may make their own to
 * size it or share it between middlewares, and tests make several, as
 * several isolates would be.
 */
import { randomDigestKey, sipHash24 } from "../core/digest.ts";
import type { Rule } from "../core/rules.ts";
import { Tokens } from "../identity/tokens.ts";
import { AdaptiveRules } from "./adaptive.ts";
import { ClientKeys, DEFAULT_LOG_EVERY_MS, DEFAULT_MAX_LEASE_UNITS, DEFAULT_MAX_REFUSAL_MS } from "./client-keys.ts";
import { IsolateCounters } from "./counters.ts";
import { variantsOf } from "./rule-ids.ts";
import { DEFAULT_FLUSH_EVERY_MS, StatsRecorder } from "./stats.ts";

export type IsolateOptions = {
  /**
   * The isolate's clock, in Unix milliseconds. Only durations measured on it
   * matter (how long a lease or a refusal lasts), so it may differ from the
   * objects' clocks.
   * @default Date.now
   */
  clock?: () => number;
  /**
   * Client keys each cache remembers at most; the least recently used go first.
   * @default 10_000
   */
  maxKeys?: number;
  /**
   * Lease units asked for at most with one call; 0 turns leases off, so every
   * admission is decided by the object.
   * @default 64
   */
  maxLeaseUnits?: number;
  /**
   * How long a remembered refusal answers at most, in milliseconds; 0 turns
   * the cache of refusals off. It bounds how long an admin reset takes to
   * reach every isolate.
   * @default 10_000
   */
  maxRefusalMs?: number;
  /**
   * Under attack, at most one log line per client key and rule per this many milliseconds.
   * @default 10_000
   */
  logEveryMs?: number;
  /**
   * How often the isolate sends its statistics to the statistics object, at most, in milliseconds.
   * @default 10_000
   */
  flushEveryMs?: number;
};

export type Isolate = {
  clock: () => number;
  /** The digest the isolate knows a canonical client key by: 64 bits (4 code units), keyed with this isolate's secret. */
  digest: (canonical: string) => string;
  /** Every client key it remembers, by digest: leases, known refusals, forget times, owed units, demand, gates. */
  keys: ClientKeys;
  /** Units written off on purpose, by reason. */
  counters: IsolateCounters;
  /** Bearer tokens verified here, and the keys they were verified with. */
  tokens: Tokens;
  /** What this isolate decided since its last flush to the statistics object. */
  stats: StatsRecorder;
  /** Its adaptive rules: the factor each last learned, and the counts it reports to their controllers. */
  adaptive: AdaptiveRules;
};

export const DEFAULT_MAX_KEYS = 10_000;

export function createIsolate(options: IsolateOptions = {}): Isolate {
  const maxKeys = options.maxKeys ?? DEFAULT_MAX_KEYS;
  const counters = new IsolateCounters();
  const key = randomDigestKey();
  // Read at each call, not captured: a test may swap the global clock.
  const clock = options.clock ?? (() => Date.now());
  // The last key digested, and its digest: a hot key's requests, one after another, digest it once.
  let lastText: string | undefined;
  let lastDigest = "";
  const digest = (text: string) => {
    if (text !== lastText) {
      lastDigest = sipHash24(key, text);
      lastText = text;
    }
    return lastDigest;
  };
  return {
    clock,
    digest,
    keys: new ClientKeys({
      maxKeys,
      maxUnits: options.maxLeaseUnits ?? DEFAULT_MAX_LEASE_UNITS,
      maxHoldMs: options.maxRefusalMs ?? DEFAULT_MAX_REFUSAL_MS,
      logEveryMs: options.logEveryMs ?? DEFAULT_LOG_EVERY_MS,
      counters,
    }),
    counters,
    tokens: new Tokens({ clock, digest, maxTokens: maxKeys }),
    stats: new StatsRecorder(options.flushEveryMs ?? DEFAULT_FLUSH_EVERY_MS),
    adaptive: new AdaptiveRules(),
  };
}

let shared: Isolate | undefined;

/** The isolate's own state, made on first use (not at startup, where a Worker may not draw random numbers). */
export function defaultIsolate(): Isolate {
  shared ??= createIsolate();
  return shared;
}

/**
 * Forgets, at once, what this isolate remembers of a client under a rule
 * (in every tier a token put it in): its known refusal and its lease. Other
 * isolates' refusals lapse within their cap.
 */
export function forgetClient(isolate: Isolate, rule: Rule, canonical: string): void {
  isolate.keys.forget(isolate.digest(canonical), variantsOf(rule), isolate.clock());
}

/**
 * A client's override under a rule changed: what this isolate remembers of
 * it under the rule goes at once, as in {@link forgetClient}, but its counts
 * stay, so the unspent units of its lease go back to its object (with its
 * next call) rather than being written off.
 */
export function overrideChanged(isolate: Isolate, rule: Rule, canonical: string): void {
  isolate.keys.overridden(isolate.digest(canonical), variantsOf(rule), isolate.clock());
}

/**
 * What {@link forgetClient} does, for a client known by its object's name:
 * the isolate's digest of it is found through a live refusal it remembers
 * under the rule (or a tier of it), which records the name. Whether it was
 * found, and so forgotten.
 */
export function forgetClientNamed(isolate: Isolate, rule: Rule, name: string): boolean {
  const nowMs = isolate.clock();
  const variants = variantsOf(rule);
  const digest = isolate.keys.digestByName(variants, name, nowMs);
  if (digest === null) return false;
  isolate.keys.forget(digest, variants, nowMs);
  return true;
}
