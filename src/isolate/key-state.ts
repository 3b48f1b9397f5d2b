/**
 * @module
 * Everything this isolate keeps of one client key, in one object with
 * synchronous methods only: its leases (admissions the key's object counted
 * ahead for us, spent on the next requests without a call), the refusals it
 * knows of, when it was last forgotten, the units it owes its object, its
 * demand, how often its refusals were logged, and its gates (one per rule
 * set: the calls in flight for it). Fixed in size, whatever the key's length.
 *
 * A unit leaves a lease in one of three ways only: spent by a request;
 * handed back to the object (with the key's next call, or in the background
 * once the key is forgotten), as a refund against the very bucket and epoch
 * it was counted in; or written off on purpose and counted. A unit given
 * back by a request that was turned away returns to the lease it came from,
 * never to a newer one: counted in one bucket, it must not be spent in
 * another.
 *
 * Leases are sized by demand: with each call the isolate says how many
 * requests it saw for the key lately, and the object leases no more than
 * that many (scaled to the lease's life), or a share of the limit too small
 * to matter. A key this isolate sees rarely gets few units or none.
 *
 * A known refusal: once the object refuses a key under a rule, it keeps
 * refusing it until `retryAfter` (a refused request changes nothing), so
 * until then the isolate answers 429 itself, as the object would, for as
 * long as the object says its refusal holds (`holdsForMs`), capped. Its
 * clock starts when the call was sent, so it ends early rather than late.
 */
import type { CountedRule, Rule } from "../core/rules.ts";
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
import type { CallTimes } from "./flight.ts";
import { Gate } from "./gate.ts";
import { KnownRefusal, type LeaseSource, type SpentUnits, sameRules } from "./vocabulary.ts";

/** The demand window: a lease is no larger than the requests this isolate saw for the key in the last this many milliseconds. */
export const DEMAND_WINDOW_MS = 60_000;
/** The shortest span a demand is measured over: requests in one instant say little about their rate. */
const MIN_SEEN_MS = 1_000;
/**
 * Longer than any call may take (LIMITER_TIMEOUT_MS is at most 60 s, and a
 * call that times out is watched one more): returns on their way with a call
 * that has not answered by then went with a request that was cancelled.
 */
export const CALL_LOST_AFTER_MS = 150_000;

/** What a key's state needs of the isolate that keeps it. */
export interface KeyHost {
  readonly counters: IsolateCounters;
  readonly times: CallTimes;
  /** Units asked for at most with one call; 0: leases are off. */
  readonly maxUnits: number;
  /** Units of a key this isolate no longer keeps, to hand back to its object in the background. */
  handBack(name: string, refunds: Refund[]): void;
}

/** A lease held here: units one rule's row counted ahead, for one client key. */
class HeldLease implements LeaseSource {
  unitsLeft: number;
  /** Units spent since the last grant, for the `remaining` the headers report. */
  spentSinceGrant = 0;
  /** A retired lease spends nothing more; units given back to it are handed back to the object. */
  retired = false;
  readonly state: KeyState;
  readonly receipt: Receipt;
  /** Isolate time until which the units may be spent. */
  untilMs: number;
  /** Isolate time of the granting call, and the rule's verdict then. */
  grantedAtMs: number;
  verdict: RuleVerdict;

  constructor(
    state: KeyState,
    receipt: Receipt,
    units: number,
    untilMs: number,
    grantedAtMs: number,
    verdict: RuleVerdict,
  ) {
    this.state = state;
    this.receipt = receipt;
    this.unitsLeft = units;
    this.untilMs = untilMs;
    this.grantedAtMs = grantedAtMs;
    this.verdict = verdict;
  }

  get name(): string | null {
    return this.state.name;
  }

  giveBack(units: number): void {
    this.spentSinceGrant = Math.max(0, this.spentSinceGrant - units);
    if (!this.retired) this.unitsLeft += units;
    else this.state.owe([{ receipt: this.receipt, count: units }]);
  }

  /** Spends nothing more: its unspent units are owed to the object. */
  retire(): void {
    this.retired = true;
    if (this.unitsLeft > 0) this.state.owe([{ receipt: this.receipt, count: this.unitsLeft }]);
    this.unitsLeft = 0;
  }
}

/** Units handed back with a call: they leave the key's state once the call has answered. */
export type InTransit = { refunds: Refund[]; units: number; sentAtMs: number; state: KeyState };

/** What a call for a key group brought back. */
export type Grant = {
  /** The key's object name. */
  name: string;
  rules: CountedRule[];
  verdicts: RuleVerdict[];
  lease: Lease | undefined;
  /** Isolate time the call was sent. */
  sentAtMs: number;
  /** Whether the call asked for a lease with a demand of two or more: only then does a missing one say the key is near a limit. */
  asked: boolean;
};

