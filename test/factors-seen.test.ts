/**
 * The factors a key's object has seen (src/object/factors-seen.ts), on plain
 * checks: which moves are raises, which waiting checks take the new factor,
 * and that a cut never lowers what a held request was booked under.
 */
import { describe, expect, it } from "vitest";
import { FactorsSeen } from "../src/object/factors-seen.ts";
import type { RuleCheck } from "../src/object/protocol.ts";

const check = (id: string, factor: number | undefined, priority?: "critical" | "sheddable"): RuleCheck =>
  ({
    id,
    limit: 10,
    periodMs: 60_000,
    precision: 6,
    strict: false,
    enforce: true,
    ...(factor === undefined ? {} : { factor }),
    ...(priority === undefined ? {} : { priority }),
  }) as RuleCheck;

describe("the factors a key's object has seen", () => {
  it("notes a move once: the first factor seen (as after a restart), then each change, never the same twice", () => {
    const seen = new FactorsSeen();
    expect(seen.moved(check("a", 0.5))).toEqual({ before: undefined });
    expect(seen.moved(check("a", 0.5))).toBeNull();
    expect(seen.moved(check("a", 0.8))).toEqual({ before: 0.5 });
    // A rule that is not adaptive carries no factor: nothing to note.
    expect(seen.moved(check("plain", undefined))).toBeNull();
    // Each priority of a rule is its own.
    expect(seen.moved(check("a", 0.8, "sheddable"))).toEqual({ before: undefined });
  });

  it("a raise, with requests held: those of its rule and priority take the higher factor; others, and higher ones, keep theirs", () => {
    const seen = new FactorsSeen();
    seen.moved(check("a", 0.5));
    const raised = seen.raised([check("a", 0.9), check("b", undefined)], true);
    expect(raised?.ruleIds).toEqual(new Set(["a"]));
    expect(raised!.checkNow(check("a", 0.5))).toMatchObject({ factor: 0.9 });
    expect(raised!.checkNow(check("a", 0.95))).toMatchObject({ factor: 0.95 });
    expect(raised!.checkNow(check("a", 0.5, "critical"))).toMatchObject({ factor: 0.5 });
  });

  it("a cut moves no held request, and is noted: the raise after it is measured from it", () => {
    const seen = new FactorsSeen();
    seen.moved(check("a", 0.8));
    expect(seen.raised([check("a", 0.4)], true)).toBeUndefined();
    expect(seen.moved(check("a", 0.4))).toBeNull();
    expect(seen.raised([check("a", 0.6)], true)?.ruleIds).toEqual(new Set(["a"]));
  });

  it("with nothing held, notes the factors and plans nothing", () => {
    const seen = new FactorsSeen();
    seen.moved(check("a", 0.5));
    expect(seen.raised([check("a", 0.9)], false)).toBeUndefined();
    expect(seen.moved(check("a", 0.9))).toBeNull();
  });

  it("the line for places takes a new factor either way, for its own priority only", () => {
    const seen = new FactorsSeen();
    expect(seen.lineUnder(check("p", 1))).not.toBeNull();
    expect(seen.lineUnder(check("p", 1))).toBeNull();
    const cut = seen.lineUnder(check("p", 0.5))!;
    expect(cut(check("p", 1))).toMatchObject({ factor: 0.5 });
    expect(cut(check("p", 1, "critical"))).toMatchObject({ factor: 1 });
  });
});
