/**
 * The statistics endpoints of the admin API, on the real app with real
 * Durable Objects: `GET /stats`, `GET /metrics`, and `hash=` in `/status`.
 * The statistics object is one per namespace, shared by every test here, so
 * each test counts under rule ids of its own.
 */
// @ts-expect-error: the package ships no types; the shape used is declared below (`Family`).
import parseUntyped from "parse-prometheus-text-format";
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from "vitest";
import { parseSettings } from "../src/config/settings.ts";
import { noCounts, type PriorityCounts } from "../src/core/health.ts";
import { hashKey } from "../src/core/keys.ts";
import type { StatsNamespace } from "../src/isolate/stats.ts";
import { MAX_VALUE_CHARS } from "../src/isolate/tally.ts";
import { reportHealth } from "../src/object/client.ts";
import { OUTCOMES, type StatsOutcome, type StatsView } from "../src/object/stats-protocol.ts";
import { adminKey } from "../src/worker/admin/key.ts";
import { canonicalNumber, openMetrics } from "../src/worker/admin/stats.ts";
import type { Env } from "../src/worker/env.ts";
import { env } from "./support/env.ts";
import { from, limiter, statuses, timedLimiter, uniqueIp, uniqueTag } from "./support/limiter.ts";

/** A metric family as parse-prometheus-text-format returns it (values are strings, as written). */
type Family = {
  name: string;
  help: string;
  type: string;
  metrics: { value?: string; labels?: Record<string, string>; buckets?: Record<string, string>; count?: string }[];
};
const parsePrometheusText = parseUntyped as (text: string) => Family[];

const TOKEN = "test-admin-token-5e0b7c31d2a4";
const bearer = { authorization: `Bearer ${TOKEN}`, "cf-connecting-ip": "198.51.100.1" };

/** The Worker with the admin API on: `send` for traffic, `get`/`admin` for the API with the token. */
function withAdmin(rules: unknown[], vars: Partial<Env> = {}) {
  const send = limiter(rules, { ADMIN_TOKEN: TOKEN, ...vars });
  const raw = (method: string, path: string) => send(path, { method, headers: bearer });
  const admin = async (method: string, path: string) => {
    const res = await raw(method, path);
    return {
      status: res.status,
      type: res.headers.get("content-type"),
      body: (await res.json()) as Record<string, unknown>,
    };
  };
  return { send, raw, admin };
}

/** A rule id no other test uses (1–64 of [a-z0-9_-]). */
const ruleId = (name: string): string => uniqueTag(name).slice(0, 64);

/** The hash the statistics show for this client of an `ip` rule: its object's name. */
async function hashOfIp(ip: string): Promise<string> {
  const parsed = parseSettings({ RULES: [{ id: "r", limit: 1, period: 1 }] });
  if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
  const key = adminKey(parsed.value.rules[0]!, [ip], 56);
  if (!key.ok) throw new Error(key.errors.join("\n"));
  return hashKey(key.value);
}

const counts = (values: Partial<Record<StatsOutcome, number>>): Record<StatsOutcome, number> =>
  Object.fromEntries(OUTCOMES.map((o) => [o, values[o] ?? 0])) as Record<StatsOutcome, number>;

async function readStats(admin: ReturnType<typeof withAdmin>["admin"], minutes?: number) {
  const res = await admin("GET", `/__ratelimit/stats${minutes === undefined ? "" : `?minutes=${minutes}`}`);
  expect([res.status, res.type]).toEqual([200, "application/json"]);
  return res.body as unknown as StatsView;
}

const ruleIn = (view: StatsView, id: string) => {
  const rule = view.rules.find((r) => r.id === id);
  if (rule === undefined) throw new Error(`no rule ${id} in the view`);
  return rule;
};

const minuteNow = () => Math.floor(Date.now() / 60_000);

