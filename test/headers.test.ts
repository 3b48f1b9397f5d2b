import { type Item, parseList, serializeList, Token } from "structured-headers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { from, limiter, uniqueIp } from "./support/limiter.ts";

const at = (iso: string) => vi.setSystemTime(new Date(iso));
const unix = (iso: string) => String(Date.parse(iso) / 1000);

/** The clock is fixed so that header values are exact; the Durable Object reads the same clock. */
describe("rate-limit headers, exactly", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["Date"] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("describes the quota on each allowed response (draft-11 and X-RateLimit-*)", async () => {
    const send = limiter([{ id: "api-per-ip", limit: 2, period: 60 }]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:45.000Z");
    const first = await send("/api/x", from(ip));
    expect(first.status).toBe(200);
    // One request left now; spent, the next is admitted 1 ms after 12:01:00, 15.001 s from now: t is 16 whole seconds.
    expect(Object.fromEntries([...first.headers].filter(([name]) => name.includes("ratelimit")))).toEqual({
      "ratelimit-policy": '"api-per-ip";q=2;w=60',
      ratelimit: '"api-per-ip";r=1;t=16',
      "x-ratelimit-limit": "2",
      "x-ratelimit-remaining": "1",
      "x-ratelimit-reset": unix("2026-11-21T12:01:01Z"),
    });
    at("2026-11-21T12:00:50.250Z");
    const second = await send("/api/x", from(ip));
    expect(second.headers.get("ratelimit")).toBe('"api-per-ip";r=0;t=10');
    expect(second.headers.get("x-ratelimit-remaining")).toBe("0");
  });

  it("answers 429 with Retry-After and an RFC 9457 problem body", async () => {
    const send = limiter([{ id: "api-per-ip", limit: 2, period: 60 }]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:45.000Z");
    await send("/api/x", from(ip));
    await send("/api/x", from(ip));
    const blocked = await send("/api/x", from(ip));
    // Both requests sit in the current window, so the next window's weight is 2 × (1 − elapsed):
    // under 2 one millisecond after 12:01:00, 15.001 s from now, sent as 16 whole seconds.
    expect(blocked.status).toBe(429);
    expect(blocked.headers.get("retry-after")).toBe("16");
    expect(blocked.headers.get("content-type")).toBe("application/problem+json");
    expect(blocked.headers.get("ratelimit")).toBe('"api-per-ip";r=0;t=16');
    expect(blocked.headers.get("x-ratelimit-reset")).toBe(unix("2026-11-21T12:01:01Z"));
    expect(await blocked.json()).toEqual({
      type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
      title: "Too Many Requests",
      status: 429,
      detail: 'Rate limit exceeded: "api-per-ip" (2 per minute). Retry in 16 seconds.',
      retry_after: 16,
      "violated-policies": ["api-per-ip"],
    });
  });

  it("lists every matching policy, and describes the one closest to its limit", async () => {
    const send = limiter([
      { id: "per-minute", limit: 10, period: "1m" },
      { id: "per-second", limit: 3, period: "1s" },
      { id: "per-hour", limit: 1000, period: "1h" },
    ]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:45.000Z");
    const res = await send("/api/x", from(ip));
    expect(res.headers.get("ratelimit-policy")).toBe(
      '"per-minute";q=10;w=60, "per-second";q=3;w=1, "per-hour";q=1000;w=3600',
    );
    // Two more may go now; spent, the next waits for 12:00:46.001.
    expect(res.headers.get("ratelimit")).toBe('"per-second";r=2;t=2');
    expect(res.headers.get("x-ratelimit-limit")).toBe("3");
  });

  it("counts how close each rule is in requests, not units: a rule of cost 3 with 7 units left (2 requests) is closer than one of cost 1 with 3 left", async () => {
    // Found from outside: the headers named the rule with the fewest units left (r=3 of "per-request"), and the
    // third request was refused by the other, which had units for one more only.
    const send = limiter([
      { id: "by-units", limit: 10, period: "1m", cost: 3 },
      { id: "per-request", limit: 4, period: "1m" },
    ]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:45.000Z");
    const first = await send("/api/x", from(ip));
    expect(first.headers.get("ratelimit")).toMatch(/^"by-units";r=7;t=\d+$/);
    const second = await send("/api/x", from(ip));
    expect(second.headers.get("ratelimit")).toMatch(/^"by-units";r=4;t=\d+$/);
    const third = await send("/api/x", from(ip));
    expect(third.status).toBe(200);
    expect(third.headers.get("ratelimit")).toMatch(/^"by-units";r=1;t=\d+$/);
    expect((await send("/api/x", from(ip))).status).toBe(429);
  });

  it("among rules with no request left, describes the one with the longest wait: the next request waits for it", async () => {
    // Found from outside: the rule with fewer units left (0, against 1 of a cost of 3) was described, with a wait a
    // third of the other's, and a retry after it was refused.
    const send = limiter([
      { id: "by-units", limit: 10, period: "1m", cost: 3 },
      { id: "per-10s", limit: 3, period: "10s" },
    ]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:45.000Z");
    await send("/api/x", from(ip));
    await send("/api/x", from(ip));
    const third = await send("/api/x", from(ip));
    expect(third.status).toBe(200);
    const [, id, r, t] = /^"([^"]+)";r=(\d+);t=(\d+)$/.exec(third.headers.get("ratelimit") ?? "") ?? [];
    expect({ id, r }).toEqual({ id: "by-units", r: "1" });
    expect(Number(t)).toBeGreaterThan(10);
  });

  it("names every violated policy and waits for the longest", async () => {
    const send = limiter([
      { id: "per-second", limit: 1, period: "1s" },
      { id: "per-minute", limit: 1, period: "1m" },
    ]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:45.000Z");
    await send("/api/x", from(ip));
    const blocked = await send("/api/x", from(ip));
    const body = (await blocked.json()) as { "violated-policies": string[]; retry_after: number };
    expect(body["violated-policies"]).toEqual(["per-second", "per-minute"]);
    expect(body.retry_after).toBe(16);
    expect(blocked.headers.get("ratelimit")).toBe('"per-minute";r=0;t=16');
  });
});

/**
 * `t` is draft-ietf-httpapi-ratelimit-headers-11's effective window (§4.1.2):
 * "the number of seconds within which the client can use no more than the
 * available quota". Here: with every request admissible now spent, the wait
 * until one more is admitted, so the `r` requests left may go at any time
 * within it, and one more once it has passed; not the end of the current
 * window, where the previous window's requests may still weigh whole, and
 * before which they may already weigh less.
 */
describe("t, the effective window", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["Date"] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("lets the requests left go within it, and one more once it has passed, not at the window's end", async () => {
    const send = limiter([{ id: "window", limit: 3, period: 60 }]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:45.000Z");
    expect((await send("/api/x", from(ip))).headers.get("ratelimit")).toBe('"window";r=2;t=16');
    at("2026-11-21T12:00:50.000Z");
    expect((await send("/api/x", from(ip))).status).toBe(200);
    const last = await send("/api/x", from(ip));
    expect([last.status, last.headers.get("ratelimit")]).toEqual([200, '"window";r=0;t=11']);
    // At 12:01:00, where the current window ends, the three still weigh whole: refused, as t says.
    at("2026-11-21T12:01:00.000Z");
    expect((await send("/api/x", from(ip))).status).toBe(429);
    // t ended at 12:01:01.
    at("2026-11-21T12:01:01.000Z");
    expect((await send("/api/x", from(ip))).status).toBe(200);
  });

  it("is short while the previous window's requests weigh less every moment, and says so rather than the window's end", async () => {
    const send = limiter([{ id: "window", limit: 4, period: 60 }]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:10.000Z");
    for (let i = 0; i < 4; i++) expect((await send("/api/x", from(ip))).status).toBe(200);
    // Half-way into the next window the four weigh 2: one more now, then one a moment later, and so on.
    at("2026-11-21T12:01:30.000Z");
    expect((await send("/api/x", from(ip))).headers.get("ratelimit")).toBe('"window";r=1;t=1');
    expect((await send("/api/x", from(ip))).headers.get("ratelimit")).toBe('"window";r=0;t=1');
    at("2026-11-21T12:01:31.000Z");
    expect((await send("/api/x", from(ip))).status).toBe(200);
  });

  it("is the Retry-After of a refusal: the Retry-After never names a moment before t ends (§6)", async () => {
    const send = limiter([
      { id: "per-second", limit: 1, period: "1s" },
      { id: "per-minute", limit: 2, period: "1m" },
    ]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:45.000Z");
    await send("/api/x", from(ip));
    at("2026-11-21T12:00:46.500Z");
    await send("/api/x", from(ip));
    const refused = await send("/api/x", from(ip));
    expect(refused.status).toBe(429);
    expect(refused.headers.get("ratelimit")).toBe(`"per-minute";r=0;t=${refused.headers.get("retry-after")}`);
  });
});

/**
 * Both fields are Structured Field Lists (RFC 9651): each item a String
 * naming the policy (draft-11 §3 and §4 keep Strings, not Tokens: the working
 * group's issue 158), with Integer parameters, and `qu` a String. Parsed by
 * the `structured-headers` library, and serialised back to what was sent.
 */
describe("the fields, parsed as RFC 9651 Structured Fields", () => {
  const sent: string[] = [];
  const fields = (res: Response) => {
    for (const name of ["ratelimit-policy", "ratelimit"]) {
      const value = res.headers.get(name);
      if (value !== null) sent.push(value);
    }
    return res;
  };

  it("are Lists of String items with Integer q, w, r and t, and a String qu, on admissions, refusals and places, for every kind", async () => {
    const rates = limiter([
      { id: "per-minute", path: "/api/*", limit: 3, period: "1m" },
      { id: "per-hour", path: "/api/*", limit: 1000, period: "1h" },
      { id: "streams", path: "/stream/*", concurrency: 1 },
      // A unit back a second: the third request is refused unless a busy host takes a second over the first two.
      { id: "bucket", path: "/bucket/*", limit: 10, period: "10s", burst: 2 },
      { id: "too-big", path: "/big/*", limit: 10, period: "1s", burst: 2, cost: 5 },
      { id: "monthly", path: "/quota/*", quota: 2, per: "month", timezone: "America/New_York" },
    ]);
    const ip = uniqueIp();
    for (let i = 0; i < 4; i++) await fields(await rates("/api/x", from(ip))).arrayBuffer();
    await fields(await rates("/stream/0", from(uniqueIp()))).arrayBuffer();
    // A bucket's burst, then its refusal; a request no wait admits (no t); a quota to its end and past it.
    const statuses: number[] = [];
    for (const path of ["/bucket/x", "/bucket/x", "/bucket/x", "/big/x", "/quota/x", "/quota/x", "/quota/x"]) {
      const res = fields(await rates(path, from(ip)));
      statuses.push(res.status);
      await res.arrayBuffer();
    }
    expect(statuses).toEqual([200, 200, 429, 429, 200, 200, 429]);
    expect(sent.length).toBeGreaterThanOrEqual(23);
    for (const value of sent) {
      const list = parseList(value);
      expect(serializeList(list)).toBe(value);
      for (const [name, parameters] of list as Item[]) {
        expect(typeof name, value).toBe("string");
        expect(name).not.toBeInstanceOf(Token);
        for (const [key, parameter] of parameters) {
          if (key === "qu") expect(parameter, value).toBe("concurrent-requests");
          else {
            expect(["q", "w", "r", "t"], value).toContain(key);
            expect(Number.isInteger(parameter) && (parameter as number) >= 0, value).toBe(true);
          }
        }
      }
    }
  });
});

/**
 * The seeds' `X-RateLimit-*` headers are sent by default, for the clients
 * that read them; `LEGACY_HEADERS = false` (or `rateLimit({ legacyHeaders:
 * false })`) leaves them out, as express-rate-limit's `legacyHeaders` does,
 * and the draft's `RateLimit-Policy` and `RateLimit` stay.
 */
describe("the legacy X-RateLimit-* headers", () => {
  const LEGACY = ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"];
  const named = (response: Response) => LEGACY.filter((name) => response.headers.has(name));

  it.each([
    ["sent by default", {}, LEGACY],
    ['sent with LEGACY_HEADERS = "true"', { LEGACY_HEADERS: "true" }, LEGACY],
    ["left out with LEGACY_HEADERS = false", { LEGACY_HEADERS: false }, []],
    ['left out with LEGACY_HEADERS = "false"', { LEGACY_HEADERS: "false" }, []],
  ] as const)(
    "are %s: on an admission, the object's refusal and a refusal the isolate knows of",
    async (_, vars, sent) => {
      const send = limiter([{ id: "legacy", limit: 1, period: "1h" }], vars);
      const ip = uniqueIp();
      const answers = [await send("/x", from(ip)), await send("/x", from(ip)), await send("/x", from(ip))];
      expect(answers.map((r) => r.status)).toEqual([200, 429, 429]);
      for (const answer of answers) {
        expect(named(answer)).toEqual(sent);
        expect(answer.headers.get("ratelimit-policy")).toBe('"legacy";q=1;w=3600');
        expect(answer.headers.has("ratelimit")).toBe(true);
      }
    },
  );

  it("are left out by rateLimit({ legacyHeaders: false }) in your own Hono app", async () => {
    const { Hono } = await import("hono");
    const { rateLimit } = await import("../src/lib.ts");
    const { env } = await import("./support/env.ts");
    const app = new Hono();
    app.get("/with", rateLimit({ rules: { id: "legacy-lib-on", limit: 5, period: "1m" } }), (c) => c.text("ok"));
    const off = rateLimit({ rules: { id: "legacy-lib-off", limit: 5, period: "1m" }, legacyHeaders: false });
    app.get("/without", off, (c) => c.text("ok"));
    const ip = uniqueIp();
    const call = (path: string) => app.request(path, { headers: { "cf-connecting-ip": ip } }, env);
    expect(named(await call("/with"))).toEqual(LEGACY);
    const without = await call("/without");
    expect([without.status, named(without)]).toEqual([200, []]);
    expect(without.headers.get("ratelimit")).toMatch(/^"legacy-lib-off";r=4;t=\d+$/);
  });

  it("refuses a LEGACY_HEADERS that is neither true nor false, naming it", async () => {
    const { parseSettings } = await import("../src/config/settings.ts");
    const parsed = parseSettings({ RULES: [{ id: "x", limit: 1, period: 1 }], LEGACY_HEADERS: "no" });
    expect(parsed.ok ? [] : parsed.errors).toEqual(['LEGACY_HEADERS: must be true or false; got "no"']);
  });
});
