/**
 * The baseline drift of `npm run bench:origin` (tools/bench/origin/), in
 * virtual time, deterministic: the origin's calm latency rises above the
 * adaptive rule's target while the load is light (a slower day, not an
 * overload). The controller cuts while it cannot tell a slow origin from a
 * queue, finds that cutting does not make it faster, says so, and brings
 * the limit back while the load is light; the light clients are served
 * throughout. Without that finding, the limit stays down for as long as
 * the origin is slow.
 */
import { describe, expect, it } from "vitest";
import type { ControllerParams } from "../src/core/controller.ts";
import { driftFigures } from "../tools/bench/origin/metrics.ts";
import type { Scenario } from "../tools/bench/origin/scenario.ts";
import { simulate } from "../tools/bench/origin/simulate.ts";

/** C = 200/s, 10 workers (50 ms each); after 10 s every answer 150 ms later, capacity unchanged. */
const scenario: Scenario = {
  capacityPerSecond: 200,
  halveAtMs: null,
  driftAtMs: 10_000,
  driftExtraMs: 150,
  driftJitter: 0,
  phases: [
    { name: "before", durationMs: 10_000, load: 0.5 },
    { name: "drift", durationMs: 40_000, load: 0.5 },
    { name: "overload", durationMs: 10_000, load: 3 },
    { name: "after", durationMs: 10_000, load: 0.5 },
  ],
  lightClients: 50,
  lightShare: 1 / 3,
  clientTimeoutMs: 2_000,
  workers: 10,
  queueBound: 400,
  jitter: 0.2,
  seed: 1,
};

/** The benchmark's rule: per client, ten times C; the target twice the unloaded p99 (120 ms), under the 200 ms drifted. */
function run(params: Partial<ControllerParams> = {}) {
  const r = simulate(scenario, {
    kind: "adaptive",
    limit: 2_000,
    periodMs: 1_000,
    floor: 1,
    latencyMs: 120,
    percentile: 99,
    errorShare: 0.05,
    params,
  });
  return driftFigures(scenario, r.requests, r.served, r.originRefusedAtMs, r.factors ?? [], r.drift);
}

describe("an origin whose calm latency drifts above the target, in the origin benchmark's simulation", () => {
  it("is said to have drifted, and the limit is back at the configured one while the load is light", () => {
    const figures = run();
    expect(figures.driftedP99Ms).toBeGreaterThan(120);
    expect(figures.reportedMs).not.toBeNull();
    expect(figures.reportedMs!).toBeLessThan(20_000);
    expect(figures.limitBackMs).not.toBeNull();
    expect(figures.limitBackMs!).toBeLessThan(40_000);
    expect(figures.lightSuccess).toBeGreaterThanOrEqual(0.99);
  });

  it("stays down for as long as the origin is slow when cutting is never found not to help", () => {
    const figures = run({ driftAfterMs: Number.POSITIVE_INFINITY });
    expect(figures.reportedMs).toBeNull();
    expect(figures.limitBackMs).toBeNull();
  });
});
