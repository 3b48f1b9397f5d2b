import { abortAllDurableObjects, createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from "vitest";
import type { Isolate } from "../src/isolate/isolate.ts";
import { app } from "../src/worker/app.ts";
import type { Env } from "../src/worker/env.ts";
import {
  type Failure,
  flakyNamespace,
  hangObject,
  objectForIp,
  type Script,
  scriptedNamespace,
} from "./support/chaos.ts";
import { env } from "./support/env.ts";
import { createIsolate, decider, requestFrom, settingsFor, statusOf } from "./support/isolate.ts";
import { from, limiter, originHits, originUrl, uniqueIp, uniqueTag } from "./support/limiter.ts";
import { ipCanonical } from "./support/objects.ts";

let errors: MockInstance;
/** When each error line was logged, on the test's (possibly faked) clock. */
let loggedAtMs: number[];
beforeEach(() => {
  loggedAtMs = [];
  errors = vi.spyOn(console, "error").mockImplementation(() => {
    loggedAtMs.push(Date.now());
  });
});
afterEach(() => errors.mockRestore());
const logged = () => errors.mock.calls.map(([line]) => JSON.parse(String(line)) as Record<string, unknown>);

/**
 * One request through the Worker, on whatever timers the test has faked: `answered` resolves with the
 * response and when it came (milliseconds after sending, on the test's clock), `done()` once the
 * request's background work (refunds, a late answer watched) is over too. Unlike `limiter()`, the answer
 * can be awaited while background work still waits for timers the test has yet to advance.
 */
function sendAndWatch(rules: unknown[], vars: Partial<Env>, path: string, init: RequestInit) {
  const testEnv: Env = { ...env, ORIGIN_URL: originUrl(), ...vars, RULES: rules };
  const ctx = createExecutionContext();
  const sentAt = Date.now();
  const answered = Promise.resolve(app.fetch(new Request(`http://limiter.test${path}`, init), testEnv, ctx)).then(
    (response) => ({ response, atMs: Date.now() - sentAt }),
  );
  return { sentAt, answered, done: () => waitOnExecutionContext(ctx) };
}

const UNAVAILABLE_503 = {
  type: "urn:edge-rate-limiter:limiter-unavailable",
  title: "Service Unavailable",
  status: 503,
  detail: "The rate limiter could not decide, and this endpoint does not go on without a decision.",
};

// First in the file: workerd 2026-11 crashes ("Promise callback destroyed itself") when
// abortAllDurableObjects() follows a runInDurableObject() that used blockConcurrencyWhile().
describe("a real failure of the runtime", () => {
  it("after every object is reset (a deploy or a crash), the next request decides normally, with its count kept", async () => {
    const send = limiter([{ id: "reset-between", limit: 10, period: "1m", on_error: "closed" }]);
    const ip = uniqueIp();
    expect((await send("/x", from(ip))).status).toBe(200);
    await abortAllDurableObjects();
    // A stub that saw the reset stays broken; each call makes a fresh one, and the count survived.
    const after = await send("/x", from(ip));
    expect(after.status).toBe(200);
    expect(after.headers.get("x-ratelimit-remaining")).toBe("8");
    expect(logged()).toEqual([]);
  });
});

/**
 * When the limiter cannot decide, each rule's on_error decides for it. The object is kept busy on the test's
 * faked timers (it runs in the test's isolate), and the Worker's deadline runs on them too: every instant
 * below is exact, and nothing waits in real time.
 */
describe("when the Durable Object does not answer in time", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('forwards the request with on_error = "open", and logs why', async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("fail-open");
    const hang = await hangObject(ip, 500);
    const request = sendAndWatch(
      [{ id: "open-rule", limit: 10, period: "1m", on_error: "open" }],
      { LIMITER_TIMEOUT_MS: "100" },
      "/api/x",
      from(ip, { "x-test-tag": tag }),
    );
    await vi.advanceTimersByTimeAsync(100);
    const { response: res, atMs } = await request.answered;
    // Decided at its deadline, on the isolate's clock: it waited for the object, and no longer.
    expect(loggedAtMs).toEqual([request.sentAt + 100]);
    expect(atMs).toBe(100);
    expect(res.status).toBe(200);
    expect(res.headers.has("ratelimit")).toBe(false);
    expect(await originHits(tag)).toBe(1);
    expect(logged()).toEqual([
      expect.objectContaining({
        event: "limiter_unavailable",
        rule: "open-rule",
        reason: "timeout",
        attempts: 1,
        outcome: "forwarded",
      }),
    ]);
    await vi.advanceTimersByTimeAsync(400);
    await hang.over;
    await request.done();
  });

  it('answers 503 problem+json with on_error = "closed", and the origin is not contacted', async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("fail-closed");
    const hang = await hangObject(ip, 500);
    const request = sendAndWatch(
      [{ id: "closed-rule", limit: 10, period: "1m", on_error: "closed" }],
      { LIMITER_TIMEOUT_MS: "100" },
      "/login",
      { ...from(ip, { "x-test-tag": tag }), method: "POST", body: "user=a" },
    );
    await vi.advanceTimersByTimeAsync(100);
    const { response: res, atMs } = await request.answered;
    expect(atMs).toBe(100);
    expect(res.status).toBe(503);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(await res.json()).toEqual({ ...UNAVAILABLE_503, "failed-policies": ["closed-rule"] });
    expect(await originHits(tag)).toBe(0);
    expect(logged()).toContainEqual(
      expect.objectContaining({ rule: "closed-rule", reason: "timeout", outcome: "refused" }),
    );
    await vi.advanceTimersByTimeAsync(400);
    await hang.over;
    await request.done();
  });

  it("decides again normally once the object answers", async () => {
    const rules = [{ id: "recovers", limit: 10, period: "1m", on_error: "closed" }];
    const vars = { LIMITER_TIMEOUT_MS: "100" };
    const ip = uniqueIp();
    const hang = await hangObject(ip, 300);
    const refused = sendAndWatch(rules, vars, "/x", from(ip));
    await vi.advanceTimersByTimeAsync(100);
    expect((await refused.answered).response.status).toBe(503);
    await vi.advanceTimersByTimeAsync(200);
    await hang.over;
    await refused.done();
    const answered = sendAndWatch(rules, vars, "/x", from(ip));
    const { response: res, atMs } = await answered.answered;
    expect(atMs).toBe(0); // the object answers: no deadline passes
    expect(res.status).toBe(200);
    expect(res.headers.get("ratelimit")).toMatch(/^"recovers";r=\d;t=\d+$/);
    await answered.done();
  });
});

