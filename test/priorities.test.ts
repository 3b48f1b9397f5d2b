/**
 * Priorities under an adaptive rule, on plain numbers: which requests are
 * critical and which sheddable, how one controller factor becomes each
 * priority's (sheddable refused first, then default, critical only when
 * nothing else is left, with a reserve kept for critical), and how the
 * controller moves through those stages on what each priority sent.
 */
import { describe, expect, it } from "vitest";
import { CONTROLLER_PARAMS, type ControllerState, initialState, observe } from "../src/core/controller.ts";
import { type HealthCounts, noCounts, type PriorityCounts, parseAdaptive } from "../src/core/health.ts";
import { pathAsWritten, requestPath } from "../src/core/paths.ts";
import {
  factorsAt,
  type Priorities,
  type PriorityFacts,
  parseMatchers,
  priorityOf,
  stageAt,
  stagesOf,
} from "../src/core/priorities.ts";

const facts = (
  over: Partial<PriorityFacts> & { headers?: Record<string, string>; claims?: Record<string, string> } = {},
): PriorityFacts => ({
  method: over.method ?? "GET",
  path: over.path ?? pathAsWritten("/api/items"),
  header: (name) => over.headers?.[name] ?? null,
  claim: (path) => over.claims?.[path] ?? null,
  tier: over.tier ?? null,
});

const prioritiesOf = (critical: string[], sheddable: string[], reserve = 0): Priorities => {
  const c = parseMatchers(critical.length > 0 ? critical : undefined, false);
  const s = parseMatchers(sheddable.length > 0 ? sheddable : undefined, false);
  if (!c.ok || !s.ok) throw new Error("bad matchers");
  return { critical: c.value, sheddable: s.value, reserve };
};

describe("a request's priority", () => {
  const priorities = prioritiesOf(
    ["jwt:plan=enterprise", "tier:gold", "path:/api/checkout/*", "header:x-priority=critical"],
    ["path:/api/prefetch/*", "header:x-priority=low", "method:OPTIONS"],
  );
  it.each<[string, Parameters<typeof facts>[0], string]>([
    ["a verified claim's value", { claims: { plan: "enterprise" } }, "critical"],
    ["another value of that claim", { claims: { plan: "free" } }, "default"],
    ["the token's tier", { tier: "gold" }, "critical"],
    ["a path glob", { path: pathAsWritten("/api/checkout/42") }, "critical"],
    ["a header's value", { headers: { "x-priority": "critical" } }, "critical"],
    ["a sheddable path", { path: pathAsWritten("/api/prefetch/home") }, "sheddable"],
    ["a sheddable header", { headers: { "x-priority": "low" } }, "sheddable"],
    ["a method, whatever its case as written", { method: "OPTIONS" }, "sheddable"],
    ["nothing that any list names", {}, "default"],
    [
      "both lists: critical wins",
      { path: pathAsWritten("/api/prefetch/x"), claims: { plan: "enterprise" } },
      "critical",
    ],
  ])("is read from %s", (_what, given, expected) => {
    expect(priorityOf(priorities, facts(given), false)).toBe(expected);
  });

  // A rule counts more spellings than an origin routes alike (safe: more is counted); a critical matcher takes none
  // of them (more would be privileged): a path is critical only as the origin receives it.
  it.each([
    ["/p/prefetch/..%2Fcheckout/x", "sheddable"],
    ["/p/prefetch/x/..;/..;/checkout/y", "sheddable"],
    ["/p/prefetch/x/..%2F..%2Fcheckout/y", "sheddable"],
    ["/p/prefetch%2F..%2Fcheckout/x", "default"],
    ["/p/checkout;x/y", "default"],
    ["/p/checkout/../prefetch/x", "sheddable"],
    // Nor, the other way, a path critical as written that an origin reads as another: it must be critical both ways.
    ["/p/checkout/..%2fprefetch/x", "sheddable"],
    ["/p/checkout/x/..;/..;/prefetch/y", "sheddable"],
    ["/p/checkout/..%2F..%2Fother/x", "default"],
    ["/p/checkout/x", "critical"],
    ["/P/Checkout/x", "critical"],
    ["/p/checkout/x/", "critical"],
    // The glob's bare prefix, as a rule's `path` counts it (`/api/*` counts `/api`), for both lists alike.
    ["/p/checkout", "critical"],
    ["/p/checkout/", "critical"],
    ["/P/Checkout", "critical"],
    ["/p/prefetch", "sheddable"],
    ["/p/checkoutx", "default"],
    // Nor a path that an origin decoding `%5C` as a separator, or decoding twice, reads as another.
    ["/p/checkout/%5c..%5cprefetch/x", "default"],
    ["/p/checkout/%252e%252e/other", "default"],
    ["/p/checkout/%5C..%5Cother", "default"],
    ["/p/checkout/%C3%A9t%C3%A9", "critical"],
  ])("%s is %s: a critical path matcher reads the path only as the origin receives it", (path, expected) => {
    const p = prioritiesOf(["path:/p/checkout/*"], ["path:/p/prefetch/*"]);
    expect(priorityOf(p, facts({ path: requestPath(path) }), false)).toBe(expected);
  });

  it("a header named without a value matches any value, and `*` every request", () => {
    const p = prioritiesOf(["header:x-internal"], ["*"]);
    expect(priorityOf(p, facts({ headers: { "x-internal": "anything" } }), false)).toBe("critical");
    expect(priorityOf(p, facts(), false)).toBe("sheddable");
  });
});