describe("GET /stats", () => {
  it("shows each rule's exact admitted and refused counts for this minute, and the most refused clients by hash", async () => {
    const id = ruleId("stats-counts");
    const { send, admin } = withAdmin([{ id, limit: 2, period: "1h" }]);
    const [a, b, c] = [uniqueIp(), uniqueIp(), uniqueIp()];
    const startMinute = minuteNow();
    expect(await statuses(5, () => send("/x", from(a)))).toEqual([200, 200, 429, 429, 429]);
    expect(await statuses(3, () => send("/x", from(b)))).toEqual([200, 200, 429]);
    expect(await statuses(1, () => send("/x", from(c)))).toEqual([200]);

    // Read at once: the isolate's own counts are sent before the read, not 10 s later.
    const view = await readStats(admin, 5);
    const readMinute = minuteNow();
    expect(view.toMinute - view.fromMinute + 1).toBe(5);
    const rule = ruleIn(view, id);
    // The object refuses a client once; the isolate then answers the client's next requests itself.
    const expected = counts({ admitted: 5, refused: 2, refused_cached: 2 });
    expect(rule.totals).toEqual(expected);
    expect(rule.lifetime).toEqual(expected);
    if (startMinute === readMinute) {
      // All in the current minute (else the traffic straddled two minutes, and the totals say it all).
      expect(view.toMinute).toBe(startMinute);
      expect(rule.series).toEqual([{ minute: view.toMinute, counts: expected }]);
    }
    const [hashA, hashB] = [await hashOfIp(a), await hashOfIp(b)];
    expect(rule.topRefused).toEqual([
      { hash: hashA, key: hashA.slice(0, 12), count: 3, error: 0 },
      { hash: hashB, key: hashB.slice(0, 12), count: 1, error: 0 },
    ]);
    expect(view.rawKeys).toBe(false);
  });

  it("counts a shadow rule's would-be refusals apart, and lets the requests through", async () => {
    const id = ruleId("stats-shadow");
    const { send, admin } = withAdmin([{ id, limit: 1, period: "1h", action: "log" }]);
    const ip = uniqueIp();
    expect(await statuses(3, () => send("/x", from(ip)))).toEqual([200, 200, 200]);
    const rule = ruleIn(await readStats(admin), id);
    expect(rule.totals).toEqual(counts({ admitted: 1, shadow_refused: 2 }));
    const hash = await hashOfIp(ip);
    expect(rule.topRefused).toEqual([{ hash, key: hash.slice(0, 12), count: 2, error: 0 }]);
  });

  it("shows refused clients' keys as written when STATS_RAW_KEYS is true", async () => {
    const id = ruleId("stats-raw");
    const { send, admin } = withAdmin([{ id, limit: 1, period: "1h" }], { STATS_RAW_KEYS: "true" });
    const ip = uniqueIp();
    expect(await statuses(2, () => send("/x", from(ip)))).toEqual([200, 429]);
    const view = await readStats(admin);
    expect(view.rawKeys).toBe(true);
    expect(ruleIn(view, id).topRefused).toEqual([{ hash: await hashOfIp(ip), key: `ip=${ip}`, count: 1, error: 0 }]);
  });

  it("shows a client with a long key by a bounded prefix of each value, and by its full hash", async () => {
    const id = ruleId("stats-raw-long");
    const { send, admin } = withAdmin([{ id, limit: 1, period: "1h", key: ["header:x-api-key", "ip"] }], {
      STATS_RAW_KEYS: "true",
    });
    const apiKey = `k${"x".repeat(8_000)}`; // as long as the origin in the tests takes (Node: 16 KB of headers)
    const ip = uniqueIp();
    expect(await statuses(2, () => send("/x", from(ip, { "x-api-key": apiKey })))).toEqual([200, 429]);
    const [top] = ruleIn(await readStats(admin), id).topRefused;
    const canonical = JSON.stringify([
      ["header:x-api-key", apiKey],
      ["ip", ip],
    ]);
    expect(top).toEqual({
      hash: await hashKey(canonical),
      key: `header:x-api-key=${apiKey.slice(0, MAX_VALUE_CHARS)}…&ip=${ip}`,
      count: 1,
      error: 0,
    });
  });

  it.each([1, 1440])("covers minutes=%i minutes", async (minutes) => {
    const { admin } = withAdmin([{ id: ruleId("stats-minutes"), limit: 1, period: "1h" }]);
    const view = await readStats(admin, minutes);
    expect(view.toMinute - view.fromMinute + 1).toBe(minutes);
  });

  it("covers 60 minutes when minutes= is absent", async () => {
    const { admin } = withAdmin([{ id: ruleId("stats-default"), limit: 1, period: "1h" }]);
    const view = await readStats(admin);
    expect(view.toMinute - view.fromMinute + 1).toBe(60);
  });

  it.each([
    ["0", 'must be an integer from 1 to 1440; got "0".'],
    ["1441", 'must be an integer from 1 to 1440; got "1441".'],
    ["-5", 'must be an integer from 1 to 1440; got "-5".'],
    ["1.5", 'must be an integer from 1 to 1440; got "1.5".'],
    ["1e2", 'must be an integer from 1 to 1440; got "1e2".'],
    ["abc", 'must be an integer from 1 to 1440; got "abc".'],
    ["", 'must be an integer from 1 to 1440; got "".'],
    ["%2060", 'must be an integer from 1 to 1440; got " 60".'],
    ["060", 'must be an integer from 1 to 1440; got "060".'],
    ["60&minutes=5", "is given 2 times; give it once."],
  ])("answers minutes=%s with a 400 problem naming the parameter", async (value, says) => {
    const { admin } = withAdmin([{ id: ruleId("stats-bad"), limit: 1, period: "1h" }]);
    const { status, type, body } = await admin("GET", `/__ratelimit/stats?minutes=${value}`);
    expect([status, type, body.type, body.parameter]).toEqual([
      400,
      "application/problem+json",
      "urn:edge-rate-limiter:invalid-parameter",
      "minutes",
    ]);
    expect(body.detail).toBe(`The "minutes" query parameter ${says}`);
  });

  it("allows GET only, and only with the admin token", async () => {
    const { send, admin } = withAdmin([{ id: ruleId("stats-auth"), limit: 1, period: "1h" }]);
    expect((await send("/__ratelimit/stats", from(uniqueIp()))).status).toBe(401);
    expect((await send("/__ratelimit/metrics", from(uniqueIp()))).status).toBe(401);
    const posted = await admin("POST", "/__ratelimit/stats");
    expect([posted.status, posted.body.detail]).toEqual([405, "/__ratelimit/stats allows GET."]);
  });
});

