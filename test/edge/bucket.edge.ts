/**
 * @module
 * A token bucket (`limit = 10, period = "1s", burst = 20`) across 8
 * isolates over real sockets: a burst of 300 requests for one client key,
 * sent 20 ms apart round the isolates (50 a second, five times the rate).
 * Measured at the origin, the "Show":
 * - the arrivals never exceed the conformance bound in any interval:
 *   at most `burst + rate × t` in any t (with `LATE_MS` of slack for the
 *   way from the isolate to the origin);
 * - the refusals carry the exact `Retry-After` (a unit drips back every
 *   100 ms: 1 s), and a client that retries then is admitted;
 * - with `max_delay`, the requests over the burst are held and reach the
 *   origin in the order they were sent, one every 100 ms (their
 *   conformance instants), a quarter of their clients hanging up while
 *   held and their turns going to the next in line; those past the delay
 *   are refused at once with the exact Retry-After;
 * - nothing is counted twice or lost: a window rule beside each, never
 *   reached, counts exactly what reached the origin;
 * - no 5xx, no request left hanging.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BucketLimit, check, fullState } from "../../src/core/gcra.ts";
import type { RuleInput } from "../../src/core/rules.ts";
import { randomGenerator } from "../support/random.ts";
import type { RequestRecord } from "./support/driver.ts";
import { type Edge, startEdge } from "./support/harness.ts";
import type { Arrival } from "./support/origin.ts";

const ISOLATES = 8;
const REQUESTS = 300;
const BUCKET: BucketLimit = { limit: 10, periodMs: 1_000, burst: 20 };
/** One unit's emission interval: 100 ms. */
const T_MS = BUCKET.periodMs / BUCKET.limit;
const MAX_DELAY_MS = 5_000;
/** Between two sends: 50 a second, five times the rate. */
const GAP_MS = 20;
/** How late after its admission a request may reach the origin (its isolate's timer, the connection), for the bound. */
const LATE_MS = 50;
/** With max_delay, a quarter of the clients hang up if unanswered within 100–600 ms: while held, for those that are. */
const HANG_UP_SHARE = 0.25;

const rules = (id: string, path: string, held: boolean): RuleInput[] => [
  held
    ? { id, path, limit: BUCKET.limit, period: "1s", burst: BUCKET.burst, max_delay: `${MAX_DELAY_MS}ms`, key: ["ip"] }
    : { id, path, limit: BUCKET.limit, period: "1s", burst: BUCKET.burst, key: ["ip"] },
  // Beside it, on the same key: a limit never reached, which counts every request that went on, once.
  { id: `${id}-all`, path, limit: 1_000_000, period: "1h", key: ["ip"] },
];
const RULES = [...rules("bucket", "/bucket/*", false), ...rules("bucket-held", "/held/*", true)];

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: RULES, isolates: ISOLATES, timeoutMs: 5_000 });
});
afterAll(async () => {
  await edge?.stop();
});

/**
 * `driverStartMs`: the instant the driver started, on the origin's clock
 * (the driver and the origin share this process's clock), read just before
 * it: a record's `sentAtMs` after it is at or before the true send.
 */
type Run = {
  records: RequestRecord[];
  arrivals: (Arrival & { seq: number })[];
  runtimeFailures: string[];
  driverStartMs: number;
};

/** The burst for `key` on `path`: sent `GAP_MS` apart round the isolates; every record, and what reached the origin. */
async function burst(key: string, path: string, hangUps: boolean, seed: number): Promise<Run> {
  const random = randomGenerator(seed);
  const driverStartMs = performance.timeOrigin + performance.now();
  const driver = edge.driver(MAX_DELAY_MS + 10_000);
  const mark = edge.workerd.mark();
  const started = performance.now();
  const sent: Promise<RequestRecord>[] = [];
  for (let i = 0; i < REQUESTS; i++) {
    const waitMs = started + i * GAP_MS - performance.now();
    if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
    const abortAfterMs = hangUps && random.next() < HANG_UP_SHARE ? 100 + random.int(500) : undefined;
    sent.push(driver.send(i % ISOLATES, key, { path, abortAfterMs }).done);
  }
  const records = await Promise.all(sent);
  await new Promise((resolve) => setTimeout(resolve, 250)); // workerd's last lines trail the answers
  const seqOf = new Map(records.map((r, i) => [r.tag, i]));
  const arrivals = edge.origin
    .arrivals()
    .filter((a) => seqOf.has(a.tag))
    .map((a) => ({ ...a, seq: seqOf.get(a.tag)! }));
  return { records, arrivals, runtimeFailures: edge.failures(mark), driverStartMs };
}