describe("the adaptive table's priority fields", () => {
  it("parse into the target: matchers as written, the reserve as a share", () => {
    const parsed = parseAdaptive(
      { latency: "250ms", critical: "jwt:plan=enterprise", sheddable: ["path:/api/prefetch/*"], reserve: "20%" },
      100,
    );
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    expect(parsed.value.priorities?.critical.map((m) => m.source)).toEqual(["jwt:plan=enterprise"]);
    expect(parsed.value.priorities?.sheddable.map((m) => m.source)).toEqual(["path:/api/prefetch/*"]);
    expect(parsed.value.priorities?.reserve).toBe(0.2);
  });

  it("leave a rule without them as it was: no priorities", () => {
    const parsed = parseAdaptive({ latency: "250ms" }, 100);
    expect(parsed.ok && parsed.value.priorities).toBeUndefined();
  });

  it.each([
    [{ critical: [] }, '"adaptive.critical": must be a list of 1 to 32 matchers'],
    [{ critical: ["query:x"] }, '"adaptive.critical": item 1: unknown matcher "query:x"'],
    [{ sheddable: ["path:api/*"] }, '"adaptive.sheddable": item 1: path: needs a glob that starts with "/"'],
    [{ sheddable: ["header:x-priority="] }, '"adaptive.sheddable": item 1: header: needs a header name'],
    [{ critical: ["jwt:"] }, '"adaptive.critical": item 1: jwt: needs a claim'],
    [{ critical: ["tier:"] }, '"adaptive.critical": item 1: tier: needs a value'],
    [{ critical: [42] }, '"adaptive.critical": item 1: must be a string'],
    [{ critical: ["*"], reserve: "95%" }, '"adaptive.reserve": must be a share written with "%", from "0%" to "90%"'],
    [{ critical: ["*"], reserve: 0.2 }, '"adaptive.reserve": must be a share written with "%"'],
    [{ reserve: "20%" }, '"adaptive.reserve": keeps a share for critical requests: it needs a `critical` list'],
    [{ critical: Array.from({ length: 33 }, () => "*") }, '"adaptive.critical": must be a list of 1 to 32 matchers'],
  ])("refuse %j with an error naming the field", (fields, message) => {
    const parsed = parseAdaptive({ latency: "250ms", ...fields }, 100);
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.errors.join("\n")).toContain(message);
  });
});

