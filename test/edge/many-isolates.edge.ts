/**
 * @module
 * The promise at production's shape: 16 isolates, each with its own caches,
 * in front of one Durable Object per key; concurrent traffic for shared keys
 * spread over all of them; clients that hang up mid-request; and the whole
 * runtime killed (SIGKILL) and restarted in the middle of the run.
 *
 * Every rule is strict and the run is far shorter than its period, so the
 * exact single-object decision is known: a key admits at most its limit in
 * all, and with three times that demand, exactly its limit.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { randomGenerator } from "../support/random.ts";
import { type Edge, startEdge } from "./support/harness.ts";
import { type Planned, runLoad, tally } from "./support/load.ts";

const LIMIT = 400;
const KEYS = Array.from({ length: 6 }, (_, i) => `10.20.0.${i + 1}`);
/** `slow-5-`: the objects service holds every check 5 ms, as a Durable Object a few milliseconds away would. */
const RULE = "slow-5-shared";
const RULES: RuleInput[] = [
  { id: RULE, path: "/*", limit: LIMIT, period: "1h", strict: true, key: ["ip"], on_error: "closed" },
];

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: RULES, timeoutMs: 5_000 });
});
afterAll(async () => {
  await edge?.stop();
});

describe("16 isolates, shared keys, clients that hang up, and a kill in the middle", () => {
  it("never admits more than one object would, answers no 5xx, hangs nothing, and loses no count", async () => {
    const random = randomGenerator(7);
    // Three times each key's limit, interleaved over keys and isolates; one client in ten hangs up
    // within 10 ms of sending, before, while or after its call is made.
    const plan: Planned[] = Array.from({ length: KEYS.length * LIMIT * 3 }, () => ({
      isolate: random.int(edge.isolates),
      key: KEYS[random.int(KEYS.length)]!,
      ...(random.next() < 0.1 ? { abortAfterMs: random.int(10) } : {}),
    }));
    const driver = edge.driver(30_000);
    const mark = edge.workerd.mark();
    let restarted: Promise<void> | null = null;
    const records = await runLoad(driver, plan, {
      concurrency: 32,
      // Halfway: kill workerd with requests in flight, restart it on the same storage, and go on.
      before: (index) => {
        if (index === plan.length / 2) restarted = edge.workerd.kill().then(() => edge.workerd.restart());
        return restarted ?? undefined;
      },
    });

    const { admitted, statuses, serverErrors } = tally(records);
    const runtimeFailures = edge.failures(mark);
    const killed = edge.workerd.outputSince(mark).match(/ended \(SIGKILL\)/g) ?? [];
    console.log(`workerd killed ${killed.length} time(s) mid-run; requests cut off by it: ${statuses.error ?? 0}`);
    const counted = new Map<string, number>();
    for (const key of KEYS) counted.set(key, (await edge.status(RULE, key)).weighted);
    const perKey = KEYS.map((key) => ({ key, admitted: admitted.get(key) ?? 0, counted: counted.get(key)! }));
    console.table(perKey);
    console.log("outcomes:", statuses);

    expect(serverErrors.map((r) => `${r.status} ${r.body}`)).toEqual([]);
    expect(runtimeFailures).toEqual([]);
    // Every request was answered, but those the kill cut off (at most the ones in flight then).
    expect(statuses["no answer"]).toBeUndefined();
    expect(statuses.error ?? 0).toBeLessThanOrEqual(32);
    for (const { key, admitted: seen, counted: kept } of perKey) {
      // Never over: the object alone admits at most the limit in a run shorter than the period.
      expect(seen, key).toBeLessThanOrEqual(LIMIT);
      // Nothing lost: every admission a client saw is still counted after the kill and restart.
      expect(kept, key).toBeGreaterThanOrEqual(seen);
    }
    // Every admission reached the origin, once; no refused request did.
    const atOrigin = records.filter((r) => r.status === 200 && !r.aborted).map((r) => edge.origin.hits(r.tag));
    expect(atOrigin.every((hits) => hits === 1)).toBe(true);
    const refusedAtOrigin = records.filter((r) => r.status === 429).filter((r) => edge.origin.hits(r.tag) > 0);
    expect(refusedAtOrigin).toEqual([]);
    // The run did what it meant to: keys reached their limits, clients hung up, workerd was killed mid-run.
    expect(statuses["429"]).toBeGreaterThan(KEYS.length * LIMIT);
    expect(statuses.aborted).toBeGreaterThan(0);
    expect(killed).toHaveLength(1);
  });
});
