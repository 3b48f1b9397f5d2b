/**
 * The leases of one client key (src/isolate/held-leases.ts), alone, on plain
 * numbers (isolate milliseconds, units): every unit leased or owed is spent,
 * handed back, or written off on purpose and counted; none is lost
 * silently, and none is counted twice. Each case follows units from a
 * grant to where they leave, and a seeded random trace checks the whole
 * ledger after every step.
 */
import { describe, expect, it } from "vitest";
import type { CountedRule } from "../src/core/rules.ts";
import { IsolateCounters } from "../src/isolate/counters.ts";
import { CALL_LOST_AFTER_MS, type Grant, HeldLeases, type InTransit } from "../src/isolate/held-leases.ts";
import { KnownRefusals } from "../src/isolate/refusals.ts";
import { giveBackSpent, type SpentUnits } from "../src/isolate/vocabulary.ts";
import { type Receipt, type Refund, type RuleVerdict, unitsOf } from "../src/object/protocol.ts";
import { settingsFor } from "./support/isolate.ts";
import { randomGenerator } from "./support/random.ts";

const [one, pricey] = settingsFor([
  { id: "one", limit: 1_000, period: "1h" },
  { id: "pricey", limit: 1_000, period: "1h", cost: 3 },
]).rules as [CountedRule, CountedRule];
const LIFE_MS = 60_000;

const receipt = (bucket: number, epoch = 1): Receipt => ({ row: "one|3600000|1", epoch, bucket });
const verdict: RuleVerdict = {
  allowed: true,
  ruleAllows: true,
  weighted: 10,
  remaining: 100,
  retryAfterMs: 0,
  resetMs: 30_000,
  counted: null,
  holdsForMs: 0,
};

/**
 * A key's leases with a ledger of where every unit went: granted by calls,
 * spent by requests (net of what they gave back), handed back to the object
 * (in the background, or taken by a call that answered), written off by
 * reason, held here, or on their way with a call.
 */
function ledger({ name = "object" as string | null } = {}) {
  const counters = new IsolateCounters();
  const handedBack: Refund[] = [];
  const leases = new HeldLeases({ counters, handBack: (_name, refunds) => handedBack.push(...refunds) }, { name });
  const refusals = new KnownRefusals();
  const units = { granted: 0, spent: 0, taken: 0 };
  const transits = new Set<InTransit>();
  const grant = (sentAtMs: number, n: number, rules = [one], bucket = 0): void => {
    const g: Grant = {
      name: "object",
      rules,
      verdicts: rules.map(() => verdict),
      lease: { units: n, receipts: rules.map(() => receipt(bucket)), expiresInMs: LIFE_MS },
      sentAtMs,
      // Stamped by its time: in these tests, calls go in the order of their times.
      sent: sentAtMs,
      asked: true,
    };
    leases.keep(g, refusals);
    units.granted += n * rules.length;
  };
  const spend = (nowMs: number, rules = [one]): SpentUnits | undefined => {
    const spent = leases.spend(rules, nowMs);
    if (spent) units.spent += spent.costs.reduce((a, b) => a + b, 0);
    return spent;
  };
  const giveBack = (spent: SpentUnits): void => {
    giveBackSpent(spent);
    units.spent -= spent.costs.reduce((a, b) => a + b, 0);
  };
  /** Calls that never answered leave the transit account when the key's next call or its eviction writes them off. */
  const lose = (nowMs: number): void => {
    for (const t of transits) if (nowMs - t.sentAtMs >= CALL_LOST_AFTER_MS) transits.delete(t);
  };
  const send = (nowMs: number, rules = [one]): InTransit | null => {
    lose(nowMs);
    const transit = leases.takeReturns(rules, nowMs);
    if (transit) transits.add(transit);
    return transit;
  };
  const land = (transit: InTransit, taken: boolean): void => {
    leases.landed(transit, taken);
    transits.delete(transit);
    if (taken) units.taken += transit.units;
  };
  const writtenOff = (): number => Object.values(counters.writtenOff).reduce((a, b) => a + b, 0);
  const held = (): number => unitsOf(leases.holdings());
  /** Every unit granted, by where it is now. */
  const accounts = () => ({
    spent: units.spent,
    handedBack: unitsOf(handedBack) + units.taken,
    writtenOff: writtenOff(),
    held: held(),
    inTransit: [...transits].reduce((n, t) => n + t.units, 0),
  });
  /** Whether every unit granted is in exactly one account. */
  const balanced = (): boolean => {
    const a = accounts();
    return a.spent + a.handedBack + a.writtenOff + a.held + a.inTransit === units.granted;
  };
  const evict = (nowMs: number): void => {
    lose(nowMs);
    leases.evicted(nowMs);
  };
  return {
    leases,
    counters,
    handedBack,
    refusals,
    transits,
    grant,
    spend,
    giveBack,
    send,
    land,
    evict,
    held,
    accounts,
    balanced,
  };
}

