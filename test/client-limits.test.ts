/**
 * The client-limits endpoint (`CLIENT_LIMITS_PATH`): a client reads its own
 * limits, in the terms of the `RateLimit` headers, without spending a
 * request; identified as the rules identify it, it sees every rule it is
 * under and nothing of another client; and it is limited itself.
 */
import { Hono } from "hono";
import { beforeAll, describe, expect, it } from "vitest";
import { ADMIN_PATHS, DASHBOARD_PATHS } from "../src/config/admin-prefix.ts";
import { readConfiguration } from "../src/config/configuration.ts";
import { parseSettings } from "../src/config/settings.ts";
import { type ClientLimits, clientLimits, type RuleInput, type RuleLimit, rateLimit } from "../src/lib.ts";
import { ADMIN_ROUTES } from "../src/worker/admin/api.ts";
import { CLIENT_LIMITS_RULE } from "../src/worker/client-limits.ts";
import { hangObject } from "./support/chaos.ts";
import { env } from "./support/env.ts";
import { from, limiter, originHits, uniqueIp, uniqueTag } from "./support/limiter.ts";
import { expectErrorLogs } from "./support/logs.ts";
import { storedRows } from "./support/objects.ts";
import { bearer, keySet, type SigningKey, signingKey, tokenFor } from "./support/tokens.ts";

const PATH = "/rate_limit";

/** What is left under a rule, if the endpoint says (a rule counted per path does not). */
const remainingOf = (rule: ClientLimits["rules"][number] | undefined): number | undefined =>
  rule !== undefined && "remaining" in rule ? rule.remaining : undefined;
const on = { CLIENT_LIMITS_PATH: PATH };

/** What the endpoint answered, for the rules by id. */
async function limitsOf(res: Response): Promise<Record<string, ClientLimits["rules"][number]>> {
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("application/json");
  expect(res.headers.get("cache-control")).toBe("no-store");
  const body = (await res.json()) as ClientLimits;
  return Object.fromEntries(body.rules.map((rule) => [rule.id, rule]));
}

const api = { id: "cl-api", path: "/api/*", limit: 10, period: "1h" };
const login = { id: "cl-login", path: "/login", methods: ["POST"], limit: 5, period: "1m" };

/** PUTs `override` for the client at `ip` under `rule`, with the admin token these tests set. */
const putOverride = (send: ReturnType<typeof limiter>, rule: string, ip: string, override: unknown) =>
  send(`/__ratelimit/overrides?rule=${rule}&key=${ip}`, {
    method: "PUT",
    headers: { authorization: "Bearer cl-admin-token", "content-type": "application/json" },
    body: JSON.stringify(override),
  });

describe("the endpoint is off unless CLIENT_LIMITS_PATH is set", () => {
  it("proxies and counts its path like any other while unset", async () => {
    const send = limiter([{ id: "cl-all", limit: 10, period: "1m" }]);
    const tag = uniqueTag("cl-off");
    const res = await send(PATH, from(uniqueIp(), { "x-test-tag": tag }));
    expect(res.status).toBe(200);
    expect(res.headers.get("x-origin")).toBe("test-origin");
    expect(res.headers.get("ratelimit")).toMatch(/^"cl-all";r=9;t=\d+$/);
    expect(await originHits(tag)).toBe(1);
  });

  it.each([
    ["rate_limit", "no leading slash"],
    ["/rate_limit/", "a trailing slash"],
    ["/a/../rate_limit", "a dot segment"],
    ["/rate limit", "a space"],
  ])("refuses CLIENT_LIMITS_PATH = %j (%s), naming the variable", (value) => {
    const parsed = parseSettings({ CLIENT_LIMITS_PATH: value });
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) {
      expect(parsed.errors).toEqual([
        `CLIENT_LIMITS_PATH: must be a path such as "/rate_limit": segments of [A-Za-z0-9._~-], not "." or "..", no trailing slash; got ${JSON.stringify(value)}`,
      ]);
    }
  });
});

