/**
 * The controller of an adaptive rule, pure: what a window of counts under the
 * current factor does to it, table by table, and properties that hold for
 * any sequence of reports (never below the floor nor above 1, a breach never
 * raises, too few answers never move it, other versions are never evidence).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  CONTROLLER_PARAMS,
  type ControllerState,
  type ControlTarget,
  initialState,
  judge,
  observe,
  reportEveryMs,
  scaledLimit,
  urgent,
} from "../src/core/controller.ts";
import { type HealthCounts, type KeyCounts, noCounts } from "../src/core/health.ts";

/** p99 under the target, 5 % errors, a floor of a hundredth of the limit. */
const target: ControlTarget = { slowShare: 0.01, errorShare: 0.05, minFactor: 0.01 };
const T0 = 1_000_000;

const counts = (over: Partial<HealthCounts>): HealthCounts => ({ ...noCounts(), ...over });
/** 100 answers to 100 forwarded requests, none slow, none failed. */
const healthy = (over: Partial<HealthCounts> = {}) => counts({ forwarded: 100, answered: 100, ...over });

/** The state at `factor` (a version per change), its window empty. */
const at = (factor: number, over: Partial<ControllerState> = {}): ControllerState => ({
  ...initialState(),
  factor,
  version: 7,
  mode: factor === 1 ? "full" : "reducing",
  ...over,
});

/** Two reports under the state's version, 500 ms apart: the first opens the window, the second closes it. */
function decide(state: ControllerState, first: HealthCounts, second = counts({})) {
  const opened = observe(state, first, state.version, T0, target);
  return observe(opened.state, second, state.version, T0 + CONTROLLER_PARAMS.intervalMs, target);
}

