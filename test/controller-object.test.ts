/**
 * An adaptive rule's controller object, in the real runtime: isolates'
 * reports in, the factor out, decided on the object's own clock (only `Date`
 * is faked), kept across eviction, each change of mode logged once, and a
 * history of the limit for the statistics and the dashboard.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { HealthCounts } from "../src/core/health.ts";
import { readController, reportHealth } from "../src/object/client.ts";
import { controllerName, type FactorAnswer, type HealthReport } from "../src/object/controller-protocol.ts";
import { env } from "./support/env.ts";
import { expectErrorLogs } from "./support/logs.ts";

const T0 = Date.UTC(2031, 0, 1, 0, 0, 0);
const at = (ms: number) => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(ms);
};
afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

let rules = 0;
/** A rule of its own per test: storage is shared by the tests of a file. */
const freshRule = () => `adaptive-test-${++rules}-${Date.now()}`;
const stubOf = (rule: string) => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(controllerName(rule)));

/** 1000 a second configured, p99 under 250 ms, 5 % errors, a floor of 10. */
const target = { latencyMs: 250, percentile: 99, errorShare: 0.05, floor: 10 };
const counts = (over: Partial<HealthCounts>): HealthCounts => ({
  forwarded: 0,
  answered: 0,
  slow: 0,
  errors: 0,
  gone: 0,
  goneSlow: 0,
  late: 0,
  stuck: 0,
  busyMs: 0,
  busySq: 0,
  shed: 0,
  peak: 0,
  ...over,
});
const report = (rule: string, version: number, over: Partial<HealthCounts>, extra: Partial<HealthReport> = {}) =>
  ({ rule, limit: 1000, target, version, counts: counts(over), ...extra }) satisfies HealthReport;

/** The origin answering a third of what it is sent, all of it slow (400 ms), while the reduction refuses some. */
const overloaded = { forwarded: 300, answered: 100, slow: 100, busyMs: 100 * 400, shed: 50 };
/** All of it answered, in 50 ms. */
const healthy = { forwarded: 100, answered: 100, busyMs: 100 * 50 };

/** The log lines (info and warn) from now on, parsed, in order; not printed. */
function loggedLines(): Record<string, unknown>[] {
  const lines: Record<string, unknown>[] = [];
  for (const stream of ["log", "warn"] as const) {
    vi.spyOn(console, stream).mockImplementation((line: unknown) => {
      lines.push(JSON.parse(String(line)) as Record<string, unknown>);
    });
  }
  return lines;
}

/** Two reports 500 ms apart under `version`: enough for the controller to judge. */
async function window(rule: string, version: number, over: Partial<HealthCounts>, startMs: number) {
  at(startMs);
  await stubOf(rule).reportHealth(report(rule, version, over));
  at(startMs + 500);
  return (await stubOf(rule).reportHealth(report(rule, version, {}))) as FactorAnswer;
}

