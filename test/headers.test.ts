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

  it("describes the quota on each allowed response (draft-10 and X-RateLimit-*)", async () => {
    const send = limiter([{ id: "api-per-ip", limit: 2, period: 60 }]);
    const ip = uniqueIp();
    at("2026-11-21T12:00:45.000Z");
    const first = await send("/api/x", from(ip));
    expect(first.status).toBe(200);
    expect(Object.fromEntries([...first.headers].filter(([name]) => name.includes("ratelimit")))).toEqual({
      "ratelimit-policy": '"api-per-ip";q=2;w=60',
      ratelimit: '"api-per-ip";r=1;t=15',
      "x-ratelimit-limit": "2",
      "x-ratelimit-remaining": "1",
      "x-ratelimit-reset": unix("2026-11-21T12:01:00Z"),
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
    expect(res.headers.get("ratelimit")).toBe('"per-second";r=2;t=1');
    expect(res.headers.get("x-ratelimit-limit")).toBe("3");
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