describe("a client reads its own limits", () => {
  it("says never, with no reset, for a rule whose cost no wait admits (more than a token bucket's burst), as the headers do", async () => {
    const rule = { id: "cl-never", path: "/big", limit: 30, period: "1h", burst: 20, cost: 25 };
    const send = limiter([rule], on);
    const ip = uniqueIp();
    const refused = await send("/big", from(ip));
    expect([refused.status, refused.headers.get("ratelimit"), refused.headers.get("x-ratelimit-reset")]).toEqual([
      429,
      '"cl-never";r=0',
      null,
    ]);
    const limits = await limitsOf(await send(PATH, from(ip)));
    expect(limits["cl-never"]).toEqual({
      kind: "bucket",
      id: "cl-never",
      limit: 20,
      remaining: 0,
      allowed: false,
      shed: false,
      windowSeconds: 2400,
      never: true,
    });
  });

  it("answers every rule the client is under: limit, remaining and reset, as the RateLimit headers state them", async () => {
    const send = limiter([api, login], on);
    const ip = uniqueIp();
    let last: Response | undefined;
    for (let i = 0; i < 3; i++) last = await send("/api/orders", from(ip));
    const stated = /^"cl-api";r=(\d+);t=(\d+)$/.exec(last!.headers.get("ratelimit") ?? "");
    expect(stated?.[1]).toBe("7");
    const limits = await limitsOf(await send(PATH, from(ip)));
    expect(Object.keys(limits)).toEqual(["cl-api", "cl-login"]);
    const own = limits["cl-api"] as Required<RuleLimit>;
    expect(own).toMatchObject({
      kind: "window",
      limit: 10,
      remaining: 7,
      windowSeconds: 3600,
      allowed: true,
      shed: false,
    });
    // The reset the last response stated, read a moment later: t then, and the instant of X-RateLimit-Reset
    // (each rounded up to a whole second, so a second boundary passed in between moves it by one).
    expect(own.resetSeconds).toBeLessThanOrEqual(Number(stated![2]));
    expect(own.resetSeconds).toBeGreaterThanOrEqual(Number(stated![2]) - 1);
    const resetAt = Number(last!.headers.get("x-ratelimit-reset"));
    expect(own.resetEpochSeconds).toBeGreaterThanOrEqual(resetAt);
    expect(own.resetEpochSeconds).toBeLessThanOrEqual(resetAt + 1);
    expect(limits["cl-login"]).toMatchObject({
      kind: "window",
      limit: 5,
      remaining: 5,
      windowSeconds: 60,
      allowed: true,
    });
  });

  it("counts against nothing: reading it twenty times leaves every count as it was", async () => {
    const send = limiter([api, login], on);
    const ip = uniqueIp();
    await send("/api/orders", from(ip));
    const before = await storedRows(ip);
    for (let i = 0; i < 20; i++)
      expect((await limitsOf(await send(PATH, from(ip))))["cl-api"]).toMatchObject({ remaining: 9 });
    expect(await storedRows(ip)).toEqual(before);
    const next = await send("/api/orders", from(ip));
    expect(next.headers.get("ratelimit")).toMatch(/^"cl-api";r=8;t=\d+$/);
  });

  it("says a rule refuses, and until when, once the client is over it", async () => {
    const send = limiter([{ ...login, limit: 2 }], on);
    const ip = uniqueIp();
    for (let i = 0; i < 2; i++) expect((await send("/login", { ...from(ip), method: "POST" })).status).toBe(200);
    const refused = await send("/login", { ...from(ip), method: "POST" });
    expect(refused.status).toBe(429);
    const wait = Number(refused.headers.get("retry-after"));
    const limits = await limitsOf(await send(PATH, from(ip)));
    expect(limits["cl-login"]).toMatchObject({ remaining: 0, allowed: false });
    const { resetSeconds } = limits["cl-login"] as Required<RuleLimit>;
    expect(resetSeconds).toBeGreaterThanOrEqual(wait - 1);
    expect(resetSeconds).toBeLessThanOrEqual(wait);
  });

  it("answers every spelling of its path, HEAD without a body, and 405 to other methods; never the origin", async () => {
    const send = limiter([{ id: "cl-everything", limit: 100, period: "1m" }], on);
    const ip = uniqueIp();
    const tag = uniqueTag("cl-spellings");
    for (const path of [
      "/rate_limit",
      "/RATE_LIMIT",
      "/rate_limit/",
      "//rate_limit",
      "/rate%5Flimit",
      "/rate_limit;x=1",
      "/rate_limit?x=1",
    ]) {
      const res = await send(path, from(ip, { "x-test-tag": tag }));
      expect(Object.keys(await limitsOf(res)), path).toEqual(["cl-everything"]);
    }
    const head = await send(PATH, { ...from(ip, { "x-test-tag": tag }), method: "HEAD" });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");
    const post = await send(PATH, { ...from(ip, { "x-test-tag": tag }), method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    expect(await originHits(tag)).toBe(0);
    // Only its path: one below it is an ordinary path, counted and proxied.
    const below = await send(`${PATH}/x`, from(ip, { "x-test-tag": tag }));
    expect(below.headers.get("x-origin")).toBe("test-origin");
    expect(await originHits(tag)).toBe(1);
    expect((await limitsOf(await send(PATH, from(ip))))["cl-everything"]).toMatchObject({ remaining: 99 });
  });

  // Spellings an origin or a proxy in front of it may read as the path, though the rules' matching path does not.
  it.each([
    "/v1%2frate_limit",
    "/v1%2Frate_limit",
    "/v1%5crate_limit",
    "/%2fv1/rate_limit",
    "/v1/rate%255flimit",
    "/v1/rate_limit%3bx=1",
    "/v1/x%2f..%2frate_limit",
    "/V1%2FRATE_LIMIT/",
  ])("answers %s, which some origin reads as its path, itself: never counted, never the origin", async (path) => {
    const send = limiter([{ id: "cl-everything", limit: 100, period: "1m" }], { CLIENT_LIMITS_PATH: "/v1/rate_limit" });
    const ip = uniqueIp();
    const tag = uniqueTag("cl-loose");
    const res = await send(path, from(ip, { "x-test-tag": tag }));
    expect(res.headers.get("x-origin")).toBeNull();
    expect(await originHits(tag)).toBe(0);
    expect((await limitsOf(res))["cl-everything"]).toMatchObject({ remaining: 100 });
  });

  it.each(["/v1/rate_limit%2fx", "/v1/rate_limitx", "/v1%2frate_limit%2f..%2f..%2fother"])(
    "counts and proxies %s, which no origin reads as its path",
    async (path) => {
      const send = limiter([{ id: "cl-everything", limit: 100, period: "1m" }], {
        CLIENT_LIMITS_PATH: "/v1/rate_limit",
      });
      const tag = uniqueTag("cl-not-loose");
      const res = await send(path, from(uniqueIp(), { "x-test-tag": tag }));
      expect(res.headers.get("x-origin")).toBe("test-origin");
      expect(await originHits(tag)).toBe(1);
    },
  );

  it("answers at its path under the admin API's prefix, without the admin token", async () => {
    const send = limiter([api], { CLIENT_LIMITS_PATH: "/__ratelimit/me", ADMIN_TOKEN: "cl-admin-token" });
    const limits = await limitsOf(await send("/__ratelimit/me", from(uniqueIp())));
    expect(limits["cl-api"]).toMatchObject({ remaining: 10 });
  });

  it("knows every path the admin API answers: the dashboard's files and its routes", () => {
    expect([...ADMIN_PATHS].sort()).toEqual([...DASHBOARD_PATHS, ...Object.keys(ADMIN_ROUTES)].sort());
  });

  it.each(ADMIN_PATHS.filter((rest) => rest !== "/"))(
    "is refused at the admin API's path {prefix}%s, which it would hide: an error naming it, and the endpoint off",
    (rest) => {
      const path = `/__RateLimit${rest}`;
      const { errors, settings } = readConfiguration({ CLIENT_LIMITS_PATH: path, ADMIN_PREFIX: "/__RateLimit" });
      expect(errors).toEqual([
        `CLIENT_LIMITS_PATH: "${path}" is a path of the admin API (${path}, the dashboard or a route), which it would hide, since it is answered first; the endpoint is off. Choose a path of its own, such as "/rate_limit" or "/__RateLimit/me"`,
      ]);
      expect(settings.clientLimitsPath).toBeNull();
    },
  );

  it.each([
    ["/__ratelimit", 200, "text/html; charset=utf-8"],
    ["/__ratelimit/dashboard.js", 200, "text/javascript; charset=utf-8"],
    // A configuration with an error: the admin API answers its token holders 500, naming it (docs/configuration.md).
    ["/__ratelimit/rules", 500, "application/problem+json"],
  ])("leaves %s to the admin API when CLIENT_LIMITS_PATH names it: %i, %s", async (path, status, type) => {
    const token = "cl-admin-token";
    const send = limiter([api], { CLIENT_LIMITS_PATH: path, ADMIN_TOKEN: token });
    const res = await send(path, from(uniqueIp(), { authorization: `Bearer ${token}` }));
    expect([res.status, res.headers.get("content-type")]).toEqual([status, type]);
    const body = await res.text();
    // Not the endpoint's answer, which lists the client's rules with what is left of each.
    expect(body).not.toContain('"remaining"');
    if (status === 500) {
      expect(body).toContain(`CLIENT_LIMITS_PATH: \\"${path}\\" is a path of the admin API`);
      expectErrorLogs("invalid_config");
    }
  });

  it("answers 503 when the client's object cannot be read in time, and logs it", async () => {
    const send = limiter([api], { ...on, LIMITER_TIMEOUT_MS: "50" });
    const ip = uniqueIp();
    const { over } = await hangObject(ip, 400);
    const res = await send(PATH, from(ip));
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ type: "urn:edge-rate-limiter:limiter-unavailable", status: 503 });
    expect(expectErrorLogs("client_limits_unavailable")).toEqual([
      expect.objectContaining({ message: "no answer within 50ms" }),
    ]);
    await over;
  });
});