type Case = {
  /** What each attempt meets, in order; attempts past the list reach the real object. */
  plan: Failure[];
  attempts: number;
  /** The labelled reason logged, or null when the retry succeeded and nothing failed. */
  reason: "error" | "overloaded" | "timeout" | null;
  /** Whether the decision waited for the deadline (a hanging attempt) rather than failing at once. */
  waits: boolean;
};

const ALWAYS = 5; // more failures than a decision will ever attempt

/**
 * Every kind of failure, alone and combined with a retry: how many attempts
 * it gets, and what is logged. A timeout and an overloaded object are never
 * retried; a retryable error is retried once, with a fresh stub, within the
 * same deadline.
 */
const cases: [string, Case][] = [
  ["a thrown error", { plan: ["throw"], attempts: 1, reason: "error", waits: false }],
  ["an overloaded object", { plan: ["overloaded"], attempts: 1, reason: "overloaded", waits: false }],
  ["a hanging call", { plan: ["hang"], attempts: 1, reason: "timeout", waits: true }],
  ["a retryable error, twice", { plan: Array(ALWAYS).fill("retryable"), attempts: 2, reason: "error", waits: false }],
  [
    "a retryable error, then a thrown one",
    { plan: ["retryable", "throw"], attempts: 2, reason: "error", waits: false },
  ],
  [
    "a retryable error, then an overloaded object",
    { plan: ["retryable", "overloaded"], attempts: 2, reason: "overloaded", waits: false },
  ],
  [
    "a retryable error, then a hanging retry",
    { plan: ["retryable", "hang"], attempts: 2, reason: "timeout", waits: true },
  ],
  ["a retryable error, then success", { plan: ["retryable"], attempts: 2, reason: null, waits: false }],
];

