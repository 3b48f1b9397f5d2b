import { Hono } from "hono";
import { describe, expect, it, vi } from "vitest";
import type { RuleInput } from "../src/core/rules.ts";
import { createIsolate, rateLimit } from "../src/lib.ts";
import { env } from "./support/env.ts";
import { uniqueIp } from "./support/limiter.ts";

/** The middleware in someone else's Hono app, per route, like seed 000's @RateLimit annotation. */
describe("rateLimit() in your own Hono app", () => {
  const app = new Hono<{ Bindings: typeof env }>();
  app.post("/login", rateLimit({ rules: { id: "lib-login", limit: 2, period: "1m" } }), (c) => c.text("welcome"));
  app.get("/search", rateLimit({ rules: [{ id: "lib-search", limit: 1, period: "10s" }] }), (c) =>
    c.json({ ok: true }),
  );
  app.get("/free", (c) => c.text("unlimited"));

  const call = (path: string, ip: string, method = "GET") =>
    app.request(path, { method, headers: { "cf-connecting-ip": ip } }, env);

  it("limits the routes it guards, each with its own rule, and adds the headers to the handler's response", async () => {
    const ip = uniqueIp();
    const first = await call("/login", ip, "POST");
    expect(first.status).toBe(200);
    expect(await first.text()).toBe("welcome");
    expect(first.headers.get("ratelimit-policy")).toBe('"lib-login";q=2;w=60');
    expect((await call("/login", ip, "POST")).status).toBe(200);
    expect((await call("/login", ip, "POST")).status).toBe(429);
    expect((await call("/search", ip)).status).toBe(200);
    expect((await call("/search", ip)).status).toBe(429);
  });

  it("leaves unguarded routes alone", async () => {
    const ip = uniqueIp();
    for (let i = 0; i < 5; i++) {
      const res = await call("/free", ip);
      expect(res.status).toBe(200);
      expect(res.headers.has("ratelimit")).toBe(false);
    }
  });

  it("throws at construction for an invalid rule, naming the rule and the field", () => {
    expect(() => rateLimit({ rules: { id: "x", limit: -1, period: "1m" } })).toThrow(
      'rateLimit(): invalid options:\nRULES[0] "x": field "limit": must be an integer from 1 to 1000000000; got -1',
    );
  });

  it("answers 500 when the Durable Object binding is missing, naming it in the log once per 10 s, the same every time", async () => {
    const bare = new Hono();
    bare.get("/", rateLimit({ binding: "MISSING" }), (c) => c.text("ok"));
    const lines: string[] = [];
    const original = console.error;
    console.error = (line: string) => lines.push(line);
    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      const badEnv = { ...env, RULES: [{ id: "x", limit: 0, period: 1 }] };
      expect((await bare.request("/", {}, badEnv)).status).toBe(500);
      vi.advanceTimersByTime(9_999);
      expect((await bare.request("/", {}, badEnv)).status).toBe(500);
      expect(lines).toHaveLength(1);
      vi.advanceTimersByTime(1);
      expect((await bare.request("/", {}, badEnv)).status).toBe(500);
    } finally {
      console.error = original;
      vi.useRealTimers();
    }
    const logged = lines.map((line) => JSON.parse(line));
    expect(logged).toHaveLength(2);
    expect(logged[0]).toMatchObject({
      level: "error",
      event: "invalid_config",
      errors: [
        'RULES[0] "x": field "limit": must be an integer from 1 to 1000000000; got 0',
        "MISSING: no Durable Object binding by this name; bind the RateLimiter class to it",
      ],
    });
    expect(logged[1]).toEqual(logged[0]);
  });

  it("counts two rateLimit()s that reuse a rule id with different periods apart", async () => {
    const twins = new Hono<{ Bindings: typeof env }>();
    twins.get("/a", rateLimit({ rules: { id: "twin", limit: 5, period: "1s" } }), (c) => c.text("a"));
    twins.get("/b", rateLimit({ rules: { id: "twin", limit: 3, period: "1h" } }), (c) => c.text("b"));
    const ip = uniqueIp();
    const get = (path: string) => twins.request(path, { headers: { "cf-connecting-ip": ip } }, env);
    const statuses: number[] = [];
    for (const path of ["/b", "/a", "/b", "/a", "/b", "/a", "/b"]) statuses.push((await get(path)).status);
    // Each has its own row: /b admits 3 an hour whatever /a does. /a's row, made after /b's, starts from
    // /b's count once (as a rule whose period changed would), then counts alone: 1 + 3 < 5.
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 429]);
  });

  it("adapts a rule to what the handler answers: fast 503s from the app behind it bring the limit down", async () => {
    const isolate = createIsolate();
    const adaptive = new Hono<{ Bindings: typeof env }>();
    const rule: RuleInput = { id: `lib-adaptive-${Date.now()}`, limit: 100, period: "1m", adaptive: { latency: "1s" } };
    adaptive.get("/", rateLimit({ rules: rule, isolate }), (c) => c.text("down for now", 503));
    const startedAt = Date.now();
    const factor = () => isolate.adaptive.get(rule.id)?.factor ?? 1;
    while (factor() === 1 && Date.now() - startedAt < 8_000) {
      await Promise.all(
        Array.from({ length: 8 }, () => adaptive.request("/", { headers: { "cf-connecting-ip": uniqueIp() } }, env)),
      );
      // Reports go in the background: without an execution context, loose; a moment for them to land.
      await new Promise((resolve) => setTimeout(resolve, 30));
    }
    expect(factor()).toBeLessThan(1);
  });
});
