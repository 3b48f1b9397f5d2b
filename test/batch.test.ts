/**
 * Batches: requests of one key that wait in one isolate for a call in
 * flight, and still need the object when it lands, go to the object in one
 * call, which decides each of them in order, all or nothing, as if each had
 * called alone. Near a limit, where every request needs the object, an
 * isolate then makes at most one call for a key while another is in flight.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { IsolateCounters } from "../src/isolate/counters.ts";
import { CallTimes } from "../src/isolate/flight.ts";
import { Gate } from "../src/isolate/gate.ts";
import type { LimiterNamespace } from "../src/object/client.ts";
import type { CheckOptions, WindowCheck as RuleCheck } from "../src/object/protocol.ts";
import { flakyNamespace, scriptedNamespace, slowNamespace } from "./support/chaos.ts";
import { countedNamespace } from "./support/counting.ts";
import { env } from "./support/env.ts";
import { createIsolate, decider, objectAlone, requestFrom, settingsFor, statusOf } from "./support/isolate.ts";
import { uniqueIp } from "./support/limiter.ts";
import { expectErrorLogs } from "./support/logs.ts";
import { gatedNamespace, storedTotal } from "./support/objects.ts";

const rule = (id: string, limit: number, over: Partial<RuleCheck> = {}): RuleCheck => ({
  id,
  limit,
  periodMs: 3_600_000,
  precision: 60,
  strict: true,
  enforce: true,
  ...over,
});

let objects = 0;
const freshObject = () => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`batch-test-${++objects}-${Date.now()}`));

describe("the object: one check decides a batch of requests, in order", () => {
  it("admits as many as fit, each all or nothing across its rules, and refuses the rest with the refusal each would get", async () => {
    const stub = freshObject();
    const rules = [rule("tight", 10), rule("loose", 100)];
    const result = await stub.check(rules, { batch: 15 });
    expect(result.admitted).toBe(10);
    expect(result.allowed).toBe(true);
    expect(result.verdicts.map((v) => v.remaining)).toEqual([0, 90]);
    expect(result.refused?.map((v) => v.ruleAllows)).toEqual([false, true]);
    expect(result.refused![0]!.retryAfterMs).toBeGreaterThan(0);
    // The loose rule counted the 10 admitted, not the 5 the tight one refused.
    const seen = await stub.peek(rules);
    expect(seen.verdicts.map((v) => v.weighted)).toEqual([10, 10]);
    // One at a time, the next is refused as the batch's last ones were.
    const next = await stub.check(rules);
    expect(next.allowed).toBe(false);
    // The same wait, less the milliseconds between the two checks.
    expect(next.verdicts[0]!.retryAfterMs).toBeGreaterThan(result.refused![0]!.retryAfterMs - 1_000);
    expect(next.verdicts[0]!.retryAfterMs).toBeLessThanOrEqual(result.refused![0]!.retryAfterMs);
  });

  it("admits none when the first is refused, and counts nothing", async () => {
    const stub = freshObject();
    await stub.check([rule("full", 3)], { batch: 3 });
    const result = await stub.check([rule("full", 3)], { batch: 4 });
    expect(result).toMatchObject({ allowed: false, admitted: 0 });
    expect(result.refused).toBeUndefined();
    expect((await stub.peek([rule("full", 3)])).verdicts[0]!.weighted).toBe(3);
  });

  it("grants a lease after a batch only when the whole batch fitted", async () => {
    const stub = freshObject();
    // A lease lasts to the end of the current bucket (a minute here), and is sized to the demand seen in
    // `seenInMs` scaled to that: seen over 1 ms, 64 are asked for whatever the wall clock reads. (Over a
    // second, a run in a minute's last second was leased fewer: 61 instead of 64, once in CI.)
    const lease = { units: 64, seen: 64, seenInMs: 1 };
    const roomy = await stub.check([rule("roomy", 1_000_000)], { batch: 10, lease });
    expect(roomy.admitted).toBe(10);
    expect(roomy.lease?.units).toBe(64);
    expect((await stub.peek([rule("roomy", 1_000_000)])).verdicts[0]!.weighted).toBe(10 + 64);
    const tight = await stub.check([rule("tight-lease", 20)], { batch: 25, lease });
    expect(tight.admitted).toBe(20);
    expect(tight.lease).toBeUndefined();
  });

  it("refuses a later request of a batch as it would refuse it alone, when the counts before it may be refunded: not held, its penalty tentative", async () => {
    const penalized = (id: string) => rule(id, 1, { blockForMs: 600_000 });
    // One call at a time: the refusal rests on a count that may be handed back, so it does not hold, and the
    // penalty it starts is lifted when the count is.
    const alone = freshObject();
    const a = await alone.check([penalized("alone")], { refundableForMs: 10_000 });
    const b = await alone.check([penalized("alone")], { refundableForMs: 10_000 });
    expect(b.allowed).toBe(false);
    expect(b.verdicts[0]!.holdsForMs).toBe(0);
    await alone.refund([{ receipt: a.verdicts[0]!.counted!, count: 1 }]);
    expect((await alone.peek([penalized("alone")])).allowed).toBe(true);
    // The same two requests in one batch: the same.
    const batched = freshObject();
    const both = await batched.check([penalized("batched")], { refundableForMs: 10_000, batch: 2 });
    expect(both.admitted).toBe(1);
    expect(both.refused![0]!.holdsForMs).toBe(0);
    await batched.refund([{ receipt: both.verdicts[0]!.counted!, count: 1 }]);
    expect((await batched.peek([penalized("batched")])).allowed).toBe(true);
  });

  it("answers a check without a batch as it always did", async () => {
    const result = await freshObject().check([rule("single", 5)]);
    expect(result.allowed).toBe(true);
    expect("admitted" in result).toBe(false);
  });
});

describe("the isolate: requests that wait for a call go to the object together", () => {
  afterEach(() => vi.useRealTimers());

  it("300 concurrent requests under a limit of 100: exactly 100 admitted, in two calls", async () => {
    const { ns, counter } = countedNamespace();
    // A deadline no busy machine reaches: the calls are what is counted here, not how the isolate gives up on one.
    const { run } = decider(
      settingsFor([{ id: "burst-batch", limit: 100, period: "1h", precision: 60, strict: true }], 30_000),
      ns,
      createIsolate(),
    );
    const ip = uniqueIp();
    const results = await Promise.all(Array.from({ length: 300 }, () => run(requestFrom(ip))));
    expect(results.filter((r) => statusOf(r) === 200)).toHaveLength(100);
    expect(results.filter((r) => statusOf(r) === 429)).toHaveLength(200);
    expect(await storedTotal(ip)).toBe(100);
    // The first request's call, then one for the 299 that waited for it.
    expect(counter.calls).toBe(2);
  });

  it("an object that knows no batches (an earlier version, during a deploy) decides one request a call: still exactly the limit", async () => {
    const stubs: LimiterNamespace = {
      idFromName: (name) => env.RATE_LIMITER.idFromName(name),
      get: (id) => {
        const stub = env.RATE_LIMITER.get(id);
        return {
          // It reads no `batch`: it decides one request, and answers as for one.
          check: (rules: RuleCheck[], options: CheckOptions = {}) =>
            stub.check(rules, { ...options, batch: undefined }),
          refund: (refunds: Parameters<typeof stub.refund>[0]) => stub.refund(refunds),
        } as unknown as ReturnType<LimiterNamespace["get"]>;
      },
    };
    // 300 calls at once: a deadline no busy machine reaches, or the ones it ran out on would be forwarded.
    const { run } = decider(
      settingsFor([{ id: "old-object", limit: 100, period: "1h", precision: 60, strict: true }], 30_000),
      stubs,
      createIsolate(),
    );
    const ip = uniqueIp();
    const results = await Promise.all(Array.from({ length: 300 }, () => run(requestFrom(ip))));
    expect(results.filter((r) => statusOf(r) === 200)).toHaveLength(100);
    expect(await storedTotal(ip)).toBe(100);
  });

  it("waves of concurrent requests near a limit: each wave's waiters go in one call, and no more is admitted than the object alone admits", async () => {
    const limit = 60;
    const settings = settingsFor([{ id: "waves", limit, period: "1h", precision: 60, strict: true }]);
    const { ns, counter } = countedNamespace();
    const { run } = decider(settings, ns, createIsolate());
    const alone = decider(settings, countedNamespace().ns, objectAlone());
    const ip = uniqueIp();
    const other = uniqueIp();
    const statuses: number[] = [];
    const reference: number[] = [];
    for (let wave = 0; wave < 8; wave++) {
      const sent = Array.from({ length: 10 + wave }, () => run(requestFrom(ip)));
      statuses.push(...(await Promise.all(sent)).map(statusOf));
      for (let i = 0; i < sent.length; i++) reference.push(statusOf(await alone.run(requestFrom(other))));
    }
    const admitted = statuses.filter((s) => s === 200).length;
    expect(admitted).toBe(reference.filter((s) => s === 200).length);
    expect(admitted).toBe(limit);
    expect(await storedTotal(ip)).toBe(limit);
    // At most two calls a wave (its first request's, and its waiters' batch), and none once refusals are known.
    expect(counter.calls).toBeLessThanOrEqual(2 * 8);
  });

  it("a burst that one batch absorbs leaves nothing leased: another isolate's burst gets every admission that is left", async () => {
    // A batch forms when requests waited for a call that left them uncovered: the demand it carries has been
    // served once it lands. Units leased on top of it would sit unspent in this isolate when the burst is over,
    // counted against the key everywhere.
    const settings = settingsFor([{ id: "burst-lease", limit: 100, period: "1h", precision: 60, strict: true }]);
    const { ns } = countedNamespace();
    const first = decider(settings, ns, createIsolate());
    const second = decider(settings, ns, createIsolate());
    const ip = uniqueIp();
    const early = await Promise.all(Array.from({ length: 60 }, () => first.run(requestFrom(ip))));
    expect(early.filter((r) => statusOf(r) === 200)).toHaveLength(60);
    expect(await storedTotal(ip)).toBe(60);
    const late = await Promise.all(Array.from({ length: 50 }, () => second.run(requestFrom(ip))));
    expect(late.filter((r) => statusOf(r) === 200)).toHaveLength(40);
    expect(await storedTotal(ip)).toBe(100);
  });

  it("a batch tells the object its counts may be handed back when any request in it may have them handed back, whichever request sends it", async () => {
    // Per IP, 3 an hour with a 10-minute penalty; per user, 1 an hour on /both. The user's only admission is
    // used up first, from another IP, so a request to /both is refused by its user's key and its per-IP count
    // handed back.
    const settings = settingsFor([
      { id: "per-ip", path: "/*", limit: 3, period: "1h", precision: 60, strict: true, block_for: "10m" },
      { id: "per-user", path: "/both", limit: 1, period: "1h", key: ["header:x-user"] },
    ]);
    const { ns } = countedNamespace();
    const user = `batch-user-${Math.random()}`;
    const elsewhere = decider(settings, ns, createIsolate());
    expect(statusOf(await elsewhere.run(requestFrom(uniqueIp(), "/both", { "x-user": user })))).toBe(200);
    const ip = uniqueIp();
    const { run, background } = decider(settings, ns, createIsolate());
    const leader = run(requestFrom(ip, "/x")); // the call the others wait for
    const sender = run(requestFrom(ip, "/x")); // first to wait: sends the batch; it has one key only
    const both = run(requestFrom(ip, "/both", { "x-user": user })); // per-IP admits it (3 of 3), per-user refuses
    const over = run(requestFrom(ip, "/x")); // per-IP refuses it (4 of 3), on a count about to be handed back
    const statuses = (await Promise.all([leader, sender, both, over])).map(statusOf);
    await background.settled();
    expect(statuses).toEqual([200, 200, 429, 429]);
    expect(await storedTotal(ip)).toBe(2);
    // Decided in order by the object alone, the last refusal rested on a count handed back: its penalty was
    // lifted with it, and the next request is admitted (3 of 3).
    const next = decider(settings, ns, createIsolate());
    expect(statusOf(await next.run(requestFrom(ip, "/x")))).toBe(200);
  });

  it("a batch whose call fails shares the failure with every request in it: one call, one answer each", async () => {
    const { ns, calls } = flakyNamespace("throw");
    const settings = settingsFor([
      { id: "batch-closed", limit: 100, period: "1h", precision: 60, strict: true, on_error: "closed" },
    ]);
    const { run } = decider(settings, ns, createIsolate());
    const results = await Promise.all(Array.from({ length: 20 }, () => run(requestFrom(uniqueIpOnce))));
    expect(results.map(statusOf)).toEqual(Array.from({ length: 20 }, () => 503));
    // The first call failed and every waiter shared it: no batch was sent.
    expect(calls.attempts).toBe(1);
    const logged = expectErrorLogs("limiter_unavailable");
    expect(logged).toHaveLength(20);
    for (const line of logged)
      expect(line).toMatchObject({ rule: "batch-closed", reason: "error", outcome: "refused" });
  });

  it("waits for a slow call to the end rather than calling again: 20 waiters, then one batch, not 20 calls", async () => {
    vi.useFakeTimers();
    // A 200 ms deadline: before batches, each waiter stopped waiting at half of it (110 ms) and called on its
    // own, 20 more calls queued at an object already slow. The call answers at 150 ms, before it is presumed
    // lost (4 typical call times: 200 ms).
    const settings = settingsFor([{ id: "slow-call", limit: 1000, period: "1h" }], 200);
    const { ns, calls } = scriptedNamespace([
      { afterMs: 150, ends: "admit" },
      { afterMs: 10, ends: "admit" },
    ]);
    const { run } = decider(settings, ns, createIsolate());
    const ip = uniqueIp();
    const started = Date.now();
    const decidedAt: number[] = [];
    const leader = run(requestFrom(ip));
    await vi.advanceTimersByTimeAsync(10);
    const waiters = Array.from({ length: 20 }, () =>
      run(requestFrom(ip)).then((outcome) => {
        decidedAt.push(Date.now() - started);
        return outcome;
      }),
    );
    await vi.advanceTimersByTimeAsync(1_000);
    expect(statusOf(await leader)).toBe(200);
    expect((await Promise.all(waiters)).map(statusOf)).toEqual(Array.from({ length: 20 }, () => 200));
    expect(calls.checks).toBe(2);
    expect(calls.options[1]?.batch).toBe(20);
    expect(Math.min(...decidedAt)).toBeGreaterThanOrEqual(160);
  });

  it("waiting costs a waiter one timer, not one every few milliseconds: the call's landing wakes it", async () => {
    vi.useFakeTimers();
    // At a slow object, every request of a hot key waits, hundreds at once in one isolate. A waiter that looked
    // at its flight every few milliseconds made each of them wake the isolate dozens of times a call: CPU taken
    // from everything else the isolate and its machine do, the object's own work included.
    const settings = settingsFor([{ id: "woken", limit: 1000, period: "1h" }], 1_000);
    const { ns, calls } = scriptedNamespace([
      { afterMs: 150, ends: "admit" },
      { afterMs: 150, ends: "admit" },
    ]);
    const { run } = decider(settings, ns, createIsolate());
    const ip = uniqueIp();
    const leader = run(requestFrom(ip));
    await vi.advanceTimersByTimeAsync(10);
    const timers = vi.spyOn(globalThis, "setTimeout");
    const waiters = Array.from({ length: 100 }, () => run(requestFrom(ip)));
    await vi.advanceTimersByTimeAsync(1_000);
    expect(statusOf(await leader)).toBe(200);
    expect((await Promise.all(waiters)).map(statusOf)).toEqual(Array.from({ length: 100 }, () => 200));
    expect(calls.checks).toBe(2);
    // Each waited for two calls, 290 ms in all: a timer for each wait, and the calls' own.
    expect(timers.mock.calls.length).toBeLessThanOrEqual(2 * 100 + 10);
    timers.mockRestore();
  });

  it("a batch's call gets a whole timeout of its own: the request that sent it late runs out, the others in it are answered", async () => {
    vi.useFakeTimers();
    const settings = settingsFor([{ id: "late-sender", limit: 1000, period: "1h", on_error: "closed" }], 200);
    const { ns, calls } = scriptedNamespace([
      { afterMs: 150, ends: "admit" },
      { afterMs: 100, ends: "admit" },
    ]);
    const { run } = decider(settings, ns, createIsolate());
    const ip = uniqueIp();
    const leader = run(requestFrom(ip)); // its call answers at 150 ms, with no lease
    await vi.advanceTimersByTimeAsync(10);
    const sender = run(requestFrom(ip)); // deadline 210 ms: sends the batch at 150 ms, which answers at 250 ms
    await vi.advanceTimersByTimeAsync(90);
    const other = run(requestFrom(ip)); // deadline 300 ms
    await vi.advanceTimersByTimeAsync(1_000);
    expect([statusOf(await leader), statusOf(await sender), statusOf(await other)]).toEqual([200, 503, 200]);
    expect(calls.checks).toBe(2);
    expect(calls.options[1]?.batch).toBe(2);
    expect(expectErrorLogs("limiter_unavailable")).toEqual([
      expect.objectContaining({ rule: "late-sender", reason: "timeout", outcome: "refused" }),
    ]);
  });

  it("a batch whose call never answers (its request was cancelled): the others in it stop waiting when it is presumed lost, and are decided by calls of their own", async () => {
    vi.useFakeTimers();
    const settings = settingsFor([{ id: "lost-batch", limit: 1000, period: "1h" }], 1_000);
    const { ns, calls } = scriptedNamespace([
      { afterMs: 50, ends: "admit" }, // the first request's call: no lease for a demand of one
      { ends: "hang" }, // the batch of the 5 that waited for it
      { afterMs: 10, ends: "admit" },
      { afterMs: 10, ends: "admit" },
    ]);
    const { run } = decider(settings, ns, createIsolate());
    const ip = uniqueIp();
    const started = Date.now();
    const leader = run(requestFrom(ip));
    await vi.advanceTimersByTimeAsync(10);
    const decidedAt: number[] = [];
    const waiters = Array.from({ length: 5 }, () =>
      run(requestFrom(ip)).then((outcome) => {
        decidedAt.push(Date.now() - started);
        return outcome;
      }),
    );
    await vi.advanceTimersByTimeAsync(2_000);
    expect(statusOf(await leader)).toBe(200);
    expect((await Promise.all(waiters)).map(statusOf)).toEqual([200, 200, 200, 200, 200]);
    expect(calls.options[1]?.batch).toBe(5);
    // The batch's call is presumed lost 4 × 50 ms after it left (at 50 ms): the 4 others in it were decided
    // soon after, by one call and then a batch of the rest, long before their 1 s deadline. Its sender waited
    // to its own deadline, and failed open as any call of its own that never answered would have.
    decidedAt.sort((a, b) => a - b);
    expect(decidedAt.slice(0, 4).every((ms) => ms >= 250 && ms < 400)).toBe(true);
    expect(decidedAt[4]).toBeGreaterThanOrEqual(1_000);
    expect(calls.checks).toBe(4);
    expect(expectErrorLogs("limiter_unavailable")).toEqual([
      expect.objectContaining({ rule: "lost-batch", reason: "timeout", outcome: "forwarded" }),
    ]);
  });

  it("a batch whose call answers after its timeout: every count it took is an admission served, or written off and counted", async () => {
    const settings = settingsFor(
      [{ id: "late-batch", limit: 100, period: "1h", precision: 60, strict: true, on_error: "closed" }],
      200,
    );
    const { ns, hold, arrived } = gatedNamespace();
    const isolate = createIsolate();
    const { run, background } = decider(settings, ns, isolate);
    const ip = uniqueIp();
    const releaseLeader = hold("check");
    const leader = run(requestFrom(ip));
    const others = [run(requestFrom(ip)), run(requestFrom(ip))];
    while (arrived.check < 1) await sleep(1);
    releaseLeader();
    const releaseBatch = hold("check"); // the batch's call, sent once the leader's lands
    expect(statusOf(await leader)).toBe(200);
    while (arrived.check < 2) await sleep(1);
    await sleep(300); // past every deadline, and the batch call's own timeout
    const statuses = (await Promise.all(others)).map(statusOf);
    releaseBatch(); // the object decides the batch now, late, and counts both
    await sleep(50);
    await background.settled();
    const admitted = 1 + statuses.filter((s) => s === 200).length;
    const writtenOff = Object.values(isolate.counters.writtenOff).reduce((a, b) => a + b, 0);
    const held = [...isolate.keys.digests()].reduce((n, digest) => n + isolate.keys.heldUnits(digest), 0);
    expect(await storedTotal(ip)).toBe(admitted + held + writtenOff);
    // Each request that ran out of time logged it once, and failed closed.
    const logged = expectErrorLogs("limiter_unavailable");
    expect(logged).toHaveLength(statuses.filter((s) => s === 503).length);
    for (const line of logged)
      expect(line).toMatchObject({ rule: "late-batch", reason: "timeout", outcome: "refused" });
  });

  it("a rule that only logs keeps every request's own call: its batch would need a verdict per request", async () => {
    const { ns, counter } = countedNamespace();
    const { run } = decider(
      settingsFor([{ id: "shadow-batch", limit: 5, period: "1h", action: "log" }]),
      ns,
      createIsolate(),
    );
    const ip = uniqueIp();
    const results = await Promise.all(Array.from({ length: 10 }, () => run(requestFrom(ip))));
    expect(results.every((r) => statusOf(r) === 200)).toBe(true);
    expect(counter.calls).toBe(10);
  });
});

const uniqueIpOnce = uniqueIp();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("a request whose client hangs up while it waits, and which goes on running (its request has work in the background)", () => {
  // The runtime cancels a request whose client hangs up, unless the request still has work it handed to
  // waitUntil: then what it awaits still settles, and its code goes on. It must decide nothing more then:
  // every count the object took is an admission served, or written off, and nothing is counted twice.
  afterEach(() => vi.useRealTimers());

  /** A request from `ip` whose client hangs up when `hangUp.abort()` is called: its `request.signal`. */
  const hangable = (ip: string, hangUp: AbortController) =>
    new Request("http://limiter.test/x", { headers: { "cf-connecting-ip": ip }, signal: hangUp.signal });

  it("a waiter gone before its batch is sent sends nothing, and no other request is counted twice", async () => {
    vi.useFakeTimers();
    const settings = settingsFor([{ id: "gone-waiter", limit: 1000, period: "1h" }], 1_000);
    const { ns, calls } = scriptedNamespace([
      { afterMs: 150, ends: "admit" }, // the leader's call: no lease for a key seen once
      { afterMs: 10, ends: "admit" }, // the batch of the waiter still there
      { afterMs: 10, ends: "admit" },
      { afterMs: 10, ends: "admit" },
    ]);
    const { run } = decider(settings, ns, createIsolate());
    const ip = uniqueIp();
    const leader = run(hangable(ip, new AbortController()));
    await vi.advanceTimersByTimeAsync(10);
    const gone = new AbortController();
    const hungUp = run(hangable(ip, gone));
    const stayed = run(hangable(ip, new AbortController()));
    await vi.advanceTimersByTimeAsync(10);
    gone.abort();
    await vi.advanceTimersByTimeAsync(2_000);
    const [first, , last] = (await Promise.all([leader, hungUp, stayed])).map(statusOf);
    expect([first, last]).toEqual([200, 200]);
    // The leader's call, and the batch of the one waiter still there: nothing for the request gone.
    expect(calls.checks).toBe(2);
    expect(calls.options[1]?.batch).toBeUndefined();
  });

  it("the waiter that sent the batch, gone while its call is on its way: what the batch admitted for it is given back, and it is not served too", async () => {
    const settings = settingsFor([{ id: "gone-sender", limit: 100, period: "1h", precision: 60, strict: true }], 1_000);
    const { ns, hold, arrived } = gatedNamespace();
    const isolate = createIsolate();
    const { run, background } = decider(settings, ns, isolate);
    const ip = uniqueIp();
    const releaseLeader = hold("check");
    const leader = run(hangable(ip, new AbortController()));
    const gone = new AbortController();
    const sender = run(hangable(ip, gone)); // the first to wait: it sends the batch
    const other = run(hangable(ip, new AbortController()));
    while (arrived.check < 1) await sleep(1);
    const releaseBatch = hold("check");
    releaseLeader();
    while (arrived.check < 2) await sleep(1);
    gone.abort();
    releaseBatch();
    const outcomes = await Promise.all([leader, sender, other]);
    await background.settled();
    const served = outcomes.filter((outcome) => outcome.kind === "allow").length;
    const writtenOff = Object.values(isolate.counters.writtenOff).reduce((a, b) => a + b, 0);
    const held = [...isolate.keys.digests()].reduce((n, digest) => n + isolate.keys.heldUnits(digest), 0);
    // The object counts only the two requests served (and what this isolate holds ahead of its next ones).
    expect({ served, writtenOff, stored: await storedTotal(ip) }).toEqual({
      served: 2,
      writtenOff: 0,
      stored: 2 + held,
    });
  });
});