/** A place a request in flight holds: its rule, its timeout, and when it was last renewed (isolate time). */
type PlaceHeld = { rule: string; timeoutMs: number; renewedAtMs: number };

/** When a line was last logged for a key and rule, and the lines held back since. */
type Logged = { atMs: number; repeats: number };

export class KeyState {
  private readonly host: KeyHost;
  /** The key's object name (SHA-256 hex), once a call was made ({@link objectName}). */
  name: string | null = null;
  private leases = new Map<Rule, HeldLease>();
  /** Units of retired leases, handed back with the key's next call. */
  private owed: Refund[] = [];
  /** Requests seen in the current and the previous demand window. */
  private demand = { window: 0, current: 0, previous: 0 };
  /** Isolate time of the first request for the key since it was last forgotten. */
  private sinceMs: number;
  /** False once a call that asked for a lease got none: concurrent requests then each call. */
  leasable = true;
  /** False while the isolate does not keep the key as in use: units given back to its leases are handed back at once. */
  private live = true;
  /** Returns on their way to the object with calls that have not answered yet. */
  private readonly inTransit = new Set<InTransit>();
  /** Per rule, the refusal the object gave last, while it holds. */
  private refusals: Map<Rule, KnownRefusal> | null = null;
  /**
   * Per rule, the isolate time it was last forgotten (an admin reset or an
   * override change): a lease or a refusal from a call sent before then
   * rests on counts that are gone.
   */
  private forgottenAtMs: Map<Rule, number> | null = null;
  /** Per rule and log line, when one last went out. */
  private logged: Map<Rule, Logged> | null = null;
  private costLogged: Map<Rule, Logged> | null = null;
  /** One gate per rule set: the calls in flight for it, and the requests that wait. */
  private gates: Gate[] | null = null;
  /** Places this isolate's requests in flight hold at the key's object, by id. */
  private places: Map<string, PlaceHeld> | null = null;

  constructor(host: KeyHost, nowMs: number) {
    this.host = host;
    this.sinceMs = nowMs;
  }

  // Leases.

  /** Counts a request for this key toward its demand. */
  noteRequest(nowMs: number): void {
    const { demand } = this;
    const window = Math.floor(nowMs / DEMAND_WINDOW_MS);
    if (window !== demand.window) {
      demand.previous = window === demand.window + 1 ? demand.current : 0;
      demand.current = 0;
      demand.window = window;
    }
    demand.current++;
  }

  /** What to ask of a lease with a call for this key: the demand this isolate has seen for it. */
  leaseRequest(nowMs: number): LeaseRequest | undefined {
    if (this.host.maxUnits === 0) return undefined;
    const { window, current, previous } = this.demand;
    const elapsed = (nowMs % DEMAND_WINDOW_MS) / DEMAND_WINDOW_MS;
    const recent = Math.floor(
      current + (window === Math.floor(nowMs / DEMAND_WINDOW_MS) ? previous * (1 - elapsed) : 0),
    );
    // Even one request seen asks: the object leases a key seen once only units too few to matter.
    // Over how long they were seen: since the key was first seen, if that is less than a window, so a key
    // busy for a few seconds is not taken for one that came a few times a minute.
    const seenInMs = Math.max(MIN_SEEN_MS, Math.min(DEMAND_WINDOW_MS, nowMs - this.sinceMs));
    return { units: this.host.maxUnits, seen: recent, seenInMs };
  }

