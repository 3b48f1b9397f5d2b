/**
 * The hooks of rateLimit(), as a Hono user writes them: `key` names the
 * client, `onRefused` builds the answer over a limit, `skip` lets a request
 * through uncounted.
 */
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { createIsolate, rateLimit } from "../src/lib.ts";
import type { LimiterNamespace } from "../src/object/client.ts";
import { flakyNamespace } from "./support/chaos.ts";
import { env } from "./support/env.ts";
import { uniqueIp } from "./support/limiter.ts";
import { expectErrorLogs } from "./support/logs.ts";

type AppEnv = { Bindings: typeof env; Variables: { userId: string | undefined } };

let rules = 0;
/** A rule of its own per test, so no test sees another's counts. */
const rule = (limit: number) => ({ id: `hooks-${++rules}`, limit, period: "1m" as const });

/** An app whose auth middleware sets `userId` from `x-user`, and then the limiter. */
function appWith(options: Parameters<typeof rateLimit<AppEnv>>[0]) {
  const app = new Hono<AppEnv>();
  app.use(async (c, next) => {
    c.set("userId", c.req.header("x-user"));
    await next();
  });
  app.use(rateLimit<AppEnv>({ isolate: createIsolate(), ...options }));
  app.get("*", (c) => c.text("ok"));
  return (ip: string, headers: Record<string, string> = {}, bindings: Partial<typeof env> = {}) =>
    app.request("/", { headers: { "cf-connecting-ip": ip, ...headers } }, { ...env, ...bindings });
}

const statuses = async (responses: (Response | Promise<Response>)[]) =>
  (await Promise.all(responses)).map((r) => r.status);

describe("key: the client as your app knows it", () => {
  it("counts one user across every IP it comes from", async () => {
    const call = appWith({ rules: rule(2), key: (c) => c.get("userId") });
    const user = { "x-user": `alice-${uniqueIp()}` };
    const sequence = [];
    for (let i = 0; i < 3; i++) sequence.push((await call(uniqueIp(), user)).status);
    expect(sequence).toEqual([200, 200, 429]);
  });

  it("counts two users behind one IP apart", async () => {
    const call = appWith({ rules: rule(1), key: (c) => c.get("userId") });
    const ip = uniqueIp();
    const sequence = [];
    for (const user of ["bob", "carol", "bob", "carol"])
      sequence.push((await call(ip, { "x-user": user + ip })).status);
    expect(sequence).toEqual([200, 200, 429, 429]);
  });

  it("falls back to the rule's own key (the IP) when it returns undefined", async () => {
    const call = appWith({ rules: rule(1), key: (c) => c.get("userId") });
    const ip = uniqueIp();
    expect([(await call(ip)).status, (await call(ip)).status, (await call(uniqueIp())).status]).toEqual([
      200, 429, 200,
    ]);
  });

  it("may be async", async () => {
    const call = appWith({
      rules: rule(1),
      key: async (c) => {
        await Promise.resolve();
        return c.req.header("x-tenant");
      },
    });
    const tenant = { "x-tenant": `t-${uniqueIp()}` };
    expect([(await call(uniqueIp(), tenant)).status, (await call(uniqueIp(), tenant)).status]).toEqual([200, 429]);
  });

  it("never shares a count with a key the rules make, even when the strings are equal", async () => {
    const shared = rule(1);
    const ip = uniqueIp();
    const byHook = appWith({ rules: shared, key: () => ip });
    const byIp = appWith({ rules: shared });
    expect((await byHook(uniqueIp())).status).toBe(200);
    // The hook's key "<ip>" and the rule's IP key for <ip> are different clients.
    expect((await byIp(ip)).status).toBe(200);
    expect((await byHook(uniqueIp())).status).toBe(429);
    expect((await byIp(ip)).status).toBe(429);
  });
});