describe("without a STATS binding", () => {
  it.each(["/__ratelimit/stats", "/__ratelimit/metrics"])(
    "%s is a 404 problem that says how to turn statistics on",
    async (path) => {
      const { send, admin } = withAdmin([{ id: ruleId("stats-off"), limit: 1, period: "1h" }], { STATS: undefined });
      const ip = uniqueIp();
      expect(await statuses(2, () => send("/x", from(ip)))).toEqual([200, 429]);
      const { status, type, body } = await admin("GET", path);
      expect([status, type, body.type, body.title]).toEqual([
        404,
        "application/problem+json",
        "urn:edge-rate-limiter:statistics-off",
        "Not Found",
      ]);
      expect(body.detail).toMatch(/^Statistics are off: the Worker has no STATS binding\. To turn them on, bind/);
      expect(body.detail).toContain('class_name = "StatsObject"');
    },
  );
});

describe("a statistics object that fails or hangs is a 503 within LIMITER_TIMEOUT_MS", () => {
  let error: MockInstance;
  let warn: MockInstance;
  beforeEach(() => {
    error = vi.spyOn(console, "error").mockImplementation(() => {});
    warn = vi.spyOn(console, "warn").mockImplementation(() => {});
  });
  afterEach(() => {
    error.mockRestore();
    warn.mockRestore();
  });

  /** The real STATS namespace, with `record` and `read` of its stub replaced as given. */
  function statsWith(stub: {
    record?: (real: (batch: unknown) => Promise<unknown>, batch: unknown) => Promise<unknown>;
    read?: () => Promise<unknown>;
  }): Env["STATS"] {
    const ns: StatsNamespace = {
      idFromName: (name) => env.STATS!.idFromName(name),
      get: (id) => {
        const real = env.STATS!.get(id);
        return {
          record: (batch: unknown) =>
            stub.record ? stub.record((b) => real.record(b as never), batch) : real.record(batch as never),
          read: (options: { minutes: number; rawKeys: boolean }) => (stub.read ? stub.read() : real.read(options)),
        } as unknown as ReturnType<StatsNamespace["get"]>;
      },
    };
    return ns as unknown as Env["STATS"];
  }

  it.each([
    ["a read that never answers", { read: () => new Promise(() => {}) }, "no answer within 100ms"],
    ["a read that throws", { read: async () => Promise.reject(new Error("induced failure")) }, "induced failure"],
  ])("%s", async (_, stub, message) => {
    const rules = [{ id: ruleId("stats-503"), limit: 5, period: "1h" }];
    const vars: Partial<Env> = { ADMIN_TOKEN: TOKEN, LIMITER_TIMEOUT_MS: "100", STATS: statsWith(stub) };
    for (const path of ["/__ratelimit/stats", "/__ratelimit/metrics"]) {
      const { response, responseMs } = await timedLimiter(rules, vars)(path, { headers: bearer });
      expect([response.status, response.headers.get("content-type")]).toEqual([503, "application/problem+json"]);
      expect(await response.json()).toEqual({
        type: "urn:edge-rate-limiter:statistics-unavailable",
        title: "Service Unavailable",
        status: 503,
        detail: `The statistics object did not answer: ${message}`,
      });
      expect(responseMs).toBeLessThan(1000);
    }
  });

  it("a flush of this isolate's counts that takes longer than the deadline: 503, and the counts still arrive", async () => {
    const id = ruleId("stats-slow-flush");
    const rules = [{ id, limit: 5, period: "1h" }];
    const slow = statsWith({
      record: async (real, batch) => {
        await new Promise((resolve) => setTimeout(resolve, 300));
        return real(batch);
      },
    });
    const timed = timedLimiter(rules, { ADMIN_TOKEN: TOKEN, LIMITER_TIMEOUT_MS: "100", STATS: slow });
    const ip = uniqueIp();
    for (let i = 0; i < 3; i++) expect((await timed("/x", from(ip))).response.status).toBe(200);
    const { response, responseMs } = await timed("/__ratelimit/stats", { headers: bearer });
    expect(response.status).toBe(503);
    expect(((await response.json()) as { detail: string }).detail).toBe(
      "The statistics object did not answer: no answer within 100ms",
    );
    expect(responseMs).toBeLessThan(1000);
    // timed() waited for the flush, which the response left running: it arrived.
    const { admin } = withAdmin(rules);
    expect(ruleIn(await readStats(admin), id).totals).toEqual(counts({ admitted: 3 }));
  });
});