describe("a window under the current factor", () => {
  it.each([
    ["healthy at the configured limit: nothing to raise", 1, healthy(), "hold", 1],
    ["healthy, the reduction refusing requests: a probe of a tenth", 0.5, healthy({ shed: 10 }), "raise", 0.55],
    ["healthy, the reduction refusing no one: doubled", 0.2, healthy(), "raise", 0.4],
    ["healthy, refusing no one, near the configured limit: capped at 1", 0.7, healthy(), "raise", 1],
    ["at the target exactly (1 slow in 100): within it", 0.5, healthy({ slow: 1, shed: 1 }), "raise", 0.55],
    ["over the target within chance (2 slow in 100): held", 0.5, healthy({ slow: 2, shed: 1 }), "hold", 0.5],
    [
      "slow beyond chance, the origin keeping up: cut by a tenth at least",
      0.5,
      healthy({ slow: 30, shed: 5 }),
      "cut",
      0.45,
    ],
    [
      "slow beyond chance, the origin answering 60 of 100 sent: to 0.6 × 0.95 of it",
      0.5,
      counts({ forwarded: 100, answered: 60, slow: 60, shed: 5 }),
      "cut",
      0.5 * 0.6 * 0.95,
    ],
    [
      "failing fast: 40 of 100 answers are 503s, cut to what the origin kept up with",
      0.8,
      counts({ forwarded: 100, answered: 100, errors: 40, shed: 1 }),
      "cut",
      0.8 * 0.6 * 0.95,
    ],
    [
      "answering a third of what it is sent: halved, no deeper in one step",
      0.8,
      counts({ forwarded: 300, answered: 100, slow: 100, shed: 50 }),
      "cut",
      0.4,
    ],
    [
      "slow, but answering more than it is sent: its backlog drains, no cut on top",
      0.3,
      counts({ forwarded: 100, answered: 130, slow: 130, shed: 50 }),
      "hold",
      0.3,
    ],
    [
      "slow while the reduction refuses no one: the cut starts from the busiest client's level",
      1,
      counts({ forwarded: 300, answered: 100, slow: 100, peak: 0.25 }),
      "cut",
      0.125,
    ],
    [
      "slow, refusing no one, the busiest client's level unknown: the cut starts from the factor",
      1,
      counts({ forwarded: 300, answered: 100, slow: 100 }),
      "cut",
      0.5,
    ],
    [
      "a cut never goes below the floor",
      0.015,
      counts({ forwarded: 300, answered: 100, slow: 90, shed: 9 }),
      "cut",
      0.01,
    ],
    [
      "at the floor, a cut changes nothing",
      0.01,
      counts({ forwarded: 300, answered: 100, slow: 90, shed: 9 }),
      "hold",
      0.01,
    ],
  ])("%s", (_, factor, window, kind, to) => {
    const { state, step } = decide(at(factor), window);
    expect(step.kind).toBe(kind);
    expect(state.factor).toBeCloseTo(to, 12);
    expect(state.version).toBe(kind === "hold" ? 7 : 8);
  });

  /** `n` keys, each with `answered` answers of which `slow` were slow. */
  const keys = (n: number, answered: number, slow: number, tag = "k"): KeyCounts[] =>
    Array.from({ length: n }, (_, i): KeyCounts => [`${tag}${i}`, answered, slow, 0]);

  it.each([
    ["one client's slow answers among fast ones from the rest: no cut", 1, 90, "hold"],
    ["five clients' (a small set): no cut", 5, 90, "hold"],
    ["six clients' (more than the set a decision leaves out): a cut", 6, 90, "cut"],
  ] as const)("%s", (_, slowKeys, fastAnswers, kind) => {
    // Each slow client: 4 answers, all slow. The others: fast, and no key of theirs is among the worst.
    const slowAnswers = slowKeys * 4;
    const window = counts({
      forwarded: fastAnswers + slowAnswers,
      answered: fastAnswers + slowAnswers,
      slow: slowAnswers,
      worst: keys(slowKeys, 4, 4),
    });
    const { state, step } = decide(at(1), window);
    expect(step.kind).toBe(kind);
    expect(state.factor < 1).toBe(kind === "cut");
  });

  it.each([
    ["one client, all the traffic there is", 1],
    ["two clients, all the traffic there is", 2],
    ["five clients, all the traffic there is", 5],
  ])("an origin slow for every client is still seen: %s, all slow, is a cut", (_, n) => {
    const window = counts({ forwarded: 40, answered: 40, slow: 40, worst: keys(n, 40 / n, 40 / n) });
    expect(decide(at(1), window).step.kind).toBe("cut");
  });

  it("leaves out the worst keys only: a slow client beyond them is judged with the fast ones", () => {
    // Five keys with many slow answers, a sixth with one slow answer in 10, and 90 fast answers of others.
    const worst = [...keys(5, 10, 10), ["k5", 10, 1, 0] as KeyCounts];
    const window = counts({ forwarded: 160, answered: 160, slow: 51, worst });
    const health = judge(window, target, CONTROLLER_PARAMS.z, CONTROLLER_PARAMS.leaveOut);
    expect(health).toMatchObject({ answered: 110, leftOut: 5 });
    expect(health.slowShare).toBeCloseTo(1 / 110, 12);
  });

  it("counts a client gone before its answer as neither success nor failure", () => {
    // 100 forwarded, 40 of whose clients hung up early: the origin answered the other 60, fast. No breach,
    // and it kept up with all it was left to answer.
    const window = counts({ forwarded: 100, answered: 60, gone: 40 });
    const health = judge(window, target, CONTROLLER_PARAMS.z, CONTROLLER_PARAMS.leaveOut);
    expect(health).toMatchObject({ answered: 60, breached: false, keepingUp: 1 });
    expect(decide(at(0.5), window).step.kind).toBe("raise");
  });

  it("counts a client gone after the origin kept it past the target as slow: a hung origin is still seen", () => {
    // Nothing answered: every client gave up after waiting past the target.
    const window = counts({ forwarded: 30, answered: 30, slow: 30, gone: 30, goneSlow: 30 });
    const health = judge(window, target, CONTROLLER_PARAMS.z, CONTROLLER_PARAMS.leaveOut);
    // It kept up with none of them: the deepest cut.
    expect(health).toMatchObject({ answered: 30, breached: true, keepingUp: 0 });
    expect(decide(at(1), window)).toMatchObject({ step: { kind: "cut" }, state: { factor: 0.5 } });
    // As before clients' hang-ups were told apart: a request given up after the target is not one kept up with.
    const mixed = counts({ forwarded: 100, answered: 80, slow: 30, gone: 30, goneSlow: 10 });
    expect(judge(mixed, target, CONTROLLER_PARAMS.z, CONTROLLER_PARAMS.leaveOut).keepingUp).toBeCloseTo(70 / 80, 12);
  });

  it("judges nothing before 500 ms of reports, nor on fewer than 20 answers", () => {
    const slow = counts({ forwarded: 50, answered: 50, slow: 50 });
    const early = observe(at(1), slow, 7, T0, target);
    expect(early.step.kind).toBe("gathering");
    expect(observe(early.state, counts({}), 7, T0 + 499, target).step.kind).toBe("gathering");
    const few = decide(at(1), counts({ forwarded: 19, answered: 19, slow: 19 }));
    expect(few.step.kind).toBe("gathering");
    expect(few.state.factor).toBe(1);
  });

  it("drops counts that stayed too few for 10 s, and keeps the factor", () => {
    const first = observe(at(0.5), counts({ answered: 5, slow: 5 }), 7, T0, target);
    const dropped = observe(first.state, counts({ answered: 5, slow: 5 }), 7, T0 + 10_000, target);
    expect(dropped.step).toEqual({ kind: "dropped", answered: 10 });
    expect(dropped.state.factor).toBe(0.5);
    expect(dropped.state.windowStartMs).toBeNull();
  });

  it("ignores a report gathered under another version: it says nothing about the current factor", () => {
    const state = at(0.5);
    for (const version of [6, 8]) {
      const { state: after, step } = observe(
        state,
        counts({ forwarded: 300, answered: 100, slow: 100 }),
        version,
        T0,
        target,
      );
      expect(step.kind).toBe("ignored");
      expect(after).toEqual(state);
    }
  });

  it("names its mode by its last change: reducing after a cut, recovering after a raise, full at 1", () => {
    const cut = decide(at(1), counts({ forwarded: 300, answered: 100, slow: 100, shed: 1 })).state;
    expect(cut.mode).toBe("reducing");
    const raised = decide(cut, healthy({ shed: 5 })).state;
    expect(raised.mode).toBe("recovering");
    let state = raised;
    while (state.factor < 1) state = decide(state, healthy()).state;
    expect(state.mode).toBe("full");
  });

  it("lifts a factor below a floor raised since, as a change of its own", () => {
    const { state, step } = observe(at(0.01), healthy(), 7, T0, { ...target, minFactor: 0.2 });
    expect(state.factor).toBe(0.2);
    expect(state.version).toBe(8);
    expect(step.kind).toBe("ignored");
  });

  it("asks isolates to report every second at the configured limit, every 250 ms while reduced", () => {
    expect(reportEveryMs(at(1))).toBe(1_000);
    expect(reportEveryMs(at(0.5))).toBe(250);
    expect(reportEveryMs(at(0.5, { mode: "recovering" }))).toBe(250);
  });

  it("lets an isolate report early on its own counts only with 10 answers breaching beyond chance", () => {
    expect(urgent(counts({ answered: 9, slow: 9 }), target)).toBe(false);
    expect(urgent(counts({ answered: 10, slow: 10 }), target)).toBe(true);
    expect(urgent(counts({ answered: 10, errors: 1 }), target)).toBe(false);
    expect(urgent(counts({ answered: 10, errors: 3 }), target)).toBe(true);
  });
});

