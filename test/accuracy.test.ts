import { describe, expect, it } from "vitest";
import { ALGORITHMS } from "../tools/accuracy/algorithms.ts";
import { runTrace } from "../tools/accuracy/harness.ts";
import { replay } from "../tools/accuracy/replay.ts";
import { boundaryAttack, bucketEdgeAttack, SETUP, steadyPoisson } from "../tools/accuracy/traces.ts";

const row = (rows: ReturnType<typeof runTrace>["rows"], id: string) => {
  const found = rows.find((r) => r.algorithm === id);
  if (!found) throw new Error(`no row for ${id}`);
  return found;
};

describe("the accuracy harness's traces, replayed in workerd", () => {
  it("on the boundary attack, strict mode never admits more than the limit in any window; the seeds' counter and a fixed window nearly double it", () => {
    const { rows } = runTrace(boundaryAttack());
    for (const id of ["strict-k1", "strict-k10", "strict-k60"]) {
      expect(row(rows, id).maxRatio, id).toBeLessThanOrEqual(1);
      expect(row(rows, id).overAdmits, id).toBe(0);
    }
    expect(row(rows, "exact-log").maxRatio).toBe(1);
    expect(row(rows, "fixed-window").maxRatio).toBeGreaterThan(1.9);
    expect(row(rows, "sliding-k1").maxRatio).toBeGreaterThan(1.9);
  });

  it("on the bucket-edge attack, strict mode holds at every precision while default mode nears 2× even at k = 60", () => {
    const { rows } = runTrace(bucketEdgeAttack());
    for (const id of ["strict-k1", "strict-k10", "strict-k60"])
      expect(row(rows, id).maxRatio, id).toBeLessThanOrEqual(1);
    expect(row(rows, "sliding-k60").maxRatio).toBeGreaterThan(1.9);
  });

  it("with precision 60 and strict mode, admits at least 98% of what an exact log admits on Poisson traffic at 3× the limit", () => {
    const algorithms = ALGORITHMS.filter((a) => a.id === "exact-log" || a.id === "strict-k60");
    const { rows } = runTrace(steadyPoisson(3), algorithms);
    expect(row(rows, "strict-k60").shareOfExact).toBeGreaterThanOrEqual(0.98);
    expect(row(rows, "strict-k60").maxRatio).toBeLessThanOrEqual(1);
  });

  it("measures what a brute-force count over the same decisions finds", () => {
    const trace = boundaryAttack(6);
    for (const algorithm of ALGORITHMS) {
      const measured = replay(trace, algorithm, SETUP.limit, SETUP.periodMs, true);
      // Replays the same decisions and counts every window from scratch: O(n²), fine for a short trace.
      const limiter = algorithm.create(SETUP.limit, SETUP.periodMs);
      const admitted: number[] = [];
      let overAdmits = 0;
      let overRefusals = 0;
      let maxInWindow = 0;
      for (const t of trace.timesMs) {
        const inWindow = admitted.filter((a) => a > t - SETUP.periodMs).length;
        const allowed = limiter.admit(0, t);
        if (allowed && inWindow >= SETUP.limit) overAdmits++;
        if (!allowed && inWindow < SETUP.limit) overRefusals++;
        if (allowed) {
          admitted.push(t);
          maxInWindow = Math.max(maxInWindow, inWindow + 1);
        }
      }
      expect(measured, algorithm.id).toMatchObject({
        admitted: admitted.length,
        maxInWindow,
        overAdmits,
        overRefusals,
      });
      expect(measured.admittedMs).toEqual(admitted);
    }
  });
});
