/**
 * The refusals one isolate knows of for a client key, and when each rule
 * was forgotten (src/isolate/refusals.ts), alone, on plain numbers (isolate
 * milliseconds): a refusal answers from the instant its call was sent for
 * as long as the object says it holds, capped; a rule forgotten (an admin
 * reset, an override change) keeps no refusal a call sent until then
 * brings.
 */
import { describe, expect, it } from "vitest";
import type { Rule } from "../src/core/rules.ts";
import { KnownRefusals } from "../src/isolate/refusals.ts";
import type { RuleVerdict } from "../src/object/protocol.ts";
import { settingsFor } from "./support/isolate.ts";

const [api, other] = settingsFor([
  { id: "api", limit: 10, period: "1m" },
  { id: "other", limit: 10, period: "1m" },
]).rules as [Rule, Rule];
/** A tier's variant of `api`: another rule object with the same id (src/isolate/rule-ids.ts). */
const apiGold: Rule = { ...api, limit: 100, tier: "gold" };
const CAP_MS = 10_000;

const refusedFor = (retryAfterMs: number, holdsForMs = retryAfterMs): RuleVerdict => ({
  allowed: false,
  ruleAllows: false,
  weighted: 10,
  remaining: 0,
  retryAfterMs,
  resetMs: retryAfterMs,
  counted: null,
  holdsForMs,
});

describe("a key's known refusals", () => {
  it.each([
    // [what, sent at, retry after, holds for, answers until, retry at]
    ["answers until the object admits the key again", 1_000, 4_000, 4_000, 5_000, 5_000],
    ["answers at most the cap, however far off the retry", 1_000, 60_000, 60_000, 11_000, 61_000],
    ["answers only as long as the object says its refusal holds", 1_000, 4_000, 2_500, 3_500, 5_000],
  ])("%s, from when the call was sent", (_, sentAtMs, retryAfterMs, holdsForMs, untilMs, retryAtMs) => {
    const refusals = new KnownRefusals();
    expect(refusals.remember(api, "object", sentAtMs, sentAtMs, refusedFor(retryAfterMs, holdsForMs), CAP_MS)).toBe(
      true,
    );
    const known = refusals.get(api, untilMs - 1)!;
    expect([known.untilMs, known.retryAtMs, known.weighted, known.name]).toEqual([untilMs, retryAtMs, 10, "object"]);
    expect(refusals.any).toBe(true);
    expect(refusals.get(api, untilMs)).toBeUndefined();
    expect(refusals.any).toBe(false); // a lapsed refusal is dropped when looked up
  });

  it("keeps what applied to the client when it was refused, and the units it had left (fewer than a request's cost)", () => {
    const refusals = new KnownRefusals();
    const verdict: RuleVerdict = {
      ...refusedFor(4_000),
      remaining: 2,
      limit: 5,
      override: "limit",
      tier: "gold",
      reduced: true,
    };
    refusals.remember(api, "object", 0, 0, verdict, CAP_MS);
    expect(refusals.get(api, 0)!.applied).toEqual({
      limit: 5,
      override: "limit",
      tier: "gold",
      reduced: true,
      remaining: 2,
    });
  });

  it.each([
    ["a refusal that may rest on counts still to be refunded (holds for 0)", 4_000, 0, CAP_MS],
    ["nothing, when the cap is 0 (known refusals are off)", 4_000, 4_000, 0],
  ])("does not remember %s, and drops the one it had", (_, retryAfterMs, holdsForMs, capMs) => {
    const refusals = new KnownRefusals();
    refusals.remember(api, "object", 0, 0, refusedFor(5_000), CAP_MS);
    expect(refusals.remember(api, "object", 100, 100, refusedFor(retryAfterMs, holdsForMs), capMs)).toBe(false);
    expect(refusals.get(api, 100)).toBeUndefined();
  });

  it("keeps one refusal per rule object: a tier's variant apart from the rule's own", () => {
    const refusals = new KnownRefusals();
    refusals.remember(api, "object", 0, 0, refusedFor(4_000), CAP_MS);
    expect(refusals.get(apiGold, 0)).toBeUndefined();
    expect(refusals.get(other, 0)).toBeUndefined();
    refusals.remember(apiGold, "object", 0, 0, refusedFor(8_000), CAP_MS);
    expect(refusals.get(apiGold, 0)!.untilMs).toBe(8_000);
    expect(refusals.get(api, 0)!.untilMs).toBe(4_000);
  });

  it("drops the refusals of every variant of a rule whose factor changed, and no other rule's", () => {
    const refusals = new KnownRefusals();
    for (const rule of [api, apiGold, other]) refusals.remember(rule, "object", 0, 0, refusedFor(4_000), CAP_MS);
    refusals.dropRule("api");
    expect([api, apiGold, other].map((rule) => refusals.get(rule, 0) !== undefined)).toEqual([false, false, true]);
  });
});

describe("a key's forget times", () => {
  it("drops a rule's refusal when it is forgotten, and keeps none that a call sent until then brings", () => {
    const refusals = new KnownRefusals();
    refusals.remember(api, "object", 0, 0, refusedFor(9_000), CAP_MS);
    refusals.remember(other, "object", 0, 0, refusedFor(9_000), CAP_MS);
    refusals.forget(api, 2_000);
    expect(refusals.get(api, 2_000)).toBeUndefined();
    expect(refusals.get(other, 2_000)).toBeDefined();
    // Calls on their way during the reset: sent before it, or at its very instant.
    expect(refusals.remember(api, "object", 1_000, 1_000, refusedFor(9_000), CAP_MS)).toBe(false);
    expect(refusals.remember(api, "object", 2_000, 2_000, refusedFor(9_000), CAP_MS)).toBe(false);
    expect(refusals.get(api, 2_000)).toBeUndefined();
    expect(refusals.remember(api, "object", 2_001, 2_001, refusedFor(9_000), CAP_MS)).toBe(true);
  });

  it.each([
    // [what, forgotten at, sent at, forgotten since]
    ["a call sent before", [2_000], 1_999, true],
    ["a call sent at the instant", [2_000], 2_000, true],
    ["a call sent after", [2_000], 2_001, false],
    ["by the last time only", [2_000, 5_000], 4_000, true],
    ["never forgotten", [], 0, false],
  ] as const)("says whether the rule was forgotten since %s", (_, forgottenAtMs, sentAtMs, since) => {
    const refusals = new KnownRefusals();
    for (const atMs of forgottenAtMs) refusals.forget(api, atMs);
    expect(refusals.forgottenSince(api, sentAtMs)).toBe(since);
    expect(refusals.forgottenSince(apiGold, sentAtMs)).toBe(false); // a variant is forgotten on its own
  });

  it("keeps its forget times when its refusals are cleared (the key pushed out of the refused keys)", () => {
    const refusals = new KnownRefusals();
    refusals.remember(api, "object", 0, 0, refusedFor(9_000), CAP_MS);
    refusals.forget(other, 1_000);
    refusals.clear();
    expect(refusals.any).toBe(false);
    expect(refusals.get(api, 0)).toBeUndefined();
    expect(refusals.remember(other, "object", 500, 500, refusedFor(9_000), CAP_MS)).toBe(false);
  });
});
