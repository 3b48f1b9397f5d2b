/**
 * @module
 * Leases in the isolate: admissions a key's object counted ahead for us,
 * spent on the next requests for that key without calling the object.
 *
 * One book owns every unit. A lease is held per client key and rule, so a
 * unit counted for a rule is spent by any request that rule counts, whatever
 * other rules that request matches. A unit leaves the book in one of three
 * ways only: spent by a request; handed back to the object (with the key's
 * next call, or in the background when its entry is evicted), as a refund
 * against the very bucket and epoch it was counted in; or written off on
 * purpose and counted in {@link IsolateCounters}. A unit given back by a
 * request that was turned away returns to the lease it came from, never to
 * a newer one: counted in one bucket, it must not be spent in another.
 *
 * Leases are sized by demand: with each call the isolate says how many
 * requests it saw for the key lately, and the object leases no more than
 * that many (scaled to the lease's life), or a share of the limit too small
 * to matter. A key this isolate sees rarely gets few units or none, so few
 * sit counted and unspent here.
 */

import { LruMap } from "../core/lru.ts";
import type { Rule } from "../core/rules.ts";
import {
  costOf,
  type Lease,
  type LeaseRequest,
  type Receipt,
  type Refund,
  type RuleVerdict,
  unitsOf,
} from "../object/protocol.ts";
import type { IsolateCounters } from "./counters.ts";

/** The demand window: a lease is no larger than the requests this isolate saw for the key in the last this many milliseconds. */
export const DEMAND_WINDOW_MS = 60_000;
/** The shortest span a demand is measured over: requests in one instant say little about their rate. */
const MIN_SEEN_MS = 1_000;
/** Units asked for at most with one call. */
export const DEFAULT_MAX_LEASE_UNITS = 64;
/** Units waiting to be handed back for evicted keys; more are written off. */
const MAX_OUTBOX = 1_000;
/**
 * Longer than any call may take (LIMITER_TIMEOUT_MS is at most 60 s, and a
 * call that times out is watched one more): returns on their way with a call
 * that has not answered by then went with a request that was cancelled.
 */
const CALL_LOST_AFTER_MS = 150_000;
const NO_RETURNS: readonly Return[] = Object.freeze([]);

/** A lease held here: units one rule's row counted ahead, for one client key. */
class HeldLease {
  unitsLeft: number;
  /** Units spent since the last grant, for the `remaining` the headers report. */
  spentSinceGrant = 0;
  /** A retired lease spends nothing more; units given back to it are handed back to the object. */
  retired = false;

  readonly record: KeyRecord;
  readonly receipt: Receipt;
  /** Isolate time until which the units may be spent. */
  untilMs: number;
  /** Isolate time of the granting call, and the rule's verdict then. */
  grantedAtMs: number;
  verdict: RuleVerdict;

  constructor(
    record: KeyRecord,
    receipt: Receipt,
    units: number,
    untilMs: number,
    grantedAtMs: number,
    verdict: RuleVerdict,
  ) {
    this.record = record;
    this.receipt = receipt;
    this.unitsLeft = units;
    this.untilMs = untilMs;
    this.grantedAtMs = grantedAtMs;
    this.verdict = verdict;
  }
}

/** Everything the isolate keeps of one client key. Fixed in size, whatever the key's length. */
type KeyRecord = {
  /** The key's object name (SHA-256 hex), once a call was made. */
  name: string | null;
  leases: Map<Rule, HeldLease>;
  /** Units of retired leases, handed back with the key's next call. */
  owed: Refund[];
  /** Requests seen in the current and the previous demand window. */
  demand: { window: number; current: number; previous: number };
  /** Isolate time of the first request for the key since it was last forgotten. */
  sinceMs: number;
  /** False once a call that asked for a lease got none: concurrent requests then each call. */
  leasable: boolean;
  /** False once evicted: units given back to its leases go to the outbox. */
  live: boolean;
  /** Returns on their way to the object with calls that have not answered yet. */
  inTransit: Set<InTransit>;
  /** Per rule, the isolate time of an admin reset: a lease from a call sent before it counted in rows that are gone. */
  resetAtMs: Map<Rule, number> | null;
};

/** Units handed back with a call: they leave the book once the call has answered. */
export type InTransit = { refunds: Refund[]; units: number; sentAtMs: number; record: KeyRecord };