describe("injected failures: attempts, outcome, log and time", () => {
  const TIMEOUT_MS = 200;
  afterEach(() => vi.useRealTimers());

  /** On faked timers, so that the deadline is exact in isolate time and a hanging attempt costs no real time. */
  const run = async (name: string, plan: Failure[], onError: "open" | "closed", waits: boolean) => {
    vi.useFakeTimers();
    const { ns, calls } = flakyNamespace(plan);
    const id = `${name.replace(/[^a-z]+/g, "-").slice(0, 40)}-${onError}`;
    const tag = uniqueTag(id);
    const request = sendAndWatch(
      [{ id, limit: 10, period: "1m", on_error: onError }],
      { RATE_LIMITER: ns as Env["RATE_LIMITER"], LIMITER_TIMEOUT_MS: String(TIMEOUT_MS) },
      "/x",
      from(uniqueIp(), { "x-test-tag": tag }),
    );
    // Time moves only for a hanging attempt: to its deadline, then one more timeout, while its late answer
    // is watched. A decision that waited for any other timer would never come.
    if (waits) await vi.advanceTimersByTimeAsync(TIMEOUT_MS);
    const { response: res, atMs } = await request.answered;
    const logAtMs = loggedAtMs.map((at) => at - request.sentAt);
    if (waits) await vi.advanceTimersByTimeAsync(TIMEOUT_MS);
    await request.done();
    return { id, res, atMs, logAtMs, calls, hits: await originHits(tag) };
  };

  describe.each(["open", "closed"] as const)('with on_error = "%s"', (onError) => {
    it.each(cases)("%s", async (name, { plan, attempts, reason, waits }) => {
      const { id, res, atMs, logAtMs, calls, hits } = await run(name, plan, onError, waits);

      expect(calls.attempts).toBe(attempts);
      // Each attempt goes through a stub of its own: a stub that has failed may stay broken.
      expect(calls.stubs).toEqual(Array.from({ length: attempts }, (_, i) => i + 1));

      // Decided, and the failure logged, exactly at the deadline when an attempt hangs, and at once otherwise.
      const decidedAtMs = waits ? TIMEOUT_MS : 0;
      expect(atMs).toBe(decidedAtMs);
      expect(logAtMs).toEqual(reason === null ? [] : [decidedAtMs]);

      const refused = reason !== null && onError === "closed";
      expect(res.status).toBe(refused ? 503 : 200);
      expect(hits).toBe(refused ? 0 : 1);
      if (refused) expect(await res.json()).toEqual({ ...UNAVAILABLE_503, "failed-policies": [id] });
      // Only a decision the object made carries a remaining count.
      expect(res.headers.has("ratelimit")).toBe(reason === null);

      const lines = logged().filter((line) => line.event === "limiter_unavailable");
      if (reason === null) expect(lines).toEqual([]);
      else {
        const lastKind = plan[attempts - 1];
        expect(lines).toEqual([
          {
            level: "error",
            event: "limiter_unavailable",
            rule: id,
            key: expect.stringMatching(/^[0-9a-f]{12}$/),
            reason,
            message: reason === "timeout" ? `no decision within ${TIMEOUT_MS}ms` : `induced ${lastKind} failure`,
            attempts,
            outcome: refused ? "refused" : "forwarded",
          },
        ]);
      }
    });
  });

  it("counts a request that succeeded on its retry exactly once", async () => {
    const { ns, calls } = flakyNamespace(["retryable"]);
    const send = limiter([{ id: "retried-once", limit: 3, period: "1m", on_error: "closed" }], {
      RATE_LIMITER: ns as Env["RATE_LIMITER"],
    });
    const ip = uniqueIp();
    const first = await send("/x", from(ip));
    const second = await send("/x", from(ip));
    expect(calls.outcomes).toEqual(["retryable", "real", "real"]);
    expect([first.headers.get("x-ratelimit-remaining"), second.headers.get("x-ratelimit-remaining")]).toEqual([
      "2",
      "1",
    ]);
  });

  it("fails only the rules of the key whose object failed: a shadow rule never refuses", async () => {
    const { ns } = flakyNamespace("throw");
    const send = limiter(
      [
        { id: "shadow-closed", limit: 10, period: "1m", action: "log", on_error: "closed" },
        { id: "enforced-open", limit: 10, period: "1m", on_error: "open" },
      ],
      { RATE_LIMITER: ns as Env["RATE_LIMITER"] },
    );
    const tag = uniqueTag("shadow-fail");
    const res = await send("/x", from(uniqueIp(), { "x-test-tag": tag }));
    expect(res.status).toBe(200);
    expect(await originHits(tag)).toBe(1);
    expect(logged().map((line) => [line.rule, line.outcome])).toEqual([
      ["shadow-closed", "forwarded"],
      ["enforced-open", "forwarded"],
    ]);
  });
});