describe("onRefused: your answer over a limit", () => {
  it("answers with what it returns, and adds the limiter's Retry-After and RateLimit headers to it", async () => {
    const seen: number[] = [];
    const call = appWith({
      rules: rule(1),
      onRefused: (c, { retryAfterSeconds }) => {
        seen.push(retryAfterSeconds);
        return c.json({ error: "slow down", retryAfterSeconds }, 429);
      },
    });
    const ip = uniqueIp();
    const admitted = await call(ip);
    expect(seen).toEqual([]);
    const refused = await call(ip);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await refused.json()).toEqual({ error: "slow down", retryAfterSeconds: seen[0] });
    expect(seen).toHaveLength(1);
    // Until the minute's bucket ends (precision 1): somewhere in 1–60 s.
    expect(seen[0]).toBeGreaterThanOrEqual(1);
    expect(seen[0]).toBeLessThanOrEqual(60);
    expect(refused.headers.get("retry-after")).toBe(String(seen[0]));
    expect(refused.headers.get("ratelimit-policy")).toBe(admitted.headers.get("ratelimit-policy"));
    expect(refused.headers.get("ratelimit")).toMatch(/;r=0;t=\d+$/);
  });

  it.each([
    ["legacy headers on (the default)", {}],
    ["legacy headers off", { LEGACY_HEADERS: "false" }],
  ])(
    "carries every rate-limit header the limiter's own 429 carries, and that the decision lists: %s",
    async (_, vars) => {
      const limits = rule(1);
      const ip = uniqueIp();
      const own = appWith({ rules: limits });
      const headers: Record<string, string>[] = [];
      const custom = appWith({
        rules: limits,
        onRefused: (c) => {
          headers.push({ ...c.get("rateLimit").headers });
          return c.text("custom", 429);
        },
      });
      await own(ip, {}, vars);
      const refusedByLimiter = await own(ip, {}, vars);
      const refusedByApp = await custom(ip, {}, vars);
      expect([refusedByLimiter.status, refusedByApp.status, await refusedByApp.text()]).toEqual([429, 429, "custom"]);
      const rateLimitHeaders = (response: Response) =>
        [...response.headers.keys()].filter((name) =>
          /^(retry-after|ratelimit|ratelimit-policy|x-ratelimit-.*)$/.test(name),
        );
      expect(rateLimitHeaders(refusedByApp)).toEqual(rateLimitHeaders(refusedByLimiter));
      expect(rateLimitHeaders(refusedByApp).sort()).toEqual(
        Object.keys(headers[0]!)
          .map((n) => n.toLowerCase())
          .sort(),
      );
      for (const [name, value] of Object.entries(headers[0]!)) expect(refusedByApp.headers.get(name), name).toBe(value);
    },
  );

  it("keeps a Retry-After the answer sets itself", async () => {
    const call = appWith({
      rules: rule(1),
      onRefused: () => new Response("later", { status: 503, headers: { "Retry-After": "3600" } }),
    });
    const ip = uniqueIp();
    await call(ip);
    const refused = await call(ip);
    expect([refused.status, await refused.text(), refused.headers.get("retry-after")]).toEqual([503, "later", "3600"]);
  });

  it("is not asked about a 503 from a rule that fails closed: that is not a refusal over a limit", async () => {
    let asked = 0;
    const { ns } = flakyNamespace("throw");
    const call = appWith({
      rules: { ...rule(5), on_error: "closed" },
      timeoutMs: 200,
      onRefused: () => {
        asked++;
        return new Response("custom");
      },
    });
    const response = await call(uniqueIp(), {}, { RATE_LIMITER: ns as LimiterNamespace as typeof env.RATE_LIMITER });
    expect([response.status, asked]).toEqual([503, 0]);
    expect(expectErrorLogs("limiter_unavailable")).toEqual([
      expect.objectContaining({ reason: "error", outcome: "refused" }),
    ]);
  });
});

describe("a middleware given rules", () => {
  it("is fixed by its options: it reads no variable, so LEGACY_HEADERS = false leaves its legacy headers on", async () => {
    const call = appWith({ rules: rule(5) });
    const fromVariables = appWith({});
    const vars = { LEGACY_HEADERS: "false", RULES: [rule(5)] } as Partial<typeof env>;
    const given = await call(uniqueIp(), {}, vars);
    const read = await fromVariables(uniqueIp(), {}, vars);
    expect([given.status, given.headers.has("x-ratelimit-limit"), given.headers.has("ratelimit")]).toEqual([
      200,
      true,
      true,
    ]);
    expect([read.status, read.headers.has("x-ratelimit-limit"), read.headers.has("ratelimit")]).toEqual([
      200,
      false,
      true,
    ]);
  });
});