/** One request's units spent per rule of a key group (its cost): the verdicts to report, and where to give them back. */
export type SpentUnits = { verdicts: RuleVerdict[]; leases: HeldLease[]; costs: number[] };

/** What a call for a key group brought back. */
export type Grant = {
  /** The key's object name. */
  name: string;
  rules: Rule[];
  verdicts: RuleVerdict[];
  lease: Lease | undefined;
  /** Isolate time the call was sent. */
  sentAtMs: number;
  /** Whether the call asked for a lease with a demand of two or more: only then does a missing one say the key is near a limit. */
  asked: boolean;
};

/** Units to hand back for a key no longer in the book. */
export type Return = { name: string; refunds: Refund[] };

export type LeaseBookOptions = {
  /** Client keys remembered at most. */
  maxKeys: number;
  /** Units asked for at most with one call; 0 turns leases off. */
  maxUnits: number;
  counters: IsolateCounters;
};

export class LeaseBook {
  private readonly records: LruMap<string, KeyRecord>;
  private readonly outbox: Return[] = [];
  private readonly maxUnits: number;
  private readonly counters: IsolateCounters;
  /** The latest isolate time the book was told of, for evictions, which come without one. */
  private lastNowMs = 0;

  constructor(options: LeaseBookOptions) {
    this.maxUnits = options.maxUnits;
    this.counters = options.counters;
    this.records = new LruMap(options.maxKeys, (_digest, record) => this.evicted(record));
  }

  /** Client keys remembered. */
  get size(): number {
    return this.records.size;
  }

  /** Whether leases are on (maxUnits above 0). */
  get enabled(): boolean {
    return this.maxUnits > 0;
  }

  /** The digests of the keys remembered (for inspection). */
  keys(): IterableIterator<string> {
    return this.records.keys();
  }

  /** The key's record, made if missing, as seen at `nowMs`. */
  private record(digest: string, nowMs: number): KeyRecord {
    this.lastNowMs = Math.max(this.lastNowMs, nowMs);
    let record = this.records.get(digest);
    if (!record) {
      record = {
        name: null,
        leases: new Map(),
        owed: [],
        demand: { window: 0, current: 0, previous: 0 },
        sinceMs: nowMs,
        leasable: true,
        live: true,
        inTransit: new Set(),
        resetAtMs: null,
      };
      this.records.set(digest, record);
    }
    return record;
  }

  /** Counts a request for this key toward its demand. */
  noteRequest(digest: string, nowMs: number): void {
    if (this.maxUnits === 0) return;
    const { demand } = this.record(digest, nowMs);
    const window = Math.floor(nowMs / DEMAND_WINDOW_MS);
    if (window !== demand.window) {
      demand.previous = window === demand.window + 1 ? demand.current : 0;
      demand.current = 0;
      demand.window = window;
    }
    demand.current++;
  }

  /** What to ask of a lease with a call for this key: the demand this isolate has seen for it. */
  leaseRequest(digest: string, nowMs: number): LeaseRequest | undefined {
    const record = this.records.peek(digest);
    if (!record || this.maxUnits === 0) return undefined;
    const { window, current, previous } = record.demand;
    const elapsed = (nowMs % DEMAND_WINDOW_MS) / DEMAND_WINDOW_MS;
    const recent = Math.floor(
      current + (window === Math.floor(nowMs / DEMAND_WINDOW_MS) ? previous * (1 - elapsed) : 0),
    );
    // Even one request seen asks: the object leases a key seen once only units too few to matter.
    // Over how long they were seen: since the key was first seen, if that is less than a window, so a key
    // busy for a few seconds is not taken for one that came a few times a minute.
    const seenInMs = Math.max(MIN_SEEN_MS, Math.min(DEMAND_WINDOW_MS, nowMs - record.sinceMs));
    return { units: this.maxUnits, seen: recent, seenInMs };
  }

  /** Whether concurrent requests for this key may wait for one call's lease. */
  leasable(digest: string): boolean {
    return this.records.peek(digest)?.leasable ?? true;
  }

