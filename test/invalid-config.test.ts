/**
 * A Worker whose configuration has errors anyway, past the check every
 * deploy makes (a variable set in the dashboard, a secret, a `--var`): what
 * is invalid is left out and the rest applies. A request no valid rule
 * matches reaches the origin; every valid rule keeps its limit; an invalid
 * rule limits nothing; an invalid variable is at its default. The errors
 * are logged at error level, at once and then at most once per 10 s per
 * isolate, and the admin API answers every route 500 with all of them. The
 * one exception is where to forward: while `ORIGIN_URL`, or a set
 * `ORIGIN_SECRET` and its header, is invalid, nothing is forwarded (500).
 * Through the Worker, in front of the real origin.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { checkConfig } from "../src/config/check.ts";
import { readConfiguration } from "../src/config/configuration.ts";
import { isVariable } from "../src/config/variables.ts";
import { INVALID_CONFIG_LOG_EVERY_MS } from "../src/http/problem.ts";
import { env } from "./support/env.ts";
import { from, limiter, originHits, originUrl, statuses, uniqueIp, uniqueTag } from "./support/limiter.ts";
import { expectErrorLogs } from "./support/logs.ts";

const TOKEN = "test-admin-token-invalid-config-9c3f";
const bearer = { authorization: `Bearer ${TOKEN}` };

let ids = 0;
/** A rule of its own: `limit` requests a minute on `path`. */
const rule = (path: string, limit: number, fields: Record<string, unknown> = {}) => ({
  id: `rule-${++ids}`,
  path,
  limit,
  period: "1m",
  ...fields,
});
/** A rule with an error: `limit = 0`. */
const invalid = (path: string) => ({ ...rule(path, 5), limit: 0 });

afterEach(() => {
  vi.useRealTimers();
});

/** The errors check-config reports for what the Worker under `limiter(rules, vars)` runs with. */
function checkerErrors(rules: unknown, vars: Record<string, unknown>): string[] {
  const all = { ...env, ORIGIN_URL: originUrl(), ...vars, RULES: rules } as Record<string, unknown>;
  const variables = Object.fromEntries(Object.entries(all).filter(([name]) => isVariable(name)));
  return checkConfig({ vars: variables })
    .findings.filter((f) => f.level === "error")
    .map((f) => f.message);
}

/** `n` requests from one client to `path`, each tagged; their statuses, and how many reached the origin. */
async function sendMany(send: ReturnType<typeof limiter>, path: string, n: number, init: RequestInit = {}) {
  const tag = uniqueTag("invalid-config");
  const ip = uniqueIp();
  const headers = { ...(init.headers as Record<string, string> | undefined), "x-test-tag": tag };
  const codes = await statuses(n, () => send(path, { ...init, ...from(ip, headers) }));
  return { codes, hits: await originHits(tag) };
}

describe("a rule with an error is left out; every other rule applies, and a request no rule matches reaches the origin", () => {
  const api = rule("/api/*", 2);
  const login = { ...invalid("/login"), methods: ["POST"], on_error: "closed" };
  const send = limiter([api, login]);

  it("forwards a request no rule matches to the origin, unlimited and without rate-limit headers", async () => {
    const res = await send("/free", from(uniqueIp()));
    expect(res.status).toBe(200);
    expect(res.headers.has("ratelimit")).toBe(false);
    expect(await sendMany(send, "/free", 5)).toEqual({ codes: [200, 200, 200, 200, 200], hits: 5 });
    expectErrorLogs("invalid_config");
  });

  it("keeps the valid rule's limit: 429 past it, and only its policy in the headers", async () => {
    expect(await sendMany(send, "/api/x", 3)).toEqual({ codes: [200, 200, 429], hits: 2 });
    const res = await send("/api/y", from(uniqueIp()));
    expect(res.headers.get("ratelimit-policy")).toBe(`"${api.id}";q=2;w=60`);
    expectErrorLogs("invalid_config");
  });

  it("limits nothing with the invalid rule, on_error = closed or not: what it would match reaches the origin", async () => {
    expect(await sendMany(send, "/login", 6, { method: "POST" })).toEqual({
      codes: [200, 200, 200, 200, 200, 200],
      hits: 6,
    });
    expectErrorLogs("invalid_config");
  });
});

