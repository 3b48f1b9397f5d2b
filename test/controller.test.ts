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
  type ControllerParams,
  type ControllerState,
  type ControlTarget,
  initialState,
  judge,
  lateMsOf,
  observe,
  reportEveryMs,
  scaledLimit,
  urgent,
  withoutFew,
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

/**
 * Two reports under the state's version, 500 ms apart: the first opens the window, the second closes it. At
 * the configured limit, a first report that shows trouble clearly is judged at once (the onset): that step.
 */
function decide(state: ControllerState, first: HealthCounts, second = counts({})) {
  const opened = observe(state, first, state.version, T0, target);
  if (opened.step.kind !== "gathering") return opened;
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
      "slow beyond chance, the origin answering 60 of 100 sent: to 0.6 of it",
      0.5,
      counts({ forwarded: 100, answered: 60, slow: 60, shed: 5 }),
      "cut",
      0.5 * 0.6,
    ],
    [
      "failing fast: 40 of 100 answers are 503s, cut to what the origin kept up with",
      0.8,
      counts({ forwarded: 100, answered: 100, errors: 40, shed: 1 }),
      "cut",
      0.8 * 0.6,
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
    Array.from({ length: n }, (_, i): KeyCounts => [`${tag}${i}`, answered, slow, 0, 0, 0, 0, 0]);

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

  it("judges the window whole when the worst leave fewer than 5 answers: their luckier answers, named in no report, are not the origin's health", () => {
    // Five clients failing 9 answers in 10, each one that may be left out; 4 of their good answers were never named.
    const failing = Array.from({ length: 5 }, (_, i): KeyCounts => [`k${i}`, 8, 0, 8, 0, 0, 0, 0]);
    const window = counts({ forwarded: 44, answered: 44, errors: 40, worst: failing });
    expect(judge(window, target)).toMatchObject({ answered: 44, leftOut: 0, failing: true });
    // With 5 answers of other clients beyond them, the five are left out, and the rest is judged.
    const more = counts({ forwarded: 45, answered: 45, errors: 40, worst: failing });
    expect(judge(more, target)).toMatchObject({ answered: 5, leftOut: 5, failing: false });
  });

  it("leaves out the worst keys only: a slow client beyond them is judged with the fast ones", () => {
    // Five keys with many slow answers, a sixth with one slow answer in 10, and 90 fast answers of others.
    const worst = [...keys(5, 10, 10), ["k5", 10, 1, 0, 0, 0, 0, 0] as KeyCounts];
    const window = counts({ forwarded: 160, answered: 160, slow: 51, worst });
    const health = judge(window, target);
    expect(health).toMatchObject({ answered: 110, leftOut: 5 });
    expect(health.slowShare).toBeCloseTo(1 / 110, 12);
  });

  /**
   * `slowKeys` clients whose 4 answers each took 2 s (slow, late, mostly bad), beside `fastKeys` clients with 6
   * answers each in `fastMs`, as an isolate that counts its clients reports them: the worst keys (16 at most), the
   * clients, and the mostly-bad keys with their counts added up.
   */
  const slowEndpoint = (slowKeys: number, fastKeys: number, fastMs = 50): HealthCounts => {
    const slow = slowKeys * 4;
    const fast = fastKeys * 6;
    return counts({
      forwarded: slow + fast,
      answered: slow + fast,
      slow,
      late: slow,
      busyMs: slow * 400 + fast * fastMs, // each slow answer counts at most four times the 100 ms target
      busySq: slow * 400 ** 2 + fast * fastMs ** 2,
      worst: Array.from(
        { length: Math.min(16, slowKeys) },
        (_, i): KeyCounts => [`s${i}`, 4, 4, 0, 4, 1600, 0, 4 * 400 ** 2],
      ),
      clients: slowKeys + fastKeys,
      troubled: {
        keys: slowKeys,
        answered: slow,
        slow,
        errors: 0,
        late: slow,
        busyMs: slow * 400,
        stuck: 0,
        busySq: slow * 400 ** 2,
      },
    });
  };

  it.each([
    ["six clients of twenty", 6, 14, "raise"],
    ["nine of twenty", 9, 11, "raise"],
    ["twenty of sixty, more than a report names", 20, 40, "raise"],
    ["ten of twenty: not fewer than half", 10, 10, "cut"],
    ["fifteen of twenty", 15, 5, "cut"],
  ] as const)(
    "judges without the clients whose answers were mostly slow while they are fewer than half of them: %s (%i slow, %i fast) is a %s",
    (_, slowKeys, fastKeys, kind) => {
      const { step } = decide(at(0.5, { calm: calm(50) }), slowEndpoint(slowKeys, fastKeys));
      expect(step.kind).toBe(kind);
      if (kind === "raise") expect(step).toMatchObject({ health: { leftOut: slowKeys, slowShare: 0, queue: false } });
    },
  );

  it("judges with them when the others slowed too: a queue slows every client", () => {
    // The fourteen others' answers at 75 ms against a calm of 50: over 1.4 × calm, a queue.
    expect(decide(at(0.5, { calm: calm(50) }), slowEndpoint(6, 14, 75)).step.kind).toBe("cut");
    // At 65 ms, within it (a host's noise, or a queue only forming): the six are left out, and the others judged.
    expect(decide(at(0.5, { calm: calm(50) }), slowEndpoint(6, 14, 55)).step.kind).toBe("raise");
    expect(decide(at(0.5, { calm: calm(50) }), slowEndpoint(6, 14, 65)).step.kind).toBe("hold");
  });

  it.each([
    [9, 5],
    [10, 22],
  ])(
    "leaves out the troubled clients only where the others' answers can show they did not slow: with %i of them, %i keys left out",
    (othersAnswered, leftOut) => {
      // 22 keys of 50 clients whose 3 answers each were slow (a standing queue, found by every client it answered),
      // and the others' few answers fast: too few to say the others were not slowed too (a mean needs 10), the
      // window is judged without the 5 worst only, as for a queue (found in the spike of 12 × C at C = 50/s: 22
      // keys left out of a queue, the rest too thin for a mean, cut the limit to its floor where it held).
      const troubled = { keys: 22, answered: 66, slow: 66, errors: 0, late: 0, busyMs: 66 * 400, stuck: 0, busySq: 0 };
      const window = counts({
        forwarded: 66 + othersAnswered,
        answered: 66 + othersAnswered,
        slow: 66,
        busyMs: 66 * 400 + othersAnswered * 50,
        worst: Array.from({ length: 16 }, (_, i): KeyCounts => [`k${i}`, 3, 3, 0, 0, 1_200, 0, 0]),
        clients: 50,
        troubled,
      });
      expect(withoutFew(window, CONTROLLER_PARAMS, 50).leftOut).toBe(leftOut);
    },
  );

  it("judges a lone client whole, and a report without the clients counted as before", () => {
    const lone = counts({
      forwarded: 40,
      answered: 40,
      slow: 40,
      worst: [["a", 40, 40, 0, 0, 0, 0, 0]],
      clients: 1,
      troubled: { keys: 1, answered: 40, slow: 40, errors: 0, late: 0, busyMs: 0, stuck: 0, busySq: 0 },
    });
    expect(decide(at(1), lone).step.kind).toBe("cut");
    const { clients: _, troubled: __, ...unCounted } = slowEndpoint(6, 14);
    expect(decide(at(0.5, { calm: calm(50) }), unCounted).step.kind).toBe("cut");
  });

  it("counts a client gone before its answer as neither success nor failure", () => {
    // 100 forwarded, 40 of whose clients hung up early: the origin answered the other 60, fast. No breach,
    // and it kept up with all it was left to answer.
    const window = counts({ forwarded: 100, answered: 60, gone: 40 });
    const health = judge(window, target);
    expect(health).toMatchObject({ answered: 60, breached: false, keepingUp: 1 });
    expect(decide(at(0.5), window).step.kind).toBe("raise");
  });

  it("counts a client gone after the origin kept it past the target as slow: a hung origin is still seen", () => {
    // Nothing answered: every client gave up after waiting past the target.
    const window = counts({ forwarded: 30, answered: 30, slow: 30, gone: 30, goneSlow: 30 });
    const health = judge(window, target);
    // It kept up with none of them: the deepest cut.
    expect(health).toMatchObject({ answered: 30, breached: true, keepingUp: 0 });
    expect(decide(at(1), window)).toMatchObject({ step: { kind: "cut" }, state: { factor: 0.5 } });
    // As before clients' hang-ups were told apart: a request given up after the target is not one kept up with.
    const mixed = counts({ forwarded: 100, answered: 80, slow: 30, gone: 30, goneSlow: 10 });
    expect(judge(mixed, target).keepingUp).toBeCloseTo(70 / 80, 12);
  });

  it("judges nothing before 500 ms of reports while the limit is reduced, nor on fewer than 20 answers", () => {
    const slow = counts({ forwarded: 50, answered: 50, slow: 50, shed: 5 });
    const early = observe(at(0.5), slow, 7, T0, target);
    expect(early.step.kind).toBe("gathering");
    expect(observe(early.state, counts({}), 7, T0 + 499, target).step.kind).toBe("gathering");
    expect(observe(early.state, counts({}), 7, T0 + 500, target).step.kind).toBe("cut");
    const few = decide(at(1), counts({ forwarded: 19, answered: 19, slow: 19 }));
    expect(few.step.kind).toBe("gathering");
    expect(few.state.factor).toBe(1);
  });

  it("judges the onset at once: at the configured limit, settled, a window that shows trouble clearly is not kept waiting", () => {
    const slow = counts({ forwarded: 50, answered: 50, slow: 50 });
    expect(observe(at(1), slow, 7, T0, target).step.kind).toBe("cut");
    // Nothing wrong in it: it gathers on for 500 ms, as before.
    expect(observe(at(1), healthy(), 7, T0, target).step.kind).toBe("gathering");
    // Within a second of the last change, the change is judged by a whole window first.
    const justRaised = at(1, { changedAtMs: T0 - 999 });
    expect(observe(justRaised, slow, 7, T0, target).step.kind).toBe("gathering");
    expect(observe(at(1, { changedAtMs: T0 - 1_000 }), slow, 7, T0, target).step.kind).toBe("cut");
  });

  it("drops counts that stayed too few for 10 s, and keeps the factor", () => {
    const first = observe(at(0.5), counts({ answered: 5, slow: 5 }), 7, T0, target);
    const dropped = observe(first.state, counts({ answered: 5, slow: 5 }), 7, T0 + 10_000, target);
    expect(dropped.step).toEqual({ kind: "dropped", answered: 10 });
    expect(dropped.state.factor).toBe(0.5);
    expect(dropped.state.windowStartMs).toBeNull();
  });

  it.each([
    ["nothing forwarded, 40 refused by the reduction: doubled", counts({ shed: 40 }), "raise", 0.1],
    [
      "5 healthy answers, 40 refused: a probe of a tenth",
      counts({ forwarded: 5, answered: 5, shed: 40 }),
      "raise",
      0.055,
    ],
    ["5 answers, 1 slow: gathered on", counts({ forwarded: 5, answered: 5, slow: 1, shed: 40 }), "gathering", 0.05],
    ["5 answers, 1 failed: gathered on", counts({ forwarded: 5, answered: 5, errors: 1, shed: 40 }), "gathering", 0.05],
    ["1 request late in flight: gathered on", counts({ forwarded: 1, stuck: 1, shed: 40 }), "gathering", 0.05],
    ["a client gone after a slow wait: gathered on", counts({ gone: 1, goneSlow: 1, shed: 40 }), "gathering", 0.05],
    ["only 10 refused: too few to say, gathered on", counts({ shed: 10 }), "gathering", 0.05],
  ] as const)(
    "a window with too few answers because the reduction refuses nearly everyone: %s",
    (_, window, kind, to) => {
      const { state, step } = decide(at(0.05, { calm: calm(50) }), window);
      expect(step.kind).toBe(kind);
      expect(state.factor).toBeCloseTo(to, 12);
      if (kind === "raise") expect(state).toMatchObject({ mode: "recovering", version: 8, trying: null });
    },
  );

  it("takes slow answers in such a window for nothing once the origin is known slower than the target when calm", () => {
    const slowButCalm = counts({ forwarded: 5, answered: 5, slow: 5, shed: 40 });
    expect(decide(at(0.05, { calm: calm(150), drift: true }), slowButCalm).step.kind).toBe("raise");
    expect(decide(at(0.05, { calm: calm(150) }), slowButCalm).step.kind).toBe("gathering");
  });

  it("drops a thin window after 2 s while the reduction refuses plenty, so that a few answers from before do not hold the limit down", () => {
    // 3 slow answers to requests forwarded before the cut, then only refusals: too few to judge, never starved.
    let state = at(0.05, { calm: calm(50) });
    const steps: string[] = [];
    const reports = [
      counts({ answered: 3, slow: 3, shed: 30 }),
      ...Array.from({ length: 12 }, () => counts({ shed: 30 })),
    ];
    reports.forEach((report, i) => {
      const seen = observe(state, report, state.version, T0 + i * 250, target);
      steps.push(seen.step.kind);
      state = seen.state;
    });
    // Gathered for 2 s, dropped, then a clean window of 500 ms: doubled.
    expect(steps.slice(0, 10)).toEqual([...Array(8).fill("gathering"), "dropped", "gathering"]);
    expect(steps.slice(10)).toEqual(["gathering", "raise", "gathering"]);
    expect(state.factor).toBeCloseTo(0.1, 12);
    // Not a window in which requests were sent since it began: their answers come in, from other isolates too, while
    // one isolate reports only refusals. (An isolate's report of refusals alone used to drop it, over and over.) One
    // slow answer keeps it from being starved: it is judged once 20 answers are in.
    let slow = at(0.05, { calm: calm(50) });
    const kinds: string[] = [];
    for (let i = 0; i < 16; i++) {
      const answers = counts({ forwarded: 3, answered: 3, slow: i === 0 ? 1 : 0, busyMs: 150, shed: 10 });
      const report = i % 2 === 0 ? answers : counts({ shed: 30 });
      const seen = observe(slow, report, slow.version, T0 + i * 250, target);
      kinds.push(seen.step.kind);
      slow = seen.state;
    }
    expect(kinds).not.toContain("dropped");
    // Judged (over the target within chance: held); then a clean window, starved: raised.
    expect(kinds.filter((kind) => kind !== "gathering")).toEqual(["hold", "raise"]);
    // Without refusals to fill the next window soon, a thin window waits the 10 s as before.
    const quiet = observe(at(0.05), counts({ answered: 3, slow: 3 }), 7, T0, target).state;
    expect(observe(quiet, counts({ answered: 1 }), 7, T0 + 2_000, target).step.kind).toBe("gathering");
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

/** A calm latency of `ms`, measured in the current period. */
const calm = (ms: number) => ({ ms, periodStartMs: T0 - 1_000, previousMs: null, currentMs: ms });

/** `n` successful answers whose mean latency is `meanMs`, to `n` requests forwarded, under the reduction (`shed`). */
const answers = (n: number, meanMs: number, over: Partial<HealthCounts> = {}) =>
  counts({ forwarded: n, answered: n, busyMs: n * meanMs, shed: 5, ...over });

describe("a queue at the origin, seen before its answers breach the target", () => {
  it("measures the origin's calm latency: the lowest mean of a window without a queue", () => {
    let state = at(0.5);
    for (const [i, meanMs] of [80, 50, 60, 200].entries()) {
      state = observe(state, answers(100, meanMs), state.version, T0 + i * 1_000, target).state;
      state = observe(state, counts({}), state.version, T0 + i * 1_000 + 500, target).state;
    }
    // 200 ms was a queue against 50: not a calm window.
    expect(state.calm.ms).toBe(50);
  });

  it.each([
    ["at its calm latency: raised by 15 %", 50, 100, "raise", 0.5 * 1.15],
    ["a tenth over it: raised by half as much, the room before a queue forms halved", 55, 100, "raise", 0.5 * 1.075],
    ["over 1.2 × calm: a queue forming, held", 65, 100, "hold", 0.5],
    [
      "over 1.4 × calm: a queue, cut to what the origin kept up with, less what drains it in 2 s",
      80,
      90,
      "cut",
      0.5 * 0.9 * (1 - 30 / 2_000),
    ],
    ["over 1.4 × calm, the origin keeping up: cut by 5 % at least", 80, 100, "cut", 0.5 * 0.95],
    ["over 1.4 × calm, but its backlog draining on its own: held", 80, 106, "hold", 0.5],
  ] as const)("with the origin's calm latency 50 ms, a window's mean %s", (_, meanMs, answered, kind, to) => {
    // 100 requests sent, `answered` of them answered: what the origin kept up with.
    const window = answers(answered, meanMs, { forwarded: 100 });
    const { state, step } = decide(at(0.5, { calm: calm(50) }), window);
    expect(step.kind).toBe(kind);
    expect(state.factor).toBeCloseTo(to, 12);
    if (step.kind !== "hold" || kind === "hold") expect(step).toMatchObject({ health: { gradient: meanMs / 50 } });
  });

  it("raises by 2 % near the level where the last queue formed, unless the mean is within 5 % of calm", () => {
    const near = at(0.49, { calm: calm(50), troubleAt: 0.5 });
    expect(decide(near, answers(100, 55)).state.factor).toBeCloseTo(0.49 * 1.02, 12);
    expect(decide(near, answers(100, 50)).state.factor).toBeCloseTo(0.49 * 1.15, 12);
    // Far from it (a fifth below): in proportion to the room, as anywhere.
    expect(decide(at(0.4, { calm: calm(50), troubleAt: 0.5 }), answers(100, 55)).state.factor).toBeCloseTo(
      0.4 * 1.075,
      12,
    );
  });

  it("takes requests found still in flight past the late mark as a queue, before any answer says so", () => {
    // 30 answers at the calm latency, and 30 requests in flight for more than 3 × calm: half of them late.
    const window = answers(30, 50, { forwarded: 60, stuck: 30 });
    const { step, state } = decide(at(0.5, { calm: calm(50) }), window);
    expect(step).toMatchObject({ kind: "cut", health: { lateShare: 0.5, queue: true } });
    expect(state.factor).toBeCloseTo(0.25, 12);
    // Late answers alone, as many: the same.
    expect(decide(at(0.5, { calm: calm(50) }), answers(60, 50, { late: 30 })).step).toMatchObject({ kind: "cut" });
  });

  it("leaves out the late answers, busy time and late requests of the five worst clients: a few clients do not make a queue", () => {
    // Each of `n` clients: 10 answers of 2 s (late, busy) and 10 requests found late; the rest, 100 fast answers.
    const slowClients = (n: number) =>
      answers(100 + 10 * n, 50, {
        forwarded: 100 + 20 * n,
        busyMs: 100 * 50 + 10 * n * 2_000,
        late: 10 * n,
        stuck: 10 * n,
        worst: Array.from({ length: n }, (_, i): KeyCounts => [`k${i}`, 10, 0, 0, 10, 20_000, 10, 10 * 2_000 ** 2]),
      });
    expect(decide(at(0.5, { calm: calm(50) }), slowClients(5)).step).toMatchObject({ kind: "raise" });
    expect(decide(at(0.5, { calm: calm(50) }), slowClients(6)).step).toMatchObject({ kind: "cut" });
  });

  it("counts late answers only against the late mark they were counted with: counted against another, they say nothing", () => {
    const state = at(0.5, { calm: calm(50) }); // the late mark: 150 ms
    const late = answers(60, 50, { late: 30 });
    const first = (lateMs: number | null) => observe(state, late, state.version, T0, target, CONTROLLER_PARAMS, lateMs);
    expect(observe(first(150).state, counts({}), state.version, T0 + 500, target).step.kind).toBe("cut");
    for (const other of [60, null]) {
      expect(observe(first(other).state, counts({}), state.version, T0 + 500, target).step.kind).toBe("raise");
    }
  });

  it("takes a calm latency under 25 ms as 25: a fast origin's jitter, or a busy host's, is not a queue", () => {
    for (const meanMs of [1, 5, 11, 25, 28]) {
      expect(decide(at(0.5, { calm: calm(1) }), answers(100, meanMs)).step.kind).toBe("raise");
    }
    expect(decide(at(0.5, { calm: calm(1) }), answers(100, 37)).step.kind).toBe("cut");
    expect(lateMsOf(at(1, { calm: calm(1) }))).toBe(75);
    expect(lateMsOf(at(1))).toBeNull();
    // No calm latency yet (a new controller, or one reloaded): the rule's latency target is the mark.
    expect(lateMsOf(at(1), CONTROLLER_PARAMS, 100)).toBe(100);
    expect(lateMsOf(at(1, { calm: calm(50) }), CONTROLLER_PARAMS, 100)).toBe(150);
  });
});

/**
 * Windows judged one after another, a report every `everyMs` (1 s unless given), each followed 500 ms later by an
 * empty one that closes its window (as isolates report while the factor stands): the states and steps after each,
 * and when each was judged.
 */
function judged(
  reports: HealthCounts[],
  from: ControllerState,
  {
    params = {},
    everyMs = 1_000,
    against = target,
  }: {
    params?: Partial<ControllerParams>;
    everyMs?: number;
    against?: ControlTarget;
  } = {},
) {
  const all = { ...CONTROLLER_PARAMS, ...params };
  let state = from;
  const seen: { state: ControllerState; step: ReturnType<typeof observe>["step"]; atMs: number }[] = [];
  reports.forEach((report, i) => {
    const atMs = T0 + i * everyMs;
    const opened = observe(state, report, state.version, atMs, against, all);
    const gathering = opened.step.kind === "gathering";
    const judgedAt = gathering ? atMs + 500 : atMs;
    const { state: next, step } = gathering
      ? observe(opened.state, counts({}), state.version, judgedAt, against, all)
      : opened;
    state = { ...next, windowStartMs: null };
    seen.push({ state, step, atMs: judgedAt });
  });
  return seen;
}

describe("an origin slower than the target while nothing queues (a baseline drift)", () => {
  /** Every answer slower than the 120 ms target (p99), none failing: the window's counts, its mean `meanMs`. */
  const slowAnswers = (meanMs: number, over: Partial<HealthCounts> = {}) =>
    answers(100, meanMs, { slow: 100, ...over });

  /** Windows every 500 ms from a calm of 50 ms at the configured limit: the states and steps after each, and when each was judged. */
  const run = (reports: HealthCounts[], from = at(1, { calm: calm(50), mode: "full" })) =>
    judged(reports, from, { everyMs: 500 });

  it("cuts for 10 s, and when that did not make it faster while it kept up, measures its calm latency again and says so", () => {
    const seen = run(Array.from({ length: 30 }, () => slowAnswers(200)));
    const kinds = seen.map((s) => s.step.kind);
    // Two cuts; then, as they did not help while it kept up, no more, until 10 s of it. The window that measures
    // the calm latency again decides nothing.
    const againAt = seen.findIndex((s) => s.state.drift);
    expect(seen[againAt]!.atMs - seen[0]!.atMs).toBeGreaterThanOrEqual(10_000);
    expect(kinds.slice(0, againAt + 1)).toEqual(["cut", "cut", ...Array(againAt - 1).fill("hold")]);
    expect(seen[againAt]!.state.calm.ms).toBe(200);
    // Slow answers no longer cut: with no queue against the new calm latency, the limit comes back.
    expect(kinds.slice(againAt + 1).every((k) => k === "raise" || k === "hold")).toBe(true);
    expect(seen.at(-1)!.state.factor).toBeGreaterThan(seen[againAt]!.state.factor);
    expect(seen.at(-1)!.state.drift).toBe(true);
  });

  it("counts windows in which nothing new was sent (answers of requests sent before) as the origin keeping up", () => {
    // Slow answers, the origin sent nothing new over the cuts: nothing grows or drains, as with answers to what it was sent.
    const seen = run(Array.from({ length: 30 }, () => slowAnswers(200, { forwarded: 0 })));
    expect(seen.some((s) => s.state.drift)).toBe(true);
  });

  it("still cuts on errors, and on a queue against the new calm latency; and the drift ends when the target is met", () => {
    const drifted = run(Array.from({ length: 30 }, () => slowAnswers(200))).at(-1)!.state;
    expect(drifted.drift).toBe(true);
    expect(run([slowAnswers(200, { errors: 40 })], drifted)[0]!.step.kind).toBe("cut");
    expect(run([slowAnswers(400)], drifted)[0]!.step).toMatchObject({ kind: "cut", health: { queue: true } });
    const met = run([answers(100, 60)], drifted)[0]!;
    expect(met.state.drift).toBe(false);
    expect(met.state.calm.ms).toBe(60);
  });

  it.each([
    [
      "a queue that grows: the origin answering a tenth less than it is sent, the mean rising",
      (i: number) => slowAnswers(200 * 1.05 ** i, { forwarded: 111 }),
    ],
    [
      "an origin that does not keep up: a fifth of what it is sent unanswered",
      () => slowAnswers(200, { forwarded: 125 }),
    ],
    ["an origin that fails", () => slowAnswers(200, { errors: 20 })],
  ])("is never said of %s: the cuts go on", (_, report) => {
    const seen = run(Array.from({ length: 40 }, (_, i) => report(i)));
    expect(seen.some((s) => s.state.drift)).toBe(false);
    expect(seen.filter((s) => s.step.kind === "cut").length).toBeGreaterThan(2);
  });

  it("cuts an origin slow from its first request as before, until cuts are shown not to help", () => {
    // No calm latency known yet: the first windows measure it at 200 ms, and it is over the 120 ms target.
    const seen = run(
      Array.from({ length: 6 }, () => slowAnswers(200)),
      at(1, { mode: "full" }),
    );
    expect(seen[0]!.step.kind).toBe("cut");
    expect(seen.some((s) => s.state.drift)).toBe(false);
  });

  it("tells isolates: slow answers alone are not urgent while the origin drifts, errors and queues are", () => {
    expect(urgent(slowAnswers(200), target)).toBe(true);
    expect(urgent(slowAnswers(200), target, CONTROLLER_PARAMS, true)).toBe(false);
    expect(urgent(slowAnswers(200, { errors: 20 }), target, CONTROLLER_PARAMS, true)).toBe(true);
    expect(urgent(slowAnswers(200, { stuck: 50 }), target, CONTROLLER_PARAMS, true)).toBe(true);
  });
});

/**
 * A queue (300 ms against a calm 50 ms) at 0.4, the origin answering a quarter more than it is sent: its backlog
 * drains at 0.4, so the limit holds there. Then the origin answers a little less than it is sent: two cuts drain the
 * rest, deeper than 0.4 needed. Then the queue is gone.
 */
const drained = [
  answers(100, 300, { forwarded: 80 }),
  answers(100, 300, { forwarded: 105 }),
  answers(100, 300, { forwarded: 105 }),
  answers(100, 50),
];

describe("once a queue has drained: back to what the origin kept up with while it stood", () => {
  it("raises at once to 0.9 × the highest factor at which the origin kept up, not by 15 % from the cuts", () => {
    const seen = judged(drained, at(0.4, { calm: calm(50) }));
    expect(seen.map((s) => s.step.kind)).toEqual(["hold", "cut", "cut", "raise"]);
    expect(seen[0]!.state.keptUpAt).toBe(0.4);
    expect(seen[2]!.state.factor).toBeLessThan(0.3);
    expect(seen[3]!.state.factor).toBeCloseTo(0.36, 9);
    // The level is used once: the next raise is by the room left, as before.
    expect(seen[3]!.state.keptUpAt).toBeNull();
    // Without it (resumeAt 0), the limit climbs from the cuts by 15 % a window.
    const without = judged(drained, at(0.4, { calm: calm(50) }), { params: { resumeAt: 0 } });
    expect(without[3]!.state.factor).toBeCloseTo(without[2]!.state.factor * 1.15, 9);
  });

  it("forgets it when the origin then falls behind beyond chance (less capacity than it had): no jump back", () => {
    const fell = [drained[0]!, answers(100, 300, { forwarded: 150 }), drained[2]!, drained[3]!];
    const seen = judged(fell, at(0.4, { calm: calm(50) }));
    expect(seen[1]!.state.keptUpAt).toBeNull();
    expect(seen[3]!.step.kind).toBe("raise");
    expect(seen[3]!.state.factor).toBeCloseTo(seen[2]!.state.factor * 1.15, 9);
  });

  it("is not learned from a window that only kept up within chance, nor without a queue", () => {
    // 100 answered of 95 sent is within a standard deviation of keeping up: a standing queue, not a draining one.
    const standing = judged([answers(100, 300, { forwarded: 95 })], at(0.4, { calm: calm(50) }));
    expect(standing[0]!.state.keptUpAt ?? null).toBeNull();
    const calmWindow = judged([answers(100, 50, { forwarded: 80 })], at(0.4, { calm: calm(50) }));
    expect(calmWindow[0]!.state.keptUpAt ?? null).toBeNull();
  });
});

describe("once a queue has drained but the mean still says one stands, nothing late", () => {
  // As above: a queue at 0.4 the origin drained there, then cuts deeper. Then the backlog is gone: nothing late
  // (over three times the calm), but the mean is `meanMs`, over 1.4 × the calm 50 ms: a queue, by the mean alone.
  const drainedThen = (meanMs: number) => [...drained.slice(0, 3), answers(100, meanMs, { forwarded: 100 })];

  it("goes back to the level at once, and at 1.8 × the calm latency or more measures the calm latency again", () => {
    const seen = judged(drainedThen(100), at(0.4, { calm: calm(50) }));
    expect(seen[3]!.step.kind).toBe("raise");
    expect(seen[3]!.state.factor).toBeCloseTo(0.36, 9);
    expect(seen[3]!.state.calm.ms).toBe(100);
    // Against the new calm latency the next window is healthy, and the level was used: a raise by the room left.
    const next = judged([answers(100, 100)], seen[3]!.state);
    expect(next[0]!.step.kind).toBe("raise");
    expect(next[0]!.state.factor).toBeCloseTo(0.36 * 1.15, 9);
  });

  it("under 1.8 × the calm latency goes back to the level and keeps the calm latency (a small queue the level drains)", () => {
    const seen = judged(drainedThen(80), at(0.4, { calm: calm(50) }));
    expect(seen[3]!.step.kind).toBe("raise");
    expect(seen[3]!.state.factor).toBeCloseTo(0.36, 9);
    expect(seen[3]!.state.calm.ms).toBe(50);
  });

  it("cuts as before while answers are late, or from 2.5 × the calm latency: a queue still stands", () => {
    const late = judged([...drained.slice(0, 3), answers(100, 100, { late: 30 })], at(0.4, { calm: calm(50) }));
    expect(late[3]!.step.kind).toBe("cut");
    const deep = judged(drainedThen(130), at(0.4, { calm: calm(50) }));
    expect(deep[3]!.step.kind).toBe("cut");
  });
});

describe("a mean at the cap isolates count answers to measures nothing", () => {
  // A rule whose target is 120 ms: isolates count an answer at most 4 × 120 = 480 ms. A queue so long every answer
  // is at the cap, the origin answering what it is sent: the mean cannot fall, whatever the cuts do.
  const capped = { ...target, latencyMs: 120 };
  const full = () => answers(100, 480, { slow: 100, late: 100 });

  it("is never taken for the origin's calm latency, after 10 s of it or any time", () => {
    const seen = judged(Array.from({ length: 40 }, full), at(0.5, { calm: calm(50) }), { against: capped });
    expect(seen.map((s) => s.state.calm.ms)).toEqual(Array(40).fill(50));
    expect(seen.some((s) => s.state.drift)).toBe(false);
  });

  it("under the cap, as before: the calm latency is measured again after 10 s", () => {
    const under = Array.from({ length: 40 }, () => answers(100, 300, { slow: 100, late: 100 }));
    const seen = judged(under, at(0.5, { calm: calm(50) }), { against: capped });
    expect(seen.at(-1)!.state.calm.ms).toBe(300);
  });
});

describe("a slower origin found sooner when the cuts went deep and nothing is late", () => {
  // Calm 50 ms; then every answer takes 100 ms (twice the calm: its service time doubled), none late against the
  // late mark of 150 ms. Three windows the origin falls a little behind in (noise of a few dozen answers) cut; one it
  // answers more than it is sent in makes up for them: over them all it kept up.
  const doubled = [
    ...Array.from({ length: 3 }, () => answers(100, 100, { forwarded: 120 })),
    answers(100, 100, { forwarded: 40 }),
    ...Array.from({ length: 12 }, () => answers(100, 100)),
  ];
  const start = () => at(0.5, { calm: calm(50) });

  it("measures its calm latency again after 1 s of quiet windows once the cuts took the limit below 0.7 of where they began", () => {
    const seen = judged(doubled, start());
    const againAt = seen.findIndex((s) => s.state.calm.ms !== 50);
    expect(againAt).toBeGreaterThan(0);
    expect(seen[againAt]!.atMs - seen[0]!.atMs).toBeLessThan(10_000);
    expect(seen[againAt]!.state.calm.ms).toBe(100);
    expect(seen[againAt - 1]!.state.factor).toBeLessThanOrEqual(0.5 * 0.7);
  });

  it("waits the 10 s as before when answers are late (a queue makes some wait past three times the calm)", () => {
    const late = doubled.map((c) => ({ ...c, late: 20 }));
    const seen = judged(late, start());
    const againAt = seen.findIndex((s) => s.state.calm.ms !== 50);
    expect(againAt === -1 || seen[againAt]!.atMs - seen[0]!.atMs >= 10_000).toBe(true);
  });

  it("waits the 10 s as before when the cuts were shallow", () => {
    const seen = judged(doubled, start(), { params: { driftQuietDepth: 0.1 } });
    const againAt = seen.findIndex((s) => s.state.calm.ms !== 50);
    expect(againAt === -1 || seen[againAt]!.atMs - seen[0]!.atMs >= 10_000).toBe(true);
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
    expect(judge(counts({ answered, slow }), target).breached).toBe(breached);
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