describe("never another client's data, nor a rule the client is not under", () => {
  it.each([
    ["X-Forwarded-For", "x-forwarded-for"],
    ["X-Real-IP", "x-real-ip"],
    ["True-Client-IP", "true-client-ip"],
    ["Forwarded", "forwarded"],
  ])("a client naming another's IP in %s (not trusted) reads its own counts", async (_, header) => {
    const send = limiter([api], on);
    const [victim, caller] = [uniqueIp(), uniqueIp()];
    for (let i = 0; i < 4; i++) await send("/api/orders", from(victim));
    const value = header === "forwarded" ? `for=${victim}` : victim;
    expect((await limitsOf(await send(PATH, from(caller, { [header]: value }))))["cl-api"]).toMatchObject({
      remaining: 10,
    });
    expect((await limitsOf(await send(PATH, from(victim))))["cl-api"]).toMatchObject({ remaining: 6 });
  });

  it("reads the IP from the trusted header when the operator names one, as the rules do", async () => {
    const send = limiter([api], { ...on, TRUSTED_IP_HEADER: "X-Real-IP" });
    const [behind, proxy] = [uniqueIp(), uniqueIp()];
    for (let i = 0; i < 3; i++) await send("/api/orders", from(proxy, { "x-real-ip": behind }));
    expect((await limitsOf(await send(PATH, from(proxy, { "x-real-ip": behind }))))["cl-api"]).toMatchObject({
      remaining: 7,
    });
  });

  it("leaves out a rule whose ips leave the client out, a shadow rule, and a rule an override lifts for it", async () => {
    const token = "cl-admin-token";
    const rules = [
      api,
      { id: "cl-partners", limit: 50, period: "1m", ips: ["192.0.2.0/24"] },
      { id: "cl-shadow", limit: 1, period: "1m", action: "log" },
      { id: "cl-lifted", limit: 3, period: "1m" },
    ];
    const send = limiter(rules, { ...on, ADMIN_TOKEN: token });
    const ip = uniqueIp();
    expect((await putOverride(send, "cl-lifted", ip, { unlimited: true })).status).toBe(200);
    expect(Object.keys(await limitsOf(await send(PATH, from(ip))))).toEqual(["cl-api"]);
    // A partner's address is under its rule.
    expect(Object.keys(await limitsOf(await send(PATH, from("192.0.2.17"))))).toEqual([
      "cl-api",
      "cl-partners",
      "cl-lifted",
    ]);
  });

  it("lists a rule keyed by path with its policy and what it counts per, and no count", async () => {
    const send = limiter([{ id: "cl-per-path", path: "/api/*", limit: 4, period: "1m", key: ["ip", "path"] }], on);
    const ip = uniqueIp();
    await send("/api/a", from(ip));
    expect(await limitsOf(await send(PATH, from(ip)))).toEqual({
      "cl-per-path": { id: "cl-per-path", kind: "window", limit: 4, windowSeconds: 60, countedPer: ["path"] },
    });
  });
});