describe("a breach beyond chance", () => {
  it.each([
    [100, 1, false],
    [100, 2, false],
    [100, 3, true],
    [1000, 16, false],
    [1000, 17, true],
    [20, 1, false],
    [20, 2, true],
  ])("with p99: %d answers, %d slow → breached %s", (answered, slow, breached) => {
    expect(judge(counts({ answered, slow }), target, 2).breached).toBe(breached);
  });
});

describe("the limit a factor gives", () => {
  it.each([
    [100, 1, 100],
    [100, 0.55, 55],
    [100, 0.999, 99],
    [3, 0.1, 1],
    [1000, 0.1, 100],
  ])("%d × %d → %d", (limit, factor, scaled) => {
    expect(scaledLimit(limit, factor)).toBe(scaled);
  });

  it("never goes below the floor when the factor is floor ÷ limit", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 1_000_000_000 }), fc.integer({ min: 1, max: 1_000_000_000 }), (a, b) => {
        const [floor, limit] = a <= b ? [a, b] : [b, a];
        expect(scaledLimit(limit, floor / limit)).toBeGreaterThanOrEqual(floor);
      }),
    );
  });
});

/** One arbitrary report: its counts as shares, how long after the last, and whether under an old version. */
type Report = {
  forwarded: number;
  answered: number;
  slowShare: number;
  errorShare: number;
  shed: number;
  peak: number;
  afterMs: number;
  stale: boolean;
};