describe("skip: requests the limiter does not see", () => {
  it("lets them through uncounted and without rate-limit headers, and counts the rest as before", async () => {
    const call = appWith({ rules: rule(2), skip: (c) => c.req.header("x-internal") === "yes" });
    const ip = uniqueIp();
    const skipped = await Promise.all(Array.from({ length: 5 }, () => call(ip, { "x-internal": "yes" })));
    expect(skipped.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(skipped.map((r) => r.headers.has("ratelimit"))).toEqual([false, false, false, false, false]);
    expect(await statuses([call(ip)])).toEqual([200]);
    expect(await statuses([call(ip)])).toEqual([200]);
    expect(await statuses([call(ip)])).toEqual([429]);
  });

  it("may be async", async () => {
    const call = appWith({ rules: rule(1), skip: async () => true });
    const ip = uniqueIp();
    expect(await statuses([call(ip), call(ip), call(ip)])).toEqual([200, 200, 200]);
  });
});

describe("two rateLimit() stacked: one for the whole app, one for a route", () => {
  /** `outer` on every path, `inner` on `/inner/*` only; limits far below what a lease is given for, so each count is the object's. */
  function stacked(
    outerLimit: number,
    innerLimit: number,
    innerOptions: Partial<Parameters<typeof rateLimit<AppEnv>>[0]> = {},
  ) {
    const [outer, inner] = [rule(outerLimit), rule(innerLimit)];
    const app = new Hono<AppEnv>();
    app.use(rateLimit<AppEnv>({ isolate: createIsolate(), rules: outer }));
    app.get("/inner/*", rateLimit<AppEnv>({ isolate: createIsolate(), rules: inner, ...innerOptions }), (c) =>
      c.text("ok"),
    );
    app.get("/plain", (c) => c.text("ok"));
    const call = (path: string, ip: string) => app.request(path, { headers: { "cf-connecting-ip": ip } }, env);
    return { call, outer, inner };
  }

  it("a request the route's limiter refuses counts against the app's for nothing, and its 429 says the route's rule refused it", async () => {
    const { call, outer, inner } = stacked(10, 3);
    const ip = uniqueIp();
    const answers: Response[] = [];
    for (let i = 0; i < 8; i++) answers.push(await call("/inner/x", ip));
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 429, 429, 429, 429, 429]);
    const refusal = answers[3]!;
    expect(refusal.headers.get("ratelimit")).toBe(`"${inner.id}";r=0;t=${refusal.headers.get("retry-after")}`);
    expect(refusal.headers.get("ratelimit-policy")).toBe(`"${inner.id}";q=3;w=60, "${outer.id}";q=10;w=60`);
    expect(((await refusal.json()) as { "violated-policies": string[] })["violated-policies"]).toEqual([inner.id]);
    // The app's limit of 10 spent only by the 3 served: 7 more go, then 429.
    const plain: number[] = [];
    for (let i = 0; i < 8; i++) plain.push((await call("/plain", ip)).status);
    expect(plain).toEqual([200, 200, 200, 200, 200, 200, 200, 429]);
  });

  it("so it does when the route's refusal is your onRefused's", async () => {
    const { call } = stacked(5, 1, { onRefused: (c) => c.json({ slow: "down" }, 429) });
    const ip = uniqueIp();
    const answers: number[] = [];
    for (let i = 0; i < 6; i++) answers.push((await call("/inner/x", ip)).status);
    expect(answers).toEqual([200, 429, 429, 429, 429, 429]);
    const plain: number[] = [];
    for (let i = 0; i < 5; i++) plain.push((await call("/plain", ip)).status);
    expect(plain).toEqual([200, 200, 200, 200, 429]);
  });
});
