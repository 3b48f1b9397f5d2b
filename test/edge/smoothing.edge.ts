/**
 * @module
 * Holding a request until it may go (`max_delay`), across 8 isolates over
 * real sockets: a burst of 300 requests for one client key, sent 20 ms
 * apart (50 a second against a limit of 10 a second) round the isolates,
 * a quarter of them from clients that hang up after a while if still
 * unanswered. Measured at the origin, the issue's "Show":
 * - the origin receives them in the order they were sent;
 * - never more than the limit in any window: per second of the window's
 *   own clock for the sliding window counter, and in any window of length
 *   `period` in strict mode;
 * - those whose turn is past the delay are refused at once, with the
 *   exact Retry-After;
 * - the places of clients that hang up while held go to the next in line,
 *   and nothing is counted twice or lost: a second rule on the same key,
 *   whose limit is never reached, counts exactly what reached the origin;
 * - no 5xx, no request left hanging.
 *
 * The origin's clock is the objects' (one machine), but a held request
 * reaches the origin a little after its turn (its isolate's timer, then the
 * connection): a window is measured from `LATE_MS` after its start, the
 * slack that lateness is allowed, and the lateness seen is printed.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { randomGenerator } from "../support/random.ts";
import type { RequestRecord } from "./support/driver.ts";
import { type Edge, startEdge } from "./support/harness.ts";
import type { Arrival } from "./support/origin.ts";

const ISOLATES = 8;
const REQUESTS = 300;
const LIMIT = 10;
const PERIOD_MS = 1_000;
const MAX_DELAY_MS = 5_000;
/** Between two sends: 50 a second, five times the limit. */
const GAP_MS = 20;
/** A quarter of the clients hang up if unanswered within 100–600 ms: while held, for those that are. */
const HANG_UP_SHARE = 0.25;
/** How late after its turn a held request may reach the origin, for the window counts. */
const LATE_MS = 50;

/** Strict mode's buckets: with 10, it admits about 10/11 of the limit under overload (docs/strict-mode.md). */
const STRICT_PRECISION = 10;

const rule = (id: string, path: string, strict: boolean): RuleInput[] => [
  {
    id,
    path,
    limit: LIMIT,
    period: "1s",
    ...(strict ? { strict, precision: STRICT_PRECISION } : {}),
    max_delay: `${MAX_DELAY_MS}ms`,
    key: ["ip"],
  },
  // Beside it, on the same key: a limit never reached, which counts every request that went on, once.
  { id: `${id}-all`, path, limit: 1_000_000, period: "1h", key: ["ip"] },
];
const RULES = [...rule("smooth", "/smooth/*", false), ...rule("smooth-strict", "/strict/*", true)];

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: RULES, isolates: ISOLATES, timeoutMs: 5_000 });
});
afterAll(async () => {
  await edge?.stop();
});

type Run = { records: RequestRecord[]; arrivals: (Arrival & { seq: number })[]; runtimeFailures: string[] };

/** The burst for `key` on `path`: sent `GAP_MS` apart round the isolates; every record, and what reached the origin. */
async function burst(key: string, path: string, seed: number): Promise<Run> {
  const random = randomGenerator(seed);
  const driver = edge.driver(MAX_DELAY_MS + 10_000);
  const mark = edge.workerd.mark();
  const started = performance.now();
  const sent: Promise<RequestRecord>[] = [];
  for (let i = 0; i < REQUESTS; i++) {
    const waitMs = started + i * GAP_MS - performance.now();
    if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
    const abortAfterMs = random.next() < HANG_UP_SHARE ? 100 + random.int(500) : undefined;
    sent.push(driver.send(i % ISOLATES, key, { path, abortAfterMs }).done);
  }
  const records = await Promise.all(sent);
  await new Promise((resolve) => setTimeout(resolve, 250)); // workerd's last lines trail the answers
  const seqOf = new Map(records.map((r, i) => [r.tag, i]));
  const arrivals = edge.origin
    .arrivals()
    .filter((a) => seqOf.has(a.tag))
    .map((a) => ({ ...a, seq: seqOf.get(a.tag)! }));
  return { records, arrivals, runtimeFailures: edge.failures(mark) };
}

