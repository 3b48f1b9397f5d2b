import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from "vitest";
import { parseSettings } from "../src/config/settings.ts";
import { formatDuration } from "../src/core/duration.ts";
import { canonicalKey, keyParams } from "../src/core/keys.ts";
import { requestPath } from "../src/core/paths.ts";
import type { Rule } from "../src/core/rules.ts";
import { requestFacts } from "../src/http/request-facts.ts";
import { adminKey } from "../src/worker/admin/key.ts";
import { hangObject } from "./support/chaos.ts";
import { from, limiter, originHits, statuses, uniqueIp, uniqueTag } from "./support/limiter.ts";

const TOKEN = "test-admin-token-6f1c2d9a4b7e";
const bearer = (token = TOKEN) => ({ authorization: `Bearer ${token}` });

/** The Worker with the admin API on; `admin(method, pathAndQuery)` calls it with the token. */
function withAdmin(rules: unknown[], vars: Record<string, string> = {}) {
  const send = limiter(rules, { ADMIN_TOKEN: TOKEN, ...vars });
  const admin = async (method: string, path: string) => {
    const res = await send(path, { method, headers: { ...bearer(), "cf-connecting-ip": "198.51.100.1" } });
    return {
      status: res.status,
      type: res.headers.get("content-type"),
      body: (await res.json()) as Record<string, unknown>,
    };
  };
  return { send, admin };
}

const q = (params: Record<string, string | string[]>) => {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) for (const v of [value].flat()) search.append(name, v);
  return search.toString();
};

describe("the admin API is off unless ADMIN_TOKEN is set", () => {
  it.each([
    ["unset", {}],
    ["empty", { ADMIN_TOKEN: "" }],
  ])(
    "with ADMIN_TOKEN %s, its prefix is an ordinary path: proxied and rate-limited like any other",
    async (_, vars) => {
      const send = limiter([{ id: "everything", limit: 10, period: "1m" }], vars);
      const tag = uniqueTag("admin-off");
      const res = await send("/__ratelimit/rules", from(uniqueIp(), { ...bearer(), "x-test-tag": tag }));
      expect(res.status).toBe(200);
      expect(res.headers.get("x-origin")).toBe("test-origin");
      expect(res.headers.get("ratelimit-policy")).toBe('"everything";q=10;w=60');
      expect(await res.json()).not.toHaveProperty("rules");
      expect(await originHits(tag)).toBe(1);
    },
  );
});

