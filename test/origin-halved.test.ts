/**
 * C halved mid-overload in `npm run bench:origin` (tools/bench/origin/): the
 * figures once the limiter has followed the halving, and the time it took.
 * It has followed from the first whole second after the halving whose p99
 * at the origin is within twice its unloaded p99 at the halved C (twice the
 * p99 before: its service times doubled), and the targets are read from
 * there to the end of the overload. Checked on hand-made records, and on
 * the simulation: without a limiter, or with a fixed limit at the old C,
 * the origin never gets there.
 */
import { describe, expect, it } from "vitest";
import { figures, type RequestRecord, type ServedRecord } from "../tools/bench/origin/metrics.ts";
import type { Scenario } from "../tools/bench/origin/scenario.ts";
import { simulate } from "../tools/bench/origin/simulate.ts";

/** C = 20/s, halved 10 s into a 20 s overload. */
const scenario: Scenario = {
  capacityPerSecond: 20,
  halveAtMs: 20_000,
  driftAtMs: null,
  driftExtraMs: 0,
  driftJitter: 0,
  phases: [
    { name: "before", durationMs: 10_000, load: 0.5 },
    { name: "overload", durationMs: 20_000, load: 3 },
    { name: "after", durationMs: 5_000, load: 0.5 },
  ],
  lightClients: 5,
  lightShare: 1 / 3,
  clientTimeoutMs: 2_000,
  workers: 1,
  queueBound: 40,
  jitter: 0,
  seed: 1,
};

describe("C halved mid-overload: the figures once the limiter has followed it", () => {
  it("starts at the first second whose p99 is within twice the halved unloaded p99, and reads the targets from there", () => {
    const served: ServedRecord[] = [];
    const requests: RequestRecord[] = [];
    const serve = (atMs: number, latencyMs: number, client: number, outcome: RequestRecord["outcome"] = "ok") => {
      served.push({ arriveMs: atMs, finishMs: atMs + latencyMs });
      requests.push({ client, sentMs: atMs, doneMs: atMs + latencyMs, outcome });
    };
    // Unloaded: 50 ms, so 100 ms at the halved C, and within twice that is 200 ms.
    for (let t = 0; t < 10_000; t += 100) serve(t, 50, 1);
    for (let t = 10_000; t < 19_900; t += 50) serve(t, 60, 1 + ((t / 50) % 5));
    // The halving's backlog: answers of 1 s sent for 3 s, the last at 23.9 s; then 150 ms ones, ten a second,
    // half from light clients. The first second whose answers are all within 200 ms is the 25th.
    for (let t = 20_000; t < 23_000; t += 100) serve(t, 1_000, 1);
    for (let t = 23_000; t < 30_000; t += 100) serve(t, 150, (t / 100) % 2 === 0 ? 0 : 1 + ((t / 100) % 5));
    // One light request refused by the limiter after the halving was followed: 31 light ones sent, 30 ok.
    requests.push({ client: 2, sentMs: 25_050, doneMs: 25_051, outcome: "shed" });
    const followed = figures(scenario, requests, served, [], null).followed;
    expect(followed).not.toBeNull();
    expect(followed!.afterMs).toBe(4_000);
    // 60 answered from 24 s to 30 s, of the 60 the halved C allowed.
    expect(followed!.goodputShare).toBeCloseTo(1, 6);
    expect(followed!.lightSuccess).toBeCloseTo(30 / 31, 6);
    expect(followed!.p99Ratio).toBeCloseTo(1.5, 6);
  });

  it("starts after the halving's backlog: a second within the bound before the backlog formed is not following", () => {
    const served: ServedRecord[] = [];
    const requests: RequestRecord[] = [];
    const serve = (atMs: number, latencyMs: number, client: number) => {
      served.push({ arriveMs: atMs, finishMs: atMs + latencyMs });
      requests.push({ client, sentMs: atMs, doneMs: atMs + latencyMs, outcome: "ok" });
    };
    for (let t = 0; t < 20_000; t += 100) serve(t, 50, 1);
    // The first second after the halving is served at the doubled service time, before any queue: within 200 ms.
    for (let t = 20_000; t < 21_000; t += 100) serve(t, 100, 1);
    // Then the backlog: answers of 1 s for 2 s; then 150 ms ones. Followed from the 23rd second, not the 20th.
    for (let t = 21_000; t < 23_000; t += 100) serve(t, 1_000, 1);
    for (let t = 23_000; t < 30_000; t += 100) serve(t, 150, 1);
    const followed = figures(scenario, requests, served, [], null).followed;
    expect(followed!.afterMs).toBe(4_000);
    expect(followed!.p99Ratio).toBeCloseTo(1.5, 6);
  });

  it("starts at the halving when no second after it is over the bound: no backlog to follow", () => {
    const served: ServedRecord[] = [];
    for (let t = 0; t < 20_000; t += 100) served.push({ arriveMs: t, finishMs: t + 50 });
    for (let t = 20_000; t < 30_000; t += 100) served.push({ arriveMs: t, finishMs: t + 100 });
    expect(figures(scenario, [], served, [], null).followed!.afterMs).toBe(0);
  });

  it("is absent without a halving", () => {
    const unhalved = { ...scenario, halveAtMs: null };
    expect(figures(unhalved, [], [{ arriveMs: 0, finishMs: 50 }], [], null).followed).toBeNull();
  });

  it("never comes without a limiter, nor with a fixed limit at the old C: the origin's queue stays full", () => {
    const played: Scenario = { ...scenario, capacityPerSecond: 100, workers: 10, queueBound: 200 };
    for (const limiter of [{ kind: "none" } as const, { kind: "fixed", limit: 100, periodMs: 1_000 } as const]) {
      const r = simulate(played, limiter);
      const followed = figures(played, r.requests, r.served, r.originRefusedAtMs, r.factors).followed;
      expect(followed?.afterMs).toBeNull();
    }
  });
});
