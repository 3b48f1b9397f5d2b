import { afterEach, describe, expect, it, type MockInstance, vi } from "vitest";
import type { Settings } from "../src/config/settings.ts";
import { admit, emptyState, evaluate } from "../src/core/sliding-window.ts";
import type { Isolate } from "../src/isolate/isolate.ts";
import type { LimiterNamespace } from "../src/object/client.ts";
import { countedNamespace } from "./support/counting.ts";
import { createIsolate, decider, requestFrom, settingsFor, statusOf, windows } from "./support/isolate.ts";
import { from, limiter, uniqueIp } from "./support/limiter.ts";
import { gatedNamespace } from "./support/objects.ts";
import { randomGenerator } from "./support/random.ts";

/** An isolate that remembers refusals but leases nothing, so every admission is the object's. */
const refusalsOnly = (options: { maxKeys?: number; maxRefusalMs?: number } = {}) =>
  createIsolate({ maxLeaseUnits: 0, ...options });

/** Decides one request from `ip` at the current (possibly faked) time; the status it gets. */
async function status(settings: Settings, ns: LimiterNamespace, isolate: Isolate, ip: string, path = "/x") {
  return statusOf(await decider(settings, ns, isolate).run(requestFrom(ip, path)));
}

describe("refusals the isolate knows of", () => {
  afterEach(() => vi.useRealTimers());

  it("answers repeated refusals itself, without calling the object", async () => {
    const settings = settingsFor([{ id: "cached", limit: 2, period: "1h" }]);
    const { ns, counter } = countedNamespace();
    const cache = refusalsOnly();
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
    const cache = refusalsOnly();
    const ip = uniqueIp();
    const ask = async () => {
      const outcome = await decider(settings, ns, cache).run(requestFrom(ip));
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
    const cache = refusalsOnly();
    const ip = uniqueIp();
    const retryAfterAt = async (ms: number) => {
      vi.setSystemTime(start + ms);
      const outcome = await decider(settings, ns, cache).run(requestFrom(ip));
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
    const cache = refusalsOnly();
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
    const cache = refusalsOnly();
    const never = refusalsOnly({ maxRefusalMs: 0 });
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
    // Seeded, sequential and on a faked clock, the trace is the same every run.
    const admitted = alone.filter((s) => s === 200).length;
    expect({ admitted, refused: alone.length - admitted }).toEqual({ admitted: 57, refused: 343 });
    // The object decides each admission, and the first refusal of each run of refusals; the isolate answers
    // every other refusal itself, until the instant the object would admit again, which ends the run.
    const refusalRuns = alone.filter((s, i) => s === 429 && alone[i - 1] !== 429).length;
    expect(counter.calls).toBe(admitted + refusalRuns);
  });

  it("stays within its size cap under a flood of distinct blocked keys", async () => {
    const settings = settingsFor([{ id: "flood", limit: 1, period: "1h" }]);
    const { ns } = countedNamespace();
    const cache = refusalsOnly({ maxKeys: 50 });
    for (let i = 0; i < 200; i++) {
      const ip = `172.16.${i >> 8}.${i & 255}`;
      await status(settings, ns, cache, ip);
      await status(settings, ns, cache, ip);
      expect(cache.keys.refusedSize).toBeLessThanOrEqual(50);
    }
    expect(cache.keys.refusedSize).toBe(50);
  });

  it("keeps no entry at all when its size is 0", async () => {
    const settings = settingsFor([{ id: "off", limit: 1, period: "1h" }]);
    const { ns, counter } = countedNamespace();
    const cache = refusalsOnly({ maxRefusalMs: 0 });
    const ip = uniqueIp();
    for (let i = 0; i < 5; i++) await status(settings, ns, cache, ip);
    expect(cache.keys.refusedSize).toBe(0);
    expect(counter.calls).toBe(5);
  });

  it("does not remember a refusal that rests on a count about to be refunded", async () => {
    const settings = settingsFor([
      { id: "pending-ip", limit: 1, period: "1h", key: ["ip"] },
      { id: "pending-key", path: "/k/*", limit: 1, period: "1h", key: ["header:x-k"] },
    ]);
    const { ns, hold } = gatedNamespace();
    const { run, background } = decider(settings, ns, refusalsOnly());
    const ip = uniqueIp();
    expect(statusOf(await run(requestFrom(uniqueIp(), "/k/a", { "x-k": "full" })))).toBe(200); // "full" is now full
    const release = hold("refund");
    // The IP admits this request and the key refuses it: the IP's count is to be refunded, but not yet.
    expect(statusOf(await run(requestFrom(ip, "/k/b", { "x-k": "full" })))).toBe(429);
    expect(statusOf(await run(requestFrom(ip, "/y")))).toBe(429); // refused on a count not yet refunded
    release();
    await background.settled();
    expect(statusOf(await run(requestFrom(ip, "/y")))).toBe(200); // the object admits now, and so does the isolate
  });

  // A rule whose count the origin's answer settles (`count`, `cost_header`) may give its own count back up to
  // 100 s later; a rule beside it on the same key gives nothing back, so its refusals hold as any other's.
  describe.each([
    ["count = failed", { count: "failed" }],
    ["count = successful", { count: "successful" }],
    ["cost_header", { cost_header: "x-cost" }],
  ])("beside a rule with %s on the same key", (_, settledByAnswer) => {
    it("remembers a plain rule's refusal: 47 refusals cost no call", async () => {
      const settings = settingsFor([
        { id: "plain", limit: 2, period: "1h" },
        { id: "by-answer", limit: 1000, period: "1h", ...settledByAnswer },
      ]);
      const { ns, counter } = countedNamespace();
      const cache = refusalsOnly();
      const ip = uniqueIp();
      const statuses: number[] = [];
      for (let i = 0; i < 50; i++) statuses.push(await status(settings, ns, cache, ip));
      expect(statuses).toEqual([200, 200, ...Array(48).fill(429)]);
      expect(counter.calls).toBe(3);
    });

    it("does not remember the refusal of the rule whose count the answer settles", async () => {
      const settings = settingsFor([
        { id: "plain", limit: 1000, period: "1h" },
        { id: "by-answer", limit: 2, period: "1h", ...settledByAnswer },
      ]);
      const { ns, counter } = countedNamespace();
      const cache = refusalsOnly();
      const ip = uniqueIp();
      const statuses: number[] = [];
      for (let i = 0; i < 10; i++) statuses.push(await status(settings, ns, cache, ip));
      expect(statuses).toEqual([200, 200, ...Array(8).fill(429)]);
      expect(counter.calls).toBe(10); // each refusal asks: the answers may give the counts back
    });
  });
});

describe("logs under attack", () => {
  let lines: string[];
  let spy: MockInstance;
  afterEach(() => spy?.mockRestore());
  const blockedLines = () => lines.map((l) => JSON.parse(l)).filter((l) => l.event === "ratelimit_blocked");

  it("logs one ratelimit_blocked line per key per 10 s from 20 concurrent connections, with the repeats", async () => {
    lines = [];
    spy = vi.spyOn(console, "log").mockImplementation((line) => lines.push(String(line)));
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.UTC(2031, 0, 1, 0, 0, 0);
    const settings = settingsFor([{ id: "attacked", limit: 2, period: "2s", key: ["ip"] }]);
    const { ns } = countedNamespace();
    const { run } = decider(settings, ns, createIsolate());
    const ip = uniqueIp();
    // What one exact window admits of the same requests in the first 10 s: every other one is refused.
    const [rule] = windows(settings.rules);
    let window = emptyState(start, rule!);
    let admittedInFirst10s = 0;
    for (let t = 0; t < 10_000; t += 100) {
      for (let i = 0; i < 20; i++) {
        const seen = evaluate(window, start + t, rule!);
        window = seen.allowed ? admit(seen.state) : seen.state;
        if (seen.allowed) admittedInFirst10s++;
      }
    }
    expect(admittedInFirst10s).toBe(10); // 2 per 2 s
    let refusedInFirst10s = 0;
    for (let t = 0; t < 20_000; t += 100) {
      vi.setSystemTime(start + t);
      const outcomes = await Promise.all(Array.from({ length: 20 }, () => run(requestFrom(ip))));
      if (t < 10_000) refusedInFirst10s += outcomes.filter((o) => statusOf(o) === 429).length;
    }
    // The first refusal is logged at once (t = 0); the next line comes with the first refusal at 10 s,
    // and counts the refusals in between that were not logged.
    const logged = blockedLines();
    expect(logged.length).toBe(2);
    expect(logged[0]).toMatchObject({ rule: "attacked", decision: "blocked" });
    expect(logged[0]!.repeats).toBeUndefined();
    expect(refusedInFirst10s).toBe(100 * 20 - admittedInFirst10s);
    expect(logged[1]!.repeats).toBe(refusedInFirst10s - 1);
  });
});

describe("a refusal that answers after its key was forgotten", () => {
  const rule = settingsFor([{ id: "forgotten", limit: 1, period: "1m" }]).rules[0]!;
  const refused = {
    allowed: false,
    ruleAllows: false,
    weighted: 1,
    remaining: 0,
    retryAfterMs: 50_000,
    resetMs: 50_000,
    counted: null,
    holdsForMs: 50_000,
  };

  it("is not remembered when its call was sent before the forget (an admin reset or an override change)", () => {
    const isolate = createIsolate({ clock: () => 1_000 });
    // The call goes out at 900; the operator's change is served at 1000; the old refusal lands at 1100.
    const sent = isolate.keys.stamp();
    isolate.keys.forget("digest", [rule], 1_000);
    isolate.keys.remember("digest", rule, "name", 900, sent, refused);
    expect(isolate.keys.refusal("digest", rule, 1_100)).toBeUndefined();
  });

  it("is remembered when its call was sent after the forget, in the same millisecond too", () => {
    const isolate = createIsolate({ clock: () => 1_000 });
    isolate.keys.forget("digest", [rule], 1_000);
    // Sent after the forget, at its very millisecond: after it (by times alone, it could not be told apart).
    isolate.keys.remember("digest", rule, "name", 1_000, isolate.keys.stamp(), refused);
    expect(isolate.keys.refusal("digest", rule, 1_100)?.retryAtMs).toBe(51_000);
  });

  it("never removes a newer refusal when an older call answers late", () => {
    const isolate = createIsolate({ clock: () => 1_000 });
    const older = isolate.keys.stamp();
    isolate.keys.forget("digest", [rule], 1_000);
    isolate.keys.remember("digest", rule, "name", 1_001, isolate.keys.stamp(), refused);
    isolate.keys.remember("digest", rule, "name", 999, older, { ...refused, holdsForMs: 0 });
    expect(isolate.keys.refusal("digest", rule, 1_100)?.retryAtMs).toBe(51_001);
  });
});

/**
 * The Worker answers a refusal its isolate knows of before its Hono app runs
 * (src/worker/app.ts), and leaves everything else to the app: the answer is
 * the app's own, whichever way it went.
 */
describe("a known refusal answered by the Worker before its app", () => {
  const RULES = [{ id: "early", path: "/early/*", limit: 1, period: "1h", methods: ["GET"] }];

  it("is the app's refusal: the same status, headers and body as the object's refusal before it", async () => {
    const send = limiter(RULES);
    const ip = uniqueIp();
    expect((await send("/early/x", from(ip))).status).toBe(200);
    const read = async () => {
      const res = await send("/early/x", from(ip));
      const headers = Object.fromEntries(res.headers);
      // The wait counts down between the two; everything else is the same.
      for (const name of ["retry-after", "ratelimit"]) delete headers[name];
      return { status: res.status, headers, body: await res.json() };
    };
    const fromObject = await read();
    const known = await read();
    expect(fromObject.status).toBe(429);
    expect(known).toEqual(fromObject);
  });

  it("leaves HEAD to the app, which answers it as it answers GET, without a body", async () => {
    const send = limiter(RULES);
    const ip = uniqueIp();
    await send("/early/x", from(ip));
    await send("/early/x", from(ip)); // refused: now known
    const head = await send("/early/x", { method: "HEAD", ...from(ip) });
    expect(head.status).toBe(429);
    expect(await head.text()).toBe("");
  });

  it("never refuses the admin API's paths, however written, for a client its rules refuse", async () => {
    const send = limiter([{ id: "everything", path: "/*", limit: 1, period: "1h" }], { ADMIN_TOKEN: "early-token" });
    const ip = uniqueIp();
    await send("/x", from(ip));
    expect((await send("/x", from(ip))).status).toBe(429); // now known
    const auth = { authorization: "Bearer early-token" };
    for (const path of ["/__ratelimit/rules", "//__ratelimit/rules", "/%5F_ratelimit/rules"]) {
      const res = await send(path, from(ip, auth));
      expect(res.status, path).toBe(200);
    }
  });
});