describe("a key's leases: where each unit goes", () => {
  it("spends a request's cost of every rule's lease at once, or of none", () => {
    const l = ledger();
    l.grant(0, 4, [one, pricey]);
    const first = l.spend(1_000, [one, pricey])!;
    expect(first.costs).toEqual([1, 3]);
    expect(l.held()).toBe(4 - 1 + (4 - 3));
    // `pricey` has 1 unit left, less than its cost: nothing is spent, `one`'s units stay.
    expect(l.spend(2_000, [one, pricey])).toBeUndefined();
    expect(l.held()).toBe(3 + 1);
    // A rule set with a rule that holds no lease spends nothing either.
    const other = ledger();
    other.grant(0, 4, [one]);
    expect(other.spend(1_000, [one, pricey])).toBeUndefined();
    expect(other.held()).toBe(4);
    expect(l.balanced() && other.balanced()).toBe(true);
  });

  it("counts `remaining` and the reset down from the grant's verdict as units are spent", () => {
    const l = ledger();
    l.grant(10_000, 5);
    const verdicts = [1, 2, 3].map((i) => l.spend(10_000 + i * 1_000)!.verdicts[0]!);
    expect(verdicts.map((v) => [v.remaining, v.resetMs, v.counted])).toEqual([
      [99, 29_000, null],
      [98, 28_000, null],
      [97, 27_000, null],
    ]);
  });

  it("retires a lease past its time at the next spend: its unspent units are owed to the object", () => {
    const l = ledger();
    l.grant(0, 5);
    l.spend(LIFE_MS - 1);
    expect(l.spend(LIFE_MS)).toBeUndefined();
    expect(l.leases.holdings()).toEqual([{ receipt: receipt(0), count: 4 }]);
    const transit = l.send(LIFE_MS + 1)!;
    expect(transit.refunds).toEqual([{ receipt: receipt(0), count: 4 }]);
    l.land(transit, true);
    expect(l.held()).toBe(0);
    expect(l.balanced()).toBe(true);
  });

  it("tops up a live lease with the same receipt, and retires one with another: its units go back against their own bucket", () => {
    const l = ledger();
    l.grant(0, 5);
    l.spend(1_000);
    l.grant(1_000, 5); // the same bucket: 4 + 5
    expect(l.leases.holdings()).toEqual([{ receipt: receipt(0), count: 9 }]);
    l.grant(2_000, 5, [one], 1); // the next bucket: a new lease; the old one's 9 are owed
    expect(l.leases.holdings()).toEqual([
      { receipt: receipt(1), count: 5 },
      { receipt: receipt(0), count: 9 },
    ]);
    expect(l.balanced()).toBe(true);
  });

  it("takes a unit a refused request gives back into its own lease, or, once that lease is retired, owes it against its receipt", () => {
    const l = ledger();
    l.grant(0, 5);
    const spent = l.spend(1_000)!;
    l.giveBack(spent);
    expect(l.leases.holdings()).toEqual([{ receipt: receipt(0), count: 5 }]);
    expect(l.spend(1_000)!.verdicts[0]!.remaining).toBe(99); // as if never spent
    const again = l.spend(1_000)!;
    l.grant(2_000, 3, [one], 1); // a newer lease, another bucket
    l.giveBack(again);
    // The unit goes back to the object against bucket 0, never into the lease of bucket 1.
    expect(l.leases.holdings()).toEqual([
      { receipt: receipt(1), count: 3 },
      { receipt: receipt(0), count: 3 },
      { receipt: receipt(0), count: 1 },
    ]);
    expect(l.balanced()).toBe(true);
  });

  it.each([
    ["taken by the object, answering on its first attempt", true, null, 0],
    ["written off when the call failed or was retried", false, "call failed", 3],
  ] as const)("hands the units of a call's rules back with it, %s", (_, taken, reason, writtenOff) => {
    const l = ledger();
    l.grant(0, 5);
    l.spend(1_000);
    l.spend(1_000);
    const transit = l.send(2_000)!;
    expect(transit.units).toBe(3);
    expect(l.held()).toBe(0); // the call decides on exactly what was admitted
    l.land(transit, taken);
    if (reason !== null) expect(l.counters.writtenOff[reason]).toBe(writtenOff);
    expect(l.balanced()).toBe(true);
  });

  it("keeps the returns of a call until it answers, and writes them off once it can no longer answer", () => {
    const l = ledger();
    l.grant(0, 5);
    l.send(1_000);
    expect(l.send(1_000 + CALL_LOST_AFTER_MS - 1)).toBeNull();
    expect(l.counters.writtenOff["call lost"]).toBe(0);
    l.send(1_000 + CALL_LOST_AFTER_MS);
    expect(l.counters.writtenOff["call lost"]).toBe(5);
    expect(l.balanced()).toBe(true);
  });

  it("writes off the returns of a call that never answered once, whatever befalls the key after", () => {
    const l = ledger();
    l.grant(0, 5);
    l.send(1_000);
    l.evict(1_000 + CALL_LOST_AFTER_MS); // pushed out long after: the call will not answer now
    expect(l.counters.writtenOff["call lost"]).toBe(5);
    l.leases.revived(); // its refusals kept it; a request brings it back into use
    l.send(2_000 + CALL_LOST_AFTER_MS); // its next call
    l.evict(3_000 + CALL_LOST_AFTER_MS);
    expect(l.counters.writtenOff["call lost"]).toBe(5);
    expect(l.balanced()).toBe(true);
  });

  it("writes off a lease a reset wiped, and the lease of a call sent before the reset, but not one sent after", () => {
    const l = ledger();
    l.grant(0, 5);
    l.spend(500);
    l.refusals.forget(one, 1_000);
    l.leases.forget(one);
    expect(l.counters.writtenOff.reset).toBe(4);
    l.grant(1_000, 7); // sent at the reset's instant: it may have been counted before it
    expect(l.counters.writtenOff.reset).toBe(4 + 7);
    expect(l.held()).toBe(0);
    l.grant(1_001, 7);
    expect(l.held()).toBe(7);
    expect(l.balanced()).toBe(true);
  });

  it("hands back every unit held or owed at once when the key is pushed out, and any given back later", () => {
    const l = ledger();
    l.grant(0, 5);
    l.grant(0, 5, [pricey]);
    const spent = l.spend(1_000, [one, pricey])!;
    l.leases.retire(pricey); // a `cost_header` charge: 2 units of it owed
    l.evict(2_000);
    expect(l.handedBack).toEqual([
      { receipt: receipt(0), count: 4 },
      { receipt: receipt(0), count: 2 },
    ]);
    expect(l.held()).toBe(0);
    l.giveBack(spent); // a request turned away after the key was pushed out
    expect(unitsOf(l.handedBack)).toBe(4 + 2 + 1 + 3);
    expect(l.balanced()).toBe(true);
  });

  it("writes off what it would hand back for a key whose object was never named (which cannot happen: a lease comes from a call)", () => {
    const l = ledger({ name: null });
    l.grant(0, 5);
    l.evict(1_000);
    expect(l.counters.writtenOff.unnamed).toBe(5);
    expect(l.balanced()).toBe(true);
  });

  it("asks again for every request once a call that asked got no lease, until one brings a lease", () => {
    const l = ledger();
    expect(l.leases.leasable).toBe(true);
    l.leases.keep(
      { name: "o", rules: [one], verdicts: [verdict], lease: undefined, sentAtMs: 0, sent: 0, asked: true },
      l.refusals,
    );
    expect(l.leases.leasable).toBe(false);
    l.leases.keep(
      { name: "o", rules: [one], verdicts: [verdict], lease: undefined, sentAtMs: 0, sent: 0, asked: false },
      l.refusals,
    );
    expect(l.leases.leasable).toBe(false); // a call that did not ask says nothing
    l.grant(0, 5);
    expect(l.leases.leasable).toBe(true);
  });
});