describe("every kind of rule", () => {
  let key: SigningKey;
  beforeAll(async () => {
    key = await signingKey("ES256");
  });

  it("a token-keyed rule: the verified token's claim is the client; another's name in an unsigned claim is not", async () => {
    const jwt = { JWT_JWKS: JSON.stringify(keySet(key)), JWT: { audience: "api" } };
    const send = limiter([{ id: "cl-per-user", limit: 6, period: "1h", key: ["jwt:sub|ip"] }], {
      ...on,
      ...jwt,
    } as never);
    const [alice, bob] = [`user-${crypto.randomUUID()}`, `user-${crypto.randomUUID()}`];
    const aliceToken = await tokenFor(key, { sub: alice, aud: "api" });
    for (let i = 0; i < 2; i++) await send("/x", from(uniqueIp(), bearer(aliceToken)));
    // Alice, from any address.
    const own = await limitsOf(await send(PATH, from(uniqueIp(), bearer(aliceToken))));
    expect(own["cl-per-user"]).toMatchObject({ limit: 6, remaining: 4 });
    // Bob's own token: his own count.
    const bobs = await limitsOf(
      await send(PATH, from(uniqueIp(), bearer(await tokenFor(key, { sub: bob, aud: "api" })))),
    );
    expect(bobs["cl-per-user"]).toMatchObject({ remaining: 6 });
    // Alice's sub in a token signed by a key the limiter does not know: not Alice, but the caller's IP.
    const stranger = await signingKey("ES256");
    const forged = await tokenFor(stranger, { sub: alice, aud: "api" });
    expect((await limitsOf(await send(PATH, from(uniqueIp(), bearer(forged)))))["cl-per-user"]).toMatchObject({
      remaining: 6,
    });
  });

  it("a concurrency rule: the places free now, with no window and no reset", async () => {
    const send = limiter([{ id: "cl-places", concurrency: 2 }], on);
    const ip = uniqueIp();
    const read = async () => (await limitsOf(await send(PATH, from(ip))))["cl-places"];
    expect(await read()).toEqual({
      kind: "concurrency",
      id: "cl-places",
      limit: 2,
      remaining: 2,
      allowed: true,
      shed: false,
    });
    const inFlight = send("/slow/1500", from(ip));
    let seen = await read();
    for (let i = 0; i < 20 && remainingOf(seen) === 2; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      seen = await read();
    }
    expect(seen).toMatchObject({ remaining: 1, allowed: true });
    const answered = await inFlight;
    expect(answered.status).toBe(200);
    // Its place goes back once its body has been sent.
    await answered.text();
    for (let i = 0; i < 20 && remainingOf(seen) === 1; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      seen = await read();
    }
    expect(seen).toMatchObject({ remaining: 2 });
  });

  it("a held rule (max_delay): while a request is held for its turn, none is left until the turn", async () => {
    const send = limiter([{ id: "cl-held", limit: 1, period: "2s", max_delay: "3s" }], on);
    const ip = uniqueIp();
    expect((await send("/x", from(ip))).status).toBe(200);
    const held = send("/x", from(ip));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const limits = await limitsOf(await send(PATH, from(ip)));
    expect(limits["cl-held"]).toMatchObject({
      kind: "window",
      limit: 1,
      remaining: 0,
      allowed: false,
      windowSeconds: 2,
    });
    const { resetSeconds } = limits["cl-held"] as Required<RuleLimit>;
    expect(resetSeconds).toBeGreaterThanOrEqual(1);
    expect(resetSeconds).toBeLessThanOrEqual(4);
    const answered = await held;
    expect(answered.status).toBe(200);
    expect(answered.headers.get("server-timing")).toMatch(/^ratelimit;desc="held";dur=\d+$/);
  });
});