describe("any sequence of reports", () => {
  const report: fc.Arbitrary<Report> = fc.record({
    forwarded: fc.nat(500),
    answered: fc.nat(500),
    slowShare: fc.double({ min: 0, max: 1, noNaN: true }),
    errorShare: fc.double({ min: 0, max: 1, noNaN: true }),
    shed: fc.nat(50),
    peak: fc.double({ min: 0, max: 2, noNaN: true }),
    afterMs: fc.integer({ min: 0, max: 3_000 }),
    stale: fc.boolean(),
  });
  const run = (
    reports: Report[],
    minFactor: number,
    check: (
      before: ControllerState,
      after: ControllerState,
      step: ReturnType<typeof observe>["step"],
      window: HealthCounts,
    ) => void,
  ) => {
    const t = { ...target, minFactor };
    let state = initialState();
    let nowMs = T0;
    for (const r of reports) {
      nowMs += r.afterMs;
      const c = counts({
        forwarded: r.forwarded,
        answered: r.answered,
        slow: Math.floor(r.answered * r.slowShare),
        errors: Math.floor(r.answered * r.errorShare),
        shed: r.shed,
        peak: r.peak,
      });
      const windowBefore = state.window;
      const { state: after, step } = observe(state, c, r.stale ? state.version - 1 : state.version, nowMs, t);
      check(state, after, step, { ...windowBefore, ...c });
      state = after;
    }
  };

  it("keeps the factor within [floor ÷ limit, 1], and counts every change in the version", () => {
    fc.assert(
      fc.property(
        fc.array(report, { maxLength: 60 }),
        fc.double({ min: 0.001, max: 1, noNaN: true }),
        (reports, minFactor) =>
          run(reports, minFactor, (before, after) => {
            expect(after.factor).toBeGreaterThanOrEqual(minFactor);
            expect(after.factor).toBeLessThanOrEqual(1);
            if (after.factor !== before.factor) expect(after.version).toBe(before.version + 1);
            else expect(after.version).toBe(before.version);
          }),
      ),
    );
  });

  it("never raises on a breach, never cuts within the target, and never moves on what it does not judge", () => {
    fc.assert(
      fc.property(fc.array(report, { maxLength: 60 }), (reports) =>
        run(reports, 0.01, (before, after, step) => {
          if (step.kind === "ignored" || step.kind === "gathering" || step.kind === "dropped") {
            expect(after.factor).toBe(before.factor);
            return;
          }
          if (step.health.breached) expect(after.factor).toBeLessThanOrEqual(before.factor);
          if (step.health.withinTarget) expect(after.factor).toBeGreaterThanOrEqual(before.factor);
          if (after.factor < before.factor)
            expect(after.factor).toBeGreaterThanOrEqual(
              before.factor * 0.5 * Math.min(1, step.health.peak || 1) - 1e-12,
            );
        }),
      ),
    );
  });
});
