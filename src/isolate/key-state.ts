/**
 * @module
 * Everything this isolate keeps of one client key, as the owners of its
 * concerns, with synchronous methods only: its demand (`demand.ts`), its
 * leases and every unit of them until it leaves (`held-leases.ts`), the
 * refusals it knows of and when each rule was forgotten (`refusals.ts`),
 * how often its lines were logged (`log-throttle.ts`), the places its
 * requests in flight hold (`held-places.ts`), and its gates (one per rule
 * set: the calls in flight for it, `gate.ts`). What it does itself: the
 * key's object name, and what takes more than one owner. Fixed in size,
 * whatever the key's length.
 */
import { isCounted, type Rule } from "../core/rules.ts";
import type { LeaseRequest } from "../object/protocol.ts";
import { Demand } from "./demand.ts";
import type { CallTimes } from "./flight.ts";
import { Gate } from "./gate.ts";
import { type Grant, HeldLeases, type LeaseHost } from "./held-leases.ts";
import { HeldPlaces } from "./held-places.ts";
import { LogThrottle } from "./log-throttle.ts";
import { KnownRefusals } from "./refusals.ts";
import { sameRules } from "./vocabulary.ts";

/** What a key's state needs of the isolate that keeps it. */
export interface KeyHost extends LeaseHost {
  readonly times: CallTimes;
  /** Units asked for at most with one call; 0: leases are off. */
  readonly maxUnits: number;
}

export class KeyState {
  private readonly host: KeyHost;
  /** The key's object name (SHA-256 hex), once a call was made ({@link objectName}). */
  name: string | null = null;
  /** The requests this isolate saw for the key lately. */
  readonly demand: Demand;
  /** Its leases, units owed, and units on their way back. */
  readonly leases: HeldLeases;
  /** The refusals known for it, and when each rule was forgotten. */
  readonly refusals = new KnownRefusals();
  /** When its refusals and ignored `cost_header` values were last logged, per rule. */
  readonly lines = new LogThrottle<Rule>();
  /** The places its requests in flight hold, renewed together. */
  readonly places = new HeldPlaces();
  /** One gate per rule set: the calls in flight for it, and the requests that wait. */
  private gates: Gate[] | null = null;

  constructor(host: KeyHost, nowMs: number) {
    this.host = host;
    this.demand = new Demand(nowMs);
    this.leases = new HeldLeases(host, this);
  }

  /** What to ask of a lease with a call for this key: the demand this isolate has seen for it. */
  leaseRequest(nowMs: number): LeaseRequest | undefined {
    return this.demand.leaseRequest(this.host.maxUnits, nowMs);
  }

  /**
   * Keeps what a call for these rules brought: the key's object name, and
   * its lease, if any (not for a rule forgotten since the call was sent).
   */
  keep(grant: Grant): void {
    this.name = grant.name;
    this.leases.keep(grant, this.refusals);
  }

  /**
   * After an admin reset of this key under `rule`, at `nowMs`: its refusal
   * goes; its lease counted in rows that are gone, so its units are written
   * off, and so are those of a lease a call sent before now brings later; a
   * refusal such a call brings is not kept.
   */
  forget(rule: Rule, lastSent: number): void {
    this.refusals.forget(rule, lastSent);
    if (isCounted(rule)) this.leases.forget(rule);
  }

  /**
   * After a change of this key's override under `rule` (its counts stay):
   * its refusal goes, as in {@link forget}; its lease, given under the old
   * limit, stops being spent, and its unspent units are owed back with the
   * key's next call, which the object decides under the new one.
   */
  overridden(rule: Rule, lastSent: number): void {
    this.refusals.forget(rule, lastSent);
    if (isCounted(rule)) this.leases.retire(rule);
  }

  /**
   * An adaptive rule's factor changed: its leases (any tier's) stop being
   * spent, their unspent units owed back with the key's next call, and its
   * known refusals go, as both were given under the old limit.
   */
  dropRule(ruleId: string): void {
    this.leases.dropRule(ruleId);
    this.refusals.dropRule(ruleId);
  }

  /**
   * The isolate no longer keeps this key as in use (its cap pushed it out):
   * every unit held or owed is handed back at once.
   */
  evicted(nowMs: number): void {
    this.leases.evicted(nowMs);
  }

  /** Kept as in use again after it was pushed out (its refusals kept it): a key seen anew. */
  revived(nowMs: number): void {
    this.leases.revived();
    this.demand.reset(nowMs);
  }

  /** The gate of this rule set: made on first use. */
  gate(rules: Rule[]): Gate {
    this.gates ??= [];
    for (const gate of this.gates) if (sameRules(gate.rules, rules)) return gate;
    const gate = new Gate(rules, this.host.times, this.host);
    this.gates.push(gate);
    return gate;
  }
}
