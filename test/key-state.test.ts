/**
 * One client key's state (src/isolate/key-state.ts), alone, on plain
 * numbers (isolate milliseconds, units): what takes more than one of its
 * owners (a reset, a change of factor, a key pushed out and brought back, a
 * call's grant), and its gates. Each owner has its own test: demand,
 * held-leases, refusals, log-throttle, held-places.
 */
import { describe, expect, it } from "vitest";
import type { CountedRule } from "../src/core/rules.ts";
import { IsolateCounters } from "../src/isolate/counters.ts";
import { CallTimes } from "../src/isolate/flight.ts";
import type { Grant } from "../src/isolate/held-leases.ts";
import { KeyState } from "../src/isolate/key-state.ts";
import { type Refund, type RuleVerdict, unitsOf } from "../src/object/protocol.ts";
import { settingsFor } from "./support/isolate.ts";

const [api, other] = settingsFor([
  { id: "api", limit: 1_000, period: "1h" },
  { id: "other", limit: 1_000, period: "1h" },
]).rules as [CountedRule, CountedRule];
const apiGold: CountedRule = { ...api, limit: 2_000, tier: "gold" };

const verdict = (allowed: boolean): RuleVerdict => ({
  allowed,
  ruleAllows: allowed,
  weighted: allowed ? 1 : 1_000,
  remaining: allowed ? 998 : 0,
  retryAfterMs: allowed ? 0 : 9_000,
  resetMs: 9_000,
  counted: null,
  holdsForMs: allowed ? 0 : 9_000,
});

const grant = (rules: CountedRule[], units: number, sentAtMs: number): Grant => ({
  name: "object",
  rules,
  verdicts: rules.map(() => verdict(true)),
  lease: { units, receipts: rules.map((r) => ({ row: r.id, epoch: 1, bucket: 0 })), expiresInMs: 60_000 },
  sentAtMs,
  // Stamped by its time: in these tests, calls go in the order of their times, and a forgetting at a time is after
  // every call sent until then.
  sent: sentAtMs,
  asked: true,
});

function keyState({ maxUnits = 64 } = {}) {
  const counters = new IsolateCounters();
  const handedBack: Refund[] = [];
  const host = {
    counters,
    times: new CallTimes(),
    maxUnits,
    handBack: (_: string, r: Refund[]) => handedBack.push(...r),
  };
  return { state: new KeyState(host, 0), counters, handedBack };
}

describe("one client key's state", () => {
  it("asks for a lease sized by its demand, up to the isolate's units, or none while leases are off", () => {
    for (const maxUnits of [64, 0]) {
      const { state } = keyState({ maxUnits });
      for (let i = 0; i < 5; i++) state.demand.note(i * 100);
      expect(state.leaseRequest(2_000)).toEqual(maxUnits === 0 ? undefined : { units: 64, seen: 5, seenInMs: 2_000 });
    }
  });

  it("keeps the object's name and the lease a call brought", () => {
    const { state } = keyState();
    expect(state.name).toBeNull();
    state.keep(grant([api, other], 5, 1_000));
    expect(state.name).toBe("object");
    expect(unitsOf(state.leases.holdings())).toBe(10);
    expect(state.leases.spend([api, other], 1_000)!.leases[0]!.name).toBe("object");
  });

  it("forgets a rule on a reset: its refusal and its lease go, and so does what a call sent before brings", () => {
    const { state, counters } = keyState();
    state.keep(grant([api], 5, 1_000));
    state.keep(grant([other], 5, 1_000));
    state.refusals.remember(apiGold, "object", 1_000, 1_000, verdict(false), 10_000);
    state.forget(api, 2_000);
    state.forget(apiGold, 2_000);
    expect(counters.writtenOff.reset).toBe(5);
    expect(state.refusals.get(apiGold, 2_000)).toBeUndefined();
    // A call sent before the reset lands after it: its lease and its refusal rest on counts that are gone.
    state.keep(grant([api], 7, 1_500));
    expect(state.refusals.remember(api, "object", 1_500, 1_500, verdict(false), 10_000)).toBe(false);
    expect(counters.writtenOff.reset).toBe(5 + 7);
    expect(unitsOf(state.leases.holdings())).toBe(5); // `other`'s, untouched
  });

  it("drops a rule whose factor changed: every variant's leases owed back and refusals gone, no other rule's", () => {
    const { state, counters } = keyState();
    state.keep(grant([api], 5, 0));
    state.keep(grant([apiGold], 3, 0));
    state.keep(grant([other], 4, 0));
    for (const rule of [api, apiGold, other]) state.refusals.remember(rule, "object", 0, 0, verdict(false), 10_000);
    state.dropRule("api");
    expect(state.leases.spend([api], 1)).toBeUndefined();
    expect(state.leases.spend([apiGold], 1)).toBeUndefined();
    expect(state.leases.spend([other], 1)).toBeDefined();
    expect([api, apiGold, other].map((rule) => state.refusals.get(rule, 1) !== undefined)).toEqual([
      false,
      false,
      true,
    ]);
    // Owed, not written off: they go back with the key's next call.
    expect(state.leases.takeReturns([], 2)!.units).toBe(5 + 3);
    expect(Object.values(counters.writtenOff).every((n) => n === 0)).toBe(true);
  });

  it("hands back every unit when pushed out, and is seen anew when brought back, its refusals kept", () => {
    const { state, handedBack } = keyState();
    for (let i = 0; i < 30; i++) state.demand.note(i * 100);
    state.keep(grant([api], 5, 0));
    state.refusals.remember(other, "object", 0, 0, verdict(false), 10_000);
    state.evicted(5_000);
    expect(unitsOf(handedBack)).toBe(5);
    state.revived(6_000);
    expect(state.leaseRequest(6_500)).toEqual({ units: 64, seen: 0, seenInMs: 1_000 });
    expect(state.leases.holdings()).toEqual([]);
    expect(state.refusals.get(other, 6_500)).toBeDefined();
  });

  it("has one gate per rule set: the same rules in the same order find the same gate", () => {
    const { state } = keyState();
    const both = state.gate([api, other]);
    expect(state.gate([api, other])).toBe(both);
    expect(state.gate([other, api])).not.toBe(both);
    expect(state.gate([api])).not.toBe(both);
    expect(state.gate([api])).toBe(state.gate([api]));
  });
});