describe("one controller factor as each priority's", () => {
  // A limit of 100, a floor of 10: sheddable and default go down to 1 a period (0.01), critical to 0.1.
  const stages = stagesOf(prioritiesOf(["*"], ["*"]), 100, 1, 0.1);

  it("goes through sheddable first, then default, then critical: each down to one a period, then to none", () => {
    expect(stages.order).toEqual(["sheddable", "default", "critical"]);
    expect(factorsAt(stages, 1)).toEqual({ sheddable: 1, default: 1, critical: 1 });
    expect(factorsAt(stages, 0.5)).toEqual({ sheddable: 0.5, default: 1, critical: 1 });
    expect(factorsAt(stages, 0.02)).toEqual({ sheddable: 0.02, default: 1, critical: 1 });
    // Past its stage, a priority has nothing left: 0, every request of it refused.
    expect(factorsAt(stages, 0.01)).toEqual({ sheddable: 0, default: 1, critical: 1 });
    expect(factorsAt(stages, 0.005)).toEqual({ sheddable: 0, default: 0.5, critical: 1 });
    expect(factorsAt(stages, 0.0001)).toEqual({ sheddable: 0, default: 0, critical: 1 });
    expect(factorsAt(stages, 0.00005)).toEqual({ sheddable: 0, default: 0, critical: 0.5 });
    expect(factorsAt(stages, stages.minFactor)).toEqual({ sheddable: 0, default: 0, critical: 0.1 });
    expect(stages.minFactor).toBeCloseTo(0.00001, 12);
  });

  it("is the controller's own for a rule without priorities: one stage, default, down to the floor", () => {
    const plain = stagesOf(undefined, 100, 1, 0.1);
    expect(plain.order).toEqual(["default"]);
    expect(plain.minFactor).toBe(0.1);
    for (const f of [1, 0.7, 0.1]) expect(factorsAt(plain, f).default).toBe(f);
  });

  it("has only the stages a rule names: with no sheddable list, default goes first", () => {
    const s = stagesOf(prioritiesOf(["*"], []), 100, 1, 0.1);
    expect(s.order).toEqual(["default", "critical"]);
    expect(factorsAt(s, 0.5)).toEqual({ sheddable: 0.5, default: 0.5, critical: 1 });
  });

  it("keeps the reserve for critical requests while the limit is reduced, and only then", () => {
    const reserved = stagesOf(prioritiesOf(["*"], ["*"], 0.2), 100, 1, 0.1);
    expect(factorsAt(reserved, 1)).toEqual({ sheddable: 1, default: 1, critical: 1 });
    expect(factorsAt(reserved, 0.9)).toEqual({ sheddable: 0.8, default: 0.8, critical: 1 });
    expect(factorsAt(reserved, 0.00005)).toEqual({ sheddable: 0, default: 0, critical: 0.5 });
  });

  it("finds the stage a factor is in", () => {
    expect([1, 0.02, 0.01, 0.005, 0.0001, 0.00002].map((f) => stageAt(stages, f))).toEqual([0, 0, 1, 1, 2, 2]);
  });
});