describe("authentication", () => {
  const send = limiter([{ id: "r", limit: 10, period: "1m" }], { ADMIN_TOKEN: TOKEN });

  it.each([
    ["no Authorization header", {}, 'Bearer realm="admin"'],
    ["a wrong token", bearer("wrong-token"), 'Bearer realm="admin", error="invalid_token"'],
    ["the token with one character more", bearer(`${TOKEN}x`), 'Bearer realm="admin", error="invalid_token"'],
    ["a prefix of the token", bearer(TOKEN.slice(0, -1)), 'Bearer realm="admin", error="invalid_token"'],
    [
      "the token as Basic credentials",
      { authorization: `Basic ${TOKEN}` },
      'Bearer realm="admin", error="invalid_token"',
    ],
    ["an empty bearer", { authorization: "Bearer " }, 'Bearer realm="admin", error="invalid_token"'],
  ])("refuses %s with 401 problem+json and a Bearer challenge, and proxies nothing", async (_, headers, challenge) => {
    const tag = uniqueTag("admin-401");
    const res = await send("/__ratelimit/rules", from(uniqueIp(), { ...headers, "x-test-tag": tag }));
    expect(res.status).toBe(401);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(res.headers.get("www-authenticate")).toBe(challenge);
    expect(await res.json()).toEqual({
      type: "about:blank",
      title: "Unauthorized",
      status: 401,
      detail: "Send the admin token: Authorization: Bearer <token>.",
    });
    expect(await originHits(tag)).toBe(0);
  });

  it("accepts the token with the scheme in any case", async () => {
    const res = await send("/__ratelimit/rules", { headers: { authorization: `bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
  });

  // `/__ratelimit` and `/__ratelimit/` are the dashboard's page, public (test/dashboard.test.ts).
  it.each(["/__ratelimit/nope", "/__ratelimit/index.html", "//__ratelimit//rules", "/%5F%5Fratelimit/rules"])(
    "answers %s itself, never proxying it: 401 without the token",
    async (path) => {
      const tag = uniqueTag("admin-prefix");
      const res = await send(path, from(uniqueIp(), { "x-test-tag": tag }));
      expect(res.status).toBe(401);
      expect(await originHits(tag)).toBe(0);
    },
  );

  it("proxies a path that only starts like the prefix", async () => {
    const tag = uniqueTag("admin-lookalike");
    const res = await send("/__ratelimitx/rules", from(uniqueIp(), { "x-test-tag": tag }));
    expect(res.headers.get("x-origin")).toBe("test-origin");
    expect(await originHits(tag)).toBe(1);
  });
});

describe("the prefix, however a path spells it", () => {
  const send = limiter([{ id: "r", limit: 100, period: "1m" }], { ADMIN_TOKEN: TOKEN });

  // What the Worker does with a spelling, with the admin token sent: the admin API answers it (200 for /rules),
  // it is refused (404) because some origin or proxy would read it as under the prefix, or it is an ordinary path.
  it.each([
    ["/__ratelimit/rules", "answered"],
    ["//__ratelimit//rules", "answered"],
    ["/%5f_ratelimit/rules", "answered"],
    ["/%5F%5Fratelimit/rules", "answered"],
    ["/x/../__ratelimit/rules", "answered"],
    ["/__ratelimit/./rules", "answered"],
    ["/x/%2e%2e/__ratelimit/rules", "answered"],
    ["/__RATELIMIT/rules", "refused"],
    ["/__RateLimit", "refused"],
    ["/__ratelimit;x=1/rules", "refused"],
    ["/__ratelimit;/rules", "refused"],
    ["/x/..;/__ratelimit/rules", "refused"],
    ["/x/%2e%2e;/__ratelimit/rules", "refused"],
    ["/__ratelimit%2frules", "refused"],
    ["/__ratelimit%2Frules", "refused"],
    ["/%2f__ratelimit/rules", "refused"],
    ["/x%2f..%2f__ratelimit/rules", "refused"],
    ["/__ratelimit%5crules", "refused"],
    ["/%255f_ratelimit/rules", "refused"],
    ["/__ratelimit%253brules", "refused"],
    ["/__ratelimit%3bx/rules", "refused"],
    ["/__ratelimitx/rules", "proxied"],
    ["/x/__ratelimit/rules", "proxied"],
    ["/__ratelimit_/rules", "proxied"],
    ["/__ratelimit%2erules", "proxied"],
  ])("%s with the token: %s, never forwarded with it", async (path, expected) => {
    for (const method of ["GET", "HEAD"]) {
      const tag = uniqueTag("admin-spelling");
      const res = await send(path, { method, ...from(uniqueIp(), { ...bearer(), "x-test-tag": tag }) });
      const outcome =
        res.headers.get("x-origin") === "test-origin" ? "forwarded" : res.status === 200 ? "answered" : res.status;
      // /rules allows GET alone: HEAD is answered 405.
      if (expected === "answered") expect(outcome, method).toBe(method === "GET" ? "answered" : 405);
      else if (expected === "refused") expect(outcome, method).toBe(404);
      // An ordinary path, but sent with the admin token: refused rather than forwarded with it.
      else expect(outcome, method).toBe(403);
      expect(await originHits(tag), method).toBe(0);
    }
  });

  it("refuses a spelling the admin API does not answer with the same 404 without the token, and forwards nothing", async () => {
    const tag = uniqueTag("admin-respelt");
    const res = await send("/__RATELIMIT/rules", from(uniqueIp(), { "x-test-tag": tag }));
    expect(res.status).toBe(404);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(await res.json()).toEqual({
      type: "about:blank",
      title: "Not Found",
      status: 404,
      detail:
        "This path reads as a path under the admin API's prefix once decoded or normalised, and is never forwarded to the origin; the admin API answers only /__ratelimit as written.",
    });
    expect(await originHits(tag)).toBe(0);
  });

  it("forwards an ordinary path sent without the admin token, or with another bearer token, with its Authorization", async () => {
    for (const headers of [{}, bearer("another-token"), bearer(TOKEN.slice(1)), bearer(TOKEN.toUpperCase())]) {
      const tag = uniqueTag("admin-other-token");
      const res = await send("/__ratelimitx/rules", from(uniqueIp(), { ...headers, "x-test-tag": tag }));
      expect(res.headers.get("x-origin")).toBe("test-origin");
      const echoed = (await res.json()) as { headers: [string, string][] };
      expect(new Map(echoed.headers).get("authorization")).toBe((headers as { authorization?: string }).authorization);
      expect(await originHits(tag)).toBe(1);
    }
  });

  it.each([
    ["two Authorization values, the token in the second", `Bearer other, Bearer ${TOKEN}`],
    ["another scheme", `Token ${TOKEN}`],
    ["no scheme", TOKEN],
    ["Basic, the token as the password", `Basic ${btoa(`x:${TOKEN}`)}`],
    ["Basic, the token as the user", `Basic ${btoa(`${TOKEN}:`)}`],
    // Inside a word: quoted, as a parameter, with punctuation stuck to it.
    ["Digest, the token as a quoted username", `Digest username="${TOKEN}"`],
    ["Digest, the token as a bare username", `Digest username=${TOKEN}`],
    ["Bearer, the token quoted", `Bearer "${TOKEN}"`],
    ["Bearer, the token in single quotes", `Bearer '${TOKEN}'`],
    ["Bearer, the token and a semicolon", `Bearer ${TOKEN};`],
    ["Bearer, the token and a parameter", `Bearer ${TOKEN};x=1`],
    ["Bearer, the token and a full stop", `Bearer ${TOKEN}.`],
    ["Bearer, the token as a parameter", `Bearer token=${TOKEN}`],
    ["Bearer, the token with more after it", `Bearer ${TOKEN}x`],
  ])(
    "refuses an ordinary path whose Authorization carries the admin token in any form (%s): 403, forwarded nowhere",
    async (_, authorization) => {
      const tag = uniqueTag("admin-token-form");
      const res = await send("/api/orders", from(uniqueIp(), { authorization, "x-test-tag": tag }));
      expect(res.status).toBe(403);
      expect(await originHits(tag)).toBe(0);
    },
  );

  it("refuses an ordinary path sent with the admin token 403, uncounted, and forwards nothing", async () => {
    const tag = uniqueTag("admin-token-leak");
    const ip = uniqueIp();
    const res = await send("/api/orders", from(ip, { authorization: `bearer  ${TOKEN} `, "x-test-tag": tag }));
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({
      type: "about:blank",
      title: "Forbidden",
      status: 403,
      detail:
        "This request carries the admin token, which is never forwarded to the origin: send it only to the admin API, under /__ratelimit.",
    });
    expect(await originHits(tag)).toBe(0);
    const next = await send("/api/orders", from(ip));
    // The refused request was not counted: the next is the client's first.
    expect(next.headers.get("ratelimit")).toMatch(/^"r";r=99;t=\d+$/);
  });
});

describe("routes", () => {
  it("answers an unknown admin path 404 and a wrong method 405, neither proxied", async () => {
    const { admin } = withAdmin([{ id: "r", limit: 1, period: 1 }]);
    expect(await admin("GET", "/__ratelimit/nope")).toEqual({
      status: 404,
      type: "application/problem+json",
      body: {
        type: "about:blank",
        title: "Not Found",
        status: 404,
        detail:
          "No admin route here. Routes: GET /__ratelimit/ (the dashboard), GET /__ratelimit/rules, GET and DELETE /__ratelimit/status?rule=<id>&key=<client> (or &hash=<hash>), GET and POST /__ratelimit/credits?rule=<id>&key=<client>, GET, PUT and DELETE /__ratelimit/overrides?rule=<id>&key=<client>, GET /__ratelimit/overrides, POST /__ratelimit/overrides/import, GET /__ratelimit/stats?minutes=<1-1440>, GET /__ratelimit/metrics.",
      },
    });
    const { status, body } = await admin("POST", "/__ratelimit/rules");
    expect([status, body.detail]).toEqual([405, "/__ratelimit/rules allows GET."]);
  });

  it("lives under ADMIN_PREFIX when set, and the default prefix is then an ordinary path", async () => {
    const { send, admin } = withAdmin([{ id: "r", limit: 10, period: "1m" }], { ADMIN_PREFIX: "/ops/limits" });
    expect((await admin("GET", "/ops/limits/rules")).status).toBe(200);
    const tag = uniqueTag("old-prefix");
    const res = await send("/__ratelimit/rules", from(uniqueIp(), { "x-test-tag": tag }));
    expect(res.headers.get("x-origin")).toBe("test-origin");
    expect(await originHits(tag)).toBe(1);
    // Though never with the admin token in it, as no ordinary path is.
    const withToken = await send("/__ratelimit/rules", from(uniqueIp(), { ...bearer(), "x-test-tag": tag }));
    expect(withToken.status).toBe(403);
    expect(await originHits(tag)).toBe(1);
  });

  it("with an invalid ADMIN_PREFIX, answers a request with the token 500 and forwards the others, rather than guess which paths are its own", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const send = limiter([{ id: "r", limit: 10, period: "1m" }], { ADMIN_TOKEN: TOKEN, ADMIN_PREFIX: "admin/" });
      const held = uniqueTag("bad-prefix-token");
      expect((await send("/admin/rules", from(uniqueIp(), { ...bearer(), "x-test-tag": held }))).status).toBe(500);
      expect(await originHits(held)).toBe(0);
      const passed = uniqueTag("bad-prefix");
      expect((await send("/api/x", from(uniqueIp(), { "x-test-tag": passed }))).status).toBe(200);
      expect(await originHits(passed)).toBe(1);
      expect(JSON.parse(String(error.mock.calls[0]![0])).errors).toEqual([
        'ADMIN_PREFIX: must be a path such as "/__ratelimit": segments of [A-Za-z0-9._~-], no trailing slash; got "admin/"',
      ]);
    } finally {
      error.mockRestore();
    }
  });

  it("GET /rules returns the validated rules, each field as wrangler.toml spells it", async () => {
    const { admin } = withAdmin(
      [
        { id: "api", path: "/api/*", exclude: "/api/health", limit: 100, period: 60, key: "ip" },
        {
          id: "login",
          path: ["/login", "/signin"],
          methods: ["post"],
          limit: 5,
          period: "90s",
          key: ["header:X-API-Key|ip", "path"],
          action: "log",
          on_error: "closed",
          precision: 6,
          strict: true,
          case_sensitive: true,
          block_for: 900,
        },
      ],
      { IPV6_PREFIX: "48", LIMITER_TIMEOUT_MS: "250" },
    );
    expect(await admin("GET", "/__ratelimit/rules")).toEqual({
      status: 200,
      type: "application/json",
      body: {
        rules: [
          {
            id: "api",
            path: ["/api/*"],
            methods: null,
            exclude: ["/api/health"],
            case_sensitive: false,
            limit: 100,
            period: "1m",
            periodMs: 60_000,
            key: ["ip"],
            action: "block",
            on_error: "open",
            precision: 1,
            strict: false,
            count: "all",
            cost: 1,
            block_for: null,
            blockForMs: 0,
            summary: "100 per 1m",
            credits: false,
          },
          {
            id: "login",
            path: ["/login", "/signin"],
            methods: ["POST"],
            exclude: [],
            case_sensitive: true,
            limit: 5,
            period: "90s",
            periodMs: 90_000,
            key: ["header:x-api-key|ip", "path"],
            action: "log",
            on_error: "closed",
            precision: 6,
            strict: true,
            count: "all",
            cost: 1,
            block_for: "15m",
            blockForMs: 900_000,
            summary: "5 per 90s",
            credits: false,
          },
        ],
        ipv6Prefix: 48,
        trustedIpHeader: null,
        timeoutMs: 250,
        // As wrangler.toml ships them: a tier naming rules this config lacks is shown, and ignored.
        tiers: { pro: { "api-per-key": 10000, login: 20 } },
      },
    });
  });

  it("GET /rules shows a concurrency rule by its places, and a rule that holds requests by its delay and bound", async () => {
    const { admin } = withAdmin([
      { id: "conc", path: "/ai/*", concurrency: 2, key: ["header:x-k"] },
      { id: "conc-held", path: "/ai/*", concurrency: 3, place_timeout: "20s", max_delay: "2s", max_held: 5 },
      { id: "rate-held", path: "/api/*", limit: 10, period: "1m", max_delay: "500ms" },
    ]);
    const { body } = await admin("GET", "/__ratelimit/rules");
    const [conc, concHeld, rateHeld] = (body as { rules: Record<string, unknown>[] }).rules;
    const common = { methods: null, exclude: [], case_sensitive: false, action: "block", on_error: "open" };
    expect(conc).toEqual({
      id: "conc",
      path: ["/ai/*"],
      ...common,
      concurrency: 2,
      place_timeout: "1m",
      placeTimeoutMs: 60_000,
      key: ["header:x-k"],
      summary: "2 in flight at once",
      credits: false,
    });
    expect(concHeld).toEqual({
      id: "conc-held",
      path: ["/ai/*"],
      ...common,
      concurrency: 3,
      place_timeout: "20s",
      placeTimeoutMs: 20_000,
      key: ["ip"],
      max_delay: "2s",
      maxDelayMs: 2_000,
      max_held: 5,
      summary: "3 in flight at once",
      credits: false,
    });
    expect(rateHeld).toMatchObject({ limit: 10, period: "1m", max_delay: "500ms", maxDelayMs: 500, max_held: 1000 });
    expect(rateHeld).not.toHaveProperty("concurrency");
  });

  it("GET /rules says each rule's limit in a line in its kind's words, and which rules keep usage and credits", async () => {
    const { body } = await withAdmin([
      { id: "window", limit: 100000, period: "1h" },
      { id: "bucket", limit: 10, period: "1s", burst: 20 },
      { id: "places", concurrency: 2 },
      { id: "monthly", quota: 100000, per: "month", timezone: "America/New_York" },
    ]).admin("GET", "/__ratelimit/rules");
    const rules = (body as { rules: { id: string; summary: string; credits: boolean }[] }).rules;
    expect(rules.map(({ id, summary, credits }) => ({ id, summary, credits }))).toEqual([
      { id: "window", summary: "100,000 per 1h", credits: false },
      { id: "bucket", summary: "10 per 1s, bursts of 20", credits: false },
      { id: "places", summary: "2 in flight at once", credits: false },
      { id: "monthly", summary: "100,000 per month (monthly on day 1 at 00:00 America/New_York)", credits: true },
    ]);
  });

  it("shows the configuration's problems to the token holder, with 500", async () => {
    const { admin } = withAdmin([{ id: "bad", limit: 0, period: "1m" }]);
    const { status, body } = await admin("GET", "/__ratelimit/rules");
    expect(status).toBe(500);
    expect(body.errors).toEqual(['RULES[0] "bad": field "limit": must be an integer from 1 to 1000000000; got 0']);
  });

  it.each([
    [60_000, "1m"],
    [90_000, "90s"],
    [1_500, "1500ms"],
    [86_400_000, "1d"],
    [7_200_000, "2h"],
  ])("spells a period of %i ms as %s", (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});

describe("GET /status peeks without counting", () => {
  it("reports a client's weighted count and remaining, and reading it five times counts nothing", async () => {
    const { send, admin } = withAdmin([{ id: "peek", limit: 10, period: "1h" }]);
    const ip = uniqueIp();
    await statuses(3, () => send("/x", from(ip)));
    for (let i = 0; i < 5; i++) {
      const { status, body } = await admin("GET", `/__ratelimit/status?${q({ rule: "peek", key: ip })}`);
      expect(status).toBe(200);
      expect(body).toEqual({
        rule: "peek",
        key: [["ip", ip]],
        keyHash: expect.stringMatching(/^[0-9a-f]{12}$/),
        limit: 10,
        periodMs: 3_600_000,
        weighted: 3,
        allowed: true,
        remaining: 7,
        retryAfterSeconds: 0,
        retryAfterMs: 0,
        resetSeconds: expect.any(Number),
        resetMs: expect.any(Number),
      });
    }
    const next = await send("/x", from(ip));
    expect(next.headers.get("x-ratelimit-remaining")).toBe("6");
  });

  it("reports a client it has never seen as having its whole limit", async () => {
    const { admin } = withAdmin([{ id: "fresh", limit: 4, period: "1m" }]);
    const { body } = await admin("GET", `/__ratelimit/status?${q({ rule: "fresh", key: uniqueIp() })}`);
    expect([body.weighted, body.remaining, body.allowed]).toEqual([0, 4, true]);
  });

  it("reports a blocked client's wait, the same Retry-After its 429 carried", async () => {
    const { send, admin } = withAdmin([{ id: "blocked", limit: 2, period: "1m" }]);
    const ip = uniqueIp();
    await statuses(2, () => send("/x", from(ip)));
    const refused = await send("/x", from(ip));
    expect(refused.status).toBe(429);
    const { body } = await admin("GET", `/__ratelimit/status?${q({ rule: "blocked", key: ip })}`);
    expect(body).toMatchObject({ weighted: 2, allowed: false, remaining: 0 });
    expect(body.retryAfterMs).toBeGreaterThan(0);
    expect(body.retryAfterSeconds).toBe(Math.ceil((body.retryAfterMs as number) / 1000));
    // A few milliseconds have passed since the 429; the wait can only have shrunk, by less than a second.
    expect(Number(refused.headers.get("retry-after")) - (body.retryAfterSeconds as number)).toBeGreaterThanOrEqual(0);
    expect(Number(refused.headers.get("retry-after")) - (body.retryAfterSeconds as number)).toBeLessThanOrEqual(1);
  });

  it("is never counted by the user's rules", async () => {
    const { send, admin } = withAdmin([{ id: "all-paths", limit: 1, period: "1h" }]);
    for (let i = 0; i < 5; i++) expect((await admin("GET", "/__ratelimit/rules")).status).toBe(200);
    // admin() calls come from 198.51.100.1; that client has used none of its 1 request.
    expect((await send("/x", from("198.51.100.1"))).status).toBe(200);
  });

  it("answers 503 when the client's object does not answer in time", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const { admin } = withAdmin([{ id: "slow", limit: 5, period: "1m" }], { LIMITER_TIMEOUT_MS: "100" });
      const ip = uniqueIp();
      const hang = await hangObject(ip, 400);
      const { status, body } = await admin("GET", `/__ratelimit/status?${q({ rule: "slow", key: ip })}`);
      expect([status, body.type, body.detail]).toEqual([
        503,
        "urn:edge-rate-limiter:limiter-unavailable",
        "The client's Durable Object did not answer: no answer within 100ms",
      ]);
      await hang.over;
    } finally {
      error.mockRestore();
    }
  });
});

/** A client that is blocked, and how an operator names it in `key`. */
const unblockCases = [
  {
    name: "an IPv4 client of an ip rule, by its address",
    key: ["ip"],
    client: () => from(uniqueIp()),
    keyParams: (init: RequestInit) => [new Headers(init.headers).get("cf-connecting-ip")!],
  },
  {
    name: "an IPv6 client of an ip rule, by another address of its /56",
    key: ["ip"],
    client: () => from(`2001:db8:${(Math.floor(Math.random() * 0xfff) + 1).toString(16)}:4a01::1`),
    keyParams: (init: RequestInit) => [
      new Headers(init.headers).get("cf-connecting-ip")!.replace("4a01::1", "4aff:ffff:ffff:ffff:ffff"),
    ],
  },
  {
    name: "an IPv6 client of an ip rule, by its /56 as the key spells it",
    key: ["ip"],
    client: () => from(`2001:db8:${(Math.floor(Math.random() * 0xfff) + 1).toString(16)}:4a01::1`),
    keyParams: (init: RequestInit) => [
      `${new Headers(init.headers).get("cf-connecting-ip")!.replace("4a01::1", "4a00::")}/56`,
    ],
  },
  {
    name: "an API key of a header rule, by its value",
    key: ["header:x-api-key"],
    client: () => from(uniqueIp(), { "x-api-key": uniqueTag("key") }),
    keyParams: (init: RequestInit) => [new Headers(init.headers).get("x-api-key")!],
  },
  {
    name: "an API key of a fallback rule, naming the header",
    key: ["header:x-api-key|ip"],
    client: () => from(uniqueIp(), { "x-api-key": uniqueTag("key") }),
    keyParams: (init: RequestInit) => [`header:X-Api-Key=${new Headers(init.headers).get("x-api-key")}`],
  },
  {
    name: "a keyless client of a fallback rule, naming the ip",
    key: ["header:x-api-key|ip"],
    client: () => from(uniqueIp()),
    keyParams: (init: RequestInit) => [`ip=${new Headers(init.headers).get("cf-connecting-ip")}`],
  },
  {
    name: "a client of a rule keyed by ip and cookie, one parameter each",
    key: ["ip", "cookie:session"],
    client: () => from(uniqueIp(), { cookie: `theme=dark; session=${uniqueTag("s")}` }),
    keyParams: (init: RequestInit) => {
      const headers = new Headers(init.headers);
      return [`cookie:session=${headers.get("cookie")!.split("session=")[1]}`, `ip=${headers.get("cf-connecting-ip")}`];
    },
  },
];

describe("DELETE /status unblocks a client", () => {
  it.each(unblockCases)("$name: 429, then DELETE, then 200", async ({ key, client, keyParams }) => {
    const id = `unblock-${uniqueTag("r").replace(/[^a-z0-9-]/g, "")}`.slice(0, 64);
    const { send, admin } = withAdmin([{ id, limit: 2, period: "1h", key }]);
    const init = client();
    expect(await statuses(3, () => send("/api/x", init))).toEqual([200, 200, 429]);
    const query = q({ rule: id, key: keyParams(init) });

    const before = await admin("GET", `/__ratelimit/status?${query}`);
    expect([before.status, before.body.weighted]).toEqual([200, 2]);
    const reset = await admin("DELETE", `/__ratelimit/status?${query}`);
    expect(reset).toEqual({
      status: 200,
      type: "application/json",
      body: { rule: id, key: before.body.key, keyHash: before.body.keyHash, reset: true },
    });
    expect(await statuses(1, () => send("/api/x", init))).toEqual([200]);
  });

  it("resets only the rule named: another rule of the same client keeps its count", async () => {
    const { send, admin } = withAdmin([
      { id: "tight", limit: 2, period: "1h" },
      { id: "loose", limit: 10, period: "1h" },
    ]);
    const ip = uniqueIp();
    expect(await statuses(3, () => send("/x", from(ip)))).toEqual([200, 200, 429]);
    await admin("DELETE", `/__ratelimit/status?${q({ rule: "tight", key: ip })}`);
    expect(await statuses(1, () => send("/x", from(ip)))).toEqual([200]);
    const loose = await admin("GET", `/__ratelimit/status?${q({ rule: "loose", key: ip })}`);
    const tight = await admin("GET", `/__ratelimit/status?${q({ rule: "tight", key: ip })}`);
    // The refused third request counted nowhere; the fourth counted in both.
    expect([loose.body.weighted, tight.body.weighted]).toEqual([3, 1]);
  });
});

describe("requests after a reset, in its very millisecond", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  // A bucket's lease forgoes up to a 32nd of its burst of refill (docs/token-bucket.md): 50 less 1.6, at the least.
  it.each([
    ["a sliding window", { limit: 50, period: "1h" }, 50],
    ["a token bucket", { limit: 1, period: "10s", burst: 50 }, 49],
  ])(
    "%s of 50: %i admitted, each counted once (leases from calls sent after the reset are kept)",
    async (_, fields, admitted) => {
      vi.useFakeTimers({ toFake: ["Date"] });
      vi.setSystemTime(Date.UTC(2031, 0, 1));
      const id = `same-ms-${uniqueTag("r").replace(/[^a-z0-9-]/g, "")}`.slice(0, 64);
      const { send, admin } = withAdmin([{ id, ...fields }]);
      const ip = uniqueIp();
      expect(await statuses(5, () => send("/x", from(ip)))).toEqual([200, 200, 200, 200, 200]);
      expect((await admin("DELETE", `/__ratelimit/status?${q({ rule: id, key: ip })}`)).status).toBe(200);
      // The clock stands still: every call after the reset is sent in its millisecond, after it. Found from outside:
      // each lease they brought was written off as sent before the reset, and 50 admitted 25.
      const after = await statuses(60, () => send("/x", from(ip)));
      expect(after.filter((s) => s === 200).length).toBeGreaterThanOrEqual(admitted);
    },
  );
});

describe("a bad rule or key is a 400 problem naming what is wrong", () => {
  const rules = [
    { id: "by-ip", limit: 5, period: "1m" },
    { id: "by-key-or-ip", limit: 5, period: "1m", key: "header:x-api-key|ip" },
    { id: "by-ip-and-path", limit: 5, period: "1m", key: ["ip", "path"] },
  ];
  const { admin } = withAdmin(rules, { IPV6_PREFIX: "56" });

  it.each([
    [
      { key: "1.2.3.4" },
      "unknown-rule",
      'The "rule" query parameter is required; rules: by-ip, by-key-or-ip, by-ip-and-path.',
    ],
    [{ rule: "nope", key: "1.2.3.4" }, "unknown-rule", 'No rule "nope"; rules: by-ip, by-key-or-ip, by-ip-and-path.'],
    [
      { rule: "by-ip" },
      "malformed-key",
      'The "key" query parameter is required. Rule "by-ip" counts by ip: key=<value> or key=ip=203.0.113.7.',
    ],
    [{ rule: "by-ip", key: "1.2.3" }, "malformed-key", '"1.2.3": is not an IP address'],
    [
      { rule: "by-ip", key: "2001:db8::/48" },
      "malformed-key",
      '"2001:db8::/48": is a /48 prefix, but IPv6 clients are grouped by /56 (IPV6_PREFIX)',
    ],
    [
      { rule: "by-key-or-ip", key: "abc" },
      "malformed-key",
      '"abc" names no characteristic of this rule. Rule "by-key-or-ip" counts by header:x-api-key|ip: one key parameter per characteristic, naming the one the client has: key=header:x-api-key=… or key=ip=203.0.113.7.',
    ],
    [
      { rule: "by-key-or-ip", key: "header:x-api-key|ip=abc" },
      "malformed-key",
      '"header:x-api-key|ip=abc": a value is named by the source it came from (header:x-api-key=… or ip=…); header:x-api-key|ip= with no value names clients with none of them.',
    ],
    [
      { rule: "by-key-or-ip", key: ["header:x-api-key=abc", "header:x-api-key|ip="] },
      "malformed-key",
      'Two values for the characteristic "header:x-api-key|ip".',
    ],
    [
      { rule: "by-ip-and-path", key: "ip=1.2.3.4" },
      "malformed-key",
      'No value for "path". Rule "by-ip-and-path" counts by ip and path: one key parameter per characteristic, naming the one the client has: key=ip=203.0.113.7; key=path=….',
    ],
    [
      { rule: "by-ip-and-path", key: ["ip=1.2.3.4", "ip=1.2.3.5", "path=/x"] },
      "malformed-key",
      'Two values for the characteristic "ip".',
    ],
    [{ rule: "by-ip-and-path", key: ["ip=1.2.3.4", "path=x"] }, "malformed-key", '"path=x": a path starts with "/"'],
  ])("%j: %s", async (params, type, detail) => {
    const { status, type: contentType, body } = await admin("GET", `/__ratelimit/status?${q(params)}`);
    expect([status, contentType, body.type, body.detail]).toEqual([
      400,
      "application/problem+json",
      `urn:edge-rate-limiter:${type}`,
      detail,
    ]);
  });
});

describe("the key an operator names is the key a request has", () => {
  const ruleWith = (key: string | string[], caseSensitive = false): Rule => {
    const parsed = parseSettings({ RULES: [{ id: "r", limit: 1, period: 1, key, case_sensitive: caseSensitive }] });
    if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
    return parsed.value.rules[0]!;
  };
  const settings = (() => {
    const parsed = parseSettings({ RULES: [] });
    if (!parsed.ok) throw new Error("unreachable");
    return parsed.value;
  })();
  const requestKey = (rule: Rule, url: string, init: RequestInit) => {
    const request = new Request(url, init);
    return canonicalKey(rule.key, requestFacts(request, requestPath(new URL(request.url).pathname), settings));
  };

  it.each([
    ["ip", "http://h/x", from("203.0.113.7"), ["203.0.113.7"]],
    ["ip", "http://h/x", from("203.0.113.7:4711"), ["203.0.113.7"]],
    ["ip", "http://h/x", from("::ffff:203.0.113.7"), ["ip=203.0.113.7"]],
    ["ip", "http://h/x", from("2001:DB8:1:2a77::1"), ["2001:db8:1:2a00::ffff"]],
    ["ip", "http://h/x", {}, ["unknown"]],
    ["ip", "http://h/x", {}, ["ip="]],
    ["header:x-api-key", "http://h/x", from("1.1.1.1", { "x-api-key": "k=1;2" }), ["k=1;2"]],
    ["header:x-api-key", "http://h/x", from("1.1.1.1"), [""]],
    ["header:x-api-key", "http://h/x", from("1.1.1.1", { "x-api-key": "" }), ["header:x-api-key="]],
    ["cookie:sid", "http://h/x", from("1.1.1.1", { cookie: 'a=1; sid="s 2"' }), ["s 2"]],
    ["query:token", "http://h/x?token=caf%C3%A9", {}, ["café"]],
    ["path", "http://h//api/%61bc", {}, ["/api//abc"]],
    ["path", "http://h/Login/;jsessionid=x", {}, ["/login"]],
    ["path", "http://h/login", {}, ["path=/LOGIN;x/"]],
    ["method", "http://h/x", { method: "get" }, ["get"]],
    ["method", "http://h/x", { method: "patch" }, ["patch"]],
    ["method", "http://h/x", { method: "propfind" }, ["PROPFIND"]],
    ["host", "http://API.Example.com:8080/x", {}, ["api.example.com:8080"]],
    ["header:x-api-key|ip", "http://h/x", from("1.1.1.1", { "x-api-key": "abc" }), ["header:x-api-key=abc"]],
    ["header:x-api-key|ip", "http://h/x", from("1.1.1.1"), ["ip=1.1.1.1"]],
    [["ip", "method"], "http://h/x", { ...from("1.1.1.1"), method: "POST" }, ["method=post", "ip=1.1.1.1"]],
  ] as const)("%j, request %s %j: key=%j", (key, url, init, params) => {
    const rule = ruleWith(key as string | string[]);
    const named = adminKey(rule, [...params], 56);
    expect(named).toEqual({ ok: true, value: requestKey(rule, url, init) });
  });

  // What the listing of overrides gives for each client (`keyParams`), and so what the dashboard sends to delete it.
  it.each([
    [
      "a plain value",
      "header:x-api-key",
      "http://h/x",
      from("1.1.1.1", { "x-api-key": "abc" }),
      ["header:x-api-key=abc"],
    ],
    ["no value", "header:x-api-key", "http://h/x", from("1.1.1.1"), ["header:x-api-key="]],
    [
      "the value null",
      "header:x-api-key",
      "http://h/x",
      from("1.1.1.1", { "x-api-key": "null" }),
      ["header:x-api-key=null"],
    ],
    [
      "& = % and spaces",
      "header:x-api-key",
      "http://h/x",
      from("1.1.1.1", { "x-api-key": "a&key=b %41" }),
      ["header:x-api-key=a&key=b %41"],
    ],
    [
      "a fallback's first source",
      "header:x-api-key|ip",
      "http://h/x",
      from("1.1.1.1", { "x-api-key": "abc" }),
      ["header:x-api-key=abc"],
    ],
    ["a fallback's second source", "header:x-api-key|ip", "http://h/x", from("1.1.1.1"), ["ip=1.1.1.1"]],
    [
      "a fallback with neither source",
      "header:x-api-key|cookie:sid",
      "http://h/x",
      from("1.1.1.1"),
      ["header:x-api-key|cookie:sid="],
    ],
    ["an IP", "ip", "http://h/x", from("203.0.113.7"), ["ip=203.0.113.7"]],
    ["no IP", "ip", "http://h/x", {}, ["ip=unknown"]],
    ["an IPv6 client", "ip", "http://h/x", from("2001:db8:1:2a77::1"), ["ip=2001:db8:1:2a00::/56"]],
    ["a path", "path", "http://h/Api//%61bc/;v=1", {}, ["path=/api/abc"]],
    ["a path with an encoded %", "path", "http://h/a%2541", {}, ["path=/a%2541"]],
    ["a query value", "query:token", "http://h/x?token=caf%C3%A9", {}, ["query:token=café"]],
    ["several characteristics", ["ip", "path"], "http://h/items", from("1.1.1.1"), ["ip=1.1.1.1", "path=/items"]],
    [
      "several, one with neither source",
      ["header:x-tenant|cookie:t", "method"],
      "http://h/x",
      { method: "PUT" },
      ["header:x-tenant|cookie:t=", "method=PUT"],
    ],
  ] as const)(
    "a request with %s (key %j, %s %j) is listed as key=%j, which names it back",
    (_, key, url, init, params) => {
      const rule = ruleWith(key as string | string[]);
      const canonical = requestKey(rule, url, init);
      expect(keyParams(canonical)).toEqual(params);
      expect(adminKey(rule, keyParams(canonical), 56)).toEqual({ ok: true, value: canonical });
    },
  );

  // A client an operator names with no value under a fallback has none of its sources, though a request always has an IP.
  it.each([
    ["cookie:sid|ip", ["cookie:sid="], ["cookie:sid|ip="]],
    ["header:x-api-key|ip", ["header:x-api-key="], ["header:x-api-key|ip="]],
    [
      ["header:x-tenant|ip", "path"],
      ["header:x-tenant=", "path=/a"],
      ["header:x-tenant|ip=", "path=/a"],
    ],
    ["header:x-api-key", [""], ["header:x-api-key="]],
    ["ip", ["ip="], ["ip=unknown"]],
  ] as const)("key %j named by key=%j is listed as key=%j, which names it back", (key, named, params) => {
    const rule = ruleWith(key as string | string[]);
    const canonical = adminKey(rule, [...named], 56);
    if (!canonical.ok) throw new Error(canonical.errors.join("; "));
    expect(keyParams(canonical.value)).toEqual(params);
    expect(adminKey(rule, keyParams(canonical.value), 56)).toEqual(canonical);
  });

  it("names a path as a case_sensitive rule counts it: its case kept, ;parameters and a trailing slash not", () => {
    const rule = ruleWith("path", true);
    const request = requestKey(rule, "http://h/Login;jsessionid=x", {});
    expect(adminKey(rule, ["/Login/"], 56)).toEqual({ ok: true, value: request });
    expect(adminKey(rule, ["/login"], 56)).not.toEqual({ ok: true, value: request });
  });
});

describe("admin changes are logged at info level: normal operator actions, not warnings", () => {
  let lines: { stream: "log" | "warn" | "error"; entry: Record<string, unknown> }[];
  let spies: MockInstance[];
  beforeEach(() => {
    lines = [];
    spies = (["log", "warn", "error"] as const).map((stream) =>
      vi.spyOn(console, stream).mockImplementation((line: unknown) => {
        try {
          lines.push({ stream, entry: JSON.parse(String(line)) as Record<string, unknown> });
        } catch {
          // not one of ours
        }
      }),
    );
  });
  afterEach(() => {
    for (const spy of spies) spy.mockRestore();
  });

  /** One admin change, sent by `admin`, for client `ip` of rule `id`. */
  type Admin = (method: string, path: string, body?: string, type?: string) => Promise<Response>;
  const changes: [string, string[], (admin: Admin, id: string, ip: string) => Promise<unknown>][] = [
    [
      "PUT /overrides",
      ["override_set"],
      (admin, id, ip) => admin("PUT", `/overrides?${q({ rule: id, key: ip })}`, '{"limit": 5}'),
    ],
    [
      "DELETE /overrides",
      ["override_set", "override_deleted"],
      async (admin, id, ip) => {
        await admin("PUT", `/overrides?${q({ rule: id, key: ip })}`, '{"limit": 5}');
        return admin("DELETE", `/overrides?${q({ rule: id, key: ip })}`);
      },
    ],
    [
      "POST /overrides/import, JSON",
      ["override_set", "overrides_imported"],
      (admin, id, ip) => admin("POST", "/overrides/import", JSON.stringify([{ rule: id, key: ip, tier: "pro" }])),
    ],
    [
      "POST /overrides/import, CSV, deleting",
      ["override_set", "override_deleted", "overrides_imported"],
      async (admin, id, ip) => {
        await admin("PUT", `/overrides?${q({ rule: id, key: ip })}`, '{"unlimited": true}');
        return admin("POST", "/overrides/import", `rule,key,delete\n${id},${ip},true\n`, "text/csv");
      },
    ],
    ["DELETE /status", ["admin_reset"], (admin, id, ip) => admin("DELETE", `/status?${q({ rule: id, key: ip })}`)],
  ];

  it.each(changes)(
    "%s logs %j as JSON at info, to the standard stream, with the key's hash, never the key",
    async (_, events, change) => {
      const id = `logged-${uniqueTag("r").replace(/[^a-z0-9-]/g, "")}`.slice(0, 64);
      const send = limiter([{ id, limit: 5, period: "1m" }], {
        ADMIN_TOKEN: TOKEN,
        TIERS: { pro: { [id]: 50 } },
      });
      const admin: Admin = async (method, path, body, type = "application/json") => {
        const res = await send(`/__ratelimit${path}`, {
          method,
          headers: { ...bearer(), "content-type": type },
          ...(body === undefined ? {} : { body }),
        });
        expect(res.status).toBe(200);
        return res;
      };
      const ip = uniqueIp();
      await change(admin, id, ip);
      const logged = lines.filter(({ entry }) => events.includes(String(entry.event)));
      expect(logged.map(({ entry }) => entry.event).sort()).toEqual([...events].sort());
      expect(logged.map(({ stream, entry }) => [stream, entry.level])).toEqual(events.map(() => ["log", "info"]));
      for (const { entry } of logged) if ("key" in entry) expect(entry.key).toMatch(/^[0-9a-f]{12}$/);
      expect(JSON.stringify(lines)).not.toContain(ip);
    },
  );
});