describe("an adaptive rule's controller object", () => {
  it("answers the configured limit until the origin looks unhealthy: factor 1, a report a second", async () => {
    const rule = freshRule();
    const answer = await window(rule, 0, healthy, T0);
    // The origin's calm latency measured (50 ms): answers, and requests in flight, past 150 ms are late.
    expect(answer).toEqual({
      nowMs: T0 + 500,
      factor: 1,
      version: 0,
      mode: "full",
      limit: 1000,
      reportInMs: 1000,
      lateMs: 150,
      drift: false,
    });
  });

  it("cuts on its own clock when the origin is slow beyond chance, and asks for reports every 250 ms", async () => {
    const rule = freshRule();
    // At the configured limit, the onset is judged at once.
    at(T0);
    const onset = await stubOf(rule).reportHealth(report(rule, 0, overloaded));
    expect(onset).toMatchObject({ nowMs: T0, factor: 0.5, version: 1, mode: "reducing", limit: 500, reportInMs: 250 });
    // Reduced, a window is judged after 500 ms of reports.
    at(T0 + 1_000);
    expect((await stubOf(rule).reportHealth(report(rule, 1, overloaded))).factor).toBe(0.5);
    at(T0 + 1_499);
    expect((await stubOf(rule).reportHealth(report(rule, 1, {}))).factor).toBe(0.5);
    at(T0 + 1_500);
    expect((await stubOf(rule).reportHealth(report(rule, 1, {}))).factor).toBe(0.25);
  });

  it("takes no report gathered under an older factor as evidence about the current one", async () => {
    const rule = freshRule();
    await window(rule, 0, overloaded, T0);
    const stale = await window(rule, 0, overloaded, T0 + 1_000);
    expect(stale).toMatchObject({ factor: 0.5, version: 1 });
  });

  it("holds the factor with too few answers to judge, and with no reports at all", async () => {
    const rule = freshRule();
    expect(await window(rule, 0, { forwarded: 19, answered: 19, slow: 19 }, T0)).toMatchObject({ factor: 1 });
    await window(rule, 0, overloaded, T0 + 1_000);
    at(T0 + 3_600_000);
    const later = await stubOf(rule).reportHealth(report(rule, 1, {}));
    expect(later).toMatchObject({ factor: 0.5, version: 1 });
  });

  it("raises again when the origin is healthy: by up to 15 % while the reduction refuses, doubled when it refuses no one", async () => {
    const rule = freshRule();
    await window(rule, 0, overloaded, T0);
    // Its answers far under what it answered when it was first seen (400 ms): all the room there is, 15 %.
    expect(await window(rule, 1, { ...healthy, shed: 5 }, T0 + 1_000)).toMatchObject({
      factor: 0.575,
      version: 2,
      mode: "recovering",
      limit: 575,
    });
    expect(await window(rule, 2, healthy, T0 + 2_000)).toMatchObject({ factor: 1, version: 3, mode: "full" });
  });

  it("never goes below the floor", async () => {
    const rule = freshRule();
    let answer = await window(rule, 0, overloaded, T0);
    for (let i = 1; i < 10; i++) answer = await window(rule, answer.version, overloaded, T0 + i * 1_000);
    expect(answer).toMatchObject({ factor: 0.01, limit: 10 });
  });

  it("keeps its factor and version across eviction", async () => {
    const rule = freshRule();
    await window(rule, 0, overloaded, T0);
    await evictDurableObject(stubOf(rule));
    at(T0 + 10_000);
    expect(await stubOf(rule).reportHealth(report(rule, 1, {}))).toMatchObject({
      factor: 0.5,
      version: 1,
      mode: "reducing",
    });
  });

  it("under priorities, says the default priority's factor and limit, and each priority's, after eviction and in its log lines", async () => {
    const rule = freshRule();
    const lines = loggedLines();
    const prioritized = { ...target, priorities: { critical: true, sheddable: true, reserve: 0 } };
    at(T0);
    // A cut of a tenth: the sheddable requests' stage is cut, the default ones' is whole.
    const slowish = {
      forwarded: 100,
      answered: 100,
      slow: 30,
      busyMs: 100 * 50,
      shed: 5,
      byPriority: { default: [50, 0], sheddable: [50, 5] } as HealthCounts["byPriority"],
    };
    await stubOf(rule).reportHealth(report(rule, 0, slowish, { target: prioritized }));
    at(T0 + 500);
    const answer = (await stubOf(rule).reportHealth(report(rule, 0, {}, { target: prioritized }))) as FactorAnswer;
    expect(answer.factors).toMatchObject({ critical: 1, default: 1 });
    expect(answer.factors!.sheddable).toBeLessThan(1);
    const before = await readController(env.RATE_LIMITER, rule, 0, 5_000);
    if (!before.ok || before.value === null) throw new Error("no view");
    expect(before.value.factor).toBe(answer.factors!.default);
    expect(before.value.priorities).toBeDefined();
    const changed = lines.find((l) => l.event === "adaptive_changed")!;
    // Every line says how many keys were left out, 0 included (found from outside: left out of the line when 0).
    expect(changed).toMatchObject({ factor: answer.factors!.default, limit: answer.limit, leftOut: 0 });
    await evictDurableObject(stubOf(rule));
    const after = await readController(env.RATE_LIMITER, rule, 0, 5_000);
    if (!after.ok || after.value === null) throw new Error("no view");
    expect({ factor: after.value.factor, limit: after.value.limit, priorities: after.value.priorities }).toEqual({
      factor: before.value.factor,
      limit: before.value.limit,
      priorities: before.value.priorities,
    });
  });

  it("keeps its configured limit and target across eviction though its factor never changed", async () => {
    const rule = freshRule();
    const prioritized = { ...target, priorities: { critical: true, sheddable: true, reserve: 0 } };
    at(T0);
    await stubOf(rule).reportHealth(report(rule, 0, healthy, { target: prioritized }));
    const loaded = await readController(env.RATE_LIMITER, rule, 0, 5_000);
    if (!loaded.ok || loaded.value === null) throw new Error("no view");
    expect(loaded.value).toMatchObject({ factor: 1, configured: 1000, limit: 1000 });
    await evictDurableObject(stubOf(rule));
    const reloaded = await readController(env.RATE_LIMITER, rule, 0, 5_000);
    if (!reloaded.ok || reloaded.value === null) throw new Error("no view");
    expect(reloaded.value).toMatchObject({ factor: 1, configured: 1000, limit: 1000 });
    expect(reloaded.value.priorities).toEqual(loaded.value.priorities);
  });

  it("logs each change of its mode once, with the shares that made it", async () => {
    const rule = freshRule();
    const lines = loggedLines();
    await window(rule, 0, overloaded, T0); // full → reducing
    await window(rule, 1, overloaded, T0 + 1_000); // reducing, cut again: no line
    await window(rule, 2, { ...healthy, shed: 5 }, T0 + 2_000); // → recovering
    await window(rule, 3, healthy, T0 + 3_000); // recovering, doubled
    await window(rule, 4, healthy, T0 + 4_000); // → full
    const changes = lines.filter((l) => l.event === "adaptive_changed");
    expect(changes.map((l) => [l.level, l.from, l.to, l.factor, l.limit])).toEqual([
      ["warn", "full", "reducing", 0.5, 500],
      ["info", "reducing", "recovering", 0.2875, 287],
      ["info", "recovering", "full", 1, 1000],
    ]);
    expect(changes[0]).toMatchObject({ rule, configured: 1000, answered: 100, slowShare: 1, keepingUp: 0.3333 });
  });

  it("keeps a history: a point at every change, and one every 10 s while reports arrive, with the latency", async () => {
    const rule = freshRule();
    const latency: [number, number][] = [
      [32, 99],
      [40, 1],
    ]; // 99 at most 256 ms, one at most 1024 ms
    at(T0);
    await stubOf(rule).reportHealth(report(rule, 0, healthy, { latency }));
    at(T0 + 5_000);
    await stubOf(rule).reportHealth(report(rule, 0, healthy, { latency }));
    await window(rule, 0, overloaded, T0 + 12_000);
    const view = await readController(env.RATE_LIMITER, rule, 0, 1_000);
    expect(view.ok && view.value).toMatchObject({
      rule,
      factor: 0.5,
      version: 1,
      mode: "reducing",
      configured: 1000,
      limit: 500,
    });
    const history = view.ok ? view.value!.history : [];
    // The onset at 12 s is judged at once: the cut is its point.
    expect(history.map((p) => [p.atMs - T0, p.factor, p.limit, p.configured, p.latencyMs, p.drift])).toEqual([
      [0, 1, 1000, 1000, 256, false],
      [12_000, 0.5, 500, 1000, 256, false],
    ]);
    const since = await readController(env.RATE_LIMITER, rule, T0 + 5_000, 1_000);
    expect(since.ok && since.value!.history.map((p) => p.atMs - T0)).toEqual([12_000]);
  });

  it("changes nothing on a report whose target no rule could have, and answers the factor all the same", async () => {
    const rule = freshRule();
    await window(rule, 0, overloaded, T0);
    for (const bad of [
      { limit: 0 },
      { target: { ...target, floor: 2000 } },
      { target: { ...target, errorShare: 0.9 } },
      { target: { ...target, latencyMs: -1 } },
    ]) {
      at(T0 + 2_000);
      await stubOf(rule).reportHealth(report(rule, 1, overloaded, bad));
      at(T0 + 2_600);
      expect(await stubOf(rule).reportHealth(report(rule, 1, {}, bad))).toMatchObject({ factor: 0.5, version: 1 });
    }
  });

  it("takes counts that are not whole numbers of at least zero as zero", async () => {
    const rule = freshRule();
    const answer = await window(
      rule,
      0,
      { forwarded: -5, answered: 1.5, slow: Number.NaN, errors: 1e300, shed: -1 },
      T0,
    );
    expect(answer).toMatchObject({ factor: 1, version: 0 });
  });

  it("takes a report's clients and troubled keys only as whole counts within its own: a bad count hides no overloaded origin", async () => {
    // Ninety of a hundred answers slow, all of them from ten keys the report calls troubled.
    const slowMostly = { forwarded: 300, answered: 100, slow: 90, busyMs: 90 * 400 + 10 * 50, shed: 50 };
    const troubled = { keys: 10, answered: 90, slow: 90, errors: 0, late: 0, busyMs: 90 * 400, stuck: 0, busySq: 0 };
    for (const [clients, keys] of [
      [1e300, 10], // not a whole count: no clients counted, so no few of them
      [100, Number.NaN],
      [100, -10],
    ]) {
      const rule = freshRule();
      const answer = await window(rule, 0, { ...slowMostly, clients, troubled: { ...troubled, keys: keys! } }, T0);
      expect(answer.factor).toBeLessThan(1);
    }
  });

  it("counts nothing of a report for another rule, and logs it: each rule has its own controller", async () => {
    const rule = freshRule();
    await window(rule, 0, overloaded, T0);
    await window(rule, 1, overloaded, T0 + 1_000); // cut again: 0.25
    at(T0 + 5_000);
    expect(await stubOf(rule).reportHealth(report("another-rule", 2, healthy))).toMatchObject({
      factor: 1,
      version: 0,
    });
    expect(expectErrorLogs("adaptive_misdirected")).toEqual([
      expect.objectContaining({ object: controllerName(rule), rule: "another-rule" }),
    ]);
    expect((await stubOf(rule).controllerView())?.factor).toBe(0.25);
  });

  it("is reached by name through the client, and a client's object is no controller", async () => {
    const rule = freshRule();
    at(T0);
    const sent = await reportHealth(env.RATE_LIMITER, report(rule, 0, healthy), 1_000);
    expect(sent).toEqual({ ok: true, value: expect.objectContaining({ factor: 1, version: 0 }) });
    const client = env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`client-${rule}`));
    expect(await client.controllerView()).toBeNull();
    expect(
      await runInDurableObject(client, (_i, state) =>
        state.storage.sql.exec("SELECT name FROM sqlite_master").toArray(),
      ),
    ).toEqual([]);
    expect(await readController(env.RATE_LIMITER, `never-${rule}`, 0, 1_000)).toEqual({ ok: true, value: null });
  });
  it("says when the origin is slower than the target while nothing queues: once in the log, in its view and history, and to isolates", async () => {
    const rule = freshRule();
    const lines = loggedLines();
    let answer = await window(rule, 0, healthy, T0); // calm: 50 ms
    // From now on every answer takes 400 ms (over the 250 ms target), the origin keeping up with all it is sent.
    const drifted = { forwarded: 100, answered: 100, slow: 100, busyMs: 100 * 400, shed: 5 };
    for (let i = 1; !answer.drift && i < 60; i++) {
      at(T0 + i * 500);
      answer = await stubOf(rule).reportHealth(report(rule, answer.version, drifted, { lateMs: answer.lateMs }));
    }
    expect(answer).toMatchObject({ drift: true, lateMs: 1_200 });
    const view = await stubOf(rule).controllerView();
    expect(view).toMatchObject({ calmMs: 400, drift: true });
    expect(view!.history.at(-1)).toMatchObject({ drift: true });
    const drift = lines.filter((l) => l.event === "adaptive_drift");
    expect(drift).toEqual([
      expect.objectContaining({ level: "warn", rule, drift: true, calmMs: 400, latencyMs: 250, percentile: 99 }),
    ]);
    // The origin is back to 50 ms: the target is met, and the drift is over, said once.
    at(T0 + 60_000);
    await stubOf(rule).reportHealth(report(rule, answer.version, healthy, { lateMs: answer.lateMs }));
    at(T0 + 60_500);
    answer = await stubOf(rule).reportHealth(report(rule, answer.version, {}, { lateMs: answer.lateMs }));
    expect(answer.drift).toBe(false);
    expect(lines.filter((l) => l.event === "adaptive_drift").map((l) => [l.level, l.drift])).toEqual([
      ["warn", true],
      ["info", false],
    ]);
  });

  it("never takes a queue that isolates hold in place by refusing a crowd for the origin's calm", async () => {
    const rule = freshRule();
    let answer = await window(rule, 0, healthy, T0); // calm: 50 ms
    // The same slow answers as a drift, but isolates found the origin crowded: their refusals, not the cuts,
    // keep its queue where it is, so the cuts' making it no faster says nothing of its calm.
    const crowded = { forwarded: 100, answered: 100, slow: 100, busyMs: 100 * 400, shed: 5, crowded: 5 };
    for (let i = 1; i < 60; i++) {
      at(T0 + i * 500);
      answer = await stubOf(rule).reportHealth(report(rule, answer.version, crowded, { lateMs: answer.lateMs }));
      expect(answer.drift).toBe(false);
    }
    expect(await stubOf(rule).controllerView()).toMatchObject({ calmMs: 50, drift: false });
  });
});