describe("the controller under a rule with priorities", () => {
  // Every priority at 100 a period, floor 10; the origin failing: every window cuts.
  const stages = stagesOf(prioritiesOf(["*"], ["*"]), 100, 1, 0.1);
  const target = { slowShare: 0.01, errorShare: 0.05, minFactor: 0.1, stages };
  const failing = (byPriority: PriorityCounts, shed = 0): HealthCounts => {
    const forwarded = Object.values(byPriority).reduce((n, c) => n + (c?.[0] ?? 0), 0);
    return { ...noCounts(), forwarded, answered: forwarded, errors: forwarded, shed, peak: 1, byPriority };
  };
  const healthy = (byPriority: PriorityCounts, shed: number): HealthCounts => {
    const forwarded = Object.values(byPriority).reduce((n, c) => n + (c?.[0] ?? 0), 0);
    return {
      ...noCounts(),
      forwarded,
      answered: forwarded,
      busyMs: forwarded * 5,
      busySq: forwarded * 25,
      shed,
      byPriority,
    };
  };
  /** One judged window: counts reported at `atMs`, judged `intervalMs` later. */
  const step = (state: ControllerState, counts: HealthCounts, atMs: number) => {
    const first = observe(state, counts, state.version, atMs, target);
    return observe(first.state, noCounts(), first.state.version, atMs + CONTROLLER_PARAMS.intervalMs, target).state;
  };
  /**
   * Sheddable requests have just been left nothing, at 10 s (the factor at the top of default's stage,
   * which has no requests); the origin's calm latency is 50 ms.
   */
  const leftNothing: ControllerState = {
    ...initialState(),
    factor: stages.tops[1]!,
    version: 3,
    mode: "reducing",
    changedAtMs: 10_000,
    calm: { ms: 50, periodStartMs: 0, previousMs: null, currentMs: 50 },
  };

  it("cuts sheddable requests while they are sent, and only them", () => {
    let state = initialState();
    for (let i = 1; i <= 3; i++) {
      state = step(state, failing({ sheddable: [200, 0], critical: [40, 0] }, 1), i * 1_000);
      const f = factorsAt(stages, state.factor);
      expect(f.critical).toBe(1);
      expect(f.default).toBe(1);
    }
    expect(factorsAt(stages, state.factor).sheddable).toBeLessThan(0.2);
  });

  it("skips a stage whose priority sent nothing: the first cut with only critical traffic cuts critical", () => {
    const state = step(initialState(), failing({ critical: [100, 0] }, 1), 1_000);
    const f = factorsAt(stages, state.factor);
    expect(f.sheddable).toBe(0);
    expect(f.default).toBe(0);
    expect(f.critical).toBeLessThan(1);
  });

  it("cuts critical requests only once the queue built before the others had nothing left has had its time to drain", () => {
    // The origin is still failing with the backlog admitted before sheddable requests were left nothing.
    const soon = step(leftNothing, failing({ critical: [100, 0], sheddable: [0, 50] }, 50), 10_600);
    expect(factorsAt(stages, soon.factor)).toEqual({ sheddable: 0, default: 1, critical: 1 });
    const later = step(leftNothing, failing({ critical: [100, 0], sheddable: [0, 50] }, 50), 12_100);
    expect(factorsAt(stages, later.factor)).toMatchObject({ sheddable: 0, default: 0 });
    expect(factorsAt(stages, later.factor).critical).toBeLessThan(1);
  });

  describe("when the origin is slow with the backlog the others built (calm 50 ms, answers waiting 1.85 s)", () => {
    /** Critical requests forwarded, and answers (all slow, at 1.85 s) of which `gone` clients had left first. */
    const queued = (forwarded: number, answered: number, gone: number): HealthCounts => ({
      ...noCounts(),
      forwarded,
      answered,
      slow: answered,
      busyMs: answered * 1_850,
      busySq: answered * 1_850 * 1_850,
      gone,
      goneSlow: gone,
      shed: 50,
      peak: 1,
      byPriority: { critical: [forwarded, 0], sheddable: [0, 50] },
    });
    const criticalAfter = (counts: HealthCounts, judgedAtMs: number) =>
      factorsAt(stages, step(leftNothing, counts, judgedAtMs - CONTROLLER_PARAMS.intervalMs).factor).critical;

    it("does not cut them while the origin answers more than it is sent: that backlog drains, however slowly", () => {
      expect(criticalAfter(queued(100, 150, 0), 14_100)).toBe(1);
      expect(criticalAfter(queued(100, 150, 0), 30_000)).toBe(1);
    });

    it("waits 2 s and the 1.85 s the answers show they waited, before cutting them when it does not keep up", () => {
      // Most of the clients gave up waiting: the origin kept 40 of the 100 it was sent.
      expect(criticalAfter(queued(100, 100, 60), 12_600)).toBe(1);
      expect(criticalAfter(queued(100, 100, 60), 13_700)).toBe(1);
      expect(criticalAfter(queued(100, 100, 60), 14_100)).toBeLessThan(1);
    });
  });

  it("raises critical first, and a stage nothing of which is refused at once", () => {
    // Deep in the critical stage: every priority held down.
    let state: ControllerState = { ...initialState(), factor: stages.minFactor, version: 1, mode: "reducing" };
    // Only sheddable requests are refused by the reduction: critical and default are done at once.
    state = step(state, healthy({ critical: [50, 0], sheddable: [10, 30] }, 30), 10_000);
    const f = factorsAt(stages, state.factor);
    expect(f.critical).toBe(1);
    expect(f.default).toBe(1);
    expect(f.sheddable).toBeGreaterThan(0.01);
    expect(f.sheddable).toBeLessThan(0.02);
  });
});