describe("a call that decides after its deadline", () => {
  afterEach(() => vi.useRealTimers());

  const peekCount = async (ip: string, id: string) => {
    const stub = await objectForIp(ip);
    const peek = await stub.peek([
      { id, limit: 1000, periodMs: 3_600_000, precision: 1, strict: false, enforce: true },
    ]);
    return peek.verdicts[0]!.weighted;
  };

  it.each([
    ["open", 200, 1],
    ["closed", 503, 0],
  ] as const)(
    'with on_error = "%s": answers %i, and the object keeps %i count for it, and no lease',
    async (onError, status, kept) => {
      // On faked timers: the object is busy for 250 ms; the deadline is 150 ms, and the late answer is
      // watched for 150 ms more, so it comes in time, at 250 ms.
      vi.useFakeTimers();
      const id = `late-${onError}`;
      const ip = uniqueIp();
      const hang = await hangObject(ip, 250);
      const request = sendAndWatch(
        [{ id, limit: 1000, period: "1h", on_error: onError }],
        { LIMITER_TIMEOUT_MS: "150" },
        "/x",
        from(ip),
      );
      await vi.advanceTimersByTimeAsync(150);
      const { response, atMs } = await request.answered;
      expect([response.status, atMs]).toEqual([status, 150]);
      await response.arrayBuffer();
      await vi.advanceTimersByTimeAsync(100);
      await hang.over;
      await request.done();
      // A 503 was never served, so its count is taken back; the lease it granted (64 units) is nobody's.
      expect(await peekCount(ip, id)).toBe(kept);
    },
  );

  // Forwarded at its deadline (on_error = "open"), the request is counted by the call's late answer: its
  // response then settles that count, as it would have settled a count answered in time.
  it.each([
    ["count = failed, a success: its count is given back", { count: "failed" }, "/status/200", 200, 0],
    ["count = failed, a failure: its count stands", { count: "failed" }, "/status/401", 401, 1],
    ["count = successful, a failure: its count is given back", { count: "successful" }, "/status/503", 503, 0],
    ["count = [429], any other status: its count is given back", { count: [429] }, "/status/204", 204, 0],
    ["cost_header, 7 used of 1 admitted: 6 more are charged", { cost_header: "x-tokens-used" }, "/tokens/7", 200, 7],
    [
      "cost_header, 2 used of 5 admitted: 3 are given back",
      { cost_header: "x-tokens-used", cost: 5 },
      "/tokens/2",
      200,
      2,
    ],
    ["cost_header, as admitted: nothing moves", { cost_header: "x-tokens-used", cost: 3 }, "/tokens/3", 200, 3],
  ])("forwarded, under %s", async (_, fields, path, status, kept) => {
    vi.useFakeTimers();
    const id = `late-settled-${++lateRules}`;
    const ip = uniqueIp();
    const hang = await hangObject(ip, 250);
    const request = sendAndWatch(
      [{ id, limit: 1000, period: "1h", on_error: "open", ...fields }],
      { LIMITER_TIMEOUT_MS: "150" },
      path,
      from(ip),
    );
    await vi.advanceTimersByTimeAsync(150);
    const { response } = await request.answered; // the origin answered before the object did
    expect(response.status).toBe(status);
    await response.arrayBuffer();
    await vi.advanceTimersByTimeAsync(100);
    await hang.over;
    await request.done();
    expect(await peekCount(ip, id)).toBe(kept);
  });

  it("forwarded, under count = failed, a success the origin answers after the object's late answer: its count is given back", async () => {
    vi.useFakeTimers();
    const id = `late-settled-${++lateRules}`;
    const ip = uniqueIp();
    const hang = await hangObject(ip, 250);
    const request = sendAndWatch(
      [{ id, limit: 1000, period: "1h", on_error: "open", count: "failed" }],
      { LIMITER_TIMEOUT_MS: "150" },
      "/slow/300", // 300 ms of real time: the faked 100 ms to the object's answer pass well before
      from(ip),
    );
    await vi.advanceTimersByTimeAsync(250);
    await hang.over;
    const { response } = await request.answered;
    expect(response.status).toBe(200);
    await response.arrayBuffer();
    await request.done();
    expect(await peekCount(ip, id)).toBe(0);
  });

  // Concurrent requests of a slow key wait for one another's calls and go to the object in batches. Here a
  // leader's call times out, and so does the batch of the three that waited for it: its sender and two
  // readers run out of time too. All four go on, and each one's response settles what was counted for it.
  it.each([
    ["count = failed, four successes: each count is given back", { count: "failed" }, 200, "refunds", 1],
    ["count = failed, four failures: every count stands", { count: "failed" }, 401, "refunds", 0],
    [
      "cost_header, 7 used of 1 admitted each: 6 more are charged for each",
      { cost_header: "x-cost" },
      200,
      "charges",
      6,
    ],
  ] as const)(
    "forwarded at their deadlines, a leader and a batch of three, under %s",
    async (_, fields, status, moved, units) => {
      vi.useFakeTimers();
      const settings = settingsFor([{ id: "late-batch", limit: 1000, period: "1h", on_error: "open", ...fields }], 100);
      // Each call answers 150 ms after it was sent: past its 100 ms deadline, within the 100 ms its late answer is watched.
      const { ns, calls } = scriptedNamespace([
        { afterMs: 150, ends: "admit" },
        { afterMs: 150, ends: "admit" },
      ]);
      const { run, background, answer } = decider(settings, ns, createIsolate());
      const ip = uniqueIp();
      const requests: Request[] = [];
      const outcomes = [];
      for (let i = 0; i < 4; i++) {
        requests.push(requestFrom(ip));
        outcomes.push(run(requests[i]!));
        await vi.advanceTimersByTimeAsync(10);
      }
      await vi.advanceTimersByTimeAsync(100); // every request has gone on, and no call has answered yet
      (await Promise.all(outcomes)).forEach((outcome, i) => {
        if (outcome.kind !== "allow") throw new Error("expected the request to go on");
        answer(requests[i]!, outcome, new Response(null, { status, headers: { "x-cost": "7" } }));
      });
      await vi.advanceTimersByTimeAsync(500);
      await background.settled();
      expect(calls.checks).toBe(2); // the leader's call, then one for the three that waited
      expect(calls.options[1]?.batch).toBe(3);
      const other = moved === "refunds" ? "charges" : "refunds";
      expect(calls[moved].flat().map((m) => m.count)).toEqual(units === 0 ? [] : [units, units, units, units]);
      expect(calls[other]).toEqual([]);
    },
  );
});

