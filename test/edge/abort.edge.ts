/**
 * @module
 * A client that hangs up must not take other clients down with it.
 *
 * Concurrent requests for one key in one isolate wait for the Durable Object
 * call of the first of them (the leader), to share the lease it may bring
 * (README, "What the isolate remembers"). When the leader's client hangs up
 * (a TCP reset, which is what workerd takes for a client gone), workerd
 * cancels the leader's request, and its call with it; the requests waiting on
 * that call must still be answered, and so must the key's next request in
 * that isolate. When waiters hang up, the call's landing must not wake them
 * (the runtime warns of every cancelled request woken), and near a limit,
 * where the waiters go to the object in one batch, the object must count
 * only the requests served, whoever hangs up: a waiter, or the one that
 * sent the batch.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { describeRecords, outcomeOf, type RequestRecord } from "./support/driver.ts";
import { type Edge, startEdge } from "./support/harness.ts";

/** Every request matches; the objects service holds each check 300 ms (`slow-300-`), so the leader's call stays in flight. */
const RULE = { id: "slow-300-leader", path: "/*", limit: 1_000_000, period: "1h", key: ["ip"] } satisfies RuleInput;
/**
 * Near a limit: with RULE on the same key, a request to /near/ is one key group of two rules, whose small
 * limit leaves no lease for a key seen once. Waiters then go to the object together, in one batch.
 */
const NEAR_RULE = { id: "near-limit", path: "/near/*", limit: 1_000, period: "1h", key: ["ip"] } satisfies RuleInput;
const WAITERS = 20;
/** After the leader's answer, when the batch sent behind its call is held at the object. */
const SENDER_HANGS_UP_AFTER_MS = 100;
/** When the waiters follow the leader: well inside the 300 ms its call is held. */
const WAITERS_AFTER_MS = 30;
/** When the leader hangs up, after the waiters: time for them to reach the isolate and wait, still well inside the 300 ms. */
const HANG_UP_AFTER_MS = 50;
/** Far above the 300 ms a check is held, even on a loaded 2-core machine; short, so that a waiter left to it is answered soon. */
const LIMITER_TIMEOUT_MS = 2000;
/** By five deadlines the limiter has decided, or given up and applied `on_error`: silence then is a hung request, not a slow one. */
const GIVE_UP_MS = 5 * LIMITER_TIMEOUT_MS;

let edge: Edge;

beforeAll(async () => {
  edge = await startEdge({ rules: [RULE, NEAR_RULE], timeoutMs: LIMITER_TIMEOUT_MS });
  // The first request an isolate and the objects service see pays for compiling and warming up; not the leader's.
  const warmUp = await edge.driver().send(0, "10.0.0.1").done;
  expect(outcomeOf(warmUp)).toBe(200);
});

afterAll(async () => {
  await edge?.stop();
});

type Run = {
  leader: RequestRecord;
  waiters: RequestRecord[];
  /** The key's next request in the same isolate, once the waiters are done. */
  next: RequestRecord;
  /**
   * Checks the objects received from the leader and the waiters: 1 when the
   * waiters shared the leader's call (on the code this test was written
   * against); reported, not asserted, as how many calls a burst makes is the
   * isolate layer's choice.
   */
  checks: number;
  /** What the runtime printed about hung, cancelled or failed requests meanwhile. */
  runtimeFailures: string[];
  /** Every request, one line each, for reading a failure. */
  story: string;
};

const checksOfRule = async () => (await edge.objectChecks())[RULE.id] ?? 0;

/**
 * The leader for `key` on edge-0, then its waiters while its call is held at
 * the object; the leader hangs up if `hangUp` is "leader", every other waiter
 * if it is "waiters", and the first waiter, once the leader is answered, if it
 * is "sender" (the first waiter to join is the first woken: near a limit, it
 * sends the batch of them all).
 */
async function leaderAndWaiters(
  key: string,
  hangUp: false | "leader" | "waiters" | "sender",
  near = false,
): Promise<Run & { countedBeforeNext: number | null }> {
  const path = near ? "/near/x" : "/";
  const driver = edge.driver(GIVE_UP_MS);
  const checksBefore = await checksOfRule();
  const mark = edge.workerd.mark();
  const leader = driver.send(0, key, { path });
  await sleep(WAITERS_AFTER_MS);
  const waiters = Array.from({ length: WAITERS }, () => driver.send(0, key, { path }));
  await sleep(HANG_UP_AFTER_MS);
  if (hangUp === "leader") leader.abort();
  if (hangUp === "waiters") for (const waiter of waiters.filter((_, i) => i % 2 === 1)) waiter.abort();
  if (hangUp === "sender") {
    await leader.done;
    await sleep(SENDER_HANGS_UP_AFTER_MS);
    waiters[0]!.abort();
  }
  await driver.settled();
  const checks = (await checksOfRule()) - checksBefore;
  // What the object counted for the leader and its waiters (the next request's call may bring a lease, counted too).
  const countedBeforeNext = near ? (await edge.status(NEAR_RULE.id, key)).weighted : null;
  const next = await driver.send(0, key, { path }).done;
  // workerd's last lines about these requests may trail their answers through the pipe.
  await sleep(250);
  return {
    leader: leader.record,
    waiters: waiters.map((w) => w.record),
    next,
    checks,
    countedBeforeNext,
    runtimeFailures: edge.failures(mark),
    story: describeRecords(driver.records),
  };
}