/** How far the origin's order strays from the sending order: the longest an earlier-sent request arrived after a later-sent one. */
function worstInversionMs(arrivals: { seq: number; atMs: number }[]): { count: number; worstMs: number } {
  let count = 0;
  let worstMs = 0;
  for (let i = 0; i < arrivals.length; i++) {
    for (let j = i + 1; j < arrivals.length; j++) {
      if (arrivals[j]!.seq < arrivals[i]!.seq) {
        count++;
        worstMs = Math.max(worstMs, arrivals[j]!.atMs - arrivals[i]!.atMs);
      }
    }
  }
  return { count, worstMs };
}

/** The most arrivals in a window of the sliding window counter: a second of the objects' clock, from `LATE_MS` after it begins. */
function mostPerSecond(arrivals: { atMs: number }[]): { most: number; perSecond: Map<number, number> } {
  const perSecond = new Map<number, number>();
  let most = 0;
  for (const { atMs } of arrivals) {
    const second = Math.floor(atMs / PERIOD_MS);
    perSecond.set(second, (perSecond.get(second) ?? 0) + 1);
  }
  const seconds = new Set(perSecond.keys());
  for (const second of seconds) {
    const within = arrivals.filter((a) => a.atMs >= second * PERIOD_MS + LATE_MS && a.atMs < (second + 1) * PERIOD_MS);
    most = Math.max(most, within.length);
  }
  return { most, perSecond };
}

/** The most arrivals in any window of length `period` less `LATE_MS` (strict mode's promise, with the slack). */
function mostInAnyWindow(arrivals: { atMs: number }[]): number {
  const times = arrivals.map((a) => a.atMs).sort((a, b) => a - b);
  let most = 0;
  let end = 0;
  for (let start = 0; start < times.length; start++) {
    while (end < times.length && times[end]! < times[start]! + PERIOD_MS - LATE_MS) end++;
    most = Math.max(most, end - start);
  }
  return most;
}

const outcome = (r: RequestRecord) =>
  r.aborted ? "aborted" : r.gaveUp ? "no answer" : r.status !== null ? String(r.status) : `error: ${r.error}`;

function summary(run: Run) {
  const outcomes: Record<string, number> = {};
  for (const r of run.records) outcomes[outcome(r)] = (outcomes[outcome(r)] ?? 0) + 1;
  const refused = run.records.filter((r) => r.status === 429);
  const retryAfter: Record<string, number> = {};
  for (const r of refused) {
    const value = String(r.headers?.["retry-after"]);
    retryAfter[value] = (retryAfter[value] ?? 0) + 1;
  }
  const refusedInMs = refused.map((r) => r.endedAtMs! - r.sentAtMs);
  const heldMs = run.records
    .filter((r) => r.status === 200)
    .map((r) => Number(/dur=(\d+)/.exec(String(r.headers?.["server-timing"] ?? ""))?.[1] ?? 0));
  const heldServed = heldMs.filter((ms) => ms > 0).length;
  const hungUp = outcomes.aborted ?? 0;
  return {
    outcomes,
    retryAfter,
    slowestRefusalMs: Math.max(...refusedInMs),
    longestHeldMs: Math.max(...heldMs),
    heldShareHungUp: hungUp / (hungUp + heldServed),
  };
}

