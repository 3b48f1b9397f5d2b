import { afterEach, describe, expect, it, vi } from "vitest";
import { BlockedCache } from "../src/blocked-cache.ts";
import { parseSettings, type Settings } from "../src/config.ts";
import { canonicalKey, hashKey } from "../src/core/keys.ts";
import { decide, type IsolateCaches } from "../src/decide.ts";
import { LEASE_UNITS, LeaseCache } from "../src/leases.ts";
import type { LimiterNamespace } from "../src/limiter-client.ts";
import { countedNamespace } from "./support/counting.ts";
import { env } from "./support/env.ts";
import { uniqueIp } from "./support/limiter.ts";
import { randomGenerator } from "./support/random.ts";

const settingsFor = (rules: unknown[]): Settings => {
  const parsed = parseSettings({ RULES: rules });
  if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
  return parsed.value;
};

const fresh = (): IsolateCaches => ({ blocked: new BlockedCache(), leases: new LeaseCache() });
const none = (): IsolateCaches => ({ blocked: new BlockedCache(0), leases: new LeaseCache(0) });

/** Decides one request from `ip`; its status and headers. */
async function send(settings: Settings, ns: LimiterNamespace, caches: IsolateCaches, ip: string) {
  const url = new URL("http://limiter.test/x");
  const request = new Request(url, { headers: { "cf-connecting-ip": ip } });
  const outcome = await decide(request, settings, ns, () => {}, caches);
  return outcome.kind === "allow"
    ? { status: 200, headers: outcome.headers }
    : { status: outcome.response.status, headers: Object.fromEntries(outcome.response.headers) };
}

/** What the object has counted for an IP-keyed rule. */
async function countedByObject(ip: string, rule: { id: string; limit: number; periodMs: number }) {
  const name = await hashKey(canonicalKey([[{ kind: "ip" }]], { ip: () => ip } as never));
  const peek = await env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(name)).peek([
    { ...rule, precision: 1, strict: false, enforce: true },
  ]);
  return peek.verdicts[0]!.weighted;
}

describe("leases: a key far below its limit is decided in the isolate", () => {
  afterEach(() => vi.useRealTimers());

  it("spends units the object counted ahead, so most requests make no call, with exact remaining counts", async () => {
    const settings = settingsFor([{ id: "roomy", limit: 1_000_000, period: "1h" }]);
    const { ns, counter } = countedNamespace();
    const caches = fresh();
    const ip = uniqueIp();
    const remaining: string[] = [];
    for (let i = 0; i < 170; i++) {
      const { status, headers } = await send(settings, ns, caches, ip);
      expect(status).toBe(200);
      remaining.push((headers as Record<string, string>)["X-RateLimit-Remaining"]!);
    }
    expect(remaining).toEqual(Array.from({ length: 170 }, (_, i) => String(1_000_000 - i - 1)));
    // One call admits its own request and leases LEASE_UNITS more.
    expect(counter.calls).toBe(Math.ceil(170 / (LEASE_UNITS + 1)));
  });

  it("grants no lease near a limit: there every request is decided by the object", async () => {
    const settings = settingsFor([{ id: "tight", limit: 10, period: "1h" }]);
    const { ns, counter } = countedNamespace();
    const caches = { blocked: new BlockedCache(0), leases: new LeaseCache() };
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await send(settings, ns, caches, ip)).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429]);
    expect(counter.calls).toBe(12);
  });

  it("lets a burst of concurrent requests share one call, and counts exactly what was admitted", async () => {
    const settings = settingsFor([{ id: "burst-lease", limit: 300, period: "1h" }]);
    const { ns, counter } = countedNamespace();
    const caches = fresh();
    const ip = uniqueIp();
    const results = await Promise.all(Array.from({ length: 500 }, () => send(settings, ns, caches, ip)));
    expect(results.filter((r) => r.status === 200)).toHaveLength(300);
    expect(await countedByObject(ip, { id: "burst-lease", limit: 300, periodMs: 3_600_000 })).toBe(300);
    expect(counter.calls).toBeLessThan(300);
  });

  it("hands back the units it did not spend before the bucket ended", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.parse("2026-11-21T12:00:10.000Z");
    vi.setSystemTime(start);
    const rule = { id: "handback", limit: 1000, period: "1m" };
    const settings = settingsFor([rule]);
    const { ns } = countedNamespace();
    const caches = fresh();
    const ip = uniqueIp();
    // One call admits its request and leases floor(999 / 8) = 124 → LEASE_UNITS more; two of them are spent.
    const lease = Math.min(LEASE_UNITS, Math.floor(999 / 8));
    for (let i = 0; i < 3; i++) await send(settings, ns, caches, ip);
    expect(await countedByObject(ip, { id: "handback", limit: 1000, periodMs: 60_000 })).toBe(1 + lease);
    vi.setSystemTime(start + 60_000); // the next window: the lease is dead, its unspent units handed back
    await send(settings, ns, caches, ip);
    // prev = 3 admitted weighs 3 × (1 − 10/60) = 2.5; plus this request and a new lease.
    const next = Math.min(LEASE_UNITS, Math.floor((1000 - 2.5 - 1) / 8));
    expect(await countedByObject(ip, { id: "handback", limit: 1000, periodMs: 60_000 })).toBeCloseTo(2.5 + 1 + next, 6);
  });

  it("decides every request of a random trace exactly as the object alone does", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const random = randomGenerator(11);
    const settings = settingsFor([
      { id: "lease-a", limit: 200, period: "2s" },
      { id: "lease-b", limit: 600, period: "10s", precision: 5 },
      { id: "lease-c", limit: 150, period: "1s", strict: true, precision: 4 },
    ]);
    const { ns, counter } = countedNamespace();
    const { ns: aloneNs } = countedNamespace();
    const [cached, alone] = [fresh(), none()];
    const [ipA, ipB] = [uniqueIp(), uniqueIp()];
    let now = Date.parse("2026-11-21T12:00:00.000Z");
    const withCaches: number[] = [];
    const objectAlone: number[] = [];
    for (let i = 0; i < 1500; i++) {
      now += random.next() < 0.99 ? random.int(6) : 400 + random.int(900);
      vi.setSystemTime(now);
      withCaches.push((await send(settings, ns, cached, ipA)).status);
      objectAlone.push((await send(settings, aloneNs, alone, ipB)).status);
    }
    expect(withCaches).toEqual(objectAlone);
    expect(objectAlone.filter((s) => s === 429).length).toBeGreaterThan(100);
    expect(objectAlone.filter((s) => s === 200).length).toBeGreaterThan(500);
    expect(counter.calls).toBeLessThan(1500 / 2);
  });

  it("stays within its size cap under a flood of distinct keys", async () => {
    const settings = settingsFor([{ id: "lease-flood", limit: 1000, period: "1h" }]);
    const { ns } = countedNamespace();
    const caches = { blocked: new BlockedCache(), leases: new LeaseCache(40) };
    for (let i = 0; i < 150; i++) {
      await send(settings, ns, caches, `172.17.${i >> 8}.${i & 255}`);
      expect(caches.leases.size).toBeLessThanOrEqual(40);
    }
    expect(caches.leases.size).toBe(40);
  });
});
