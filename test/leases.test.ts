import { afterEach, describe, expect, it, vi } from "vitest";
import { scriptedNamespace } from "./support/chaos.ts";
import { countedNamespace } from "./support/counting.ts";
import { counted, createIsolate, decider, objectAlone, requestFrom, settingsFor, statusOf } from "./support/isolate.ts";
import { from, limiter, uniqueIp } from "./support/limiter.ts";
import { gatedNamespace, ipCanonical, storedRows, storedTotal } from "./support/objects.ts";
import { randomGenerator } from "./support/random.ts";

/** An admitted rule's verdict, as the object answers a call far below the limit. */
const settledVerdict = {
  allowed: true,
  ruleAllows: true,
  weighted: 0,
  remaining: 999,
  retryAfterMs: 0,
  resetMs: 1,
  holdsForMs: 0,
};

/** 10 s into an hour: every lease below lives its whole 10 s demand window and more. */
const AT = Date.parse("2026-11-21T12:00:10.000Z");
const fakeDate = (ms = AT) => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(ms);
};
afterEach(() => vi.useRealTimers());

describe("leases: a key far below its limit is decided in the isolate", () => {
  it("asks for as many units as it saw requests lately, up to 64, with exact remaining counts", async () => {
    fakeDate();
    const { ns, counter } = countedNamespace();
    // Under 32 768, 1/16384 of the limit is less than two units: demand alone sizes the lease.
    const { run } = decider(settingsFor([{ id: "roomy", limit: 2_000, period: "1h" }]), ns, createIsolate());
    const ip = uniqueIp();
    const remaining: string[] = [];
    const calledAt: number[] = [];
    for (let i = 1; i <= 170; i++) {
      const before = counter.calls;
      const outcome = await run(requestFrom(ip));
      expect(statusOf(outcome)).toBe(200);
      if (outcome.kind === "allow") remaining.push(outcome.headers["X-RateLimit-Remaining"]!);
      if (counter.calls > before) calledAt.push(i);
    }
    expect(remaining).toEqual(Array.from({ length: 170 }, (_, i) => String(2_000 - i - 1)));
    // The call at request n leases min(n, 64) units: n requests were seen in this demand window.
    expect(calledAt).toEqual([1, 2, 5, 11, 23, 47, 95, 160]);
  });

  it("gives a key it has seen once no lease: nothing is counted but the request", async () => {
    fakeDate();
    const { ns } = countedNamespace();
    const { run } = decider(settingsFor([{ id: "rare", limit: 1000, period: "1h" }]), ns, createIsolate());
    const ips = Array.from({ length: 20 }, () => uniqueIp());
    for (const ip of ips) expect(statusOf(await run(requestFrom(ip)))).toBe(200);
    for (const ip of ips) expect(await storedTotal(ip)).toBe(1);
  });

  it("leases a key it has seen once no more than 1/16384 of its limit: too few to matter", async () => {
    fakeDate();
    const { ns } = countedNamespace();
    const isolate = createIsolate();
    const { run } = decider(settingsFor([{ id: "vast", limit: 40 * 16_384, period: "1h" }]), ns, isolate);
    const ip = uniqueIp();
    expect(statusOf(await run(requestFrom(ip)))).toBe(200);
    expect(isolate.keys.heldUnits(isolate.digest(ipCanonical(ip)))).toBe(40);
    expect(await storedTotal(ip)).toBe(1 + 40);
  });

  it("grants no lease near a limit: there every request is decided by the object", async () => {
    fakeDate();
    const { ns, counter } = countedNamespace();
    const isolate = createIsolate({ maxRefusalMs: 0 });
    const { run } = decider(settingsFor([{ id: "tight", limit: 10, period: "1h" }]), ns, isolate);
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push(statusOf(await run(requestFrom(ip))));
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429]);
    expect(counter.calls).toBe(12);
  });

  it("lets a burst of concurrent requests wait for one call's lease, and counts exactly what was admitted", async () => {
    fakeDate();
    const { ns, counter } = countedNamespace();
    const { run } = decider(settingsFor([{ id: "burst-lease", limit: 300, period: "1h" }]), ns, createIsolate());
    const ip = uniqueIp();
    const results = await Promise.all(Array.from({ length: 500 }, () => run(requestFrom(ip))));
    expect(results.filter((r) => statusOf(r) === 200)).toHaveLength(300);
    expect(await storedTotal(ip)).toBe(300);
    // 500 requests, 300 admissions, two calls: the first request's call (a demand of one gets no lease),
    // then one for the 499 that waited for it, as a batch: the object admits 299 of them, in order, and
    // refuses the rest. (Before batches, the waves of calls each leasing what an eighth of what was left
    // allowed made 38.)
    expect(counter.calls).toBe(2);
  });

  it("admits a request its object refused on units this isolate holds: it spends one of them", async () => {
    vi.useFakeTimers();
    // Two calls for one key cross: the second sent brings a lease first; the object then refuses the
    // first, counting that lease. Its units are admissions counted for this isolate: one is this request's.
    // (The second request waits for the first's call until that call is presumed lost, some 150 ms, then calls.)
    const { ns } = scriptedNamespace([
      { afterMs: 0, ends: "admit" },
      { afterMs: 0, ends: "admit" }, // demand 2 and still no lease: the key is near its limit
      { afterMs: 300, ends: "refuse" },
      { afterMs: 10, ends: "admit", leaseUnits: 3 },
    ]);
    const isolate = createIsolate();
    const { run } = decider(settingsFor([{ id: "crossed", limit: 10, period: "1d" }]), ns, isolate);
    const ip = uniqueIp();
    for (let i = 0; i < 2; i++) {
      const first = run(requestFrom(ip));
      await vi.advanceTimersByTimeAsync(1);
      expect(statusOf(await first)).toBe(200);
    }
    const refused = run(requestFrom(ip));
    const leased = run(requestFrom(ip));
    await vi.advanceTimersByTimeAsync(400);
    expect([statusOf(await refused), statusOf(await leased)]).toEqual([200, 200]);
    expect(isolate.keys.heldUnits(isolate.digest(ipCanonical(ip)))).toBe(2);
  });

  it("hands back, with the key's next call, the units it did not spend before the bucket ended", async () => {
    fakeDate();
    const rule = { id: "handback", limit: 1000, period: "1m" };
    const { ns } = countedNamespace();
    const isolate = createIsolate();
    const { run } = decider(settingsFor([rule]), ns, isolate);
    const ip = uniqueIp();
    // 1: a call, no lease yet (demand 1). 2: a call that leases 2 units. 3: spends one of them.
    for (let i = 0; i < 3; i++) await run(requestFrom(ip));
    expect(await storedTotal(ip)).toBe(4);
    expect(isolate.keys.heldUnits(isolate.digest(ipCanonical(ip)))).toBe(1);
    vi.setSystemTime(AT + 60_000); // the next window: the lease is dead, its unit owed
    await run(requestFrom(ip));
    const row = (await storedRows(ip))["handback|60000|1"]!;
    expect(row.counts[0]).toBe(3); // the previous window: the unspent unit was taken back
    // This request and a lease of 2: a demand of 3 (this one, and the previous window's 3 weighted by the 5/6
    // of it still in the last minute, rounded down) over a lease that lives the 50 s left of this bucket.
    expect(row.counts[1]).toBe(1 + 2);
    expect(isolate.keys.heldUnits(isolate.digest(ipCanonical(ip)))).toBe(row.counts[1]! - 1);
  });

  it("decides every request of a random trace exactly as the object alone does", async () => {
    fakeDate(Date.parse("2026-11-21T12:00:00.000Z"));
    const random = randomGenerator(11);
    const settings = settingsFor([
      { id: "lease-a", limit: 200, period: "2s" },
      { id: "lease-b", limit: 600, period: "10s", precision: 5 },
      { id: "lease-c", limit: 150, period: "1s", strict: true, precision: 4 },
    ]);
    const { ns, counter } = countedNamespace();
    const cached = decider(settings, ns, createIsolate());
    const alone = decider(settings, countedNamespace().ns, objectAlone());
    const [ipA, ipB] = [uniqueIp(), uniqueIp()];
    let now = Date.parse("2026-11-21T12:00:00.000Z");
    const withCaches: number[] = [];
    const objectOnly: number[] = [];
    /** Whether each request through the caches made a call. */
    const called: boolean[] = [];
    for (let i = 0; i < 1500; i++) {
      now += random.next() < 0.99 ? random.int(6) : 400 + random.int(900);
      vi.setSystemTime(now);
      const before = counter.calls;
      withCaches.push(statusOf(await cached.run(requestFrom(ipA))));
      called.push(counter.calls > before);
      objectOnly.push(statusOf(await alone.run(requestFrom(ipB))));
    }
    expect(withCaches).toEqual(objectOnly);
    // Seeded, sequential and on a faked clock, the trace is the same every run: these are its exact counts.
    const admitted = objectOnly.filter((s) => s === 200).length;
    expect({ admitted, refused: objectOnly.length - admitted }).toEqual({ admitted: 1162, refused: 338 });
    // 667 admissions were spent from leases, with no call.
    const leased = objectOnly.filter((s, i) => s === 200 && !called[i]).length;
    expect(leased).toBe(667);
    // Of the refusals, only the first of each run is the object's: the isolate answers the others itself.
    const refusalRuns = objectOnly.filter((s, i) => s === 429 && objectOnly[i - 1] !== 429).length;
    expect(objectOnly.filter((s, i) => s === 429 && called[i]).length).toBe(refusalRuns);
    expect(counter.calls).toBe(admitted - leased + refusalRuns); // 544 calls for 1,500 requests
  });

  it("stays within its size cap under a flood of distinct keys", async () => {
    fakeDate();
    const { ns } = countedNamespace();
    const isolate = createIsolate({ maxKeys: 40 });
    const { run } = decider(settingsFor([{ id: "lease-flood", limit: 1000, period: "1h" }]), ns, isolate);
    for (let i = 0; i < 150; i++) {
      await run(requestFrom(`172.17.${i >> 8}.${i & 255}`));
      expect(isolate.keys.size).toBeLessThanOrEqual(40);
    }
    expect(isolate.keys.size).toBe(40);
  });
  it("keeps the lease of a key in use under a flood of keys it only refuses: a known refusal makes no key recent", async () => {
    fakeDate();
    const { ns, counter } = countedNamespace();
    const isolate = createIsolate({ maxKeys: 16 });
    const settings = settingsFor([
      { id: "in-use", path: "/use", limit: 1000, period: "1h" },
      { id: "refused", path: "/flood", limit: 1, period: "1h" },
    ]);
    const { run, background } = decider(settings, ns, isolate);
    const inUse = uniqueIp();
    let admitted = 0;
    const use = async () => {
      expect(statusOf(await run(requestFrom(inUse, "/use")))).toBe(200);
      admitted++;
    };
    for (let i = 0; i < 30; i++) await use(); // calls at the 1st, 2nd, 5th, 11th and 23rd, which leases 23 units
    // As many refused keys as the isolate keeps: each admitted once, then refused, its refusal known.
    const flood = Array.from({ length: 16 }, () => uniqueIp());
    for (const [i, ip] of flood.entries()) {
      await run(requestFrom(ip, "/flood"));
      expect(statusOf(await run(requestFrom(ip, "/flood")))).toBe(429);
      if (i % 4 === 3) await use();
    }
    expect(isolate.keys.heldUnits(isolate.digest(ipCanonical(inUse)))).toBeGreaterThanOrEqual(10);
    const calls = counter.calls;
    // The flood: 32 refusals between two requests of the key in use, twice as many keys as the isolate keeps.
    for (let round = 0; round < 20; round++) {
      for (const ip of flood) expect(statusOf(await run(requestFrom(ip, "/flood")))).toBe(429);
      if (round % 2 === 1) await use();
    }
    // Neither a refused key nor the key in use called its object: the lease was kept, and so were the refusals.
    expect(counter.calls - calls).toBe(0);
    await background.settled();
    expect(await storedTotal(inUse)).toBe(admitted + isolate.keys.heldUnits(isolate.digest(ipCanonical(inUse))));
    expect(Object.values(isolate.counters.writtenOff).every((units) => units === 0)).toBe(true);
  });
});

