/**
 * Concurrency rules through the Worker, with real objects and the real
 * origin: a request holds a place from when it is forwarded until its
 * response body has been sent, its client hangs up, or the origin fails;
 * over the limit it is refused with the draft's `concurrent-requests`
 * headers, or, with `max_delay`, waits in line for a place.
 */
import { describe, expect, it, vi } from "vitest";
import { downOriginUrl, from, limiter, uniqueIp } from "./support/limiter.ts";
import { expectErrorLogs, expectOriginDownReports, expectRuntimeReports } from "./support/logs.ts";

const TOKEN = "concurrency-test-admin-token";

/** The Worker under `rules`, with the admin API on to read a client's places. */
function worker(rules: unknown[], vars: Record<string, string> = {}) {
  const send = limiter(rules, { ADMIN_TOKEN: TOKEN, ...vars });
  const places = async (rule: string, ip: string) => {
    const res = await send(`/__ratelimit/status?rule=${rule}&key=${ip}`, {
      headers: { authorization: `Bearer ${TOKEN}`, "cf-connecting-ip": "198.51.100.1" },
    });
    return (await res.json()) as { inUse: number; free: number | null; waiting: number; limit: number | null };
  };
  /** The client's places in use once every release sent has landed (they go in the background). */
  const settledInUse = async (rule: string, ip: string, expected: number) => {
    for (let i = 0; i < 50; i++) {
      const { inUse } = await places(rule, ip);
      if (inUse === expected) return inUse;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return (await places(rule, ip)).inUse;
  };
  return { send, places, settledInUse };
}

const ONE = [{ id: "cap", path: "/stream/*", concurrency: 1, key: ["ip"] }];

describe("a concurrency rule's place", () => {
  it("is held while the response body streams, and freed once the body has been sent", async () => {
    const { send, places, settledInUse } = worker(ONE);
    const ip = uniqueIp();
    const first = await send("/stream/200", from(ip));
    expect(first.status).toBe(200);
    expect(first.headers.get("ratelimit-policy")).toBe('"cap";q=1;qu="concurrent-requests"');
    expect(first.headers.get("ratelimit")).toBe('"cap";r=0');
    expect(await places("cap", ip)).toMatchObject({ limit: 1, inUse: 1, free: 0, waiting: 0 });
    // The body has not been read: the place is held.
    const second = await send("/stream/0", from(ip));
    expect(second.status).toBe(429);
    await second.arrayBuffer();
    expect(await first.text()).toBe("first\nlast\n");
    expect(await settledInUse("cap", ip, 0)).toBe(0);
    const third = await send("/stream/0", from(ip));
    expect(third.status).toBe(200);
    await third.arrayBuffer();
    expect(await settledInUse("cap", ip, 0)).toBe(0);
  });

  it("over the limit: 429 problem+json, RateLimit with no place free, the concurrent-requests policy, and Retry-After 1", async () => {
    const { send } = worker(ONE);
    const ip = uniqueIp();
    const holding = await send("/stream/100", from(ip));
    const refused = await send("/stream/0", from(ip));
    expect(refused.status).toBe(429);
    expect(refused.headers.get("content-type")).toBe("application/problem+json");
    expect({
      policy: refused.headers.get("ratelimit-policy"),
      rateLimit: refused.headers.get("ratelimit"),
      retryAfter: refused.headers.get("retry-after"),
      legacyReset: refused.headers.get("x-ratelimit-reset"),
    }).toEqual({
      policy: '"cap";q=1;qu="concurrent-requests"',
      rateLimit: '"cap";r=0',
      retryAfter: "1",
      legacyReset: null,
    });
    expect(await refused.json()).toMatchObject({
      status: 429,
      detail: 'Rate limit exceeded: "cap" (1 request in flight at once). Retry in 1 second.',
      retry_after: 1,
      "violated-policies": ["cap"],
    });
    await holding.arrayBuffer();
  });

  it("is freed when the client hangs up mid-body", async () => {
    const { send, settledInUse } = worker(ONE);
    const ip = uniqueIp();
    const first = await send("/stream/5000", from(ip));
    const reader = first.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("first\n");
    await reader.cancel();
    expect(await settledInUse("cap", ip, 0)).toBe(0);
    const next = await send("/stream/0", from(ip));
    expect(next.status).toBe(200);
    await next.arrayBuffer();
  });

  it.each([
    ["a plain request", {}],
    ["a WebSocket handshake, before it is upgraded", { upgrade: "websocket", connection: "Upgrade" }],
  ])("is freed at once when the client of %s hangs up before the origin has answered", async (_name, headers) => {
    const rules = [{ id: "cap-slow", path: "/slow/*", concurrency: 1, key: ["ip"], place_timeout: "30s" }];
    const { send, settledInUse } = worker(rules);
    const ip = uniqueIp();
    const hangUp = new AbortController();
    // The origin takes 3 s to answer; the client gives up after 100 ms.
    const waiting = send("/slow/3000", { ...from(ip, headers), signal: hangUp.signal }).catch(() => null);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await settledInUse("cap-slow", ip, 1)).toBe(1);
    const hungUpAt = Date.now();
    hangUp.abort();
    expect(await settledInUse("cap-slow", ip, 0)).toBe(0);
    expect(Date.now() - hungUpAt).toBeLessThan(1_000);
    await waiting;
  });

  // A HEAD's answer has no body to send: the Worker's own 502 for it must free the place as the answer goes.
  it.each(["GET", "HEAD"])("is freed when the origin cannot be reached (502), for a %s", async (method) => {
    const { send, settledInUse } = worker(ONE, { ORIGIN_URL: downOriginUrl() });
    const ip = uniqueIp();
    const res = await send("/stream/0", { method, ...from(ip) });
    expect(res.status).toBe(502);
    await res.arrayBuffer();
    await expectOriginDownReports(1);
    expectErrorLogs("origin_unreachable");
    expect(await settledInUse("cap", ip, 0)).toBe(0);
  });

  it("is freed once the origin fails mid-body, before its client sees the cut: a client that asks again at once is admitted", async () => {
    const { send } = worker(ONE);
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await send("/stream/20?reset", from(ip));
      statuses.push(res.status);
      await res.text().catch(() => "cut");
    }
    expect(statuses).toEqual(Array(10).fill(200));
    // The runtime reports each body the origin broke off, though the Worker handles it.
    expect(await expectRuntimeReports("error reading a body from connection", "all")).toBeGreaterThan(0);
  });

  it("refused, gives back what the request's rate rules counted for it", async () => {
    // A limit too small to lease from: the object's count is the requests it admitted.
    const rules = [{ id: "rate", path: "/stream/*", limit: 3, period: "1h", key: ["ip"] }, ...ONE];
    const { send } = worker(rules);
    const ip = uniqueIp();
    const holding = await send("/stream/100", from(ip));
    expect((await send("/stream/0", from(ip))).status).toBe(429);
    await holding.arrayBuffer();
    const status = await send(`/__ratelimit/status?rule=rate&key=${ip}`, {
      headers: { authorization: `Bearer ${TOKEN}`, "cf-connecting-ip": "198.51.100.1" },
    });
    // Only the request that went on is counted: the refused one's count came back.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(((await status.json()) as { weighted: number }).weighted).toBe(1);
  });

  it("under a shadow rule, is never refused: what it would refuse is logged", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    try {
      const rules = [{ id: "shadow-cap", path: "/stream/*", concurrency: 1, key: ["ip"], action: "log" }];
      const { send } = worker(rules);
      const ip = uniqueIp();
      const holding = await send("/stream/100", from(ip));
      const over = await send("/stream/0", from(ip));
      expect(over.status).toBe(200);
      // A shadow rule sends no rate-limit headers, as for a rate.
      expect(over.headers.get("ratelimit")).toBeNull();
      await Promise.all([holding.arrayBuffer(), over.arrayBuffer()]);
      const lines = log.mock.calls.map(([line]) => JSON.parse(String(line)));
      const shadow = lines.filter((l) => l.event === "ratelimit_shadow");
      expect(shadow.map((l) => [l.rule, l.decision, l.limit])).toEqual([["shadow-cap", "would_block", 1]]);
    } finally {
      log.mockRestore();
    }
  });
});