/**
 * The interval where the arrivals most exceed the conformance bound: the
 * most arrivals in one, less what the bound allows over the time their
 * admissions may have taken. Each admission was decided between its send
 * and its arrival (`fromMs` and `atMs`), so the arrivals i to j were
 * admitted within [the earliest of their `fromMs`, the last `atMs`]: the
 * bound over that span, `burst + rate × span`, holds for them. At most 0
 * when they never exceed it.
 */
function worstExcess(arrivals: { atMs: number; fromMs: number }[]) {
  const sorted = [...arrivals].sort((a, b) => a.atMs - b.atMs);
  let worst = { excess: Number.NEGATIVE_INFINITY, count: 0, spanMs: 0 };
  for (let i = 0; i < sorted.length; i++) {
    let fromMs = Number.POSITIVE_INFINITY;
    for (let j = i; j < sorted.length; j++) {
      fromMs = Math.min(fromMs, sorted[j]!.fromMs);
      const spanMs = sorted[j]!.atMs - fromMs;
      const excess = j - i + 1 - (BUCKET.burst + (BUCKET.limit * spanMs) / BUCKET.periodMs);
      if (excess > worst.excess) worst = { excess, count: j - i + 1, spanMs };
    }
  }
  return worst;
}

/**
 * The arrivals, each with the earliest instant it can have been admitted,
 * on the origin's clock (which the objects' is, one machine): its send, or
 * `LATE_MS` before its arrival for one that was held (sent on at its turn,
 * it was counted there, and reached the origin at most that much later).
 */
function admissionSpans(run: Run, held: boolean) {
  const byTag = new Map(run.records.map((r) => [r.tag, r]));
  return run.arrivals.map((a) => {
    const record = byTag.get(a.tag)!;
    const wasHeld = held && /dur=[1-9]/.test(String(record.headers?.["server-timing"] ?? ""));
    return { atMs: a.atMs, fromMs: wasHeld ? a.atMs - LATE_MS : run.driverStartMs + record.sentAtMs };
  });
}

/** How far the origin's order strays from the sending order: the longest an earlier-sent request arrived after a later-sent one. */
function worstInversion(arrivals: { seq: number; atMs: number }[]) {
  let worst = { ms: 0, early: -1, late: -1 };
  for (let i = 0; i < arrivals.length; i++) {
    for (let j = i + 1; j < arrivals.length; j++) {
      const ms = arrivals[j]!.atMs - arrivals[i]!.atMs;
      if (arrivals[j]!.seq < arrivals[i]!.seq && ms > worst.ms)
        worst = { ms, early: arrivals[j]!.seq, late: arrivals[i]!.seq };
    }
  }
  return worst;
}

/** What one exact bucket, deciding the requests at the instants they were sent, admits of them. */
function exactAdmissions(records: RequestRecord[]): number {
  let state = fullState(0, BUCKET);
  let admitted = 0;
  for (const r of records) {
    const decided = check(state, Math.round(r.sentAtMs), BUCKET);
    state = decided.state;
    if (decided.decision.allowed) admitted++;
  }
  return admitted;
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
  const heldMs = run.records
    .filter((r) => r.status === 200)
    .map((r) => Number(/dur=(\d+)/.exec(String(r.headers?.["server-timing"] ?? ""))?.[1] ?? 0));
  return {
    outcomes,
    retryAfter,
    slowestRefusalMs: Math.max(...refused.map((r) => r.endedAtMs! - r.sentAtMs)),
    longestHeldMs: Math.max(...heldMs),
    held: heldMs.filter((ms) => ms > 0).length,
  };
}

/** No 5xx, nothing left hanging, nothing the runtime complained of; every 200 reached the origin once, and nothing else did. */
async function expectClean(run: Run, id: string, key: string) {
  const { records, arrivals } = run;
  expect(records.filter((r) => r.status !== null && r.status >= 500).map((r) => r.body)).toEqual([]);
  expect(records.filter((r) => r.gaveUp || (r.error !== null && !r.aborted))).toEqual([]);
  expect(run.runtimeFailures).toEqual([]);
  const forwarded = new Set(arrivals.map((a) => a.tag));
  expect(arrivals.length).toBe(forwarded.size);
  expect(records.filter((r) => r.status === 200 && !forwarded.has(r.tag))).toEqual([]);
  expect(records.filter((r) => r.status === 429 && forwarded.has(r.tag))).toEqual([]);
  // Nothing counted twice or lost: the rule beside it counted exactly the requests that reached the origin.
  expect((await edge.status(`${id}-all`, key)).weighted).toBe(arrivals.length);
}