describe("each kind of error, and what is left out", () => {
  it("a rule variable that is not a list: its rules are left out, another variable's apply", async () => {
    const api = rule("/api/*", 1);
    const send = limiter([api], { RULES_AUTH: "[{" } as never);
    expect(await sendMany(send, "/api/x", 2)).toEqual({ codes: [200, 429], hits: 1 });
    expectErrorLogs("invalid_config");
  });

  it("a rule whose id an earlier one has: the later one is left out, the first applies", async () => {
    const first = rule("/a/*", 1);
    const send = limiter([first], { RULES_LATER: [{ ...rule("/b/*", 1), id: first.id }] } as never);
    expect(await sendMany(send, "/a/x", 2)).toEqual({ codes: [200, 429], hits: 1 });
    expect(await sendMany(send, "/b/x", 3)).toEqual({ codes: [200, 200, 200], hits: 3 });
    expectErrorLogs("invalid_config");
  });

  it("an invalid variable is at its default: IPv6 clients by /56, and the X-RateLimit headers sent", async () => {
    const send = limiter([rule("/v6/*", 1)], { IPV6_PREFIX: 200, LEGACY_HEADERS: "maybe" } as never);
    const first = await send("/v6/x", from("2001:db8:0:ff00::1"));
    expect(first.status).toBe(200);
    expect(first.headers.get("x-ratelimit-limit")).toBe("1");
    // Another address in the same /56: the same client.
    expect((await send("/v6/x", from("2001:db8:0:ffee::2"))).status).toBe(429);
    expectErrorLogs("invalid_config");
  });

  it("invalid token settings: the rules keyed on a token's claims are left out, the others apply", async () => {
    const perUser = rule("/u/*", 1, { key: ["jwt:sub"] });
    const perIp = rule("/p/*", 1);
    const send = limiter([perUser, perIp], { JWT: { audience: "api", colour: "blue" } } as never);
    expect(await sendMany(send, "/u/x", 3)).toEqual({ codes: [200, 200, 200], hits: 3 });
    expect(await sendMany(send, "/p/x", 2)).toEqual({ codes: [200, 429], hits: 1 });
    expectErrorLogs("invalid_config");
  });

  it("a tier's limit below a rule's cost, or above a concurrency rule's places: that limit is left out, the tier's others stay", () => {
    const costly = rule("/c/*", 100, { cost: 10 });
    const streams = { id: "streams", path: "/s/*", concurrency: 5 };
    const config = readConfiguration({
      RULES: [costly, streams],
      TIERS: { mixed: { [costly.id]: 9, streams: 20_000 }, fine: { [costly.id]: 50, streams: 7 } },
    });
    expect(config.errors).toHaveLength(2);
    const [c, s] = config.settings.rules;
    expect(c?.tiers).toEqual({ fine: 50 });
    expect(s?.tiers).toEqual({ fine: 7 });
    expect(config.settings.tiers).toEqual(
      new Map([
        ["mixed", new Map()],
        [
          "fine",
          new Map([
            [costly.id, 50],
            ["streams", 7],
          ]),
        ],
      ]),
    );
  });

  it("an invalid tier, or a tier's invalid limit: left out, the other tiers and limits stay", () => {
    const api = rule("/api/*", 100);
    const config = readConfiguration({
      RULES: [api],
      TIERS: { "bad name!": { [api.id]: 5 }, half: { [api.id]: 0, other: 3 }, whole: { [api.id]: 500 } },
    });
    expect(config.errors).toHaveLength(2);
    expect(config.settings.rules[0]?.tiers).toEqual({ whole: 500 });
    expect([...config.settings.tiers.keys()]).toEqual(["half", "whole"]);
  });
});

