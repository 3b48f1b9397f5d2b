/**
 * Limits over real HTTP, through `wrangler dev`: the e2e config allows 50
 * requests a day per client IP (rule "e2e").
 */
import { describe, expect, it } from "vitest";
import { originHits, send, uniqueIp, uniqueTag } from "./support/client.ts";

const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded";
const LIMIT = 50;

describe("limits over real HTTP", () => {
  it("answers the 51st request with 429, Retry-After, the RateLimit headers and a problem body", async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("limit");
    const headers = { "cf-connecting-ip": ip, "x-test-tag": tag };
    const remaining: string[] = [];
    for (let i = 0; i < LIMIT; i++) {
      const reply = await send("/api/items", { headers });
      expect(reply.status).toBe(200);
      remaining.push(String(reply.headers["x-ratelimit-remaining"]));
    }
    expect(remaining[0]).toBe("49");
    expect(remaining.at(-1)).toBe("0");

    const blocked = await send("/api/items", { headers });
    expect(blocked.status).toBe(429);
    expect(blocked.headers["content-type"]).toBe("application/problem+json");
    const retryAfterSeconds = Number(blocked.headers["retry-after"]);
    expect(Number.isInteger(retryAfterSeconds)).toBe(true);
    expect(retryAfterSeconds).toBeGreaterThan(0);
    expect(retryAfterSeconds).toBeLessThanOrEqual(86_400);
    expect(blocked.headers["ratelimit-policy"]).toBe('"e2e";q=50;w=86400');
    expect(blocked.headers.ratelimit).toBe(`"e2e";r=0;t=${retryAfterSeconds}`);
    expect(blocked.headers["x-ratelimit-limit"]).toBe("50");
    expect(blocked.headers["x-ratelimit-remaining"]).toBe("0");
    expect(blocked.json()).toEqual({
      type: QUOTA_EXCEEDED,
      title: "Too Many Requests",
      status: 429,
      detail: expect.stringContaining('"e2e" (50 per'),
      retry_after: retryAfterSeconds,
      "violated-policies": ["e2e"],
    });
    expect(await originHits(tag)).toBe(LIMIT);
  });

  it("lets 200 concurrent clients on one key through exactly 50 times", async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("concurrent");
    // 200 separate connections, all sent before any answer is read.
    const replies = await Promise.all(
      Array.from({ length: 200 }, () => send("/api/burst", { headers: { "cf-connecting-ip": ip, "x-test-tag": tag } })),
    );
    const statuses = replies.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(LIMIT);
    expect(statuses.filter((s) => s === 429)).toHaveLength(200 - LIMIT);
    expect(await originHits(tag)).toBe(LIMIT);
  });

  it("passes the origin's own 429 through unchanged, distinguishable from the limiter's", async () => {
    const ip = uniqueIp();
    const fromOrigin = await send("/status/429", { headers: { "cf-connecting-ip": ip } });
    expect(fromOrigin.status).toBe(429);
    expect(fromOrigin.headers["content-type"]).toBe("application/json");
    expect(fromOrigin.headers["retry-after"]).toBe("30");
    expect(fromOrigin.headers["x-origin"]).toBe("e2e-origin");
    expect(fromOrigin.json()).toEqual({ from: "origin", status: 429 });
    // The limiter admitted it (and says so), so it is not the limiter's refusal.
    expect(fromOrigin.headers["x-ratelimit-remaining"]).toBe("49");

    const headers = { "cf-connecting-ip": ip };
    for (let i = 1; i < LIMIT; i++) await send("/api/x", { headers });
    const fromLimiter = await send("/status/429", { headers });
    expect(fromLimiter.status).toBe(429);
    expect(fromLimiter.headers["content-type"]).toBe("application/problem+json");
    expect(fromLimiter.headers["x-origin"]).toBeUndefined();
    expect(fromLimiter.json()).toMatchObject({ type: QUOTA_EXCEEDED, "violated-policies": ["e2e"] });
  });
});
