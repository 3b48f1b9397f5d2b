/**
 * The priorities scenario of `npm run bench:origin` (tools/bench/origin/),
 * in virtual time, deterministic: steady critical requests at half of C,
 * and a spike of sheddable ones at twelve times C from the same clients.
 * A limit per client alone cannot tell them apart: without priorities the
 * critical requests are refused as often as the sheddable ones. With them,
 * each isolate refuses the sheddable requests that would crowd the origin
 * from the onset on, the controller's factor cuts them, and the critical
 * ones keep the configured limit.
 */
import { describe, expect, it } from "vitest";
import { parseAdaptive } from "../src/core/health.ts";
import { priorityFigures } from "../tools/bench/origin/metrics.ts";
import type { Scenario } from "../tools/bench/origin/scenario.ts";
import { simulate } from "../tools/bench/origin/simulate.ts";

/** C = 200/s, 10 workers (50 ms each); 50 clients, critical at C/2 together, and for 20 s sheddable at 12 × C. */
const scenario: Scenario = {
  capacityPerSecond: 200,
  halveAtMs: null,
  driftAtMs: null,
  driftExtraMs: 0,
  driftJitter: 0,
  phases: [
    { name: "before", durationMs: 10_000, load: 0.5 },
    { name: "overload", durationMs: 20_000, load: 12.5 },
    { name: "after", durationMs: 20_000, load: 0.5 },
  ],
  lightClients: 50,
  lightShare: 0.5,
  priorities: true,
  clientTimeoutMs: 2_000,
  workers: 10,
  queueBound: 400,
  jitter: 0.2,
  seed: 1,
};

/** The benchmark's rule (per client, ten times C, the target twice the unloaded p99), with the priorities' matchers or without. */
function run(marked: boolean) {
  const adaptive = {
    latency: "120ms",
    floor: 1,
    ...(marked ? { critical: ["header:x-priority=critical"], sheddable: ["header:x-priority=sheddable"] } : {}),
  };
  const parsed = parseAdaptive(adaptive, 2_000);
  if (!parsed.ok) throw new Error(parsed.errors.join("; "));
  const r = simulate(scenario, {
    kind: "adaptive",
    limit: 2_000,
    periodMs: 1_000,
    floor: 1,
    latencyMs: 120,
    percentile: 99,
    errorShare: 0.05,
    ...(parsed.value.priorities ? { priorities: parsed.value.priorities } : {}),
  });
  return priorityFigures(scenario, r.requests, r.served, r.originRefusedAtMs, r.priorityFactors);
}

describe("a spike of sheddable requests on steady critical ones from the same clients, in the origin benchmark's simulation", () => {
  it("sheds the sheddable requests and keeps the critical ones at their configured limit, with priorities", () => {
    const figures = run(true);
    expect(figures.lowestCritical).toBe(1);
    // Cut below the configured limit, though the isolates refuse most of the spike themselves (a quarter, where it
    // was a thousandth before they did).
    expect(figures.lowestSheddable!).toBeLessThan(0.5);
    expect(figures.sheddableSuccess).toBeLessThan(0.1);
    expect(figures.limitBackMs).not.toBeNull();
  });

  it("keeps the origin's queue from filling at the spike's onset, before any report: every critical request answered, the origin busy", () => {
    const figures = run(true);
    // The targets: critical requests at least 99.5 % successful, goodput at least 90 % of C.
    expect(figures.criticalSuccess).toBeGreaterThanOrEqual(0.995);
    expect(figures.goodputShare).toBeGreaterThanOrEqual(0.9);
    expect(figures.originRefusals).toBe(0);
  });

  it("refuses the critical requests as often as the sheddable ones, without priorities", () => {
    const figures = run(false);
    expect(figures.lowestCritical).toBe(figures.lowestSheddable);
    expect(figures.criticalSuccess).toBeLessThan(0.2);
  });
});
