/**
 * Statistics: what the statistics object reports equals the decisions made,
 * across several isolates, refusals served from their caches, shadow rules
 * and failures; and a statistics object that throws or hangs changes no
 * request's answer and delays none.
 */
import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { hashKey } from "../src/core/keys.ts";
import { decide, type Outcome } from "../src/isolate/decide.ts";
import { createIsolate, type Isolate } from "../src/isolate/isolate.ts";
import {
  flushStats,
  MAX_CLIENT_CHARS,
  STATS_OBJECT,
  type StatsNamespace,
  StatsRecorder,
} from "../src/isolate/stats.ts";
import type { LimiterNamespace } from "../src/object/client.ts";
import { OUTCOMES, type StatsView } from "../src/object/stats-protocol.ts";
import { flakyNamespace } from "./support/chaos.ts";
import { env } from "./support/env.ts";
import { requestFrom, settingsFor, statusOf } from "./support/isolate.ts";
import { from, limiter, uniqueIp } from "./support/limiter.ts";
import { expectErrorLogs } from "./support/logs.ts";

/** A statistics object of the test's own: the real class, under a name no other test uses. */
function ownStats(): StatsNamespace & { view: (minutes?: number) => Promise<StatsView> } {
  const suffix = crypto.randomUUID();
  const ns: StatsNamespace = {
    idFromName: (name) => env.STATS!.idFromName(`${name}-${suffix}`),
    get: (id) => env.STATS!.get(id),
  };
  return { ...ns, view: (minutes = 5) => ns.get(ns.idFromName(STATS_OBJECT)).read({ minutes, rawKeys: false }) };
}

/** Decides in `isolate`, counting for `stats`; remembers whether each answer came at once (from the isolate alone). */
function deciding(isolate: Isolate, stats: StatsNamespace | undefined, rules: unknown[], ns?: LimiterNamespace) {
  const settings = settingsFor(rules, 300);
  const tasks: Promise<unknown>[] = [];
  const send = async (ip: string, path = "/x"): Promise<{ status: number; atOnce: boolean }> => {
    const decided = decide(requestFrom(ip, path), { settings, ns: ns ?? env.RATE_LIMITER, isolate, stats });
    if (decided.pending !== undefined) tasks.push(decided.pending);
    const outcome: Outcome = decided instanceof Promise ? await decided : decided;
    return { status: statusOf(outcome), atOnce: !(decided instanceof Promise) };
  };
  const settled = async () => {
    while (tasks.length > 0) await Promise.all(tasks.splice(0));
  };
  return { send, settled };
}

const totalsOf = (view: StatsView, rule: string) => view.rules.find((r) => r.id === rule)?.totals;