  /**
   * Spends one unit of every rule's lease for this key, if each rule holds a
   * live one; otherwise spends nothing. Leases past their time are retired.
   * (Recency is the request's to mark, with noteRequest.)
   */
  spend(digest: string, rules: Rule[], nowMs: number): SpentUnits | undefined {
    const record = this.records.peek(digest);
    if (!record || record.leases.size === 0) return undefined;
    const leases: HeldLease[] = [];
    for (const rule of rules) {
      const lease = record.leases.get(rule);
      if (!lease) return undefined;
      if (nowMs >= lease.untilMs) {
        this.retire(lease);
        record.leases.delete(rule);
        return undefined;
      }
      if (lease.unitsLeft < costOf(rule)) return undefined;
      leases.push(lease);
    }
    const costs = rules.map(costOf);
    const verdicts = leases.map((lease, i) => {
      lease.unitsLeft -= costs[i]!;
      lease.spentSinceGrant += costs[i]!;
      const { verdict } = lease;
      return {
        ...verdict,
        remaining: Math.max(0, verdict.remaining - lease.spentSinceGrant),
        resetMs: Math.max(0, verdict.resetMs - (nowMs - lease.grantedAtMs)),
        counted: null,
      };
    });
    return { verdicts, leases, costs };
  }

  /** The object name of the key a spent lease unit came from (known: a lease is granted by a call). */
  nameOf(spent: SpentUnits): string | null {
    return spent.leases[0]?.record.name ?? null;
  }

  /**
   * Gives spent units back to the leases they came from: every rule's (the
   * request was turned away), or only the rules at `indexes` (their `count`
   * did not match the response).
   */
  giveBack(spent: SpentUnits, indexes?: number[]): void {
    for (const i of indexes ?? spent.leases.keys()) {
      const lease = spent.leases[i]!;
      const cost = spent.costs[i]!;
      lease.spentSinceGrant = Math.max(0, lease.spentSinceGrant - cost);
      if (!lease.retired) lease.unitsLeft += cost;
      else this.owe(lease.record, [{ receipt: lease.receipt, count: cost }]);
    }
  }

  /**
   * What to hand back with a call, sent at `nowMs`, that checks `rules` for
   * this key: every unit owed, and the live leases of those rules, so that the
   * object decides on exactly what was admitted (the call brings fresh leases
   * for all of them). They stay on record until {@link landed} says how the
   * call went; those of a call that never answers are written off.
   */
  takeReturns(digest: string, rules: Rule[], nowMs: number): InTransit | null {
    const record = this.records.peek(digest);
    if (!record) return null;
    this.writeOffLost(record, nowMs);
    for (const rule of rules) {
      const lease = record.leases.get(rule);
      if (!lease) continue;
      this.retire(lease);
      record.leases.delete(rule);
    }
    if (record.owed.length === 0) return null;
    const refunds = record.owed.splice(0);
    const transit: InTransit = { refunds, units: unitsOf(refunds), sentAtMs: nowMs, record };
    record.inTransit.add(transit);
    return transit;
  }

  /**
   * How the call that carried `transit` went: the object took the units when
   * it answered on its first attempt; after a failure or a retry it may have
   * or not, so they are written off (a retry does not carry them again, lest
   * they be taken twice).
   */
  landed(transit: InTransit, taken: boolean): void {
    transit.record.inTransit.delete(transit);
    if (!taken) this.counters.writeOff("call failed", transit.units);
  }

  /** The units held here for this key, unspent, with where each was counted: live leases and returns owed. */
  holdings(digest: string): Refund[] {
    const record = this.records.peek(digest);
    if (!record) return [];
    const live = [...record.leases.values()].map((lease) => ({ receipt: lease.receipt, count: lease.unitsLeft }));
    return [...live, ...record.owed].filter((held) => held.count > 0);
  }

