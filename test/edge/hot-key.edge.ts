/**
 * @module
 * One hot key through 16 isolates, at, over and far below its limit: the
 * correctness side of `npm run bench:hot-key` (which measures the rates).
 *
 * Every limited rule is strict and each run far shorter than its period, so
 * what one object deciding every request in arrival order admits is known
 * exactly: all of them while fewer than the limit came, the limit once as
 * many or more did. The rules at the limit fail closed: a call that never
 * answered cannot pass for an admission, and refusals are not remembered
 * while counts may still be handed back (two timeouts after the last
 * admission), so there every request needs the object. The others fail
 * open, as shipped: an admission that no object counted would show as one
 * over the limit.
 *
 * Near the limit every request needs the object. Requests that wait in one
 * isolate for a call in flight go to the object in one batch, so a burst
 * costs each isolate a few calls, not one per request.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { randomGenerator } from "../support/random.ts";
import { figuresTable, measureLoad } from "./support/figures.ts";
import { type Edge, startEdge } from "./support/harness.ts";
import type { Planned } from "./support/load.ts";

const strict = (id: string, limit: number, onError: "open" | "closed"): RuleInput => ({
  id,
  path: `/${id}/*`,
  limit,
  period: "1h",
  precision: 60,
  strict: true,
  key: ["ip"],
  on_error: onError,
});

const RULES: RuleInput[] = [
  strict("at", 1_000, "closed"),
  strict("burst", 100, "closed"),
  strict("over", 200, "open"),
  { id: "below", path: "/below/*", limit: 1_000_000_000, period: "1h", key: ["ip"] },
];

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: RULES, timeoutMs: 5_000 });
});
afterAll(async () => {
  await edge?.stop();
});

const figures = figuresTable("hot key figures", () => edge);

/** Sends `plan` for one key with `concurrency` in flight; what was admitted, the calls made, and every outcome. */
async function drive(scenario: string, rule: string, plan: Planned[], limit: number, concurrency: number) {
  const mark = edge.workerd.mark();
  const exact = Math.min(plan.length, limit);
  const { records, total, calls, statuses, serverErrors } = await measureLoad(edge, figures, {
    scenario,
    rule,
    plan,
    exact,
    concurrency,
  });
  // Every admission reached the origin once, and no refusal did.
  const origin = records.filter((r) => r.status === 200).map((r) => edge.origin.hits(r.tag));
  expect(origin.every((hits) => hits === 1)).toBe(true);
  expect(records.filter((r) => r.status === 429 && edge.origin.hits(r.tag) > 0)).toEqual([]);
  return { total, calls, statuses, serverErrors, failures: edge.failures(mark) };
}

/** `n` requests for `key`, each to a random one of the isolates. */
const spread = (n: number, key: string, path: string, seed: number): Planned[] => {
  const random = randomGenerator(seed);
  return Array.from({ length: n }, () => ({ isolate: random.int(edge.isolates), key, path }));
};

describe("one hot key through 16 isolates", () => {
  it("at its limit (as many requests as the limit, then a quarter more): never over, at least 97% of what one object admits, no 5xx", async () => {
    const limit = 1_000;
    const plan = spread(limit + limit / 4, "10.50.0.1", "/at/x", 71);
    const { total, statuses, serverErrors, failures } = await drive("at its limit (1.25×)", "at", plan, limit, 64);
    console.log("at its limit:", statuses);
    expect(serverErrors.map((r) => `${r.status} ${r.body}`)).toEqual([]);
    expect(failures).toEqual([]);
    expect(statuses["no answer"]).toBeUndefined();
    expect(total).toBeLessThanOrEqual(limit);
    // What one object admits is the limit; isolates fall short of it only by units leased to one of them
    // and unspent when the run ended. Leases near a limit are at most an eighth of what is left, and the
    // quarter more demand, spread over every isolate, spends what they hold: 3% is the target,
    // and the dense test of admission.edge.ts holds it at three times the demand.
    expect(total).toBeGreaterThanOrEqual(0.97 * limit);
  });

  it("far over its limit (10×): exactly the limit, no 5xx, and refusals answered by the isolates", async () => {
    const limit = 200;
    const plan = spread(10 * limit, "10.50.0.2", "/over/x", 72);
    const { total, calls, statuses, serverErrors, failures } = await drive("far over (10×)", "over", plan, limit, 64);
    console.log("far over its limit:", statuses);
    expect(serverErrors.map((r) => `${r.status} ${r.body}`)).toEqual([]);
    expect(failures).toEqual([]);
    expect(total).toBeLessThanOrEqual(limit);
    expect(total).toBeGreaterThanOrEqual(0.97 * limit);
    // Once an isolate knows the refusal it answers it alone, until the refusal's wait is over.
    expect(calls / plan.length).toBeLessThanOrEqual(0.05);
  });

  it("a burst at its limit, 40 requests at once into each isolate: exactly the limit, in batched calls", async () => {
    const limit = 100;
    const plan: Planned[] = [];
    for (let i = 0; i < 40; i++) {
      for (let isolate = 0; isolate < edge.isolates; isolate++)
        plan.push({ isolate, key: "10.50.0.3", path: "/burst/x" });
    }
    const { total, calls, statuses, serverErrors, failures } = await drive(
      "a burst, 40 per isolate at once",
      "burst",
      plan,
      limit,
      plan.length,
    );
    console.log("burst:", statuses, `${calls} calls`);
    expect(serverErrors.map((r) => `${r.status} ${r.body}`)).toEqual([]);
    expect(failures).toEqual([]);
    expect(total).toBe(limit);
    // A call per request would be 640. The requests each isolate holds while a call is in flight go in one
    // batch: a handful of calls per isolate (the first, a batch per call in flight, refusals the closed rule
    // does not let isolates remember). Measured: 0.2 calls per request.
    expect(calls / plan.length).toBeLessThanOrEqual(0.5);
  });

  it("far below its limit: every request admitted, at most 0.05 Durable Object calls per request", async () => {
    const plan = spread(8_000, "10.50.0.4", "/below/x", 74);
    const { total, calls, serverErrors, failures } = await drive(
      "far below its limit",
      "below",
      plan,
      1_000_000_000,
      64,
    );
    expect(serverErrors.map((r) => `${r.status} ${r.body}`)).toEqual([]);
    expect(failures).toEqual([]);
    expect(total).toBe(plan.length);
    expect(calls / plan.length).toBeLessThanOrEqual(0.05);
  });
});
