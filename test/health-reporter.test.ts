/**
 * The per-rule reporter of an isolate (src/isolate/health-reporter.ts), on
 * plain numbers: when a report is due (never two at once, never one per
 * request), what it carries, what an answer changes, and that a failed
 * report loses none of its counts.
 */
import { describe, expect, it } from "vitest";
import type { HealthTarget } from "../src/core/health.ts";
import { type Flight, HealthReporter, newFlight, REPORT_FAILURE_LOG_EVERY_MS } from "../src/isolate/health-reporter.ts";
import type { FactorAnswer } from "../src/object/controller-protocol.ts";

const target: HealthTarget = { latencyMs: 100, percentile: 99, errorShare: 0.05, floor: 10 };
const rule = { id: "api", limit: 100, adaptive: target };

const answer = (over: Partial<FactorAnswer> = {}): FactorAnswer => ({
  nowMs: 0,
  factor: 1,
  version: 0,
  mode: "full",
  limit: 100,
  reportInMs: 1_000,
  lateMs: null,
  drift: false,
  ...over,
});

/** One failed answer of `key` beside ten other clients answered fine, reported at `nowMs`: the report's counts. */
function failedBesideTen(reporter: HealthReporter, key: string, status: number, ms: number, nowMs: number) {
  reporter.answered(status, ms, key);
  for (let i = 0; i < 10; i++) reporter.answered(200, 5, `ok${i}`);
  const { counts } = reporter.due(nowMs)!;
  reporter.landed(answer());
  return counts;
}

/** `n` requests forwarded and answered in `ms` with `status`. */
const traffic = (reporter: HealthReporter, n: number, status = 200, ms = 20) => {
  for (let i = 0; i < n; i++) {
    reporter.forwarded();
    reporter.answered(status, ms);
  }
};