  /**
   * Keeps what a call for these rules brought: the key's object name, and
   * its lease, if any, split per rule. A live lease with the same receipt (a
   * concurrent call, same bucket) is topped up; any other is retired and its
   * units are owed. The lease's clock starts when the call was sent, so it
   * ends early rather than late.
   */
  keep(digest: string, grant: Grant): void {
    const { name, rules, verdicts, lease, sentAtMs } = grant;
    const record = this.record(digest, sentAtMs);
    record.name = name;
    if (grant.asked) record.leasable = lease !== undefined;
    if (!lease) return;
    const untilMs = sentAtMs + lease.expiresInMs;
    rules.forEach((rule, i) => {
      const resetAtMs = record.resetAtMs?.get(rule);
      if (resetAtMs !== undefined && sentAtMs <= resetAtMs) {
        // Sent before an admin reset: its units may be counted in rows the reset wiped; spent, they would count nowhere.
        this.counters.writeOff("reset", lease.units);
        return;
      }
      const receipt = lease.receipts[i]!;
      const held = record.leases.get(rule);
      if (held && !held.retired && sameReceipt(held.receipt, receipt)) {
        held.unitsLeft += lease.units;
        held.untilMs = Math.min(held.untilMs, untilMs);
        held.grantedAtMs = sentAtMs;
        held.verdict = verdicts[i]!;
        held.spentSinceGrant = 0;
        return;
      }
      if (held) this.retire(held);
      record.leases.set(rule, new HeldLease(record, receipt, lease.units, untilMs, sentAtMs, verdicts[i]!));
    });
  }

  /**
   * After an admin reset of this key under `rule`, at `nowMs`: its lease
   * counted in rows that are gone, so its units are written off, and so are
   * those of a lease a call sent before now brings later.
   */
  forget(digest: string, rule: Rule, nowMs: number): void {
    const record = this.record(digest, nowMs);
    record.resetAtMs ??= new Map();
    record.resetAtMs.set(rule, nowMs);
    const lease = record.leases.get(rule);
    if (!lease) return;
    this.counters.writeOff("reset", lease.unitsLeft);
    lease.unitsLeft = 0;
    lease.retired = true;
    record.leases.delete(rule);
  }

  /** Units held here, unspent, for this key: live leases and returns owed. */
  heldUnits(digest: string): number {
    return this.holdings(digest).reduce((n, held) => n + held.count, 0);
  }

  /** Returns for keys no longer in the book, to hand back in the background; they leave the book. */
  takeOutbox(): readonly Return[] {
    return this.outbox.length === 0 ? NO_RETURNS : this.outbox.splice(0);
  }

  /** Writes off the returns of calls that never answered: their requests were cancelled mid-call. */
  private writeOffLost(record: KeyRecord, nowMs: number): void {
    for (const transit of record.inTransit) {
      if (nowMs - transit.sentAtMs < CALL_LOST_AFTER_MS) continue;
      record.inTransit.delete(transit);
      this.counters.writeOff("call lost", transit.units);
    }
  }

  /**
   * Stops spending a rule's lease for this key, because the object's count
   * changed under it (a `cost_header` charge): its unspent units are handed
   * back with the key's next call, which the object then decides on.
   */
  retireLease(digest: string, rule: Rule): void {
    const record = this.records.peek(digest);
    const lease = record?.leases.get(rule);
    if (!record || !lease) return;
    this.retire(lease);
    record.leases.delete(rule);
  }

  private retire(lease: HeldLease): void {
    lease.retired = true;
    if (lease.unitsLeft > 0) this.owe(lease.record, [{ receipt: lease.receipt, count: lease.unitsLeft }]);
    lease.unitsLeft = 0;
  }

  private owe(record: KeyRecord, refunds: Refund[]): void {
    if (record.live) record.owed.push(...refunds);
    else if (record.name !== null) this.toOutbox({ name: record.name, refunds });
    else this.counters.writeOff("unnamed", unitsOf(refunds));
  }

  private evicted(record: KeyRecord): void {
    record.live = false;
    // Returns still on their way are the calls' to settle (landed); those of calls that never answer are lost here.
    for (const transit of record.inTransit) {
      if (this.lastNowMs - transit.sentAtMs >= CALL_LOST_AFTER_MS) this.counters.writeOff("call lost", transit.units);
    }
    for (const lease of record.leases.values()) this.retire(lease);
    record.leases.clear();
    if (record.owed.length > 0) this.owe(record, record.owed.splice(0));
  }

  private toOutbox(ret: Return): void {
    if (this.outbox.length < MAX_OUTBOX) this.outbox.push(ret);
    else this.counters.writeOff("outbox full", unitsOf(ret.refunds));
  }
}

const sameReceipt = (a: Receipt, b: Receipt): boolean =>
  a.row === b.row && a.epoch === b.epoch && a.bucket === b.bucket;
