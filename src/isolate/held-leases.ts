/**
 * @module
 * The leases this isolate holds for one client key (admissions the key's
 * object counted ahead, spent on the next requests without a call), and
 * every unit of them until it leaves: the units owed to the object, and
 * those on their way back with a call.
 *
 * A unit leaves a lease in one of three ways only: spent by a request;
 * handed back to the object (with the key's next call, or in the background
 * once the key is forgotten), as a refund against the very bucket and epoch
 * it was counted in; or written off on purpose and counted. A unit given
 * back by a request that was turned away returns to the lease it came from,
 * never to a newer one: counted in one bucket, it must not be spent in
 * another.
 */
import type { CountedRule } from "../core/rules.ts";
import { costOf, type Lease, type Receipt, type Refund, type RuleVerdict, unitsOf } from "../object/protocol.ts";
import type { IsolateCounters } from "./counters.ts";
import type { LeaseSource, SpentUnits } from "./vocabulary.ts";

/**
 * Longer than any call may take (LIMITER_TIMEOUT_MS is at most 60 s, and a
 * call that times out is watched one more): returns on their way with a call
 * that has not answered by then went with a request that was cancelled.
 */
export const CALL_LOST_AFTER_MS = 150_000;

/** What the leases need of the isolate that keeps them: where write-offs are counted, and where units go back. */
export interface LeaseHost {
  readonly counters: IsolateCounters;
  /** Units of a key this isolate no longer keeps, to hand back to its object in the background. */
  handBack(name: string, refunds: Refund[]): void;
}

/** The key the leases are held for: its object name (SHA-256 hex), once a call was made. */
export interface LeaseKey {
  readonly name: string | null;
}

/** When each rule was last forgotten: a lease from a call sent before then rests on counts that are gone. */
export interface ForgetTimes {
  /** Whether the rule was forgotten since the call stamped `sent` went (`ClientKeys.stamp`). */
  forgottenSince(rule: CountedRule, sent: number): boolean;
}

/** What a call for a key group brought back. */
export type Grant = {
  /** The key's object name. */
  name: string;
  rules: CountedRule[];
  verdicts: RuleVerdict[];
  lease: Lease | undefined;
  /** Isolate time the call was sent. */
  sentAtMs: number;
  /** The call's stamp (`ClientKeys.stamp`): whether it went before or after a forgetting. */
  sent: number;
  /** Whether the call asked for a lease with a demand of two or more: only then does a missing one say the key is near a limit. */
  asked: boolean;
};

/** Units handed back with a call: they leave the key's leases once the call has answered. */
export type InTransit = { refunds: Refund[]; units: number; sentAtMs: number; leases: HeldLeases };

/** A lease held here: units one rule's row counted ahead, for one client key. */
class HeldLease implements LeaseSource {
  unitsLeft: number;
  /** Units spent since the last grant, for the `remaining` the headers report. */
  spentSinceGrant = 0;
  /** A retired lease spends nothing more; units given back to it are handed back to the object. */
  retired = false;
  readonly leases: HeldLeases;
  readonly receipt: Receipt;
  /** Isolate time until which the units may be spent. */
  untilMs: number;
  /** Isolate time of the granting call, and the rule's verdict then. */
  grantedAtMs: number;
  verdict: RuleVerdict;

  constructor(
    leases: HeldLeases,
    receipt: Receipt,
    units: number,
    untilMs: number,
    grantedAtMs: number,
    verdict: RuleVerdict,
  ) {
    this.leases = leases;
    this.receipt = receipt;
    this.unitsLeft = units;
    this.untilMs = untilMs;
    this.grantedAtMs = grantedAtMs;
    this.verdict = verdict;
  }

  get name(): string | null {
    return this.leases.key.name;
  }

  giveBack(units: number): void {
    this.spentSinceGrant = Math.max(0, this.spentSinceGrant - units);
    if (!this.retired) this.unitsLeft += units;
    else this.leases.owe([{ receipt: this.receipt, count: units }]);
  }

  /** Spends nothing more: its unspent units are owed to the object. */
  retire(): void {
    this.retired = true;
    if (this.unitsLeft > 0) this.leases.owe([{ receipt: this.receipt, count: this.unitsLeft }]);
    this.unitsLeft = 0;
  }
}

export class HeldLeases {
  private readonly host: LeaseHost;
  readonly key: LeaseKey;
  private byRule = new Map<CountedRule, HeldLease>();
  /** Units of retired leases, handed back with the key's next call. */
  private owed: Refund[] = [];
  /** Returns on their way to the object with calls that have not answered yet. */
  private readonly inTransit = new Set<InTransit>();
  /** False once a call that asked for a lease got none: concurrent requests then each call. */
  leasable = true;
  /** False while the isolate does not keep the key as in use: units given back to its leases are handed back at once. */
  private live = true;

  constructor(host: LeaseHost, key: LeaseKey) {
    this.host = host;
    this.key = key;
  }

