/**
 * @module
 * What leases cost and save across many isolates. Leases keep Durable Object
 * calls off the path of a hot key; the price is the admission gap: units an
 * isolate leased but has not spent are counted against the key everywhere.
 * Leases are sized by the demand each isolate has shown, so that a key an
 * isolate sees rarely gets none there.
 *
 * Each rule is strict and each run far shorter than its period, so what one
 * object alone admits is exact: the limit, under three times that demand.
 * The figures are printed for the README; the targets are asserted.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { randomGenerator } from "../support/random.ts";
import { figuresTable, measureLoad } from "./support/figures.ts";
import { type Edge, startEdge } from "./support/harness.ts";
import type { Planned } from "./support/load.ts";

const RULES: RuleInput[] = [
  { id: "dense", path: "/dense/*", limit: 3_000, period: "1h", strict: true, key: ["ip"] },
  { id: "sparse", path: "/sparse/*", limit: 30, period: "1h", strict: true, key: ["ip"] },
  { id: "hot", path: "/hot/*", limit: 1_000_000_000, period: "1h", key: ["ip"] },
];

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: RULES, timeoutMs: 5_000 });
});
afterAll(async () => {
  await edge?.stop();
});

const figures = figuresTable("edge figures", () => edge);

/** Runs a plan; what was admitted, against what one object alone admits, and the Durable Object calls it made. */
const measure = (scenario: string, rule: string, plan: Planned[], exact: number) =>
  measureLoad(edge, figures, { scenario, rule, plan, exact, concurrency: 32 });

describe("the admission gap at three times the limit, over 16 isolates", () => {
  it("dense: one key every isolate sees often admits at least 97% of what one object alone admits, and never more", async () => {
    const random = randomGenerator(61);
    const limit = 3_000;
    const plan = Array.from({ length: 3 * limit }, () => ({
      isolate: random.int(edge.isolates),
      key: "10.30.0.1",
      path: "/dense/x",
    }));
    const { total, serverErrors } = await measure("dense: 1 key", "dense", plan, limit);
    expect(serverErrors).toEqual([]);
    expect(total).toBeLessThanOrEqual(limit);
    expect(total).toBeGreaterThanOrEqual(0.97 * limit);
  });

  it("sparse: 200 keys each isolate sees rarely admit at least 97% of what one object alone admits, and never more", async () => {
    const random = randomGenerator(62);
    const limit = 30;
    const keys = Array.from({ length: 200 }, (_, i) => `10.31.${i >> 8}.${i & 255}`);
    const plan = Array.from({ length: 3 * limit * keys.length }, () => ({
      isolate: random.int(edge.isolates),
      key: keys[random.int(keys.length)]!,
      path: "/sparse/x",
    }));
    const { admitted, total, serverErrors } = await measure("sparse: 200 keys", "sparse", plan, limit * keys.length);
    expect(serverErrors).toEqual([]);
    for (const key of keys) expect(admitted.get(key) ?? 0, key).toBeLessThanOrEqual(limit);
    expect(total).toBeGreaterThanOrEqual(0.97 * limit * keys.length);
  });
});

describe("a hot key far below its limit, over 16 isolates", () => {
  it("makes at most 0.05 Durable Object calls per request", async () => {
    const random = randomGenerator(63);
    const plan = Array.from({ length: 8_000 }, () => ({
      isolate: random.int(edge.isolates),
      key: "10.32.0.1",
      path: "/hot/x",
    }));
    const { total, calls, serverErrors } = await measure("hot key, far below its limit", "hot", plan, 0);
    expect(serverErrors).toEqual([]);
    expect(total).toBe(plan.length);
    expect(calls / plan.length).toBeLessThanOrEqual(0.05);
  });
});