describe("the statistics object counts every decision, once", () => {
  it("across two isolates, refusals from their caches, and a shadow rule", async () => {
    const stats = ownStats();
    const rules = [
      { id: "three", limit: 3, period: "1h", key: ["ip"] },
      { id: "shadow-one", limit: 1, period: "1h", key: ["ip"], action: "log" },
    ];
    const isolates = [createIsolate(), createIsolate()];
    const senders = isolates.map((isolate) => deciding(isolate, stats, rules));
    const seen = { admitted: 0, refused: 0, cached: 0 };
    const ips = [uniqueIp(), uniqueIp(), uniqueIp()];
    for (let i = 0; i < 30; i++) {
      const { status, atOnce } = await senders[i % 2]!.send(ips[i % 3]!);
      if (status === 200) seen.admitted++;
      else if (atOnce) seen.cached++;
      else seen.refused++;
    }
    expect(seen.admitted).toBe(9);
    expect(seen.cached).toBeGreaterThan(0);
    for (const [i, isolate] of isolates.entries()) {
      await senders[i]!.settled();
      await flushStats(isolate.stats, stats, { nowMs: Date.now(), force: true });
    }
    const view = await stats.view();
    expect(totalsOf(view, "three")).toEqual({
      admitted: 9,
      refused: seen.refused,
      refused_cached: seen.cached,
      shadow_refused: 0,
      failed_open: 0,
      failed_closed: 0,
      held: 0,
      shed: 0,
    });
    // Each client's first request is within the shadow limit; its next two would be refused, and go on.
    expect(totalsOf(view, "shadow-one")).toEqual({
      admitted: 3,
      refused: 0,
      refused_cached: 0,
      shadow_refused: 6,
      failed_open: 0,
      failed_closed: 0,
      held: 0,
      shed: 0,
    });
    expect(view.health).toMatchObject({ flushes: 2, lostFlushes: 0, lostDecisions: 0, failures: {} });
    expect(view.latency.counts.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    // Every refused client is among the most refused, each refused 7 times in all.
    const top = view.rules.find((r) => r.id === "three")!.topRefused;
    expect(top.map((t) => t.count)).toEqual([7, 7, 7]);
    expect(top.every((t) => /^[0-9a-f]{64}$/.test(t.hash) && t.key === t.hash.slice(0, 12))).toBe(true);
  });

  it("failures, open and closed, by reason", async () => {
    const stats = ownStats();
    const rules = [
      { id: "opens", path: "/open", limit: 10, period: "1h", key: ["ip"] },
      { id: "closes", path: "/closed", limit: 10, period: "1h", key: ["ip"], on_error: "closed" },
    ];
    const isolate = createIsolate();
    const failing = flakyNamespace("throw").ns;
    const { send, settled } = deciding(isolate, stats, rules, failing);
    const statuses = [
      (await send(uniqueIp(), "/open")).status,
      (await send(uniqueIp(), "/open")).status,
      (await send(uniqueIp(), "/closed")).status,
    ];
    expect(statuses).toEqual([200, 200, 503]);
    await settled();
    await flushStats(isolate.stats, stats, { nowMs: Date.now(), force: true });
    const view = await stats.view();
    expect(totalsOf(view, "opens")).toMatchObject({ admitted: 0, failed_open: 2 });
    expect(totalsOf(view, "closes")).toMatchObject({ admitted: 0, failed_closed: 1 });
    expect(view.health.failures).toEqual({ error: 3 });
    expect(expectErrorLogs("limiter_unavailable").map((line) => [line.rule, line.reason, line.outcome])).toEqual([
      ["opens", "error", "forwarded"],
      ["opens", "error", "forwarded"],
      ["closes", "error", "refused"],
    ]);
  });

  it("held requests as their own outcome: admitted after a wait, under the rule that held them", async () => {
    const stats = ownStats();
    const rules = [{ id: "smooth", limit: 1, period: "1s", max_delay: "2s", key: ["ip"] }];
    const isolate = createIsolate();
    const { send, settled } = deciding(isolate, stats, rules);
    const ip = uniqueIp();
    const statuses = await Promise.all([send(ip), send(ip)]);
    expect(statuses.map((s) => s.status)).toEqual([200, 200]);
    await settled();
    await flushStats(isolate.stats, stats, { nowMs: Date.now(), force: true });
    expect(totalsOf(await stats.view(), "smooth")).toMatchObject({ admitted: 1, held: 1, refused: 0 });
  });

  it("stored before held and shed requests existed, gains their columns, and counts them from then on", async () => {
    const stats = ownStats();
    const stub = stats.get(stats.idFromName(STATS_OBJECT));
    const old = OUTCOMES.filter((o) => o !== "held" && o !== "shed");
    await runInDurableObject(stub, (_instance, state) => {
      for (const table of ["series", "lifetime"]) state.storage.sql.exec(`DROP TABLE ${table}`);
      const columns = old.map((o) => `${o} INTEGER NOT NULL DEFAULT 0`).join(", ");
      state.storage.sql.exec(
        `CREATE TABLE series (minute INTEGER NOT NULL, rule TEXT NOT NULL, ${columns}, PRIMARY KEY (minute, rule))`,
      );
      state.storage.sql.exec(`CREATE TABLE lifetime (rule TEXT PRIMARY KEY, ${columns})`);
    });
    await abortAllDurableObjects(); // the next call starts the object afresh on the old tables
    const minute = Math.floor(Date.now() / 60_000);
    const counts = OUTCOMES.map((o) => (o === "held" ? 4 : o === "shed" ? 3 : o === "admitted" ? 1 : 0));
    const batch = { counts: [{ minute, rule: "smooth", counts }], latency: [], refused: [], failures: {} };
    await stats.get(stats.idFromName(STATS_OBJECT)).record({ ...batch, lost: { flushes: 0, decisions: 0 } });
    expect(totalsOf(await stats.view(), "smooth")).toMatchObject({ admitted: 1, held: 4, shed: 3 });
  });

  it("flushes at most every 10 s per isolate, in the background, one call each", async () => {
    const calls: number[] = [];
    const real = ownStats();
    const counting: StatsNamespace = {
      idFromName: (name) => real.idFromName(name),
      get: (id) => {
        const stub = real.get(id);
        return {
          record: (batch: Parameters<typeof stub.record>[0]) => {
            calls.push(batch.counts.reduce((sum, c) => sum + c.counts.reduce((a, b) => a + b, 0), 0));
            return stub.record(batch);
          },
        } as unknown as typeof stub;
      },
    };
    const clock = { nowMs: Date.now() };
    const isolate = createIsolate({ clock: () => clock.nowMs });
    const { send, settled } = deciding(isolate, counting, [{ id: "every", limit: 1000, period: "1h", key: ["ip"] }]);
    const ip = uniqueIp();
    for (let i = 0; i < 20; i++) {
      await send(ip);
      clock.nowMs += 1_000;
    }
    await settled();
    // Requests at 0 s … 19 s: the one at 10 s sends the first ten, the rest wait for the next flush.
    expect(calls).toEqual([10]);
    expect((await real.view()).rules[0]!.totals.admitted).toBe(10);
  });
});

describe("a statistics object that fails changes no answer and delays none", () => {
  const failingStats = (how: "throw" | "hang"): StatsNamespace => ({
    idFromName: (name) => env.STATS!.idFromName(name),
    get: () =>
      ({
        record: () => (how === "hang" ? new Promise(() => {}) : Promise.reject(new Error("stats down"))),
      }) as unknown as ReturnType<StatsNamespace["get"]>,
  });

  it.each(["throw", "hang"] as const)(
    "%s: every status is the one without statistics, and every answer as prompt",
    async (how) => {
      const rules = [{ id: "same", limit: 4, period: "1h", key: ["ip"] }];
      const trace = async (stats: StatsNamespace | undefined) => {
        const isolate = createIsolate({ flushEveryMs: 0 });
        const { send } = deciding(isolate, stats, rules);
        const ip = uniqueIp();
        const statuses: number[] = [];
        const atOnce: boolean[] = [];
        for (let i = 0; i < 8; i++) {
          const started = Date.now();
          const answer = await send(ip);
          statuses.push(answer.status);
          atOnce.push(answer.atOnce);
          expect(Date.now() - started).toBeLessThan(250);
        }
        return { statuses, atOnce, isolate };
      };
      const without = await trace(undefined);
      const failing = await trace(failingStats(how));
      expect(failing.statuses).toEqual(without.statuses);
      expect(failing.atOnce).toEqual(without.atOnce);
    },
  );

  it("a flush that fails is counted as lost, with its decisions, and the next one that arrives says so", async () => {
    const isolate = createIsolate({ flushEveryMs: 0 });
    const rules = [{ id: "lossy", limit: 100, period: "1h", key: ["ip"] }];
    const down = deciding(isolate, failingStats("throw"), rules);
    for (let i = 0; i < 3; i++) await down.send(uniqueIp());
    await down.settled();
    expect(isolate.stats.unreported).toEqual({ flushes: 2, decisions: 2 });
    const stats = ownStats();
    const up = deciding(isolate, stats, rules);
    await up.send(uniqueIp());
    await up.settled();
    await flushStats(isolate.stats, stats, { nowMs: Date.now(), force: true });
    const view = await stats.view();
    expect(view.health).toMatchObject({ lostFlushes: 2, lostDecisions: 2 });
    expect(isolate.stats.unreported).toEqual({ flushes: 0, decisions: 0 });
  });
});

describe("what an isolate keeps of the clients it refused, between flushes", () => {
  // An attacker's keys can be as long as the request's headers: 1,024 of them must not hold a gigabyte.
  it.each([
    ["short keys, kept whole", 40, 40],
    ["keys of 64 KB, each cut to MAX_CLIENT_CHARS", 1 << 16, MAX_CLIENT_CHARS],
  ])("%s", (_, keyChars, keptChars) => {
    const recorder = new StatsRecorder();
    const rules = settingsFor(
      Array.from({ length: 32 }, (_, r) => ({ id: `long-keys-${r}`, limit: 1, period: "1h" })),
    ).rules;
    const clientOf = (r: number, c: number) => `${r}/${c}:`.padEnd(keyChars, "x");
    rules.forEach((rule, r) => {
      recorder.count(rule, "refused", Date.now());
      for (let c = 0; c < 32; c++) recorder.refusedClient(rule, `hash-${r}-${c}`, () => clientOf(r, c));
    });
    const kept = recorder.take(Date.now()).batch.refused.flatMap((rule) => rule.clients);
    expect(kept).toHaveLength(32 * 32);
    expect(kept.every(({ client }) => client!.length <= keptChars)).toBe(true);
    expect(kept.reduce((chars, { client }) => chars + client!.length, 0)).toBeLessThanOrEqual(32 * 32 * keptChars);
    // What is kept is the key's start, marked where it was cut; the hash names the client whole.
    const [r, c] = [7, 21];
    const one = kept.find(({ hash }) => hash === `hash-${r}-${c}`)!;
    const whole = clientOf(r, c);
    expect(one.client).toBe(whole.length <= keptChars ? whole : `${whole.slice(0, keptChars - 1)}…`);
  });
});

describe("Workers Analytics Engine, when bound", () => {
  it("gets one data point per rule and decision: rule, outcome, key hash, colo, cost", async () => {
    const points: { blobs?: string[]; doubles?: number[]; indexes?: string[] }[] = [];
    const analytics = { writeDataPoint: (point: (typeof points)[number]) => points.push(point) };
    const rule = { id: `ae-${crypto.randomUUID().slice(0, 8)}`, limit: 1, period: "1h", key: ["ip"], cost: 1 };
    const send = limiter([rule], { ANALYTICS: analytics as unknown as AnalyticsEngineDataset, STATS: undefined });
    const ip = uniqueIp();
    expect([(await send("/a", from(ip))).status, (await send("/a", from(ip))).status]).toEqual([200, 429]);
    const hash = (await hashKey(JSON.stringify([["ip", ip]]))).slice(0, 12);
    expect(points).toEqual([
      { blobs: [rule.id, "admitted", hash, ""], doubles: [1], indexes: [rule.id] },
      { blobs: [rule.id, "refused", hash, ""], doubles: [1], indexes: [rule.id] },
    ]);
  });

  it("is not needed: without it, or without STATS, nothing is written and nothing changes", async () => {
    const rule = { id: `plain-${crypto.randomUUID().slice(0, 8)}`, limit: 1, period: "1h", key: ["ip"] };
    const send = limiter([rule], { STATS: undefined });
    const ip = uniqueIp();
    expect([(await send("/a", from(ip))).status, (await send("/a", from(ip))).status]).toEqual([200, 429]);
  });
});