describe("an isolate's reporter of one adaptive rule", () => {
  it("has nothing to report without traffic, whatever the time", () => {
    const reporter = new HealthReporter(rule);
    expect(reporter.due(0)).toBeNull();
    expect(reporter.due(60_000)).toBeNull();
  });

  it("reports its first counts at once, then no sooner than the controller's interval", () => {
    const reporter = new HealthReporter(rule);
    traffic(reporter, 1);
    const first = reporter.due(1_000);
    expect(first).toMatchObject({ rule: "api", limit: 100, target, version: 0 });
    expect(first!.counts).toEqual({
      forwarded: 1,
      answered: 1,
      slow: 0,
      errors: 0,
      gone: 0,
      goneSlow: 0,
      late: 0,
      stuck: 0,
      busyMs: 20,
      busySq: 400,
      shed: 0,
      peak: 0,
    });
    reporter.landed(answer({ reportInMs: 1_000 }));
    traffic(reporter, 5);
    expect(reporter.due(1_999)).toBeNull();
    expect(reporter.due(2_000)!.counts.answered).toBe(5);
  });

  it("never has two reports on their way: the next waits for the answer", () => {
    const reporter = new HealthReporter(rule);
    traffic(reporter, 3);
    expect(reporter.due(0)).not.toBeNull();
    traffic(reporter, 3);
    expect(reporter.inFlight).toBe(true);
    expect(reporter.due(5_000)).toBeNull();
    reporter.landed(answer());
    expect(reporter.due(5_000)!.counts.answered).toBe(3);
  });

  it.each([
    ["slow answers", 200, 150],
    ["fast 5xx answers", 503, 5],
    ["unreachable origins and clients gone first", 0, 5],
  ])("reports early, 250 ms after the last, when 10 %s breach the target", (_, status, ms) => {
    const reporter = new HealthReporter(rule);
    traffic(reporter, 1);
    reporter.due(0);
    reporter.landed(answer());
    traffic(reporter, 10, status, ms);
    expect(reporter.due(249)).toBeNull();
    const early = reporter.due(250);
    expect(early).not.toBeNull();
    expect(early!.counts).toMatchObject({ answered: 10, ...(status === 200 ? { slow: 10 } : { errors: 10 }) });
  });

  it("does not report early on 9 bad answers, or on 10 healthy ones", () => {
    for (const [n, status, ms] of [
      [9, 503, 5],
      [10, 200, 20],
    ] as const) {
      const reporter = new HealthReporter(rule);
      traffic(reporter, 1);
      reporter.due(0);
      reporter.landed(answer());
      traffic(reporter, n, status, ms);
      expect(reporter.due(500)).toBeNull();
      expect(reporter.due(1_000)).not.toBeNull();
    }
  });

  it("carries shed requests, the busiest client's share, and the latency histogram", () => {
    const reporter = new HealthReporter(rule);
    traffic(reporter, 2, 200, 3);
    reporter.shed();
    reporter.peak(0.4);
    reporter.peak(0.2);
    const report = reporter.due(0)!;
    expect(report.counts).toMatchObject({ forwarded: 2, answered: 2, shed: 1, peak: 0.4 });
    expect(report.latency).toEqual([[7, 2]]); // 3 ms: bucket ⌈4·log2 3⌉ = 7
  });

  it("applies a factor whose version is another, says whether it fell, and drops counts gathered under the old one", () => {
    const reporter = new HealthReporter(rule);
    traffic(reporter, 1);
    reporter.due(0);
    traffic(reporter, 4);
    expect(reporter.landed(answer({ factor: 0.5, version: 1, reportInMs: 250 }))).toEqual({
      changed: true,
      fell: true,
      from: 1,
      to: 0.5,
    });
    expect(reporter).toMatchObject({ factor: 0.5, version: 1 });
    expect(reporter.due(250)).toBeNull(); // nothing gathered under version 1 yet
    traffic(reporter, 1);
    expect(reporter.due(250)).toMatchObject({ version: 1 });
    expect(reporter.landed(answer({ factor: 0.5, version: 1 }))).toEqual({ changed: false });
    traffic(reporter, 1);
    reporter.due(5_000);
    expect(reporter.landed(answer({ factor: 1, version: 2 }))).toMatchObject({ changed: true, fell: false });
  });

  it("loses nothing when a report fails: its counts go with the next, and the failure is logged once a minute", () => {
    const reporter = new HealthReporter(rule);
    traffic(reporter, 3, 503, 5);
    reporter.due(0);
    expect(reporter.failed(10)).toEqual({ log: true });
    traffic(reporter, 2);
    const next = reporter.due(1_000)!;
    expect(next.counts).toMatchObject({ forwarded: 5, answered: 5, errors: 3 });
    expect(next.latency!.reduce((sum, [, n]) => sum + n, 0)).toBe(5);
    expect(reporter.failed(20)).toEqual({ log: false });
    traffic(reporter, 1);
    reporter.due(3_000);
    expect(reporter.failed(10 + REPORT_FAILURE_LOG_EVERY_MS)).toEqual({ log: true });
  });

  it("counts a client gone before the origin's answer as gone, neither success nor failure", () => {
    const reporter = new HealthReporter(rule);
    reporter.forwarded();
    reporter.gone(null, "a"); // its upload was still on its way, or broken off
    reporter.forwarded();
    reporter.gone(99, "b"); // the origin had it 99 ms: under the 100 ms target
    const { counts } = reporter.due(0)!;
    expect(counts).toMatchObject({ forwarded: 2, answered: 0, slow: 0, errors: 0, gone: 2, goneSlow: 0 });
    expect(counts).not.toHaveProperty("worst");
  });

  it("counts a client gone after the origin kept its whole request past the target as known slow", () => {
    const reporter = new HealthReporter(rule);
    for (let i = 0; i < 2; i++) {
      reporter.forwarded();
      reporter.gone(101, "a");
    }
    expect(reporter.due(0)!.counts).toMatchObject({
      answered: 2,
      slow: 2,
      errors: 0,
      gone: 2,
      goneSlow: 2,
      worst: [["a", 2, 2, 0, 0, 202, 0, 2 * 101 * 101]],
    });
  });

  it("names the keys with slow or failed answers, worst first, with their answers since they first had one", () => {
    const reporter = new HealthReporter(rule);
    reporter.answered(200, 5, "fast");
    reporter.answered(200, 5, "slowish");
    reporter.answered(200, 500, "slowish");
    reporter.answered(200, 5, "slowish");
    reporter.answered(200, 500, "slowish");
    reporter.answered(503, 5, "failing");
    reporter.answered(503, 5, "failing");
    reporter.answered(503, 5, "once"); // one failure: what failures spread over every client give any of them
    reporter.answered(200, 5); // a key not known: in the totals only
    const { counts } = reporter.due(0)!;
    expect(counts).toMatchObject({ answered: 9, slow: 2, errors: 3 });
    // "fast" never had a bad answer; "slowish" is counted from its first bad one; "once" is named too (a window
    // spanning reports then has all its counts if its trouble recurs), but it is no key's own trouble yet.
    // Each: answers, slow, failed, late, busy time (the 500 ms answer counts 400, four times the target), found late,
    // and the squares of the busy time.
    expect(counts.worst).toEqual([
      ["failing", 2, 0, 2, 0, 0, 0, 0],
      ["slowish", 3, 2, 0, 0, 805, 0, 2 * 400 * 400 + 5 * 5],
      ["once", 1, 0, 1, 0, 0, 0, 0],
    ]);
    expect(counts.worstable).toEqual(["failing", "slowish"]);
    // The next report starts afresh.
    reporter.landed(answer());
    reporter.answered(200, 5, "slowish");
    expect(reporter.due(5_000)!.counts).not.toHaveProperty("worst");
  });

  it("judges a key's trouble its own once it recurs, across reports too: one bad answer now and then is any client's luck", () => {
    const reporter = new HealthReporter(rule);
    const failOnce = (nowMs: number) => failedBesideTen(reporter, "k", 503, 5, nowMs);
    // Named from its first failure, but no key's own trouble yet: not one that may be left out, nor mostly bad.
    const first = failOnce(0);
    expect(first.worst).toEqual([["k", 1, 0, 1, 0, 0, 0, 0]]);
    expect(first.worstable).toEqual([]);
    expect(first).toMatchObject({ fresh: { keys: 1 } });
    // A second within about 10 s (1 + 0.93 over the longer memory, past 1.5): one of the worst that may be left out;
    // mostly bad of its own once it passes 2 with each report counting half as much 2 s on (1, 1.7, then 2.2).
    const second = failOnce(1_000);
    expect(second.worstable).toEqual(["k"]);
    expect(second).not.toHaveProperty("troubled");
    const third = failOnce(2_000);
    expect(third.worstable).toEqual(["k"]);
    expect(third.troubled).toMatchObject({ keys: 1, errors: 1 });
    // Quiet for a while (its memory forgotten below a quarter), it starts again from nothing.
    expect(failOnce(40_000).worstable).toEqual([]);
  });

  it("names a key failing one request every 2.2 s as one that may be left out from its second (found from outside: paced past 2 s, never)", () => {
    const reporter = new HealthReporter(rule);
    const failAt = (nowMs: number) => failedBesideTen(reporter, "paced", 500, 2, nowMs);
    expect(failAt(0).worstable).toEqual([]);
    for (const atMs of [2_200, 4_400, 6_600, 8_800]) expect(failAt(atMs).worstable).toEqual(["paced"]);
  });

  it("leaves a key failing as often as everyone to the rest: an origin failing a share of every client's requests is not a few keys' trouble", () => {
    const reporter = new HealthReporter(rule);
    // Six clients, each answered once a second, a third of them failed each time, in turn: every key fails about as
    // often as all of them do, and none may be left out for its failures, though each fails again within 10 s.
    for (let second = 0; second < 12; second++) {
      for (let c = 0; c < 6; c++) reporter.answered((second + c) % 3 === 0 ? 500 : 200, 5, `c${c}`);
      const { counts } = reporter.due(second * 1_000)!;
      reporter.landed(answer());
      expect(counts.worstable ?? []).toEqual([]);
    }
  });

  it("leaves keys failing as often as everyone to the rest though their failures recur: five clients failing half their requests each", () => {
    const reporter = new HealthReporter(rule);
    // Every client fails a request of its two in each report: each one's failures recur, as everyone's do.
    for (let report = 0; report < 6; report++) {
      for (let c = 0; c < 5; c++) {
        reporter.answered(500, 5, `c${c}`);
        reporter.answered(200, 5, `c${c}`);
      }
      const { counts } = reporter.due(report * 500)!;
      reporter.landed(answer());
      expect(counts.worstable ?? []).toEqual([]);
      expect(counts).not.toHaveProperty("troubled");
    }
  });

  it("adds a failed report's counts to its longer memory once: a key's failures stand out against every answer as they would have", () => {
    const sent = new HealthReporter(rule);
    const lost = new HealthReporter(rule);
    for (const reporter of [sent, lost]) {
      // A key fails one of its 3 answers beside a hundred good ones…
      for (let i = 0; i < 100; i++) reporter.answered(200, 5);
      for (let i = 0; i < 3; i++) reporter.answered(i === 0 ? 500 : 200, 5, "k");
      reporter.due(0);
      reporter.landed(answer());
      // …then 40 answers fail, spread over clients it does not know: that report lands, or fails…
      for (let i = 0; i < 40; i++) reporter.answered(500, 5);
      reporter.due(4_000);
      if (reporter === sent) reporter.landed(answer());
      else reporter.failed(4_000);
      // …and the key fails again beside a hundred good answers: its second failure within 10 s, at a share of its
      // answers over twice everyone's.
      for (let i = 0; i < 100; i++) reporter.answered(200, 5);
      reporter.answered(500, 5, "k");
    }
    expect(sent.due(5_000)!.counts.worstable).toEqual(["k"]);
    const { counts } = lost.due(5_000)!;
    expect(counts).toMatchObject({ answered: 141, errors: 41 });
    expect(counts.worstable).toEqual(["k"]);
  });

  it("keeps counts of at most 64 keys between reports, whatever a flood of clients does", () => {
    const reporter = new HealthReporter(rule);
    for (let i = 0; i < 1_000; i++) for (let j = 0; j < 2; j++) reporter.answered(503, 5, `k${i}`);
    const { counts } = reporter.due(0)!;
    expect(counts.errors).toBe(2_000);
    expect(counts.worst).toHaveLength(16);
  });

  it("counts the clients it answered, and adds up those whose answers were mostly bad, with all their answers", () => {
    const reporter = new HealthReporter(rule);
    for (let i = 0; i < 3; i++) reporter.answered(200, 5, "fast");
    reporter.answered(200, 500, "slow"); // all slow: mostly bad
    reporter.answered(200, 500, "slow");
    reporter.answered(200, 5, "once"); // one slow answer in three: not mostly bad
    reporter.answered(200, 5, "once");
    reporter.answered(200, 500, "once");
    reporter.answered(503, 5, "failing"); // a failure in each of two: mostly bad
    reporter.answered(503, 5, "failing");
    reporter.answered(503, 5, "one"); // a single failure: mostly bad, but not its own until it recurs
    reporter.answered(200, 5); // a key not known: a client not counted
    const { counts } = reporter.due(0)!;
    expect(counts.clients).toBe(5);
    expect(counts.troubled).toEqual({
      keys: 2,
      answered: 4,
      slow: 2,
      errors: 2,
      late: 0,
      busyMs: 800,
      stuck: 0,
      busySq: 2 * 400 * 400,
    });
    // The next report starts afresh.
    reporter.landed(answer());
    reporter.answered(200, 5, "fast");
    expect(reporter.due(5_000)!.counts).toMatchObject({ clients: 1 });
    expect(reporter.due(5_000)).toBeNull();
  });

  it("counts at most 1024 clients between reports, and keeps a failed report's clients and troubled keys", () => {
    const reporter = new HealthReporter(rule);
    for (let i = 0; i < 2_000; i++) reporter.answered(200, 5, `k${i}`);
    reporter.answered(503, 5, "k0");
    reporter.answered(503, 5, "k0");
    const first = reporter.due(0)!.counts;
    expect(first.clients).toBe(1024);
    expect(first.troubled).toMatchObject({ keys: 1, errors: 2 });
    reporter.failed(10);
    reporter.answered(503, 5, "x");
    reporter.answered(503, 5, "x");
    expect(reporter.due(5_000)!.counts).toMatchObject({ clients: 1025, troubled: { keys: 2, errors: 4 } });
  });

  it("keeps a failed report's worst keys: they go with the next, merged with the keys counted since", () => {
    const reporter = new HealthReporter(rule);
    reporter.answered(503, 5, "a");
    reporter.answered(503, 5, "a");
    expect(reporter.due(0)!.counts.worst).toEqual([["a", 2, 0, 2, 0, 0, 0, 0]]);
    reporter.failed(10);
    reporter.answered(503, 5, "a");
    reporter.answered(503, 5, "a");
    reporter.answered(200, 500, "b");
    reporter.answered(200, 500, "b");
    expect(reporter.due(5_000)!.counts.worst).toEqual([
      ["a", 4, 0, 4, 0, 0, 0, 0],
      ["b", 2, 2, 0, 0, 800, 0, 2 * 400 * 400],
    ]);
  });
});