describe("an object slower than the timeout, under a rule that fails closed", () => {
  // A refused request is not counted: the 503 of on_error = "closed" means it was not served, so what the object
  // counts for it when it answers late goes back, whether it called alone or in a batch.
  it.each([
    [1, "every call", 300, 0],
    [5, "every call", 300, 0],
    [20, "every call", 300, 0],
    // The first call answers at once; the rest wait for it, then go in one batch, whose call is late.
    [20, "every call but the first", 0, 1],
  ])(
    "%i requests at once, %s answered past the timeout: those refused with 503 leave nothing counted",
    async (n, _, firstMs, served) => {
      const settings = settingsFor(
        [{ id: "closed-slow", limit: 10, period: "1h", precision: 60, on_error: "closed" }],
        200,
      );
      const isolate = createIsolate();
      const slow = slowNamespace((call) => (call === 1 ? firstMs : 300));
      const { run, background } = decider(settings, slow.ns, isolate);
      const ip = uniqueIp();
      const outcomes = await Promise.all(Array.from({ length: n }, () => run(requestFrom(ip))));
      const statuses = outcomes.map(statusOf);
      expect(statuses.filter((s) => s === 503).length).toBe(n - served);
      await sleep(1_000); // the late answers, and what goes back for them
      await background.settled();
      await sleep(500);
      await background.settled();
      const held = [...isolate.keys.digests()].reduce((units, digest) => units + isolate.keys.heldUnits(digest), 0);
      expect(await storedTotal(ip)).toBe(served + held);
      expect(expectErrorLogs("limiter_unavailable").length).toBeGreaterThan(0);
    },
  );
});