/** What the clients and the origin saw, in one value: a failure shows every part of it in one diff. */
const seen = (run: Run) => ({
  waiters: run.waiters.map(outcomeOf),
  waitersAtOrigin: run.waiters.map((r) => edge.origin.hits(r.tag)),
  next: outcomeOf(run.next),
  runtimeFailures: run.runtimeFailures,
});

const allAnswered = {
  waiters: Array(WAITERS).fill(200),
  waitersAtOrigin: Array(WAITERS).fill(1),
  next: 200,
  runtimeFailures: [],
};

describe("a leader's client hanging up", () => {
  it("control: without the hang-up, the leader and its waiters are all answered", async () => {
    const run = await leaderAndWaiters("10.0.0.2", false);
    console.log(`control:\n${run.story}\nchecks the objects received: ${run.checks}`);
    expect(outcomeOf(run.leader)).toBe(200);
    expect(seen(run)).toEqual(allAnswered);
  });

  it("a waiter whose leader's client hangs up is still answered, and so is the key's next request", async () => {
    const run = await leaderAndWaiters("10.0.0.3", "leader");
    console.log(`hang-up:\n${run.story}\nchecks the objects received: ${run.checks}`);
    // Not the point, but without it the test proves nothing: the leader hung up before its answer came.
    expect(run.leader.aborted, "the leader was answered before it could hang up: the timing did not hold").toBe(true);
    expect(seen(run)).toEqual(allAnswered);
  });
});

describe("waiters' clients hanging up", () => {
  it("the leader, the waiters still there and the key's next request are answered; the call's landing wakes nobody gone", async () => {
    // A waiter sleeps on a promise its own request made, and the leader's call landing settles it. A waiter whose
    // client hung up was cancelled with its request: its wake-up must not reach into that request (the runtime
    // says so in its output, and cancels what would follow).
    const run = await leaderAndWaiters("10.0.0.4", "waiters");
    console.log(`waiters hang up:\n${run.story}\nchecks the objects received: ${run.checks}`);
    const stayed = run.waiters.filter((_, i) => i % 2 === 0);
    expect(run.waiters.filter((_, i) => i % 2 === 1).every((w) => w.aborted)).toBe(true);
    expect({
      leader: outcomeOf(run.leader),
      stayed: stayed.map(outcomeOf),
      next: outcomeOf(run.next),
      runtimeFailures: run.runtimeFailures,
    }).toEqual({ leader: 200, stayed: Array(WAITERS / 2).fill(200), next: 200, runtimeFailures: [] });
  });

  it("near a limit, where the waiters go in one batch: those whose clients hung up leave it, and the object counts only the requests served", async () => {
    const key = "10.0.0.5";
    const run = await leaderAndWaiters(key, "waiters", true);
    console.log(`waiters hang up, near a limit:\n${run.story}\nchecks the objects received: ${run.checks}`);
    const stayed = run.waiters.filter((_, i) => i % 2 === 0);
    const served = [run.leader, ...stayed].filter((r) => outcomeOf(r) === 200).length;
    expect({
      served,
      counted: run.countedBeforeNext,
      next: outcomeOf(run.next),
      runtimeFailures: run.runtimeFailures,
    }).toEqual({ served: 1 + WAITERS / 2, counted: 1 + WAITERS / 2, next: 200, runtimeFailures: [] });
  });

  it("near a limit, when the waiter that sent the batch hangs up: its call goes on, the others in it are answered by it, and nobody is counted twice", async () => {
    const key = "10.0.0.6";
    const run = await leaderAndWaiters(key, "sender", true);
    console.log(`the batch's sender hangs up:\n${run.story}`);
    expect(run.waiters[0]!.aborted, "the sender was answered before it could hang up: the timing did not hold").toBe(
      true,
    );
    const others = run.waiters.slice(1);
    expect({
      others: others.map(outcomeOf),
      // The leader and every waiter served: what the batch admitted for the sender, who hung up, went back.
      counted: run.countedBeforeNext,
      runtimeFailures: run.runtimeFailures,
    }).toEqual({ others: Array(WAITERS - 1).fill(200), counted: WAITERS, runtimeFailures: [] });
  });
});
