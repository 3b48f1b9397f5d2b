/**
 * The login penalty over real HTTP, through `wrangler dev`: rule "e2e-login"
 * counts only failed attempts (401), 3 a minute per IP, and then shuts the
 * client out for 15 minutes.
 */
import { describe, expect, it } from "vitest";
import { originHits, send, uniqueIp, uniqueTag } from "./support/client.ts";

const attempt = (ip: string, outcome: 200 | 401, tag: string) =>
  send(`/status/${outcome}`, { method: "POST", headers: { "cf-connecting-ip": ip, "x-test-tag": tag } });

describe("a login rule with count = [401] and block_for = 15m", () => {
  it("lets 3 bad passwords through, then refuses the client for 15 minutes, a good password too", async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("login-bad");
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await attempt(ip, 401, tag)).status);
    const refused = await attempt(ip, 401, tag);
    const evenGood = await attempt(ip, 200, tag);
    expect([...statuses, refused.status, evenGood.status]).toEqual([401, 401, 401, 429, 429]);
    const retryAfter = Number(refused.headers["retry-after"]);
    expect(retryAfter).toBeGreaterThanOrEqual(899);
    expect(retryAfter).toBeLessThanOrEqual(900);
    expect(await originHits(tag)).toBe(3);
  });

  it("never limits a client whose passwords succeed", async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("login-good");
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) statuses.push((await attempt(ip, 200, tag)).status);
    expect(statuses).toEqual(Array(10).fill(200));
    expect(await originHits(tag)).toBe(10);
  });
});