  /**
   * Spends one request's cost of every rule's lease, if each rule holds a
   * live one with that many units; otherwise spends nothing. Leases past
   * their time are retired.
   */
  spend(rules: CountedRule[], nowMs: number): SpentUnits | undefined {
    const held = this.byRule;
    if (held.size === 0) return undefined;
    const leases: HeldLease[] = [];
    for (const rule of rules) {
      const lease = held.get(rule);
      if (!lease) return undefined;
      if (nowMs >= lease.untilMs) {
        lease.retire();
        held.delete(rule);
        return undefined;
      }
      if (lease.unitsLeft < costOf(rule)) return undefined;
      leases.push(lease);
    }
    const costs = rules.map(costOf);
    const verdicts = leases.map((lease, i) => {
      const cost = costs[i]!;
      lease.unitsLeft -= cost;
      lease.spentSinceGrant += cost;
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

  /**
   * What to hand back with a call, sent at `nowMs`, that checks `rules`:
   * every unit owed, and the live leases of those rules, so that the object
   * decides on exactly what was admitted (the call brings fresh leases for
   * all of them). They stay here until {@link landed} says how the call
   * went; those of a call that never answers are written off.
   */
  takeReturns(rules: CountedRule[], nowMs: number): InTransit | null {
    this.writeOffLost(nowMs);
    for (const rule of rules) this.retire(rule);
    if (this.owed.length === 0) return null;
    const refunds = this.owed.splice(0);
    const transit: InTransit = { refunds, units: unitsOf(refunds), sentAtMs: nowMs, leases: this };
    this.inTransit.add(transit);
    return transit;
  }

  /**
   * How the call that carried `transit` went: the object took the units when
   * it answered on its first attempt; after a failure or a retry it may have
   * or not, so they are written off (a retry does not carry them again, lest
   * they be taken twice).
   */
  landed(transit: InTransit, taken: boolean): void {
    // Already written off as lost (cannot happen: a call answers within its timeout, or never): not twice.
    if (!this.inTransit.delete(transit)) return;
    if (!taken) this.host.counters.writeOff("call failed", transit.units);
  }

  /** The units held here, unspent, with where each was counted: live leases and returns owed. */
  holdings(): Refund[] {
    const live = [...this.byRule.values()].map((lease) => ({ receipt: lease.receipt, count: lease.unitsLeft }));
    return [...live, ...this.owed].filter((held) => held.count > 0);
  }

  /**
   * Keeps the lease a call for these rules brought, if any, split per rule.
   * A live lease with the same receipt (a concurrent call, same bucket) is
   * topped up; any other is retired and its units are owed. A rule forgotten
   * since the call was sent has its units written off. The lease's clock
   * starts when the call was sent, so it ends early rather than late.
   */
  keep(grant: Grant, forgotten: ForgetTimes): void {
    const { rules, verdicts, lease, sentAtMs, sent } = grant;
    if (grant.asked) this.leasable = lease !== undefined;
    if (!lease) return;
    const untilMs = sentAtMs + lease.expiresInMs;
    rules.forEach((rule, i) => {
      if (forgotten.forgottenSince(rule, sent)) {
        // Sent before an admin reset: its units may be counted in rows the reset wiped; spent, they would count nowhere.
        this.host.counters.writeOff("reset", lease.units);
        return;
      }
      const receipt = lease.receipts[i]!;
      const held = this.byRule.get(rule);
      if (held && !held.retired && sameReceipt(held.receipt, receipt)) {
        held.unitsLeft += lease.units;
        held.untilMs = Math.min(held.untilMs, untilMs);
        held.grantedAtMs = sentAtMs;
        held.verdict = verdicts[i]!;
        held.spentSinceGrant = 0;
        return;
      }
      if (held) held.retire();
      this.byRule.set(rule, new HeldLease(this, receipt, lease.units, untilMs, sentAtMs, verdicts[i]!));
    });
  }

  /**
   * Stops spending a rule's lease (the object's count changed under it, or
   * a call is about to decide on it): its unspent units are owed, handed
   * back with the key's next call, which the object then decides on.
   */
  retire(rule: CountedRule): void {
    const lease = this.byRule.get(rule);
    if (!lease) return;
    lease.retire();
    this.byRule.delete(rule);
  }

  /** Retires the leases of every variant (tier) of a rule. */
  dropRule(ruleId: string): void {
    for (const [rule, lease] of this.byRule) {
      if (rule.id !== ruleId) continue;
      lease.retire();
      this.byRule.delete(rule);
    }
  }

  /**
   * After an admin reset or an override change: the rule's lease counted
   * in rows that are gone, so its unspent units are written off (a unit
   * spent from it and given back later is owed as any other).
   */
  forget(rule: CountedRule): void {
    const lease = this.byRule.get(rule);
    if (!lease) return;
    this.host.counters.writeOff("reset", lease.unitsLeft);
    lease.unitsLeft = 0;
    lease.retired = true;
    this.byRule.delete(rule);
  }

  /** Units owed to the object: with the key's next call, or at once when the isolate no longer keeps the key. */
  owe(refunds: Refund[]): void {
    if (this.live) this.owed.push(...refunds);
    else if (this.key.name !== null) this.host.handBack(this.key.name, refunds);
    else this.host.counters.writeOff("unnamed", unitsOf(refunds));
  }

  /** Writes off the returns of calls that never answered: their requests were cancelled mid-call. */
  private writeOffLost(nowMs: number): void {
    for (const transit of this.inTransit) {
      if (nowMs - transit.sentAtMs < CALL_LOST_AFTER_MS) continue;
      this.inTransit.delete(transit);
      this.host.counters.writeOff("call lost", transit.units);
    }
  }

  /**
   * The isolate no longer keeps the key as in use (its cap pushed it out):
   * every unit held or owed is handed back at once. Returns still on their
   * way are the calls' to settle; those of calls that never answer are lost
   * here.
   */
  evicted(nowMs: number): void {
    this.live = false;
    this.writeOffLost(nowMs);
    for (const lease of this.byRule.values()) lease.retire();
    this.byRule.clear();
    if (this.owed.length > 0) this.owe(this.owed.splice(0));
  }

  /** Kept as in use again after it was pushed out: a key seen anew. */
  revived(): void {
    this.live = true;
    this.byRule = new Map();
    this.owed = [];
    this.leasable = true;
  }
}

const sameReceipt = (a: Receipt, b: Receipt): boolean =>
  a.row === b.row && a.epoch === b.epoch && a.bucket === b.bucket;