describe("every leased unit is spent, handed back, or written off on purpose", () => {
  it("spends a rule's units on any request that rule counts, whatever other rules it matches", async () => {
    // The shipped rules: a GET /api/x without an API key matches both rules on the same IP key;
    // with a key, api-per-ip alone is on the IP. Units leased for the first must serve the second.
    const send = limiter([
      { id: "api-per-ip", path: "/api/*", exclude: ["/api/health"], limit: 100, period: "1m", key: ["ip"] },
      { id: "api-per-key", path: "/api/*", limit: 1000, period: "1h", key: ["header:x-api-key|ip"] },
    ]);
    const ip = uniqueIp();
    // 108 requests within one minute's bucket: across a minute's edge the sliding window rightly admits one more
    // (the last minute's 100 weigh a little under 100 just after it), so start well away from one.
    const toEdgeMs = 60_000 - (Date.now() % 60_000);
    if (toEdgeMs < 15_000) await new Promise((resolve) => setTimeout(resolve, toEdgeMs + 50));
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await send("/api/x", from(ip))).status);
    for (let i = 0; i < 105; i++) {
      const res = await send("/api/y", from(ip, { "x-api-key": `key-${ip}` }));
      await res.arrayBuffer();
      statuses.push(res.status);
    }
    expect(statuses.indexOf(429)).toBe(100);
  });

  it("gives a unit back to the lease it came from, never to a newer one in another bucket", async () => {
    const t0 = Date.UTC(2031, 0, 1, 0, 0, 9); // 9 s into a 10 s window
    fakeDate(t0);
    const settings = settingsFor([
      { id: "home-ip", limit: 400, period: "10s", strict: true, key: ["ip"] },
      { id: "home-key", path: "/k/*", limit: 1, period: "1h", key: ["header:x-k"] },
    ]);
    const { ns, hold, isHeld } = gatedNamespace();
    const isolate = createIsolate();
    const { run, background } = decider(settings, ns, isolate);
    const ip = uniqueIp();
    const held = () => isolate.keys.heldUnits(isolate.digest(ipCanonical(ip)));
    expect(statusOf(await run(requestFrom(uniqueIp(), "/k/a", { "x-k": "used" })))).toBe(200); // "used" is now full
    let admittedW1 = 0;
    // A lease lives to the window's end, 1 s away: demand must say more than one unit will be spent by then.
    while (held() < 2) {
      expect(statusOf(await run(requestFrom(ip, "/y")))).toBe(200);
      admittedW1++;
    }
    // X spends a unit of lease 1; its other key's call is held back, and will refuse.
    const release = hold("check");
    const x = run(requestFrom(ip, "/k/x", { "x-k": "used" }));
    await vi.waitFor(() => expect(isHeld("check")).toBe(false));
    while (held() > 0) {
      expect(statusOf(await run(requestFrom(ip, "/y")))).toBe(200);
      admittedW1++;
    }
    vi.setSystemTime(t0 + 1_500); // the next window: lease 1 is dead; the next call brings lease 2
    let admittedW2 = 0;
    expect(statusOf(await run(requestFrom(ip, "/y")))).toBe(200);
    admittedW2++;
    release();
    expect(statusOf(await x)).toBe(429);
    await background.settled();
    const [w1, w2] = [Math.floor(t0 / 10_000), Math.floor(t0 / 10_000) + 1];
    const heldIn = (bucket: number) =>
      isolate.keys
        .holdings(isolate.digest(ipCanonical(ip)))
        .filter((h) => h.receipt.row === "home-ip|10000|1" && h.receipt.bucket === bucket)
        .reduce((n, h) => n + h.count, 0);
    expect(heldIn(w1)).toBe(1); // X's unit is owed back to window 1, where it was counted
    for (let i = 0; i < 5; i++) {
      expect(statusOf(await run(requestFrom(ip, "/y")))).toBe(200);
      admittedW2++;
    }
    // Every count in each window is an admission made in it, or a unit this isolate still holds for it.
    const row = (await storedRows(ip))["home-ip|10000|1"]!;
    expect(row.bucket).toBe(w2);
    expect(row.counts).toEqual([admittedW1 + heldIn(w1), admittedW2 + heldIn(w2)]);
  });

  it("hands back the units of a key it evicts", async () => {
    fakeDate();
    const { ns } = countedNamespace();
    const isolate = createIsolate({ maxKeys: 2 });
    const { run, background } = decider(settingsFor([{ id: "evicted", limit: 1000, period: "1h" }]), ns, isolate);
    const ip = uniqueIp();
    for (let i = 0; i < 3; i++) expect(statusOf(await run(requestFrom(ip)))).toBe(200);
    expect(isolate.keys.heldUnits(isolate.digest(ipCanonical(ip)))).toBe(1);
    for (let i = 0; i < 4; i++) await run(requestFrom(uniqueIp())); // pushes the key out
    await background.settled();
    expect(await storedTotal(ip)).toBe(3);
    expect(Object.values(isolate.counters.writtenOff).every((units) => units === 0)).toBe(true);
  });

  it("keeps the lease of a call that answers after its key was evicted", async () => {
    fakeDate();
    const { ns, hold } = gatedNamespace();
    const isolate = createIsolate({ maxKeys: 2 });
    const { run, background } = decider(settingsFor([{ id: "late-lease", limit: 1000, period: "1h" }]), ns, isolate);
    const ip = uniqueIp();
    const held = () => isolate.keys.heldUnits(isolate.digest(ipCanonical(ip)));
    let admitted = 0;
    for (let i = 0; i < 3; i++) {
      expect(statusOf(await run(requestFrom(ip)))).toBe(200);
      admitted++;
    }
    while (held() > 0) {
      expect(statusOf(await run(requestFrom(ip)))).toBe(200);
      admitted++;
    }
    const release = hold("check");
    const late = run(requestFrom(ip)); // its call asks for a lease, and is held back
    for (let i = 0; i < 4; i++) await run(requestFrom(uniqueIp())); // pushes the key out meanwhile
    release();
    expect(statusOf(await late)).toBe(200);
    admitted++;
    // All it asked for: the 5 requests seen when it was sent, in under a second.
    expect(held()).toBe(5);
    for (let i = 0; i < 5; i++) {
      expect(statusOf(await run(requestFrom(ip)))).toBe(200);
      admitted++;
    }
    await background.settled();
    expect(await storedTotal(ip)).toBe(admitted + held());
  });

  it("remembers a key by a fixed-size digest, whatever its length", async () => {
    fakeDate();
    const { ns } = countedNamespace();
    const isolate = createIsolate();
    const { run } = decider(
      settingsFor([{ id: "long", limit: 2, period: "1h", key: ["header:x-api-key"] }]),
      ns,
      isolate,
    );
    for (let i = 0; i < 30; i++) {
      const key = `${"k".repeat(100 * 1024)}${i}`;
      for (let j = 0; j < 3; j++) await run(requestFrom("192.0.2.9", "/x", { "x-api-key": key }));
    }
    const keys = [...isolate.keys.digests()];
    // Each of the 30 keys once, kept twice: for its demand (in use) and for its refusal (the third request).
    expect([keys.length, isolate.keys.size, isolate.keys.refusedSize]).toEqual([30, 30, 30]);
    expect(Math.max(...keys.map((k) => k.length))).toBeLessThanOrEqual(16);
  });

  /** One rule's book in a fresh isolate, and a grant of `units` as a call sent at `sentAtMs` would bring it. */
  const bookFor = (id: string) => {
    const isolate = createIsolate();
    const rules = counted(settingsFor([{ id, limit: 1000, period: "1h" }]).rules);
    const digest = isolate.digest("a key");
    const receipt = { row: `${id}|3600000|1`, epoch: 1, bucket: 0 };
    const verdict = { ...settledVerdict, counted: null };
    /** A call's grant, stamped as sent now: made before a forgetting, the call went before it. */
    const grant = (units: number, sentAtMs: number) => ({
      name: "n",
      rules,
      verdicts: [verdict],
      lease: { units, receipts: [receipt], expiresInMs: 60_000 },
      sentAtMs,
      sent: isolate.keys.stamp(),
      asked: true,
    });
    return { isolate, rules, digest, grant };
  };

  it("writes off, and counts, the returns of a call that never answered (its request was cancelled)", () => {
    const { isolate, rules, digest, grant } = bookFor("lost");
    const state = isolate.keys.use(digest, 0);
    state.keep(grant(5, 0));
    const sent = state.leases.takeReturns(rules, 1_000); // the call carrying them is never heard of again
    expect(sent?.units).toBe(5);
    expect(isolate.counters.writtenOff["call lost"]).toBe(0);
    state.leases.takeReturns(rules, 1_000 + 150_000); // the key's next call, long after any call may take
    expect(isolate.counters.writtenOff["call lost"]).toBe(5);
  });

  it("writes off a lease that a call sent before an admin reset brings after it: its counts were wiped", () => {
    const { isolate, rules, digest, grant } = bookFor("reset-in-flight");
    const onItsWay = grant(7, 1_000);
    isolate.keys.forget(digest, [rules[0]!], 2_000); // the reset, while a call sent at 1 000 is on its way
    isolate.keys.use(digest, 2_000).keep(onItsWay);
    expect(isolate.keys.heldUnits(digest)).toBe(0);
    expect(isolate.counters.writtenOff.reset).toBe(7);
    isolate.keys.use(digest, 2_000).keep(grant(7, 2_000));
    // A call sent after the reset, in its very millisecond too, brings a lease as usual.
    expect(isolate.keys.heldUnits(digest)).toBe(7);
  });
});