describe("GET /metrics", () => {
  it("is OpenMetrics text a Prometheus text parser reads, whose counters equal /stats' lifetime counts", async () => {
    const id = ruleId("metrics");
    const { send, raw, admin } = withAdmin([{ id, limit: 2, period: "1h" }]);
    const [a, b] = [uniqueIp(), uniqueIp()];
    expect(await statuses(4, () => send("/x", from(a)))).toEqual([200, 200, 429, 429]);
    expect(await statuses(1, () => send("/x", from(b)))).toEqual([200]);

    const res = await raw("GET", "/__ratelimit/metrics");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/openmetrics-text; version=1.0.0; charset=utf-8");
    // Read as bytes: workerd warns when .text() meets a content type it does not know for text.
    const text = new TextDecoder().decode(await res.arrayBuffer());
    const view = await readStats(admin, 1);

    expect(text.endsWith("\n# EOF\n")).toBe(true);
    expect(text).not.toContain("\r");
    // Only the metadata lines and the EOF line start with #, and no family has a second TYPE.
    const comments = text.split("\n").filter((line) => line.startsWith("#"));
    for (const line of comments) expect(line).toMatch(/^# (TYPE|UNIT|HELP) [a-z_]+ .+$|^# EOF$/);
    const typed = comments.filter((line) => line.startsWith("# TYPE ")).map((line) => line.split(" ")[2]);
    expect(new Set(typed).size).toBe(typed.length);

    const families = openMetricsFamilies(parsePrometheusText(text));
    expect(Object.fromEntries(Object.entries(families).map(([name, f]) => [name, f.type]))).toEqual({
      ratelimit_decisions: "COUNTER",
      ratelimit_decision_latency_seconds: "HISTOGRAM",
      ratelimit_object_failures: "COUNTER",
      ratelimit_stats_flushes: "COUNTER",
      ratelimit_stats_lost_flushes: "COUNTER",
      ratelimit_stats_lost_decisions: "COUNTER",
    });
    for (const family of Object.values(families)) expect(family.help).not.toBe("");
    expect(text).toContain("# UNIT ratelimit_decision_latency_seconds seconds\n");

    // One series per rule and outcome, labelled by nothing else: never a client.
    const decisions = families.ratelimit_decisions!.metrics;
    for (const m of decisions) expect(Object.keys(m.labels ?? {}).sort()).toEqual(["outcome", "rule"]);
    const mine = decisions.filter((m) => m.labels?.rule === id);
    expect(Object.fromEntries(mine.map((m) => [m.labels!.outcome, Number(m.value)]))).toEqual(
      ruleIn(view, id).lifetime,
    );
    expect(ruleIn(view, id).lifetime).toEqual(counts({ admitted: 3, refused: 1, refused_cached: 1 }));
    for (const rule of view.rules) {
      for (const outcome of OUTCOMES) {
        const m = decisions.find((d) => d.labels?.rule === rule.id && d.labels.outcome === outcome);
        expect(Number(m?.value)).toBe(rule.lifetime[outcome]);
      }
    }

    // The histogram: cumulative buckets in canonical `le`s, ending with +Inf; no _sum, so no _count.
    const [latency] = families.ratelimit_decision_latency_seconds!.metrics;
    const buckets = latency!.buckets!;
    expect(Object.keys(buckets)).toEqual([
      "0.001",
      "0.002",
      "0.005",
      "0.01",
      "0.02",
      "0.05",
      "0.1",
      "0.2",
      "0.5",
      "1.0",
      "2.0",
      "5.0",
      "+Inf",
    ]);
    let cumulative = 0;
    Object.values(buckets).forEach((value, i) => {
      cumulative += view.latency.lifetime[i]!;
      expect(Number(value)).toBe(cumulative);
    });
    expect(Number(buckets["+Inf"])).toBeGreaterThan(0); // this test's calls to objects, at least
    expect(latency!.count).toBeUndefined();
    expect(text).not.toMatch(/_sum|_count/);

    const failures = families.ratelimit_object_failures!.metrics;
    expect(failures.map((m) => m.labels?.reason)).toEqual(
      [...new Set(["error", "overloaded", "timeout", ...Object.keys(view.health.failuresLifetime)])].sort(),
    );
    for (const m of failures) expect(Number(m.value)).toBe(view.health.failuresLifetime[m.labels!.reason!] ?? 0);
    const single = (name: string) => Number(families[name]!.metrics[0]!.value);
    expect(single("ratelimit_stats_flushes")).toBe(view.health.flushes);
    expect(single("ratelimit_stats_flushes")).toBeGreaterThan(0);
    expect(single("ratelimit_stats_lost_flushes")).toBe(view.health.lostFlushes);
    expect(single("ratelimit_stats_lost_decisions")).toBe(view.health.lostDecisions);
  });

  it("escapes label values as OpenMetrics requires, and the parser reads them back", () => {
    const odd = ['quote"d', "back\\slash", "new\nline", 'all\\"\n'];
    const view: StatsView = {
      fromMinute: 0,
      toMinute: 0,
      rules: odd.map((id, i) => ({
        id,
        series: [],
        totals: counts({}),
        lifetime: counts({ admitted: i + 1 }),
        topRefused: [],
      })),
      latency: { boundsMs: [], counts: [], lifetime: [], p50Ms: null, p99Ms: null },
      health: { failures: {}, failuresLifetime: { 'odd"reason': 2 }, lostFlushes: 0, lostDecisions: 0, flushes: 0 },
      rawKeys: false,
    };
    const text = openMetrics(view);
    expect(text).toContain('ratelimit_decisions_total{rule="quote\\"d",outcome="admitted"} 1\n');
    expect(text).toContain('ratelimit_decisions_total{rule="back\\\\slash",outcome="admitted"} 2\n');
    expect(text).toContain('ratelimit_decisions_total{rule="new\\nline",outcome="admitted"} 3\n');
    expect(text).toContain('ratelimit_decisions_total{rule="all\\\\\\"\\n",outcome="admitted"} 4\n');
    const families = openMetricsFamilies(parsePrometheusText(text));
    const admitted = families.ratelimit_decisions!.metrics.filter((m) => m.labels?.outcome === "admitted");
    expect(admitted.map((m) => m.labels!.rule)).toEqual(odd);
    expect(families.ratelimit_object_failures!.metrics.map((m) => m.labels!.reason)).toContain('odd"reason');
    // With no decisions yet, the histogram is all zeros and still ends with +Inf.
    expect(families.ratelimit_decision_latency_seconds!.metrics[0]!.buckets!["+Inf"]).toBe("0");
  });

  it.each([
    // OpenMetrics' "canonical numbers", as its spec lists them.
    [
      [0, 0.001, 0.002, 0.01, 0.1, 0.9, 0.95, 0.99, 0.999, 1, 1.7, 10],
      "0.0 0.001 0.002 0.01 0.1 0.9 0.95 0.99 0.999 1.0 1.7 10.0",
    ],
    [[1e-10, 1e-9, 1e-5, 1e-4, 0.1, 1, 100000, 1e6, 1e10], "1e-10 1e-09 1e-05 0.0001 0.1 1.0 100000.0 1e+06 1e+10"],
    [
      [0.005, 0.02, 0.05, 0.2, 0.5, 2, 5, 1.1e-4, 1.1e23, Number.POSITIVE_INFINITY],
      "0.005 0.02 0.05 0.2 0.5 2.0 5.0 0.00011 1.1e+23 +Inf",
    ],
  ])("spells %j as %s", (numbers, spelled) => {
    expect(numbers.map(canonicalNumber).join(" ")).toBe(spelled);
  });
});

describe("an adaptive rule in /stats and /metrics", () => {
  /** Pushes the rule's controller to a cut, as isolates' reports of a slow origin would. */
  async function cutController(id: string) {
    const target = { latencyMs: 100, percentile: 99, errorShare: 0.05, floor: 10 };
    const report = (version: number) =>
      reportHealth(
        env.RATE_LIMITER,
        {
          rule: id,
          limit: 200,
          target,
          version,
          counts: { ...noCounts(), forwarded: 50, answered: 50, slow: 50, shed: 5, peak: 1 },
          latency: [[30, 50]],
        },
        5_000,
      );
    await report(0);
    await new Promise((resolve) => setTimeout(resolve, 550));
    const cut = await report(0);
    if (!cut.ok) throw new Error(cut.message);
    return cut.value;
  }

  it("shows the current limit against the configured one, with its history: /stats' adaptive, /metrics' gauges", async () => {
    const id = ruleId("adaptive-stats");
    const rule = { id, limit: 200, period: "1m", key: ["ip"], adaptive: { latency: "100ms", floor: 10 } };
    const { raw, admin } = withAdmin([rule]);
    const cut = await cutController(id);
    expect(cut.limit).toBeLessThan(200);

    const view = (await readStats(admin, 5)) as StatsView & { adaptive: { rule: string; controller: unknown }[] };
    const mine = view.adaptive.find((a) => a.rule === id)!;
    expect(mine.controller).toMatchObject({ factor: cut.factor, limit: cut.limit, configured: 200, mode: "reducing" });
    const history = (mine.controller as { history: { limit: number; configured: number }[] }).history;
    expect(history.at(-1)).toMatchObject({ limit: cut.limit, configured: 200 });

    const res = await raw("GET", "/__ratelimit/metrics");
    const text = new TextDecoder().decode(await res.arrayBuffer());
    const families = openMetricsFamilies(parsePrometheusText(text));
    const gauge = (name: string) => {
      expect(families[name]!.type).toBe("GAUGE");
      return Number(families[name]!.metrics.find((m) => m.labels?.rule === id)!.value);
    };
    expect(gauge("ratelimit_adaptive_limit")).toBe(cut.limit);
    expect(gauge("ratelimit_adaptive_configured_limit")).toBe(200);
    expect(gauge("ratelimit_adaptive_factor")).toBeCloseTo(cut.factor, 4);
  });

  it("splits a rule with priorities by priority: each one's limit, and what it forwarded and shed, in /stats and /metrics", async () => {
    const id = ruleId("adaptive-priorities");
    const adaptive = { latency: "100ms", floor: 10, critical: ["header:x-priority=critical"], sheddable: ["*"] };
    const { raw, admin } = withAdmin([{ id, limit: 200, period: "1m", key: ["ip"], adaptive }]);
    const target = {
      latencyMs: 100,
      percentile: 99,
      errorShare: 0.05,
      floor: 10,
      priorities: { critical: true, sheddable: true, reserve: 0 },
    };
    const byPriority: PriorityCounts = { critical: [20, 0], sheddable: [30, 5] };
    const report = () =>
      reportHealth(
        env.RATE_LIMITER,
        {
          rule: id,
          limit: 200,
          target,
          version: 0,
          counts: {
            ...noCounts(),
            forwarded: 50,
            answered: 50,
            slow: 50,
            shed: 5,
            peak: 1,
            byPriority: { ...byPriority },
          },
          latency: [[30, 50]],
        },
        5_000,
      );
    // The first report already breaches at the configured limit: it cuts at once (the onset); the second,
    // counted under the factor before, is no evidence about the new one, but its requests count in the statistics.
    await report();
    await new Promise((resolve) => setTimeout(resolve, 550));
    const cut = await report();
    if (!cut.ok) throw new Error(cut.message);
    // Sheddable requests were refused by the reduction: their stage is cut, the others keep the configured limit.
    expect(cut.value.factors?.critical).toBe(1);
    expect(cut.value.factors?.default).toBe(1);
    expect(cut.value.factors?.sheddable).toBeLessThan(1);
    const sheddableLimit = Math.floor(200 * cut.value.factors!.sheddable);

    const view = (await readStats(admin, 5)) as StatsView & {
      adaptive: { rule: string; controller: { priorities: unknown[] } }[];
    };
    const mine = view.adaptive.find((a) => a.rule === id)!;
    expect(mine.controller.priorities).toEqual([
      { priority: "critical", factor: 1, limit: 200, forwarded: 40, shed: 0 },
      { priority: "default", factor: 1, limit: 200, forwarded: 0, shed: 0 },
      { priority: "sheddable", factor: expect.any(Number), limit: sheddableLimit, forwarded: 60, shed: 10 },
    ]);

    const res = await raw("GET", "/__ratelimit/metrics");
    const metricsText = new TextDecoder().decode(await res.arrayBuffer());
    const families = openMetricsFamilies(parsePrometheusText(metricsText));
    const sample = (name: string, priority: string) =>
      Number(families[name]!.metrics.find((m) => m.labels?.rule === id && m.labels?.priority === priority)!.value);
    expect(sample("ratelimit_adaptive_priority_limit", "critical")).toBe(200);
    expect(sample("ratelimit_adaptive_priority_limit", "sheddable")).toBe(sheddableLimit);
    expect(sample("ratelimit_adaptive_priority_factor", "default")).toBe(1);
    expect(sample("ratelimit_adaptive_priority_shed", "sheddable")).toBe(10);
    expect(sample("ratelimit_adaptive_priority_forwarded", "critical")).toBe(40);
  });

  it("counts a request only the reduction refused as shed (503), apart from refused", async () => {
    const id = ruleId("adaptive-shed");
    const { send, admin } = withAdmin([{ id, limit: 10, period: "1h", adaptive: { latency: "100ms", floor: 1 } }]);
    // The origin kept up with half of what it was sent, slowly: the limit is cut by half, to 5.
    const target = { latencyMs: 100, percentile: 99, errorShare: 0.05, floor: 1 };
    const seen = { ...noCounts(), forwarded: 100, answered: 50, slow: 50, shed: 1, peak: 1 };
    const report = () =>
      reportHealth(env.RATE_LIMITER, { rule: id, limit: 10, target, version: 0, counts: seen }, 5_000);
    await report();
    await new Promise((resolve) => setTimeout(resolve, 550));
    const cut = await report();
    expect(cut.ok && cut.value.limit).toBe(5);
    const ip = uniqueIp();
    // The first request reports what it saw and learns the factor; the 6th of the client is over 5.
    const answers = await statuses(7, () => send("/x", from(ip)));
    expect(answers).toEqual([200, 200, 200, 200, 200, 503, 503]);
    expect(ruleIn(await readStats(admin, 1), id).totals).toEqual(counts({ admitted: 5, shed: 2 }));
  });

  it("shows a rule that has not reported yet as null, and no gauge for it", async () => {
    const id = ruleId("adaptive-quiet");
    const { raw, admin } = withAdmin([{ id, limit: 50, period: "1m", adaptive: { latency: "1s" } }]);
    const view = (await readStats(admin, 1)) as StatsView & { adaptive: { rule: string; controller: unknown }[] };
    expect(view.adaptive).toEqual([{ rule: id, controller: null }]);
    const text = new TextDecoder().decode(await (await raw("GET", "/__ratelimit/metrics")).arrayBuffer());
    expect(text).not.toContain(id);
  });
});

/**
 * The parser's families as OpenMetrics groups them. The parser reads the
 * Prometheus text format 0.0.4, where a counter family is named with its
 * `_total`; in OpenMetrics the family is `foo` and its samples `foo_total`.
 * So it returns a COUNTER family `foo` with no samples, then an untyped
 * `foo_total` with them: joined here, and nothing else is allowed to differ.
 */
function openMetricsFamilies(parsed: Family[]): Record<string, Family> {
  const families: Record<string, Family> = {};
  for (let i = 0; i < parsed.length; i++) {
    const family = parsed[i]!;
    const next = parsed[i + 1];
    if (family.type === "COUNTER") {
      expect(family.metrics).toEqual([]);
      expect(next?.name).toBe(`${family.name}_total`);
      expect(next?.type).toBe("UNTYPED");
      families[family.name] = { ...family, metrics: next!.metrics };
      i++;
    } else {
      families[family.name] = family;
    }
  }
  return families;
}

describe("hash= names a client in /status by its hash, as /stats shows it", () => {
  it("reads and resets a top offender known only by its hash: admitted again at once", async () => {
    const id = ruleId("by-hash");
    const { send, admin } = withAdmin([{ id, limit: 2, period: "1h" }]);
    const ip = uniqueIp();
    expect(await statuses(4, () => send("/x", from(ip)))).toEqual([200, 200, 429, 429]);
    const [top] = ruleIn(await readStats(admin), id).topRefused;
    const hash = top!.hash;
    expect(hash).toBe(await hashOfIp(ip));

    const byHash = await admin("GET", `/__ratelimit/status?rule=${id}&hash=${hash}`);
    const byKey = await admin("GET", `/__ratelimit/status?rule=${id}&key=${ip}`);
    expect(byHash.status).toBe(200);
    const { key: _key, ...sameAsByKey } = byKey.body;
    expect(byHash.body).toEqual({
      ...sameAsByKey,
      hash,
      resetSeconds: expect.any(Number),
      resetMs: expect.any(Number),
      retryAfterSeconds: expect.any(Number),
      retryAfterMs: expect.any(Number),
    });
    expect(byHash.body).toMatchObject({ rule: id, keyHash: hash.slice(0, 12), weighted: 2, allowed: false });

    const reset = await admin("DELETE", `/__ratelimit/status?rule=${id}&hash=${hash}`);
    expect(reset).toEqual({
      status: 200,
      type: "application/json",
      body: { rule: id, hash, keyHash: hash.slice(0, 12), reset: true, forgotten: true },
    });
    // Its refusal, cached in this isolate, was found by the hash and forgotten: no 429 from the cache.
    expect(await statuses(2, () => send("/x", from(ip)))).toEqual([200, 200]);
    const after = await admin("GET", `/__ratelimit/status?rule=${id}&hash=${hash}`);
    expect(after.body).toMatchObject({ weighted: 2, allowed: false, remaining: 0 });
  });

  it("resets a client this isolate holds no refusal of, and says it had nothing to forget", async () => {
    const id = ruleId("by-hash-unknown");
    const { send, admin } = withAdmin([{ id, limit: 3, period: "1h" }]);
    const ip = uniqueIp();
    expect(await statuses(2, () => send("/x", from(ip)))).toEqual([200, 200]);
    const hash = await hashOfIp(ip);
    const reset = await admin("DELETE", `/__ratelimit/status?rule=${id}&hash=${hash}`);
    expect(reset.body).toEqual({ rule: id, hash, keyHash: hash.slice(0, 12), reset: true, forgotten: false });
    const status = await admin("GET", `/__ratelimit/status?rule=${id}&hash=${hash}`);
    expect(status.body).toMatchObject({ weighted: 0, remaining: 3 });
  });

  const hex = "0123456789abcdef".repeat(4);
  const must = (got: string) =>
    `The "hash" query parameter must be 64 lowercase hexadecimal digits (a client's hash, as the statistics show it); got ${got}.`;
  it.each([
    [`hash=${hex.toUpperCase()}`, must(JSON.stringify(hex.toUpperCase()))],
    [`hash=${hex.slice(1)}`, must(JSON.stringify(hex.slice(1)))],
    [`hash=${hex}0`, must(JSON.stringify(`${hex}0`))],
    [`hash=${hex.slice(1)}g`, must(JSON.stringify(`${hex.slice(1)}g`))],
    [`hash=%20${hex.slice(1)}`, must(JSON.stringify(` ${hex.slice(1)}`))],
    ["hash=", must('""')],
    [`hash=${hex}&hash=${hex}`, 'The "hash" query parameter is given 2 times; give it once.'],
    [`hash=${hex}&key=10.0.0.1`, 'Give the "key" or the "hash" query parameter, not both.'],
  ])("answers %s with a 400 problem, to GET and DELETE", async (query, detail) => {
    const id = ruleId("by-hash-bad");
    const { admin } = withAdmin([{ id, limit: 1, period: "1h" }]);
    for (const method of ["GET", "DELETE"]) {
      const { status, type, body } = await admin(method, `/__ratelimit/status?rule=${id}&${query}`);
      expect([status, type, body.type, body.detail]).toEqual([
        400,
        "application/problem+json",
        "urn:edge-rate-limiter:malformed-key",
        detail,
      ]);
    }
  });
});
