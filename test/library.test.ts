import { Hono } from "hono";
import { describe, expect, it, vi } from "vitest";
import type { RuleInput } from "../src/core/rules.ts";
import {
  adminApi,
  clientLimits,
  createIsolate,
  type RateLimitDecision,
  type RuleLimit,
  rateLimit,
} from "../src/lib.ts";
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

  it("throws at construction for a rule id another middleware counts with other fields: one id is one count", () => {
    const id = `dup-${Date.now()}`;
    rateLimit({ rules: { id, limit: 3, period: "1m" } });
    expect(() => rateLimit({ rules: { id, limit: 100, period: "1h" } })).toThrow(
      `rateLimit(): rule "${id}" is already counted by another rateLimit() with other fields; every middleware with this id would share its count, so give this rule its own id (or the same fields, to share the count on purpose)`,
    );
    // The same rule again shares its count on purpose: built, as an app may build one middleware per route.
    expect(() => rateLimit({ rules: { id, limit: 3, period: "1m" } })).not.toThrow();
  });

  it("answers 500 invalid-config when the binding named is no Durable Object namespace (a variable, say), naming it in the log", async () => {
    const bare = new Hono();
    bare.get("/", rateLimit({ binding: "ADMIN_TOKEN" }), (c) => c.text("ok"));
    bare.get("/limits", clientLimits({ binding: "ADMIN_TOKEN" }));
    const lines: string[] = [];
    const original = console.error;
    console.error = (line: string) => lines.push(line);
    try {
      for (const path of ["/", "/limits"]) {
        const response = await bare.request(path, {}, { ...env, ADMIN_TOKEN: "a-secret" });
        expect(response.status, path).toBe(500);
        expect(((await response.json()) as { type: string }).type, path).toMatch(/invalid-config$/);
      }
    } finally {
      console.error = original;
    }
    expect(JSON.parse(lines[0]!).errors).toContain(
      "ADMIN_TOKEN: not a Durable Object binding (a string); bind the RateLimiter class to it",
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

/** `"id";k=v;k=v, …` (RateLimit-Policy, RateLimit) as a map from id to its parameters. */
function headerItems(value: string | null): Map<string, Record<string, string>> {
  const items = new Map<string, Record<string, string>>();
  for (const item of (value ?? "").split(", ").filter(Boolean)) {
    const [name, ...params] = item.split(";");
    items.set(JSON.parse(name!) as string, Object.fromEntries(params.map((p) => p.split("=") as [string, string])));
  }
  return items;
}

/** A Hono app whose handlers answer with what `c.get("rateLimit")` gave them. */
function echoingDecision(options: Parameters<typeof rateLimit>[0]) {
  const app = new Hono<{ Bindings: typeof env }>();
  app.use("*", rateLimit(options));
  app.all("*", (c) => c.json(c.get("rateLimit")));
  return app;
}

describe('c.get("rateLimit"): the decision in your own handler', () => {
  it("gives the handler each rule's limit, remaining and reset, the same numbers the response's headers carry", async () => {
    const app = echoingDecision({
      rules: [
        { id: "dec-minute", limit: 10, period: "1m" },
        { id: "dec-hour", limit: 3, period: "1h" },
      ],
    });
    const ip = uniqueIp();
    for (let i = 1; i <= 3; i++) {
      const res = await app.request("/", { headers: { "cf-connecting-ip": ip } }, env);
      expect(res.status).toBe(200);
      const decision = (await res.json()) as RateLimitDecision;
      expect(decision).toMatchObject({ outcome: "allowed", held: false, heldMs: 0, retryAfterSeconds: 0 });
      expect(decision.rules.map((r) => [r.id, r.kind, r.limit, r.remaining, r.allowed, r.shed])).toEqual([
        ["dec-minute", "window", 10, 10 - i, true, false],
        ["dec-hour", "window", 3, 3 - i, true, false],
      ]);
      // Every number as the headers state it: the policies' q and w, and the closest rule's r, t and reset.
      const policies = headerItems(res.headers.get("ratelimit-policy"));
      for (const rule of decision.rules) {
        expect(String(rule.windowSeconds)).toBe(policies.get(rule.id)!.w);
        expect(String(rule.limit)).toBe(policies.get(rule.id)!.q);
      }
      const stating = [...headerItems(res.headers.get("ratelimit"))];
      expect(stating).toHaveLength(1);
      const [closestId, stated] = stating[0]!;
      expect(decision.closest).toEqual(decision.rules.find((r) => r.id === closestId));
      expect(closestId).toBe("dec-hour");
      const closest = decision.closest as Required<RuleLimit>;
      expect(closest.kind).toBe("window");
      expect(closest.resetSeconds).toBeTypeOf("number");
      expect(stated).toEqual({ r: String(closest.remaining), t: String(closest.resetSeconds) });
      expect(res.headers.get("x-ratelimit-remaining")).toBe(String(closest.remaining));
      expect(res.headers.get("x-ratelimit-reset")).toBe(String(closest.resetEpochSeconds));
      expect(closest.resetEpochSeconds - Math.floor(Date.now() / 1000)).toBeLessThanOrEqual(closest.resetSeconds + 1);
      for (const [name, value] of Object.entries(decision.headers)) expect(res.headers.get(name), name).toBe(value);
    }
  });

  it("says how long a request was held (max_delay), as Server-Timing does", async () => {
    const app = echoingDecision({ rules: { id: "dec-held", limit: 1, period: "3s", max_delay: "4s" } });
    const ip = uniqueIp();
    const send = () => app.request("/", { headers: { "cf-connecting-ip": ip } }, env);
    const first = (await (await send()).json()) as RateLimitDecision;
    expect(first).toMatchObject({ outcome: "allowed", held: false, heldMs: 0 });
    const res = await send();
    expect(res.status).toBe(200);
    const second = (await res.json()) as RateLimitDecision;
    expect(second.held).toBe(true);
    expect(second.heldMs).toBeGreaterThan(0);
    expect(res.headers.get("server-timing")).toBe(`ratelimit;desc="held";dur=${second.heldMs}`);
    expect(second.headers["Server-Timing"]).toBe(res.headers.get("server-timing"));
  });

  it("gives a concurrency rule's free places, with no window and no reset", async () => {
    const app = echoingDecision({ rules: { id: "dec-places", concurrency: 3 } });
    const res = await app.request("/", { headers: { "cf-connecting-ip": uniqueIp() } }, env);
    const decision = (await res.json()) as RateLimitDecision;
    expect(decision.rules).toEqual([
      { kind: "concurrency", id: "dec-places", limit: 3, remaining: 2, allowed: true, shed: false },
    ]);
    expect(res.headers.get("ratelimit")).toBe('"dec-places";r=2');
  });

  it("gives onRefused, and a middleware before rateLimit(), the refusal: which rule, and the wait", async () => {
    const seen: RateLimitDecision[] = [];
    const app = new Hono<{ Bindings: typeof env }>();
    app.use("*", async (c, next) => {
      await next();
      seen.push(c.get("rateLimit"));
    });
    app.use(
      "*",
      rateLimit({
        rules: { id: "dec-refused", limit: 1, period: "1m" },
        onRefused: (c, { retryAfterSeconds }) => {
          const { closest } = c.get("rateLimit");
          return c.json({ rule: closest?.id, retryAfterSeconds }, 429);
        },
      }),
    );
    app.get("*", (c) => c.text("ok"));
    const ip = uniqueIp();
    expect((await app.request("/", { headers: { "cf-connecting-ip": ip } }, env)).status).toBe(200);
    const refused = await app.request("/", { headers: { "cf-connecting-ip": ip } }, env);
    expect(refused.status).toBe(429);
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(await refused.json()).toEqual({ rule: "dec-refused", retryAfterSeconds: retryAfter });
    expect(seen.map((d) => d.outcome)).toEqual(["allowed", "refused"]);
    expect(seen[1]).toMatchObject({ retryAfterSeconds: retryAfter, held: false });
    expect(seen[1]!.rules).toEqual([
      expect.objectContaining({ id: "dec-refused", remaining: 0, allowed: false, resetSeconds: retryAfter }),
    ]);
    expect(seen[1]!.headers).toMatchObject({
      "Retry-After": String(retryAfter),
      RateLimit: refused.headers.get("ratelimit"),
    });
  });

  it("says what a rule with count settles after the response: the handler sees the request counted, the headers see it given back", async () => {
    const app = new Hono<{ Bindings: typeof env }>();
    app.use("*", rateLimit({ rules: { id: "dec-failed", limit: 5, period: "1m", count: "failed" } }));
    app.get("/ok", (c) => c.json(c.get("rateLimit")));
    app.get("/bad", (c) => c.json(c.get("rateLimit"), 401));
    const ip = uniqueIp();
    const ok = await app.request("/ok", { headers: { "cf-connecting-ip": ip } }, env);
    const seenOk = (await ok.json()) as RateLimitDecision;
    expect(seenOk.closest?.remaining).toBe(4);
    // A 200 does not count: given back, the headers say what is left after it.
    expect(ok.headers.get("ratelimit")).toMatch(/^"dec-failed";r=5;t=\d+$/);
    const bad = await app.request("/bad", { headers: { "cf-connecting-ip": ip } }, env);
    expect(((await bad.json()) as RateLimitDecision).closest?.remaining).toBe(4);
    expect(bad.headers.get("ratelimit")).toMatch(/^"dec-failed";r=4;t=\d+$/);
  });

  it("says a request skip let through was skipped, and one no rule matched has no rules", async () => {
    const app = new Hono<{ Bindings: typeof env }>();
    app.use(
      "*",
      rateLimit({
        rules: { id: "dec-api", path: "/api/*", limit: 5, period: "1m" },
        skip: (c) => c.req.path === "/api/health",
      }),
    );
    app.get("*", (c) => c.json(c.get("rateLimit")));
    const at = async (path: string) =>
      (await (
        await app.request(path, { headers: { "cf-connecting-ip": uniqueIp() } }, env)
      ).json()) as RateLimitDecision;
    expect(await at("/api/health")).toEqual({
      outcome: "skipped",
      held: false,
      heldMs: 0,
      retryAfterSeconds: 0,
      rules: [],
      headers: {},
    });
    expect(await at("/elsewhere")).toEqual({
      outcome: "allowed",
      held: false,
      heldMs: 0,
      retryAfterSeconds: 0,
      rules: [],
      headers: {},
    });
  });
});

describe("adminApi() in your own app", () => {
  it("answers a path that only reads as under its prefix 404, so that none of your handlers gets it", async () => {
    const token = "lib-admin-token";
    const app = new Hono<{ Bindings: typeof env }>();
    app.use("*", adminApi());
    app.all("*", (c) => c.text("your handler"));
    const vars = { ...env, ADMIN_TOKEN: token };
    for (const path of ["/__RATELIMIT/rules", "/__ratelimit%2Frules", "/x/..;/__ratelimit/rules"]) {
      const res = await app.request(path, { headers: { authorization: `Bearer ${token}` } }, vars);
      expect(res.status, path).toBe(404);
    }
    const own = await app.request("/__ratelimitx/rules", { headers: { authorization: `Bearer ${token}` } }, vars);
    expect(await own.text()).toBe("your handler");
  });
});

describe("an override of a client that rateLimit({ key }) names", () => {
  it.each([
    ["a deny", { deny: true }, 403],
    ["a lower limit", { limit: 1 }, 429],
  ])("%s reaches it: the admin API names it key()=<what your key function returned>", async (_, override, status) => {
    const token = "key-fn-admin-token";
    const id = `key-fn-${Date.now()}-${status}`;
    const app = new Hono<{ Bindings: typeof env; Variables: { user: string } }>();
    app.use("*", adminApi());
    app.use("*", async (c, next) => {
      c.set("user", c.req.header("x-user") ?? "anonymous");
      await next();
    });
    app.use("*", rateLimit({ rules: { id, limit: 5, period: "1m" }, key: (c) => c.get("user") }));
    app.get("*", (c) => c.text("ok"));
    const vars = { ...env, ADMIN_TOKEN: token };
    const user = `user-${crypto.randomUUID()}`;
    const admin = (method: string, body?: unknown) =>
      app.request(
        `/__ratelimit/overrides?rule=${id}&key=${encodeURIComponent(`key()=${user}`)}`,
        {
          method,
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        },
        vars,
      );
    const put = await admin("PUT", override);
    expect(put.status, await put.clone().text()).toBe(200);
    expect(((await put.json()) as { keyParams: string[] }).keyParams).toEqual([`key()=${user}`]);
    const asUser = () => app.request("/", { headers: { "x-user": user, "cf-connecting-ip": uniqueIp() } }, vars);
    const statuses = [(await asUser()).status, (await asUser()).status];
    expect(statuses).toEqual(status === 403 ? [403, 403] : [200, 429]);
    // Another user keeps the rule's own limit.
    const other = await app.request(
      "/",
      { headers: { "x-user": "someone-else", "cf-connecting-ip": uniqueIp() } },
      vars,
    );
    expect(other.status).toBe(200);
  });
});

describe("key()= under a rule no key function counts by", () => {
  it("is refused (400): it would name no client, and an operator would believe a change applied", async () => {
    const token = "no-key-fn-admin-token";
    const id = `no-key-fn-${Date.now()}`;
    const app = new Hono<{ Bindings: typeof env }>();
    app.use("*", adminApi());
    app.use("*", rateLimit({ rules: { id, limit: 5, period: "1m" } }));
    app.get("*", (c) => c.text("ok"));
    const put = await app.request(
      `/__ratelimit/overrides?rule=${id}&key=${encodeURIComponent("key()=u42")}`,
      {
        method: "PUT",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ deny: true }),
      },
      { ...env, ADMIN_TOKEN: token },
    );
    expect(put.status).toBe(400);
    expect(await put.text()).toContain("counts no client by a rateLimit({ key }) function");
  });
});

describe("a key function that returns an empty string", () => {
  it("names no client: the rule's own key counts the request (here its IP), not one bucket for every such request", async () => {
    const id = `empty-key-${Date.now()}`;
    const app = new Hono<{ Bindings: typeof env }>();
    app.use("*", rateLimit({ rules: { id, limit: 1, period: "1m" }, key: (c) => c.req.header("x-user") ?? "" }));
    app.get("*", (c) => c.text("ok"));
    const from = (ip: string) => app.request("/", { headers: { "x-user": "", "cf-connecting-ip": ip } }, env);
    const [a, b] = [uniqueIp(), uniqueIp()];
    expect([(await from(a)).status, (await from(b)).status, (await from(a)).status]).toEqual([200, 200, 429]);
  });
});

describe('c.get("rateLimit") when the limiter turns a request away', () => {
  it("says a client an override denies was denied (403)", async () => {
    const token = "dec-admin-token";
    const app = new Hono<{ Bindings: typeof env }>();
    const seen: RateLimitDecision[] = [];
    app.use("*", adminApi());
    app.use("*", async (c, next) => {
      await next();
      seen.push(c.get("rateLimit"));
    });
    app.use("*", rateLimit({ rules: { id: "dec-deny", limit: 5, period: "1m" } }));
    app.get("*", (c) => c.text("ok"));
    const vars = { ...env, ADMIN_TOKEN: token };
    const ip = uniqueIp();
    const put = await app.request(
      `/__ratelimit/overrides?rule=dec-deny&key=${ip}`,
      {
        method: "PUT",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ deny: true }),
      },
      vars,
    );
    expect(put.status).toBe(200);
    const res = await app.request("/", { headers: { "cf-connecting-ip": ip } }, vars);
    expect(res.status).toBe(403);
    expect(seen.at(-1)).toMatchObject({
      outcome: "denied",
      rules: [expect.objectContaining({ id: "dec-deny", allowed: false })],
    });
  });

  it("says a request an adaptive rule's lowered limit refused was shed (503), and which rule shed it", async () => {
    const isolate = createIsolate();
    const rule: RuleInput = { id: `dec-shed-${Date.now()}`, limit: 20, period: "1m", adaptive: { latency: "1s" } };
    const seen: RateLimitDecision[] = [];
    const app = new Hono<{ Bindings: typeof env }>();
    app.use("*", async (c, next) => {
      await next();
      seen.push(c.get("rateLimit"));
    });
    app.use("*", rateLimit({ rules: rule, isolate }));
    app.get("/", (c) => c.text("down for now", 503));
    const factor = () => isolate.adaptive.get(rule.id)?.factor ?? 1;
    const startedAt = Date.now();
    while (factor() === 1 && Date.now() - startedAt < 8_000) {
      await Promise.all(
        Array.from({ length: 8 }, () => app.request("/", { headers: { "cf-connecting-ip": uniqueIp() } }, env)),
      );
      await new Promise((resolve) => setTimeout(resolve, 30));
    }
    expect(factor()).toBeLessThan(1);
    // One client past the lowered limit, still under the rule's own 20.
    const ip = uniqueIp();
    seen.length = 0;
    for (let i = 0; i < 20 && !seen.some((d) => d.outcome === "shed"); i++) {
      await app.request("/", { headers: { "cf-connecting-ip": ip } }, env);
    }
    const shed = seen.find((d) => d.outcome === "shed");
    expect(shed).toBeDefined();
    expect(shed!.retryAfterSeconds).toBeGreaterThan(0);
    expect(shed!.rules).toEqual([expect.objectContaining({ id: rule.id, allowed: false, shed: true })]);
    expect(shed!.rules[0]!.limit).toBeLessThan(20);
  });
});
