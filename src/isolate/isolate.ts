/**
 * @module
 * What one isolate remembers between requests, as one value: its clock, the
 * secret its key digests are made with, leases, known refusals, calls in
 * flight, how often refusals were logged, what it counted about itself,
 * and the bearer tokens it verified.
 * The Worker makes one per isolate; a library user may make their own to
 * size it or share it between middlewares, and tests make several, as
 * several isolates would be.
 */
import { randomDigestKey, sipHash24 } from "../core/digest.ts";
import type { Rule } from "../core/rules.ts";
import { Tokens } from "../identity/tokens.ts";
import { IsolateCounters } from "./counters.ts";
import { CallsInFlight } from "./in-flight.ts";
import { DEFAULT_MAX_REFUSAL_MS, KnownRefusals } from "./known-refusals.ts";
import { DEFAULT_MAX_LEASE_UNITS, LeaseBook } from "./leases.ts";
import { DEFAULT_LOG_EVERY_MS, RefusalLog } from "./refusal-log.ts";
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
  leases: LeaseBook;
  refusals: KnownRefusals;
  flights: CallsInFlight;
  refusalLog: RefusalLog;
  /** How often an ignored `cost_header` value was logged, per key and rule. */
  costHeaderLog: RefusalLog;
  counters: IsolateCounters;
  /** Bearer tokens verified here, and the keys they were verified with. */
  tokens: Tokens;
  /** What this isolate decided since its last flush to the statistics object. */
  stats: StatsRecorder;
};

export const DEFAULT_MAX_KEYS = 10_000;

export function createIsolate(options: IsolateOptions = {}): Isolate {
  const maxKeys = options.maxKeys ?? DEFAULT_MAX_KEYS;
  const counters = new IsolateCounters();
  const key = randomDigestKey();
  // Read at each call, not captured: a test may swap the global clock.
  const clock = options.clock ?? (() => Date.now());
  const digest = (text: string) => sipHash24(key, text);
  return {
    clock,
    digest,
    leases: new LeaseBook({ maxKeys, maxUnits: options.maxLeaseUnits ?? DEFAULT_MAX_LEASE_UNITS, counters }),
    refusals: new KnownRefusals({ maxKeys, maxHoldMs: options.maxRefusalMs ?? DEFAULT_MAX_REFUSAL_MS }),
    flights: new CallsInFlight(maxKeys),
    refusalLog: new RefusalLog(maxKeys, options.logEveryMs ?? DEFAULT_LOG_EVERY_MS),
    costHeaderLog: new RefusalLog(maxKeys, options.logEveryMs ?? DEFAULT_LOG_EVERY_MS),
    counters,
    tokens: new Tokens({ clock, digest, maxTokens: maxKeys }),
    stats: new StatsRecorder(options.flushEveryMs ?? DEFAULT_FLUSH_EVERY_MS),
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
  const digest = isolate.digest(canonical);
  for (const variant of variantsOf(rule)) {
    isolate.refusals.forget(variant, digest, isolate.clock());
    isolate.leases.forget(digest, variant, isolate.clock());
  }
}