describe("with max_delay, a request waits in line for a place", () => {
  const WAITING = [{ id: "cap", path: "/stream/*", concurrency: 1, key: ["ip"], max_delay: "2s" }];

  it("and goes when one frees, saying how long it was held", async () => {
    const { send } = worker(WAITING);
    const ip = uniqueIp();
    const first = await send("/stream/300", from(ip));
    const started = Date.now();
    const waiting = send("/stream/0", from(ip));
    const read = first.text();
    const second = await waiting;
    const waitedMs = Date.now() - started;
    expect(second.status).toBe(200);
    await read;
    const held = /^ratelimit;desc="held";dur=(\d+)$/.exec(second.headers.get("server-timing") ?? "");
    expect(held, `Server-Timing: ${second.headers.get("server-timing")}`).not.toBeNull();
    expect(Number(held![1])).toBeGreaterThanOrEqual(250);
    expect(Number(held![1])).toBeLessThanOrEqual(waitedMs);
    expect(first.headers.get("server-timing")).toBeNull();
    await second.arrayBuffer();
  });

  it("and is refused at the end of its wait when no place frees", async () => {
    const { send } = worker([{ ...WAITING[0], max_delay: "300ms" }]);
    const ip = uniqueIp();
    const first = await send("/stream/2000", from(ip));
    const started = Date.now();
    const refused = await send("/stream/0", from(ip));
    expect(refused.status).toBe(429);
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    await refused.arrayBuffer();
    await first.body!.cancel();
  });
});