let lateRules = 0;

describe("a call decided on its retry", () => {
  it("logs the retry and the first attempt's error", async () => {
    const warnings = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      const { ns } = flakyNamespace(["retryable"]);
      const send = limiter([{ id: "retry-logged", limit: 3, period: "1m" }], {
        RATE_LIMITER: ns as Env["RATE_LIMITER"],
      });
      expect((await send("/x", from(uniqueIp()))).status).toBe(200);
      expect(warnings.mock.calls.map(([line]) => JSON.parse(String(line)))).toEqual([
        {
          level: "warn",
          event: "limiter_retried",
          rules: ["retry-logged"],
          key: expect.stringMatching(/^[0-9a-f]{12}$/),
          attempts: 2,
          message: "induced retryable failure",
        },
      ]);
    } finally {
      warnings.mockRestore();
    }
  });
});

/**
 * Concurrent requests for a key wait for the call in flight that may bring a
 * lease. A waiter reads that call's state on its own timers and within its
 * own deadline, and then decides on its own: it never depends on a request
 * that may be cancelled. Time is faked, so every instant below is exact.
 */
describe("a request that waits for another request's call", () => {
  afterEach(() => vi.useRealTimers());

  /** The leader's call asks for a lease, so the waiter, 10 ms later, waits for it. */
  const scenario = async (leader: Script, waiter: Script | null, onError: "open" | "closed" = "open") => {
    vi.useFakeTimers();
    const started = Date.now();
    const settings = settingsFor([{ id: "waited", limit: 1000, period: "1h", on_error: onError }], 1_000);
    const { ns, calls } = scriptedNamespace([leader, ...(waiter ? [waiter] : [])]);
    const { run } = decider(settings, ns, createIsolate());
    const ip = uniqueIp();
    const decidedAt: Record<string, number> = {};
    const outcomes: Record<string, number> = {};
    const track = (name: string) => (outcome: Awaited<ReturnType<typeof run>>) => {
      decidedAt[name] = Date.now() - started;
      outcomes[name] = statusOf(outcome);
    };
    const a = run(requestFrom(ip)).then(track("leader"));
    await vi.advanceTimersByTimeAsync(10);
    const b = run(requestFrom(ip)).then(track("waiter"));
    await vi.advanceTimersByTimeAsync(5_000);
    await Promise.all([a, b]);
    return { decidedAt, outcomes, calls };
  };

  it("decides within its own deadline when the call it waited for brings no lease, and its own call hangs", async () => {
    const { decidedAt, outcomes, calls } = await scenario({ afterMs: 100, ends: "admit" }, { ends: "hang" });
    expect(decidedAt.leader).toBe(100);
    expect(decidedAt.waiter).toBe(10 + 1_000); // its own deadline, not the leader's answer plus a full timeout
    expect(outcomes).toEqual({ leader: 200, waiter: 200 }); // on_error = "open"
    expect(calls.checks).toBe(2);
  });

  it("gives up on a call that never lands (its request was cancelled) and decides with a call of its own", async () => {
    const { decidedAt, outcomes, calls } = await scenario({ ends: "hang" }, { afterMs: 10, ends: "admit" });
    expect(calls.checks).toBe(2);
    expect(outcomes.waiter).toBe(200);
    // The leader's call is presumed lost 4 typical call times after it left (200 ms before any has landed);
    // then the waiter's own call answers in 10 ms.
    expect(decidedAt.waiter).toBe(200 + 10);
  });

  it("shares the failure of the call it waited for, rather than calling a failing object again", async () => {
    const { decidedAt, outcomes, calls } = await scenario({ afterMs: 100, ends: "throw" }, null, "closed");
    expect(calls.checks).toBe(1);
    expect(outcomes).toEqual({ leader: 503, waiter: 503 });
    // The waiter came at 10 ms; the leader's call failing at 100 ms wakes it at once.
    expect(decidedAt).toEqual({ leader: 100, waiter: 100 });
  });

  /**
   * A call in flight filed by a request the test stands in for (one whose
   * client may hang up): the test lands it, or never does, as it chooses.
   */
  const filedFlight = (settings: ReturnType<typeof settingsFor>, isolate: Isolate, ip: string) => {
    const digest = isolate.digest(ipCanonical(ip));
    const gate = isolate.keys.use(digest, Date.now()).gate(settings.rules);
    return { gate, flight: gate.depart(Date.now(), settings.timeoutMs) };
  };

  it("waits, after a call presumed lost, for the one next call its first waiter makes, not one call each", async () => {
    vi.useFakeTimers();
    const settings = settingsFor([{ id: "regroup", limit: 1000, period: "1h" }], 1_000);
    const { ns, calls } = scriptedNamespace([{ afterMs: 20, ends: "admit", leaseUnits: 10 }]);
    const isolate = createIsolate();
    const { run } = decider(settings, ns, isolate);
    const ip = uniqueIp();
    filedFlight(settings, isolate, ip); // never lands: its request was cancelled
    const waiters = Array.from({ length: 5 }, () => run(requestFrom(ip)));
    await vi.advanceTimersByTimeAsync(1_000);
    expect((await Promise.all(waiters)).map(statusOf)).toEqual([200, 200, 200, 200, 200]);
    expect(calls.checks).toBe(1); // the first waiter's call; the other four spent the lease it brought
  });

  it.each([
    ["another request's timeout: it says that request's time ran out, not this one's", "timeout", 200, 1],
    ["the object's own error", "error", 503, 0],
  ] as const)("shares %s: %s", async (_, reason, status, ownCalls) => {
    vi.useFakeTimers();
    const settings = settingsFor([{ id: `share-${reason}`, limit: 1000, period: "1h", on_error: "closed" }], 1_000);
    const { ns, calls } = scriptedNamespace([{ afterMs: 10, ends: "admit" }]);
    const isolate = createIsolate();
    const { run } = decider(settings, ns, isolate);
    const ip = uniqueIp();
    const { gate, flight } = filedFlight(settings, isolate, ip);
    const waiter = run(requestFrom(ip));
    await vi.advanceTimersByTimeAsync(50);
    gate.land(flight, { ok: false, reason, message: "landed by the test", attempts: 1, name: "x" }, Date.now());
    await vi.advanceTimersByTimeAsync(1_000);
    expect(statusOf(await waiter)).toBe(status);
    expect(calls.checks).toBe(ownCalls);
  });

  it.each([
    ["one key and a rule that fails closed (a late count is refunded after the 503)", "closed", true],
    ["one key and a rule that fails open (a late count stands: the request went on)", "open", false],
  ] as const)("marks a check refundable with %s", async (_, onError, refundable) => {
    const settings = settingsFor([{ id: `refundable-${onError}`, limit: 1000, period: "1h", on_error: onError }]);
    const { ns, calls } = scriptedNamespace([{ afterMs: 0, ends: "admit" }]);
    await decider(settings, ns, createIsolate()).run(requestFrom(uniqueIp()));
    expect(calls.options[0]?.refundableForMs !== undefined).toBe(refundable);
  });
});