describe("where to forward: the one thing without which nothing is forwarded", () => {
  const api = rule("/api/*", 1);

  it.each([
    ["ORIGIN_URL with a path", { ORIGIN_URL: "http://127.0.0.1:1/base" }],
    ["ORIGIN_SECRET too short", { ORIGIN_SECRET: "short" }],
    [
      "ORIGIN_SECRET in a standard header",
      { ORIGIN_SECRET: "s3cret-value-that-is-long-enough", ORIGIN_SECRET_HEADER: "Origin" },
    ],
  ])("%s: every request that would be forwarded is answered 500, and the origin sees none", async (_, vars) => {
    const send = limiter([api], vars as never);
    const free = await sendMany(send, "/free", 2);
    expect(free).toEqual({ codes: [500, 500], hits: 0 });
    const res = await send("/free", from(uniqueIp()));
    expect(await res.json()).toMatchObject({ type: "urn:edge-rate-limiter:invalid-config", status: 500 });
    // The valid rule still counts and refuses.
    expect(await sendMany(send, "/api/x", 2)).toEqual({ codes: [500, 429], hits: 0 });
    expectErrorLogs("invalid_config");
  });

  it("ORIGIN_SECRET_HEADER invalid with no secret set: nothing goes in it, so requests are forwarded", async () => {
    const send = limiter([api], { ORIGIN_SECRET_HEADER: "Origin" });
    expect(await sendMany(send, "/free", 2)).toEqual({ codes: [200, 200], hits: 2 });
    expectErrorLogs("invalid_config");
  });
});

describe("the errors, where an operator sees them", () => {
  it("logs every error at error level: at once, then once per 10 s per isolate, however many requests meet them", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const rules = [rule("/api/*", 1000), invalid("/login")];
    const vars = { LIMITER_TIMEOUT_MS: 0 };
    const send = limiter(rules, vars as never);
    const requests = async (n: number) => {
      for (let i = 0; i < n; i++) await (await send(i % 2 ? "/api/x" : "/free", from(uniqueIp()))).arrayBuffer();
    };
    await requests(20);
    const first = expectErrorLogs("invalid_config");
    expect(first).toHaveLength(1);
    expect(first[0]).toMatchObject({ level: "error", errors: checkerErrors(rules, vars) });
    expect(first[0]?.errors).toHaveLength(2);
    vi.advanceTimersByTime(INVALID_CONFIG_LOG_EVERY_MS - 1);
    await requests(10);
    expect(expectErrorLogs("invalid_config")).toHaveLength(0);
    vi.advanceTimersByTime(1);
    await requests(10);
    expect(expectErrorLogs("invalid_config")).toEqual(first);
  });

  it.each(["/__ratelimit/rules", "/__ratelimit/stats", "/__ratelimit/overrides", "/__ratelimit/metrics"])(
    "the admin API answers %s 500 with every error, while requests go on",
    async (path) => {
      const rules = [rule("/api/*", 10), invalid("/login")];
      const send = limiter(rules, { ADMIN_TOKEN: TOKEN });
      const res = await send(path, { headers: bearer });
      expect(res.status).toBe(500);
      expect(await res.json()).toMatchObject({
        type: "urn:edge-rate-limiter:invalid-config",
        errors: checkerErrors(rules, {}),
      });
      expect((await send("/api/x", from(uniqueIp()))).status).toBe(200);
      expectErrorLogs("invalid_config");
    },
  );

  it("with an invalid ADMIN_PREFIX, a request that carries the admin token is answered 500 with every error, never forwarded; every other request goes on", async () => {
    const send = limiter([rule("/api/*", 10)], { ADMIN_TOKEN: TOKEN, ADMIN_PREFIX: "admin/" });
    for (const path of ["/admin/rules", "/__ratelimit/rules", "/api/x"]) {
      const tag = uniqueTag("bad-prefix");
      const res = await send(path, from(uniqueIp(), { ...bearer, "x-test-tag": tag }));
      expect(res.status).toBe(500);
      expect(await res.json()).toMatchObject({
        errors: [
          'ADMIN_PREFIX: must be a path such as "/__ratelimit": segments of [A-Za-z0-9._~-], no trailing slash; got "admin/"',
        ],
      });
      expect(await originHits(tag)).toBe(0);
    }
    expect(await sendMany(send, "/admin/rules", 2)).toEqual({ codes: [200, 200], hits: 2 });
    expect(await sendMany(send, "/api/x", 2, { headers: { authorization: "Bearer not-the-token" } })).toEqual({
      codes: [200, 200],
      hits: 2,
    });
    expectErrorLogs("invalid_config");
  });
});