describe.each([
  ["the sliding window counter", "smooth", "/smooth/x", false, 41],
  ["strict mode", "smooth-strict", "/strict/x", true, 42],
] as const)("a burst of 300 held up to 5 s against 10 a second, over 8 isolates: %s", (_, id, path, strict, seed) => {
  it("reaches the origin in order, never over the limit; the rest refused at once with the exact Retry-After; hang-ups' places go to the next, nothing counted twice or lost", async () => {
    const key = strict ? "10.60.0.2" : "10.60.0.1";
    const run = await burst(key, path, seed);
    const { records, arrivals } = run;
    const facts = summary(run);
    const order = worstInversionMs(arrivals);
    const windows = strict ? { mostInAnyWindow: mostInAnyWindow(arrivals) } : mostPerSecond(arrivals);
    console.log(`${id}:`, { ...facts, forwarded: arrivals.length, order, windows });

    // No 5xx, nothing left hanging, nothing the runtime complained of.
    expect(records.filter((r) => r.status !== null && r.status >= 500).map((r) => r.body)).toEqual([]);
    expect(facts.outcomes["no answer"]).toBeUndefined();
    expect(Object.keys(facts.outcomes).filter((o) => o.startsWith("error"))).toEqual([]);
    expect(run.runtimeFailures).toEqual([]);
    // The run did what it meant to: requests were held (for seconds), refused, and hung up on while held.
    expect(facts.longestHeldMs).toBeGreaterThan(MAX_DELAY_MS - 1_000);
    expect(facts.outcomes["429"]).toBeGreaterThan(REQUESTS / 3);
    // About a quarter of the held clients hung up (those held less than their patience were served first).
    expect(facts.heldShareHungUp).toBeGreaterThan(0.15);
    expect(facts.heldShareHungUp).toBeLessThan(0.35);

    // In the order they were sent: no request reached the origin after one sent later, beyond arriving
    // together (turns of the same instant, sent on by different isolates).
    expect(order.worstMs).toBeLessThanOrEqual(LATE_MS);
    // Never over the limit.
    if (strict) expect(mostInAnyWindow(arrivals)).toBeLessThanOrEqual(LIMIT);
    else expect(mostPerSecond(arrivals).most).toBeLessThanOrEqual(LIMIT);
    // Refused at once, past the delay: the wait behind 5 s of held requests, a turn or so more, in whole seconds.
    expect(facts.slowestRefusalMs).toBeLessThan(1_000);
    expect(Object.keys(facts.retryAfter)).toEqual(strict ? expect.arrayContaining(["6"]) : ["6"]);
    for (const value of Object.keys(facts.retryAfter)) expect(["6", "7"]).toContain(value);
    // Every 200 reached the origin once; nothing refused or hung up on while held did.
    const forwarded = new Set(arrivals.map((a) => a.tag));
    expect(arrivals.length).toBe(forwarded.size);
    expect(records.filter((r) => r.status === 200 && !forwarded.has(r.tag))).toEqual([]);
    expect(records.filter((r) => r.status === 429 && forwarded.has(r.tag))).toEqual([]);
    // Nothing counted twice or lost: the rule beside it counted exactly the requests that reached the origin.
    const counted = (await edge.status(`${id}-all`, key)).weighted;
    expect(counted).toBe(arrivals.length);
    // The places of those who hung up went to the next in line: while the queue was full the origin got the
    // full limit (strict mode: what it admits under overload, 10/11 of it). Had a hang-up's place been lost,
    // about a quarter of the held would be missing from each second.
    const firstRefusal = Math.min(...records.filter((r) => r.status === 429).map((r) => r.sentAtMs));
    const lastRefusal = Math.max(...records.filter((r) => r.status === 429).map((r) => r.sentAtMs));
    const backlog = backlogSeconds(arrivals, records, firstRefusal, lastRefusal);
    console.log(`${id}: arrivals per second while the queue was full:`, backlog);
    const full = strict ? Math.floor((LIMIT * STRICT_PRECISION) / (STRICT_PRECISION + 1)) : LIMIT;
    expect(backlog.length).toBeGreaterThan(5);
    // In all, over those seconds: strict mode admits in groups, and one group may straddle either end.
    const total = backlog.reduce((sum, n) => sum + n, 0);
    expect(total).toBeGreaterThanOrEqual(backlog.length * full - LIMIT);
  });
});

/**
 * Arrivals at the origin in each whole second of the objects' clock during
 * which the queue stayed full: from the second after the one after the
 * first refusal's until the one before the last arrival's.
 */
function backlogSeconds(
  arrivals: Arrival[],
  records: RequestRecord[],
  firstRefusalSentMs: number,
  lastRefusalSentMs: number,
): number[] {
  // The driver's clock starts at its first send; the first arrival's Unix time less its send time maps one to the other.
  const first = records.find((r) => arrivals.some((a) => a.tag === r.tag))!;
  const firstArrival = arrivals.find((a) => a.tag === first.tag)!;
  const unixOf = (driverMs: number) => firstArrival.atMs - first.sentAtMs + driverMs;
  // Two seconds on: strict mode's first burst weighs until its whole bucket has left, P + P/k after it.
  const from = Math.floor(unixOf(firstRefusalSentMs) / PERIOD_MS) + 2;
  const lastArrival = Math.max(...arrivals.map((a) => a.atMs));
  const to =
    Math.min(Math.floor((unixOf(lastRefusalSentMs) + MAX_DELAY_MS) / PERIOD_MS), Math.floor(lastArrival / PERIOD_MS)) -
    1;
  const counts: number[] = [];
  for (let second = from; second <= to; second++) {
    counts.push(arrivals.filter((a) => a.atMs >= second * PERIOD_MS && a.atMs < (second + 1) * PERIOD_MS).length);
  }
  return counts;
}
