import { afterEach, describe, expect, it, vi } from "vitest";
import { BlockedCache } from "../src/blocked-cache.ts";
import { parseSettings, type Settings } from "../src/config.ts";
import { decide } from "../src/decide.ts";
import { LeaseCache } from "../src/leases.ts";
import type { LimiterNamespace } from "../src/limiter-client.ts";
import { countedNamespace } from "./support/counting.ts";
import { uniqueIp } from "./support/limiter.ts";
import { randomGenerator } from "./support/random.ts";

const settingsFor = (rules: unknown[]): Settings => {
  const parsed = parseSettings({ RULES: rules });
  if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
  return parsed.value;
};

/** Decides one request from `ip` at the current (possibly faked) time; the status it gets. */
async function status(settings: Settings, ns: LimiterNamespace, cache: BlockedCache, ip: string, path = "/x") {
  const url = new URL(`http://limiter.test${path}`);
  const request = new Request(url, { headers: { "cf-connecting-ip": ip } });
  const outcome = await decide(request, settings, ns, () => {}, { blocked: cache, leases: new LeaseCache(0) });
  return outcome.kind === "allow" ? 200 : outcome.response.status;
}

describe("the blocked-key cache", () => {
  afterEach(() => vi.useRealTimers());

  it("answers repeated refusals itself, without calling the object", async () => {
    const settings = settingsFor([{ id: "cached", limit: 2, period: "1h" }]);
    const { ns, counter } = countedNamespace();
    const cache = new BlockedCache();
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 0; i < 50; i++) statuses.push(await status(settings, ns, cache, ip));
    expect(statuses.slice(0, 3)).toEqual([200, 200, 429]);
    expect(statuses.slice(3).every((s) => s === 429)).toBe(true);
    expect(counter.calls).toBe(3);
  });

  it("refuses with the same headers and body the object's refusal had", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(new Date("2026-11-21T12:00:45.000Z"));
    const settings = settingsFor([{ id: "same", limit: 1, period: 60 }]);
    const { ns } = countedNamespace();
    const cache = new BlockedCache();
    const ip = uniqueIp();
    const url = new URL("http://limiter.test/x");
    const ask = async () => {
      const request = new Request(url, { headers: { "cf-connecting-ip": ip } });
      const outcome = await decide(request, settings, ns, () => {}, {
        blocked: cache,
        leases: new LeaseCache(0),
      });
      if (outcome.kind !== "refuse") throw new Error("expected a refusal");
      return { headers: Object.fromEntries(outcome.response.headers), body: await outcome.response.json() };
    };
    await status(settings, ns, cache, ip);
    const fromObject = await ask();
    const fromCache = await ask();
    expect(fromCache).toEqual(fromObject);
  });

  it("counts the wait down second by second while it answers from the cache", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.parse("2026-11-21T12:00:45.000Z");
    vi.setSystemTime(start);
    const settings = settingsFor([{ id: "countdown", limit: 1, period: 60 }]);
    const { ns, counter } = countedNamespace();
    const cache = new BlockedCache();
    const ip = uniqueIp();
    const retryAfterAt = async (ms: number) => {
      vi.setSystemTime(start + ms);
      const request = new Request("http://limiter.test/x", { headers: { "cf-connecting-ip": ip } });
      const outcome = await decide(request, settings, ns, () => {}, { blocked: cache, leases: new LeaseCache(0) });
      if (outcome.kind !== "refuse") throw new Error("expected a refusal");
      return [
        outcome.response.headers.get("retry-after"),
        ((await outcome.response.json()) as { retry_after: number }).retry_after,
      ];
    };
    await status(settings, ns, cache, ip); // admitted; the next window starts in 15 s
    expect(await retryAfterAt(0)).toEqual(["16", 16]);
    expect(await retryAfterAt(300)).toEqual(["15", 15]);
    expect(await retryAfterAt(700)).toEqual(["15", 15]);
    expect(await retryAfterAt(1_300)).toEqual(["14", 14]);
    expect(await retryAfterAt(9_999)).toEqual(["6", 6]);
    expect(counter.calls).toBe(2);
  });

  it("lets the client in exactly when the object would, never later and never sooner", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.parse("2026-11-21T12:00:45.000Z");
    vi.setSystemTime(start);
    const settings = settingsFor([{ id: "edge", limit: 2, period: 60 }]);
    const { ns } = countedNamespace();
    const cache = new BlockedCache();
    const ip = uniqueIp();
    expect(await status(settings, ns, cache, ip)).toBe(200);
    expect(await status(settings, ns, cache, ip)).toBe(200);
    expect(await status(settings, ns, cache, ip)).toBe(429); // retry after 15 001 ms
    vi.setSystemTime(start + 15_000);
    expect(await status(settings, ns, cache, ip)).toBe(429);
    vi.setSystemTime(start + 15_001);
    expect(await status(settings, ns, cache, ip)).toBe(200);
  });

  it("decides every request of a random trace exactly as the object alone does", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const random = randomGenerator(5);
    const rules = [
      { id: "trace-a", limit: 5, period: "2s" },
      { id: "trace-b", limit: 12, period: "10s", precision: 5 },
      { id: "trace-c", limit: 3, period: "1s", strict: true, precision: 4 },
    ];
    const settings = settingsFor(rules);
    const { ns: withCacheNs, counter } = countedNamespace();
    const { ns: aloneNs } = countedNamespace();
    const cache = new BlockedCache();
    const never = new BlockedCache(0);
    const [cachedIp, aloneIp] = [uniqueIp(), uniqueIp()];
    let now = Date.parse("2026-11-21T12:00:00.000Z");
    const withCache: number[] = [];
    const alone: number[] = [];
    for (let i = 0; i < 400; i++) {
      now += random.int(random.next() < 0.7 ? 40 : 700);
      vi.setSystemTime(now);
      withCache.push(await status(settings, withCacheNs, cache, cachedIp));
      alone.push(await status(settings, aloneNs, never, aloneIp));
    }
    expect(withCache).toEqual(alone);
    expect(alone.filter((s) => s === 429).length).toBeGreaterThan(50);
    expect(counter.calls).toBeLessThan(400);
  });

  it("stays within its size cap under a flood of distinct blocked keys", async () => {
    const settings = settingsFor([{ id: "flood", limit: 1, period: "1h" }]);
    const { ns } = countedNamespace();
    const cache = new BlockedCache(50);
    for (let i = 0; i < 200; i++) {
      const ip = `172.16.${i >> 8}.${i & 255}`;
      await status(settings, ns, cache, ip);
      await status(settings, ns, cache, ip);
      expect(cache.size).toBeLessThanOrEqual(50);
    }
    expect(cache.size).toBe(50);
  });

  it("keeps no entry at all when its size is 0", async () => {
    const settings = settingsFor([{ id: "off", limit: 1, period: "1h" }]);
    const { ns, counter } = countedNamespace();
    const cache = new BlockedCache(0);
    const ip = uniqueIp();
    for (let i = 0; i < 5; i++) await status(settings, ns, cache, ip);
    expect(cache.size).toBe(0);
    expect(counter.calls).toBe(5);
  });
});