describe("what applies to the client now", () => {
  it("under a block_for penalty, counts to the penalty's end", async () => {
    const send = limiter([{ id: "cl-penalty", limit: 2, period: "1m", block_for: "5m" }], on);
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await send("/x", from(ip))).status);
    expect(statuses).toEqual([200, 200, 429]);
    const rule = (await limitsOf(await send(PATH, from(ip))))["cl-penalty"] as Required<RuleLimit>;
    expect(rule).toMatchObject({ remaining: 0, allowed: false });
    expect(rule.resetSeconds).toBeGreaterThan(295);
    expect(rule.resetSeconds).toBeLessThanOrEqual(300);
  });

  it("for a client an override denies, says no request is admitted until the override ends", async () => {
    const token = "cl-admin-token";
    const send = limiter([api], { ...on, ADMIN_TOKEN: token });
    const ip = uniqueIp();
    const until = new Date(Date.now() + 600_000).toISOString();
    expect((await putOverride(send, "cl-api", ip, { deny: true, expires: until })).status).toBe(200);
    expect((await send("/api/orders", from(ip))).status).toBe(403);
    const rule = (await limitsOf(await send(PATH, from(ip))))["cl-api"] as Required<RuleLimit>;
    expect(rule).toMatchObject({ remaining: 0, allowed: false });
    expect(rule.resetSeconds).toBeGreaterThan(595);
    expect(rule.resetSeconds).toBeLessThanOrEqual(600);
  });

  it("for a client a lasting override denies (no expiry), says never, and names no reset", async () => {
    const token = "cl-admin-token";
    const send = limiter([api], { ...on, ADMIN_TOKEN: token });
    const ip = uniqueIp();
    expect((await putOverride(send, "cl-api", ip, { deny: true })).status).toBe(200);
    expect((await send("/api/orders", from(ip))).status).toBe(403);
    const rule = (await limitsOf(await send(PATH, from(ip))))["cl-api"];
    expect(rule).toEqual({
      kind: "window",
      id: "cl-api",
      limit: 10,
      remaining: 0,
      allowed: false,
      shed: false,
      windowSeconds: 3600,
      never: true,
    });
  });

  it("for a client a lasting override denies under a concurrency rule, says never too", async () => {
    const token = "cl-admin-token";
    const send = limiter([{ id: "cl-denied-places", concurrency: 2 }], { ...on, ADMIN_TOKEN: token });
    const ip = uniqueIp();
    expect((await putOverride(send, "cl-denied-places", ip, { deny: true })).status).toBe(200);
    expect((await send("/x", from(ip))).status).toBe(403);
    const rule = (await limitsOf(await send(PATH, from(ip))))["cl-denied-places"];
    expect(rule).toMatchObject({ kind: "concurrency", remaining: 0, allowed: false, never: true });
    const status = await send(`/__ratelimit/status?rule=cl-denied-places&key=${ip}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(await status.json()).toMatchObject({ override: "deny", limit: null, never: true });
  });
});

describe("the endpoint is itself limited", () => {
  it(`answers ${CLIENT_LIMITS_RULE.limit} reads a minute per client IP, then 429 with Retry-After and its own policy; other clients read on`, async () => {
    const send = limiter([api], on);
    const ip = uniqueIp();
    for (let i = 1; i <= CLIENT_LIMITS_RULE.limit; i++) {
      const res = await send(PATH, from(ip));
      expect(res.status).toBe(200);
      expect(res.headers.get("ratelimit-policy")).toBe('"client-limits";q=30;w=60');
      expect(res.headers.get("ratelimit")).toMatch(
        new RegExp(`^"client-limits";r=${CLIENT_LIMITS_RULE.limit - i};t=\\d+$`),
      );
      await res.arrayBuffer();
    }
    const refused = await send(PATH, from(ip));
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(await refused.json()).toMatchObject({ status: 429, "violated-policies": ["client-limits"] });
    // Its own requests are not limited by it, nor counted: the API is untouched.
    const real = await send("/api/orders", from(ip));
    expect(real.headers.get("ratelimit")).toMatch(/^"cl-api";r=9;t=\d+$/);
    expect((await send(PATH, from(uniqueIp()))).status).toBe(200);
  });
});

describe("clientLimits() in your own Hono app", () => {
  it("answers with the rules and the key your rateLimit() middlewares count with", async () => {
    const rules: RuleInput[] = [
      { id: "lib-cl-user", limit: 20, period: "1h" },
      { id: "lib-cl-burst", limit: 5, period: "10s" },
    ];
    const key = (c: { req: { header: (name: string) => string | undefined } }) => c.req.header("x-user");
    const app = new Hono<{ Bindings: typeof env }>();
    app.get("/rate_limit", clientLimits({ rules, key }));
    app.use("/api/*", rateLimit({ rules, key }));
    app.get("/api/*", (c) => c.text("ok"));
    const user = `u-${crypto.randomUUID()}`;
    for (let i = 0; i < 3; i++) {
      const res = await app.request("/api/x", { headers: { "x-user": user, "cf-connecting-ip": uniqueIp() } }, env);
      expect(res.status).toBe(200);
    }
    const res = await app.request("/rate_limit", { headers: { "x-user": user, "cf-connecting-ip": uniqueIp() } }, env);
    const limits = await limitsOf(res);
    expect(limits["lib-cl-user"]).toMatchObject({ limit: 20, remaining: 17 });
    expect(limits["lib-cl-burst"]).toMatchObject({ limit: 5, remaining: 2 });
  });
});