describe("a refusal under an override or a tier shows the client's own number of places", () => {
  const CONC = { id: "conc", path: "/stream/*", concurrency: 2, key: ["header:x-k"] };
  const cases: { name: string; rule: Record<string, unknown>; override: Record<string, unknown>; quota: string }[] = [
    { name: "an override's limit", rule: CONC, override: { limit: 1 }, quota: "1 request in flight at once" },
    {
      name: "an override's tier, named as a rate rule's is",
      rule: CONC,
      override: { tier: "pro" },
      quota: '1 request in flight at once, tier "pro"',
    },
    {
      name: "an override's limit, to a request refused at the end of its wait",
      rule: { ...CONC, max_delay: "200ms" },
      override: { limit: 1 },
      quota: "1 request in flight at once",
    },
  ];
  for (const { name, rule, override, quota } of cases) {
    it(`${name}: q=1, X-RateLimit-Limit 1 and "${quota}", as the admitted request shows`, async () => {
      const { send } = worker([rule], { TIERS: JSON.stringify({ pro: { conc: 1 } }) });
      const client = `OW-${uniqueIp()}`;
      const put = await send(`/__ratelimit/overrides?rule=conc&key=header:x-k=${client}`, {
        method: "PUT",
        headers: {
          authorization: `Bearer ${TOKEN}`,
          "content-type": "application/json",
          "cf-connecting-ip": "198.51.100.1",
        },
        body: JSON.stringify(override),
      });
      expect(put.status).toBe(200);
      const admitted = await send("/stream/2000", from(uniqueIp(), { "x-k": client }));
      expect(admitted.status).toBe(200);
      expect(admitted.headers.get("ratelimit-policy")).toBe('"conc";q=1;qu="concurrent-requests"');
      const refused = await send("/stream/0", from(uniqueIp(), { "x-k": client }));
      expect(refused.status).toBe(429);
      expect({
        policy: refused.headers.get("ratelimit-policy"),
        legacyLimit: refused.headers.get("x-ratelimit-limit"),
        detail: ((await refused.json()) as { detail: string }).detail,
      }).toEqual({
        policy: '"conc";q=1;qu="concurrent-requests"',
        legacyLimit: "1",
        detail: `Rate limit exceeded: "conc" (${quota}). Retry in 1 second.`,
      });
      await admitted.body!.cancel();
    });
  }
});

describe("a reset of a client under a concurrency rule (DELETE /status)", () => {
  const TWO = [{ id: "two", path: "/stream/*", concurrency: 2, key: ["ip"] }];

  it("frees its places at once: the next request goes, and the reset requests' ends free nothing twice", async () => {
    const { send, places, settledInUse } = worker(TWO);
    const ip = uniqueIp();
    const [a, b] = [await send("/stream/5000", from(ip)), await send("/stream/5000", from(ip))];
    expect([a.status, b.status]).toEqual([200, 200]);
    expect((await send("/stream/0", from(ip))).status).toBe(429);
    const reset = await send(`/__ratelimit/status?rule=two&key=${ip}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${TOKEN}`, "cf-connecting-ip": "198.51.100.1" },
    });
    expect(await reset.json()).toMatchObject({ rule: "two", reset: true, freed: 2 });
    expect(await places("two", ip)).toMatchObject({ inUse: 0, free: 2 });
    const c = await send("/stream/5000", from(ip));
    expect(c.status).toBe(200);
    // The reset requests end: their places are gone already, so nothing of c's is freed.
    await Promise.all([a.body!.cancel(), b.body!.cancel()]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await settledInUse("two", ip, 1)).toBe(1);
    const d = await send("/stream/5000", from(ip));
    expect(d.status).toBe(200);
    const e = await send("/stream/0", from(ip));
    expect(e.status).toBe(429);
    await e.arrayBuffer();
    await Promise.all([c.body!.cancel(), d.body!.cancel()]);
    expect(await settledInUse("two", ip, 0)).toBe(0);
  });

  it("gives the freed place to a request waiting in line for one (max_delay)", async () => {
    const { send } = worker([{ id: "one-held", path: "/stream/*", concurrency: 1, key: ["ip"], max_delay: "5s" }]);
    const ip = uniqueIp();
    const holding = await send("/stream/5000", from(ip));
    const started = Date.now();
    const waiting = send("/stream/0", from(ip));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const reset = await send(`/__ratelimit/status?rule=one-held&key=${ip}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${TOKEN}`, "cf-connecting-ip": "198.51.100.1" },
    });
    expect(await reset.json()).toMatchObject({ reset: true, freed: 1 });
    const went = await waiting;
    expect(went.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(2_000);
    await Promise.all([went.arrayBuffer(), holding.body!.cancel()]);
  });
});
