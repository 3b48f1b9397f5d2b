import { describe, expect, it, vi } from "vitest";
import { from, limiter, originHits, statuses, uniqueIp, uniqueTag } from "./support/limiter.ts";

describe("limits at the edge", () => {
  it("answers 429 once the limit is reached, and the origin never sees the refused request", async () => {
    const send = limiter([{ id: "api-per-ip", path: "/api/*", limit: 3, period: "1m" }]);
    const ip = uniqueIp();
    const tag = uniqueTag("edge");
    expect(await statuses(5, () => send("/api/items", from(ip, { "x-test-tag": tag })))).toEqual([
      200, 200, 200, 429, 429,
    ]);
    expect(await originHits(tag)).toBe(3);
  });

  it("lets exactly 100 of 300 concurrent requests for one key reach the origin, and refuses 200", async () => {
    const send = limiter([{ id: "burst", limit: 100, period: "1h" }]);
    const ip = uniqueIp();
    const tag = uniqueTag("concurrent");
    const responses = await Promise.all(
      Array.from({ length: 300 }, () => send("/api/burst", from(ip, { "x-test-tag": tag }))),
    );
    const counts: Record<number, number> = {};
    for (const r of responses) counts[r.status] = (counts[r.status] ?? 0) + 1;
    expect(counts).toEqual({ 200: 100, 429: 200 });
    expect(await originHits(tag)).toBe(100);
  });

  it("keeps keys independent: one client's exhaustion does not touch another's", async () => {
    const send = limiter([{ id: "per-ip", limit: 2, period: "1m" }]);
    const [a, b] = [uniqueIp(), uniqueIp()];
    expect(await statuses(3, () => send("/x", from(a)))).toEqual([200, 200, 429]);
    expect(await statuses(2, () => send("/x", from(b)))).toEqual([200, 200]);
  });

  it("keeps rules independent: a rule on other paths does not count these requests", async () => {
    // On a clock of its own: on the wall clock, a minute that ends between the two logins lets the second in.
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.UTC(2031, 0, 1, 0, 0, 5));
    try {
      const send = limiter([
        { id: "api", path: "/api/*", limit: 2, period: "1m" },
        { id: "login", path: "/login", methods: ["POST"], limit: 1, period: "1m" },
      ]);
      const ip = uniqueIp();
      expect(await statuses(2, () => send("/api/x", from(ip)))).toEqual([200, 200]);
      expect((await send("/login", { ...from(ip), method: "POST" })).status).toBe(200);
      expect((await send("/login", { ...from(ip), method: "GET" })).status).toBe(200);
      expect((await send("/login", { ...from(ip), method: "POST" })).status).toBe(429);
    } finally {
      vi.useRealTimers();
    }
  });

  it("does not count a refused request in another key's rule (all or nothing across keys)", async () => {
    const send = limiter([
      { id: "per-ip", limit: 10, period: "1m", key: ["ip"] },
      { id: "per-key", limit: 1, period: "1m", key: ["header:x-api-key"] },
    ]);
    const ip = uniqueIp();
    const key = { "x-api-key": uniqueTag("key") };
    expect((await send("/x", from(ip, key))).status).toBe(200);
    expect((await send("/x", from(ip, key))).status).toBe(429);
    expect((await send("/x", from(ip, key))).status).toBe(429);
    const other = await send("/x", from(ip, { "x-api-key": uniqueTag("other-key") }));
    expect(other.headers.get("ratelimit")).toMatch(/^"per-key";r=0;/);
    expect(other.headers.get("ratelimit-policy")).toBe('"per-ip";q=10;w=60, "per-key";q=1;w=60');
    const again = await send("/x", from(ip, { "x-api-key": uniqueTag("third-key") }));
    expect(again.headers.get("ratelimit")).toMatch(/^"per-key";r=0;/);
    // Only the three admitted requests count against the IP, not the two refused: 10 − 3 − this one = 6.
    const ipOnly = limiter([{ id: "per-ip", limit: 10, period: "1m", key: ["ip"] }]);
    expect((await ipOnly("/x", from(ip))).headers.get("x-ratelimit-remaining")).toBe("6");
  });

  it("leaves requests that match no rule alone: no headers, no count", async () => {
    const send = limiter([{ id: "api", path: "/api/*", exclude: ["/api/health"], limit: 1, period: "1m" }]);
    const ip = uniqueIp();
    for (const path of ["/", "/docs", "/api/health", "/api/health"]) {
      const res = await send(path, from(ip));
      expect(res.status).toBe(200);
      expect(res.headers.has("ratelimit-policy")).toBe(false);
    }
    expect((await send("/api/x", from(ip))).status).toBe(200);
  });

  it("never blocks with a shadow (log) rule, and logs what it would have refused: at once, then once per 10 s", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.UTC(2031, 0, 1, 0, 0, 5);
    vi.setSystemTime(start);
    try {
      const send = limiter([{ id: "new-limit", limit: 2, period: "1m", action: "log" }]);
      const ip = uniqueIp();
      expect(await statuses(5, () => send("/x", from(ip)))).toEqual([200, 200, 200, 200, 200]);
      vi.setSystemTime(start + 10_000);
      expect(await statuses(1, () => send("/x", from(ip)))).toEqual([200]);
      const lines = log.mock.calls.map(([line]) => JSON.parse(String(line)));
      const shadow = lines.filter((l) => l.event === "ratelimit_shadow");
      expect(shadow).toHaveLength(2);
      expect(shadow[0]).toMatchObject({ rule: "new-limit", limit: 2, weighted: 2, decision: "would_block" });
      expect(shadow[0].key).toMatch(/^[0-9a-f]{12}$/);
      expect(shadow[0].repeats).toBeUndefined();
      expect(shadow[1]).toMatchObject({ rule: "new-limit", key: shadow[0].key, repeats: 2 });
    } finally {
      vi.useRealTimers();
      log.mockRestore();
    }
  });

  it("keeps shadow rules out of the client's headers", async () => {
    const send = limiter([
      { id: "enforced", limit: 10, period: "1m" },
      { id: "shadow", limit: 1, period: "1m", action: "log" },
    ]);
    const res = await send("/x", from(uniqueIp()));
    expect(res.headers.get("ratelimit-policy")).toBe('"enforced";q=10;w=60');
  });

  it("leaves a rule with an error out: the request reaches the origin, and the log names the error (test/invalid-config.test.ts)", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const tag = uniqueTag("bad-config");
      const send = limiter([{ id: "bad", limit: 0, period: "1m" }]);
      const res = await send("/x", from(uniqueIp(), { "x-test-tag": tag }));
      expect(res.status).toBe(200);
      expect(res.headers.has("ratelimit")).toBe(false);
      expect(await originHits(tag)).toBe(1);
      const logged = JSON.parse(String(error.mock.calls[0]![0]));
      expect(logged).toMatchObject({
        level: "error",
        event: "invalid_config",
        errors: ['RULES[0] "bad": field "limit": must be an integer from 1 to 1000000000; got 0'],
      });
    } finally {
      error.mockRestore();
    }
  });
});