describe("a burst of 300 over 8 isolates against 10 a second in bursts of 20", () => {
  it("reaches the origin never over burst + rate × t in any interval; each refusal says Retry-After 1, and a retry then is admitted", async () => {
    const key = "10.61.0.1";
    const run = await burst(key, "/bucket/x", false, 51);
    const facts = summary(run);
    const excess = worstExcess(admissionSpans(run, false));
    const exact = exactAdmissions(run.records);
    console.log("bucket:", { ...facts, forwarded: run.arrivals.length, exact, worstInterval: excess });

    await expectClean(run, "bucket", key);
    // The run did what it meant to: a full burst admitted, and most of the rest refused.
    expect(run.arrivals.length).toBeGreaterThanOrEqual(BUCKET.burst);
    expect(facts.outcomes["429"]).toBeGreaterThan(REQUESTS / 2);
    // Never over the bound, in any interval (of the time the admissions may have taken).
    expect(excess.excess).toBeLessThanOrEqual(0);
    // Close to what one exact bucket admits of the same sends (leases forgo a little refill; the rest is timing).
    expect(run.arrivals.length).toBeLessThanOrEqual(exact + 2);
    expect(run.arrivals.length).toBeGreaterThanOrEqual(Math.floor(0.9 * exact));
    // A unit drips back every 100 ms: every refusal is told to retry within the second, in whole seconds.
    expect(Object.keys(facts.retryAfter)).toEqual(["1"]);

    // The last one refused retries when told (after the burst is over, nothing else is admitted meanwhile): admitted.
    const last = run.records.filter((r) => r.status === 429).at(-1)!;
    const driver = edge.driver(10_000);
    const again = await driver.send(last.isolate, key, { path: "/bucket/x" }).done;
    // At once, the bucket may still be empty (the burst's last admissions are within 100 ms); after Retry-After, it never is.
    await new Promise((resolve) => setTimeout(resolve, Number(last.headers!["retry-after"]) * 1_000));
    const retried = await driver.send(last.isolate, key, { path: "/bucket/x" }).done;
    console.log("bucket: the retry", { atOnce: again.status, afterRetryAfter: retried.status });
    expect(retried.status).toBe(200);
  });

  it("with max_delay: held requests reach the origin in the order sent, one every 100 ms, never over the bound; past the delay, refused at once with the exact Retry-After", async () => {
    const key = "10.61.0.2";
    const run = await burst(key, "/held/x", true, 52);
    const facts = summary(run);
    const { arrivals } = run;
    const excess = worstExcess(admissionSpans(run, true));
    const inversion = worstInversion(arrivals);
    const inversionMs = inversion.ms;
    // Between consecutive held arrivals: a unit's emission interval, give or take the way there.
    const heldTags = new Set(
      run.records.filter((r) => /dur=[1-9]/.test(String(r.headers?.["server-timing"] ?? ""))).map((r) => r.tag),
    );
    const times = arrivals
      .filter((a) => heldTags.has(a.tag))
      .map((a) => a.atMs)
      .sort((a, b) => a - b);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    const tightestGapMs = Math.min(...gaps);
    console.log("bucket-held:", {
      ...facts,
      forwarded: arrivals.length,
      worstInterval: excess,
      inversion,
      tightestGapMs,
    });

    await expectClean(run, "bucket-held", key);
    // Requests were held (for seconds), refused, and hung up on while held.
    expect(facts.longestHeldMs).toBeGreaterThan(MAX_DELAY_MS - 1_000);
    expect(facts.outcomes["429"]).toBeGreaterThan(REQUESTS / 3);
    expect(facts.outcomes.aborted).toBeGreaterThan(0);
    // In the order they were sent (turns of one instant may be sent on by different isolates a little apart).
    expect(inversionMs).toBeLessThanOrEqual(LATE_MS);
    // Never over the bound, in any interval.
    expect(excess.excess).toBeLessThanOrEqual(0);
    // At their conformance instants: one per emission interval, never two within it (less the way there).
    expect(tightestGapMs).toBeGreaterThanOrEqual(T_MS - LATE_MS);
    // And the rate kept while the queue was full: over the held stretch, a unit every 100 ms, the hang-ups'
    // turns going to the next in line (had they been lost, about a quarter would be missing).
    const heldStretchMs = times.at(-1)! - times[0]!;
    expect(times.length - 1).toBeGreaterThanOrEqual(Math.floor(heldStretchMs / T_MS) - 2);
    // Refused at once past the delay: its wait behind 5 s of held requests, in whole seconds.
    expect(facts.slowestRefusalMs).toBeLessThan(1_000);
    expect(Object.keys(facts.retryAfter)).toEqual(["6"]);
  });
});