describe("what an isolate's reporter tells of a queue forming", () => {
  /** A reporter that learned the late mark (three times a calm latency of 20 ms). */
  const marked = (lateMs = 60) => {
    const reporter = new HealthReporter(rule);
    traffic(reporter, 1);
    reporter.due(0);
    reporter.landed(answer({ lateMs }));
    return reporter;
  };

  it("counts answers later than the mark the controller gave, and each answer's time up to four times the target", () => {
    const reporter = marked();
    // Twice each: a key's trouble is named once it recurs.
    for (let i = 0; i < 2; i++) {
      reporter.answered(200, 50, "a");
      reporter.answered(200, 61, "b");
      reporter.answered(200, 1_000, "c"); // slow too; counts 400 ms of busy time
      reporter.answered(503, 70, "d"); // a failure: late, but no busy time
    }
    const { counts, lateMs } = reporter.due(5_000)!;
    expect(lateMs).toBe(60);
    expect(counts).toMatchObject({ answered: 8, slow: 2, errors: 2, late: 6, busyMs: 2 * (50 + 61 + 400) });
    expect(counts.worst).toEqual([
      ["c", 2, 2, 0, 2, 800, 0, 2 * 400 * 400],
      ["d", 2, 0, 2, 2, 0, 0, 0],
      ["b", 2, 0, 0, 2, 122, 0, 2 * 61 * 61],
    ]);
  });

  it("counts no answer late before the controller gave a mark", () => {
    const reporter = new HealthReporter(rule);
    reporter.answered(200, 90);
    expect(reporter.due(0)!.counts).toMatchObject({ answered: 1, late: 0, busyMs: 90 });
  });

  it("finds the requests in flight past the mark at its next report, once each, oldest first, and their keys", () => {
    const reporter = marked();
    // Two requests of each key (a key's trouble is named once it recurs).
    const [a, a2, b, b2, c] = ["a", "a", "b", "b", "c"].map((key) => newFlight(key)) as Flight[];
    reporter.started(a!, 1_000);
    reporter.started(a2!, 1_010);
    reporter.started(b!, 1_030);
    reporter.started(b2!, 1_040);
    reporter.started(c!, 1_100);
    reporter.forwarded();
    // At 1 080 ms, only a's have been in flight for more than 60 ms.
    const first = reporter.due(1_080)!;
    expect(first.counts).toMatchObject({ stuck: 2, worst: [["a", 0, 0, 0, 0, 0, 2, 0]] });
    reporter.landed(answer({ lateMs: 60, reportInMs: 250 }));
    // b's are late by now, and are found; a's are not found again; c ended before it was late.
    reporter.ended(c!);
    reporter.forwarded();
    expect(reporter.due(1_400)!.counts).toMatchObject({ stuck: 2, worst: [["b", 0, 0, 0, 0, 0, 2, 0]] });
    // Its answer still counts when it comes, late.
    reporter.landed(answer({ lateMs: 60, reportInMs: 250 }));
    reporter.ended(b!);
    reporter.ended(b2!);
    reporter.answered(200, 500, "b");
    expect(reporter.due(2_000)!.counts).toMatchObject({ answered: 1, late: 1, stuck: 0 });
  });

  it("reports early on requests found late in flight, before any of them is answered", () => {
    const reporter = marked(); // its last report at 0, the next due at 1 000 ms
    for (let i = 0; i < 10; i++) {
      reporter.forwarded();
      reporter.started(newFlight(`k${i}`), 200);
    }
    expect(reporter.due(250)).toBeNull();
    expect(reporter.due(261)!.counts).toMatchObject({ forwarded: 10, answered: 0, stuck: 10 });
  });

  it("drops its late counts when the mark moves: they were counted against another", () => {
    const reporter = marked(60);
    reporter.answered(200, 100, "a");
    reporter.started(newFlight("b"), 0);
    reporter.due(1_000); // a report on its way: its counts, against 60 ms
    reporter.answered(200, 100, "c");
    reporter.landed(answer({ lateMs: 300 }));
    const next = reporter.due(5_000)!;
    expect(next.lateMs).toBe(300);
    expect(next.counts).toMatchObject({ answered: 1, late: 0, stuck: 0 });
    // c was among the keys for its late answer alone: against the new mark, it has none.
    expect(next.counts).not.toHaveProperty("worst");
  });

  it("while the controller says the origin drifted, does not report early on slow answers alone", () => {
    const reporter = new HealthReporter(rule);
    traffic(reporter, 1);
    reporter.due(0);
    reporter.landed(answer({ drift: true, lateMs: 600 }));
    traffic(reporter, 10, 200, 150);
    expect(reporter.due(500)).toBeNull();
    traffic(reporter, 10, 503, 5);
    expect(reporter.due(500)).not.toBeNull();
  });
});

