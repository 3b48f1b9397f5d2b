/**
 * @module
 * Leases in the isolate: admissions a key's object counted ahead for us,
 * spent on the next requests for that key without calling the object.
 *
 * A lease is only granted while every rule of the key has plenty left (see
 * `LEASE_SHARE` in the object), and it dies when the earliest current bucket
 * ends, so the counts are where the requests land and no limit is exceeded.
 *
 * While a call that may bring a lease is in flight, other requests for the
 * same key wait for it and spend its units instead of calling too: otherwise
 * a burst would have the object count many leases at once, and refuse
 * requests while their units sat unspent here. Units not spent before a lease
 * dies are handed back with the next call for the key; until then they are
 * counted but unused (the admission gap: at most one lease per key per
 * isolate, and at most `LEASE_SHARE` of what is left).
 */
import type { Rule } from "./core/rules.ts";
import { CappedMap, ruleUid } from "./isolate-cache.ts";
import type { Lease, LimiterOutcome, Refund, RuleVerdict } from "./limiter-protocol.ts";

/** Units asked for with every call. */
export const LEASE_UNITS = 64;
export const DEFAULT_MAX_LEASES = 10_000;

type Held = {
  lease: Lease;
  /** Isolate time until which the units may be spent. */
  untilMs: number;
  unitsLeft: number;
  /** Isolate time of the granting call, and its verdicts, for the headers of the units spent. */
  grantedAtMs: number;
  verdicts: RuleVerdict[];
};

/** Everything the isolate knows of one key's rules, as one object checks them. */
type Slot = {
  rules: Rule[];
  held: Held | null;
  /** A call that may bring a lease, in flight: others wait for it. */
  inflight: Promise<LimiterOutcome> | null;
  /** Whether the last answer granted a lease. While not, calls are not held back for one another. */
  leasable: boolean;
  /** Units of leases that died unspent, or were replaced, to hand back. */
  owed: Refund[];
};

/** One unit spent: the verdicts to report for it. */
export type Spent = { verdicts: RuleVerdict[]; slot: Slot };

const slotKey = (canonical: string, rules: Rule[]): string =>
  `${rules.map((rule) => ruleUid(rule)).join(",")}\u0000${canonical}`;

function unspent(slot: Slot): Refund[] {
  const held = slot.held;
  if (!held || held.unitsLeft <= 0) return [];
  return slot.rules.map((rule, i) => ({ id: rule.id, bucket: held.lease.buckets[i]!, count: held.unitsLeft }));
}

export class LeaseCache {
  private readonly slots: CappedMap<string, Slot>;
  /** Units to ask for with each call: none when this cache can hold nothing. */
  readonly unitsWanted: number;

  constructor(maxEntries = DEFAULT_MAX_LEASES, unitsWanted = LEASE_UNITS) {
    this.slots = new CappedMap(maxEntries);
    this.unitsWanted = maxEntries > 0 ? unitsWanted : 0;
  }

  get size(): number {
    return this.slots.size;
  }

  private slot(canonical: string, rules: Rule[]): Slot {
    const key = slotKey(canonical, rules);
    let slot = this.slots.get(key);
    if (!slot) {
      slot = { rules, held: null, inflight: null, leasable: true, owed: [] };
      this.slots.set(key, slot);
    }
    return slot;
  }

  /** Spends one unit of a live lease on this key's rules, if there is one. */
  spend(canonical: string, rules: Rule[], nowMs: number): Spent | undefined {
    const slot = this.slots.get(slotKey(canonical, rules));
    const held = slot?.held;
    if (!slot || !held || held.unitsLeft <= 0) return undefined;
    if (nowMs >= held.untilMs) {
      slot.owed.push(...unspent(slot));
      slot.held = null;
      return undefined;
    }
    held.unitsLeft--;
    const used = held.lease.units - held.unitsLeft;
    const elapsedMs = nowMs - held.grantedAtMs;
    const verdicts = held.verdicts.map((v) => ({
      ...v,
      remaining: Math.max(0, v.remaining - used),
      resetMs: Math.max(0, v.resetMs - elapsedMs),
      bucket: -1,
    }));
    return { verdicts, slot };
  }

  /** Gives a spent unit back: the request it admitted was refused by another key. */
  unspend(spent: Spent): void {
    if (spent.slot.held) spent.slot.held.unitsLeft++;
  }

  /** The call in flight for this key that may bring a lease, if any: wait for it, then try to spend again. */
  pending(canonical: string, rules: Rule[]): Promise<LimiterOutcome> | null {
    return this.slots.get(slotKey(canonical, rules))?.inflight ?? null;
  }

  /**
   * Makes a call for this key, handing back what is owed and keeping the
   * lease it brings. The lease's clock starts when the call is sent, so it
   * ends early rather than late.
   */
  async call(
    canonical: string,
    rules: Rule[],
    nowMs: number,
    send: (returns: Refund[]) => Promise<LimiterOutcome>,
  ): Promise<LimiterOutcome> {
    const slot = this.slot(canonical, rules);
    const returns = slot.owed.splice(0);
    const outcome = send(returns);
    if (slot.leasable) slot.inflight = outcome;
    try {
      const result = await outcome;
      if (!result.ok) return result;
      const { lease, verdicts } = result.result;
      slot.leasable = lease !== undefined;
      if (lease) {
        slot.owed.push(...unspent(slot));
        slot.held = { lease, untilMs: nowMs + lease.expiresInMs, unitsLeft: lease.units, grantedAtMs: nowMs, verdicts };
      }
      return result;
    } finally {
      if (slot.inflight === outcome) slot.inflight = null;
    }
  }
}

/** The isolate's leases, shared by every `rateLimit()` in it. */
export const leases = new LeaseCache();