  /**
   * Spends one unit of every rule's lease for this key, if each rule holds a
   * live one; otherwise spends nothing. Leases past their time are retired.
   */
  spend(rules: CountedRule[], nowMs: number): SpentUnits | undefined {
    const held = this.leases;
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
   * What to hand back with a call, sent at `nowMs`, that checks `rules` for
   * this key: every unit owed, and the live leases of those rules, so that the
   * object decides on exactly what was admitted (the call brings fresh leases
   * for all of them). They stay here until {@link landed} says how the call
   * went; those of a call that never answers are written off.
   */
  takeReturns(rules: CountedRule[], nowMs: number): InTransit | null {
    this.writeOffLost(nowMs);
    for (const rule of rules) {
      const lease = this.leases.get(rule);
      if (!lease) continue;
      lease.retire();
      this.leases.delete(rule);
    }
    if (this.owed.length === 0) return null;
    const refunds = this.owed.splice(0);
    const transit: InTransit = { refunds, units: unitsOf(refunds), sentAtMs: nowMs, state: this };
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
    this.inTransit.delete(transit);
    if (!taken) this.host.counters.writeOff("call failed", transit.units);
  }

  /** The units held here, unspent, with where each was counted: live leases and returns owed. */
  holdings(): Refund[] {
    const live = [...this.leases.values()].map((lease) => ({ receipt: lease.receipt, count: lease.unitsLeft }));
    return [...live, ...this.owed].filter((held) => held.count > 0);
  }

  /**
   * Keeps what a call for these rules brought: the key's object name, and
   * its lease, if any, split per rule. A live lease with the same receipt (a
   * concurrent call, same bucket) is topped up; any other is retired and its
   * units are owed. The lease's clock starts when the call was sent, so it
   * ends early rather than late.
   */
  keep(grant: Grant): void {
    const { name, rules, verdicts, lease, sentAtMs } = grant;
    this.name = name;
    if (grant.asked) this.leasable = lease !== undefined;
    if (!lease) return;
    const untilMs = sentAtMs + lease.expiresInMs;
    rules.forEach((rule, i) => {
      if (this.forgottenSince(rule, sentAtMs)) {
        // Sent before an admin reset: its units may be counted in rows the reset wiped; spent, they would count nowhere.
        this.host.counters.writeOff("reset", lease.units);
        return;
      }
      const receipt = lease.receipts[i]!;
      const held = this.leases.get(rule);
      if (held && !held.retired && sameReceipt(held.receipt, receipt)) {
        held.unitsLeft += lease.units;
        held.untilMs = Math.min(held.untilMs, untilMs);
        held.grantedAtMs = sentAtMs;
        held.verdict = verdicts[i]!;
        held.spentSinceGrant = 0;
        return;
      }
      if (held) held.retire();
      this.leases.set(rule, new HeldLease(this, receipt, lease.units, untilMs, sentAtMs, verdicts[i]!));
    });
  }

  /**
   * Stops spending a rule's lease for this key, because the object's count
   * changed under it (a `cost_header` charge): its unspent units are handed
   * back with the key's next call, which the object then decides on.
   */
  retireLease(rule: CountedRule): void {
    const lease = this.leases.get(rule);
    if (!lease) return;
    lease.retire();
    this.leases.delete(rule);
  }

  /** Units owed to the object: with the key's next call, or at once when the isolate no longer keeps the key. */
  owe(refunds: Refund[]): void {
    if (this.live) this.owed.push(...refunds);
    else if (this.name !== null) this.host.handBack(this.name, refunds);
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
   * The isolate no longer keeps this key as in use (its cap pushed it out):
   * every unit held or owed is handed back at once, and the demand goes.
   * Returns still on their way are the calls' to settle; those of calls that
   * never answer are lost here.
   */
  evicted(nowMs: number): void {
    this.live = false;
    for (const transit of this.inTransit) {
      if (nowMs - transit.sentAtMs >= CALL_LOST_AFTER_MS) this.host.counters.writeOff("call lost", transit.units);
    }
    for (const lease of this.leases.values()) lease.retire();
    this.leases.clear();
    if (this.owed.length > 0) this.owe(this.owed.splice(0));
  }

  /** Kept as in use again after it was pushed out (its refusals kept it): a key seen anew. */
  revived(nowMs: number): void {
    this.live = true;
    this.leases = new Map();
    this.owed = [];
    this.demand = { window: 0, current: 0, previous: 0 };
    this.sinceMs = nowMs;
    this.leasable = true;
  }

  // Known refusals.

  /** The live refusal of this key under this rule, if the object refused it recently. */
  refusal(rule: Rule, nowMs: number): KnownRefusal | undefined {
    const entry = this.refusals?.get(rule);
    if (entry === undefined) return undefined;
    if (nowMs < entry.untilMs) return entry;
    this.refusals!.delete(rule);
    return undefined;
  }

  /**
   * Remembers a refusal from a call sent at `sentAtMs`, for as long as the
   * object says it holds, at most `maxHoldMs`. Returns whether it did.
   */
  remember(rule: Rule, name: string, sentAtMs: number, verdict: RuleVerdict, maxHoldMs: number): boolean {
    if (this.forgottenSince(rule, sentAtMs)) return false;
    const holdMs = Math.min(verdict.holdsForMs, maxHoldMs);
    if (holdMs <= 0) {
      this.refusals?.delete(rule);
      return false;
    }
    const { limit, override, tier, reduced, never } = verdict;
    this.refusals ??= new Map();
    this.refusals.set(
      rule,
      new KnownRefusal(sentAtMs + verdict.retryAfterMs, sentAtMs + holdMs, verdict.weighted, name, {
        limit,
        override,
        tier,
        reduced,
        never,
      }),
    );
    return true;
  }

  /**
   * An adaptive rule's factor changed: its leases (any tier's) stop being
   * spent, their unspent units owed back with the key's next call, and its
   * known refusals go, as both were given under the old limit.
   */
  dropRule(ruleId: string): void {
    for (const [rule, lease] of this.leases) {
      if (rule.id !== ruleId) continue;
      lease.retire();
      this.leases.delete(rule);
    }
    if (this.refusals !== null)
      for (const rule of this.refusals.keys()) if (rule.id === ruleId) this.refusals.delete(rule);
  }

  /** Forgets every refusal (the isolate keeps no more of them for this key). */
  forgetRefusals(): void {
    this.refusals = null;
  }

  /** Whether any refusal is kept. */
  get refused(): boolean {
    return this.refusals !== null && this.refusals.size > 0;
  }

  // Forgetting.

  /**
   * After an admin reset of this key under `rule`, or an override change,
   * at `nowMs`: its refusal goes; its lease counted in rows that are gone,
   * so its units are written off, and so are those of a lease a call sent
   * before now brings later; a refusal such a call brings is not kept.
   */
  forget(rule: Rule, nowMs: number): void {
    this.forgottenAtMs ??= new Map();
    this.forgottenAtMs.set(rule, nowMs);
    this.refusals?.delete(rule);
    const lease = this.leases.get(rule);
    if (!lease) return;
    this.host.counters.writeOff("reset", lease.unitsLeft);
    lease.unitsLeft = 0;
    lease.retired = true;
    this.leases.delete(rule);
  }

  private forgottenSince(rule: Rule, sentAtMs: number): boolean {
    const atMs = this.forgottenAtMs?.get(rule);
    return atMs !== undefined && sentAtMs <= atMs;
  }

  // Log lines.

  /**
   * Notes one refusal (`refusal`) or one ignored `cost_header` value
   * (`cost`) of this key under this rule. Returns the repeats to log with
   * it, or null when a line went out less than `everyMs` ago.
   */
  noteLine(line: "refusal" | "cost", rule: Rule, nowMs: number, everyMs: number): { repeats: number } | null {
    if (line === "refusal") this.logged ??= new Map();
    else this.costLogged ??= new Map();
    const lines = (line === "refusal" ? this.logged : this.costLogged)!;
    const logged = lines.get(rule);
    if (logged && nowMs - logged.atMs < everyMs) {
      logged.repeats++;
      return null;
    }
    lines.set(rule, { atMs: nowMs, repeats: 0 });
    return { repeats: logged?.repeats ?? 0 };
  }

  // Places of requests in flight.

  /** A request in flight holds this place, renewed at `nowMs` (when it was given). */
  holdPlace(placeId: string, rule: string, timeoutMs: number, nowMs: number): void {
    this.places ??= new Map();
    this.places.set(placeId, { rule, timeoutMs, renewedAtMs: nowMs });
  }

  /** Whether a request in flight still holds this place. */
  holdsPlace(placeId: string): boolean {
    return this.places?.has(placeId) ?? false;
  }

  /** The request that held this place ended (or the object took it back): what was kept of it. */
  dropPlace(placeId: string): { rule: string } | undefined {
    const held = this.places?.get(placeId);
    if (held === undefined) return undefined;
    this.places!.delete(placeId);
    if (this.places!.size === 0) this.places = null;
    return held;
  }

  /**
   * The places to renew with one call now that `placeId`'s renewal is due:
   * every place held here whose last renewal is a sixth of its timeout old
   * or more (so the key's requests in flight share one call), or null when
   * `placeId`'s own was renewed less than a third of its timeout ago (another
   * request's call renewed it). They count as renewed now: a request whose
   * renewal comes due while that call is on its way does not send another
   * (one that fails is sent again a third later, two thirds before expiry).
   */
  placesToRenew(placeId: string, nowMs: number): string[] | null {
    const own = this.places?.get(placeId);
    if (own === undefined || nowMs - own.renewedAtMs < own.timeoutMs / 3) return null;
    const due: string[] = [];
    for (const [id, held] of this.places!) {
      if (nowMs - held.renewedAtMs < held.timeoutMs / 6) continue;
      due.push(id);
      held.renewedAtMs = nowMs;
    }
    return due;
  }

  /** When `placeId` is next due for renewal: a third of its timeout after its last one. */
  nextRenewalMs(placeId: string, nowMs: number): number {
    const held = this.places?.get(placeId);
    return held === undefined ? nowMs : held.renewedAtMs + held.timeoutMs / 3;
  }

  // Gates.

  /** The gate of this rule set: made on first use. */
  gate(rules: Rule[]): Gate {
    this.gates ??= [];
    for (const gate of this.gates) if (sameRules(gate.rules, rules)) return gate;
    const gate = new Gate(rules, this.host.times, this.host.counters);
    this.gates.push(gate);
    return gate;
  }
}

const sameReceipt = (a: Receipt, b: Receipt): boolean =>
  a.row === b.row && a.epoch === b.epoch && a.bucket === b.bucket;