describe("what an isolate's reporter tells at once of a crowd at the origin", () => {
  /** `n` requests in flight from `atMs`. */
  const fly = (reporter: HealthReporter, n: number, atMs: number): Flight[] =>
    Array.from({ length: n }, (_, i) => {
      const f = newFlight(`k${i}`);
      reporter.started(f, atMs);
      return f;
    });

  it("crowds sheddable requests only, from one and a half times the most in flight answered within the target", () => {
    const reporter = new HealthReporter(rule);
    const calm = fly(reporter, 8, 0);
    reporter.ended(calm[7]!);
    reporter.answered(200, 20, "k7", calm[7]!); // the eighth in flight, answered in 20 ms: within the target
    expect(reporter.crowd.bound).toBe(12);
    fly(reporter, 5, 30); // 12 in flight now
    expect(reporter.crowded("sheddable", 40)).toBe(true);
    expect(reporter.crowded("default", 40)).toBe(false);
    expect(reporter.crowded("critical", 40)).toBe(false);
    expect(reporter.crowded(undefined, 40)).toBe(false);
    reporter.forwarded();
    // The controller is told how many it found crowded: its reports' evidence is not a drift then.
    expect(reporter.due(50)!.counts.crowded).toBe(1);
  });

  it("while the origin has drifted, learns from answers within 1.4 times its calm latency: its sheddable requests are not refused for as long as it stays slow", () => {
    const reporter = new HealthReporter(rule);
    const first = fly(reporter, 1, 0);
    reporter.ended(first[0]!);
    reporter.answered(200, 20, "k0", first[0]!); // within the target: learned, bound 8
    // The controller finds the origin drifted: its calm latency 300 ms (a late mark of 900 ms), over the 100 ms target.
    reporter.due(1_000);
    reporter.landed(answer({ drift: true, lateMs: 900 }));
    // Twenty seconds on, what was learned is forgotten; ten in flight at a time are each answered in 330 ms.
    const ten = fly(reporter, 10, 25_000);
    for (const f of ten) {
      reporter.ended(f);
      reporter.answered(200, 330, f.key, f);
    }
    expect(reporter.crowd.bound).toBe(15);
    fly(reporter, 10, 25_400);
    expect(reporter.crowded("sheddable", 25_400)).toBe(false);
    // Twenty seconds on again, an answer past 1.4 times the calm latency is a queue's, and teaches nothing.
    const slow = fly(reporter, 12, 46_000);
    reporter.ended(slow[11]!);
    reporter.answered(200, 500, "k11", slow[11]!);
    expect(reporter.crowd.bound).toBe(8);
  });

  it("keeps a request found late in the crowd until its answer, and one whose client left until a later one's", () => {
    const reporter = new HealthReporter(rule);
    reporter.due(0);
    reporter.landed(answer({ lateMs: 60 }));
    const [a, b, c, d] = fly(reporter, 4, 0);
    reporter.ended(a!);
    reporter.answered(200, 20, "k0", a!);
    expect(reporter.crowd.bound).toBe(8);
    reporter.forwarded();
    // b, c and d are found late at the report: still in flight at the origin, so still crowding it.
    expect(reporter.due(1_000)!.counts.stuck).toBe(3);
    expect(reporter.crowd.flying).toBe(3);
    reporter.ended(b!);
    reporter.gone(900, "k1", b!);
    expect(reporter.crowd.flying).toBe(3);
    reporter.ended(c!);
    reporter.answered(503, 10, "k2", c!); // a failure teaches nothing
    expect(reporter.crowd.flying).toBe(1);
    expect(reporter.crowd.bound).toBe(8);
    // Counted out once: a second end of the same request changes nothing.
    reporter.answered(200, 10, "k1", b!);
    expect(reporter.crowd.flying).toBe(1);
    expect(d!.aloft).toBe(true);
  });
});