describe("a key whose calls are slow: its next call is waited for longer before it is presumed lost", () => {
  it("waits four times the key's last call, or twice the wait of a call presumed lost, up to the timeout", () => {
    // One gate per key (and rule set), all timed by the isolate's calls.
    const times = new CallTimes();
    const gateOf = () => new Gate([], times, { counters: new IsolateCounters(), handBack: () => undefined });
    const [slow, quick, lostKey] = [gateOf(), gateOf(), gateOf()];
    // Before any call has landed, a call is presumed lost after 4 × 50 ms.
    const first = slow.depart(0, 1_000);
    expect(first.staleAtMs).toBe(200);
    // It took 300 ms: this key's next call is waited for 4 × 300 ms, capped at the timeout; another key's, 4
    // typical calls (the average moved an eighth of the way to 300 ms: 81.25 ms).
    slow.land(first, { ok: true }, 300);
    expect(slow.depart(300, 1_000).staleAtMs).toBe(300 + 1_000);
    expect(quick.depart(300, 1_000).staleAtMs).toBe(300 + 325);
    // After a call presumed lost, the key's next one is waited for twice as long; once one lands, four
    // typical calls again, or four times what it took.
    const lost = lostKey.depart(0, 5_000);
    expect(lost.staleAtMs).toBe(325);
    expect(lostKey.current(400)).toBeUndefined();
    const next = lostKey.depart(400, 5_000);
    expect(next.staleAtMs).toBe(400 + 650);
    lostKey.land(next, { ok: true }, 410);
    // (4 typical calls again: the average moved an eighth of the way to 10 ms.)
    expect(lostKey.depart(410, 5_000).staleAtMs - 410).toBeCloseTo(4 * (81.25 + (10 - 81.25) / 8));
  });
});