const SEEDS = [1, 2, 3, 4, 5, 6, 7, 8];

/**
 * A seeded random life of one key's leases: grants (some sent before a
 * reset), spends and give-backs, calls that answer, fail or are never heard
 * of again, retirements, resets, changes of factor, the key pushed out and
 * brought back, buckets and time passing. `check` runs after every step.
 */
function randomLife(seed: number, check: (l: ReturnType<typeof ledger>, trace: string) => void) {
  const random = randomGenerator(seed);
  const l = ledger();
  const spent: SpentUnits[] = [];
  const inFlight: InTransit[] = [];
  let nowMs = 0;
  let bucket = 0;
  // Pushed out of the keys in use: only a request brings it back (`ClientKeys.use`), before any grant.
  let out = false;
  const revive = () => {
    if (!out) return;
    out = false;
    l.leases.revived();
  };
  const rules = () => (random.int(2) ? [one] : [one, pricey]);
  const steps: Record<string, () => void> = {
    grant: () => {
      revive();
      l.grant(nowMs - random.int(2_000), 1 + random.int(8), rules(), bucket);
    },
    spend: () => {
      const s = l.spend(nowMs, rules());
      if (s) spent.push(s);
    },
    "give back": () => {
      const s = spent.splice(random.int(spent.length + 1), 1)[0];
      if (s) l.giveBack(s);
    },
    send: () => {
      const t = l.send(nowMs, rules());
      if (t) inFlight.push(t);
    },
    land: () => {
      // A call answers within its timeout, or never.
      const t = inFlight.shift();
      if (t && l.transits.has(t) && nowMs - t.sentAtMs < CALL_LOST_AFTER_MS) l.land(t, random.int(3) > 0);
    },
    retire: () => l.leases.retire(random.int(2) ? one : pricey),
    reset: () => {
      l.refusals.forget(one, nowMs);
      l.leases.forget(one);
    },
    "drop rule": () => l.leases.dropRule("pricey"),
    "push out": () => {
      if (out) return;
      out = true;
      l.evict(nowMs);
    },
    revive,
    "next bucket": () => {
      bucket++;
    },
    later: () => {
      nowMs += random.int(4) === 0 ? CALL_LOST_AFTER_MS : random.int(10_000);
    },
  };
  const names = Object.keys(steps);
  const trace: string[] = [];
  for (let i = 0; i < 400; i++) {
    const name = names[random.int(names.length)]!;
    trace.push(name);
    steps[name]!();
    check(l, trace.slice(-12).join(" → "));
  }
  return l;
}

describe("a key's leases on a random trace", () => {
  it.each(SEEDS)("accounts for every unit after every step (seed %i)", (seed) => {
    randomLife(seed, (l, trace) => expect(l.balanced(), trace).toBe(true));
  });

  it("takes units to every account and every way of writing them off", () => {
    const reached = new Set<string>();
    for (const seed of SEEDS)
      randomLife(seed, (l) => {
        for (const [account, units] of Object.entries(l.accounts())) if (units > 0) reached.add(account);
        for (const [reason, units] of Object.entries(l.counters.writtenOff)) if (units > 0) reached.add(reason);
      });
    expect([...reached].sort()).toEqual(
      ["call failed", "call lost", "handedBack", "held", "inTransit", "reset", "spent", "writtenOff"].sort(),
    );
  });
});
