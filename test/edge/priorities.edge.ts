/**
 * @module
 * An adaptive rule with priorities over 8 isolates, in front of an origin
 * that turns slow: clients each send a stream of sheddable requests and a
 * few critical ones, spread over every isolate. The controller is one
 * object for the rule, so every isolate learns the same factors: sheddable
 * requests are shed (503, temporary reduced capacity) while every critical
 * request gets through; once the origin is fast again, every isolate is
 * back at the configured limit for sheddable requests too.
 *
 * The origin here is slow on `/slow/<ms>` whatever its load, so the
 * controller goes on cutting for as long as it is: critical requests are
 * sent far under the floor, which is as low as their limit goes. Goodput
 * under a capacity is `npm run bench:origin`'s (docs/adaptive.md).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { quotaOf, type RequestRecord } from "./support/driver.ts";
import { type Edge, startEdge } from "./support/harness.ts";

const ISOLATES = 8;
const RULE = "priorities-edge";
const LIMIT = 600;
const FLOOR = 120;
const RULES: RuleInput[] = [
  {
    id: RULE,
    path: "/*",
    limit: LIMIT,
    period: "1m",
    key: ["ip"],
    adaptive: {
      latency: "100ms",
      percentile: 95,
      floor: FLOOR,
      critical: ["header:x-priority=critical"],
      sheddable: ["header:x-priority=sheddable"],
    },
  },
];
const CLIENTS = Array.from({ length: 8 }, (_, i) => `10.40.0.${i + 1}`);
const CRITICAL = { "x-priority": "critical" };
const SHEDDABLE = { "x-priority": "sheddable" };
const REDUCED = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: RULES, isolates: ISOLATES, timeoutMs: 5_000 });
});
afterAll(async () => {
  await edge?.stop();
});

describe(`an adaptive rule with priorities over ${ISOLATES} isolates`, () => {
  it("one controller: sheddable requests are shed on every isolate while every critical request gets through; back within 10 s", async () => {
    const driver = edge.driver(10_000);
    const mark = edge.workerd.mark();

    // The origin turns slow (300 ms against a 100 ms target). Every client sends a sheddable request to
    // every isolate in turn, 10 a second each (80 a second in all), and a critical one every second.
    const overload: Promise<RequestRecord>[] = [];
    const critical: Promise<RequestRecord>[] = [];
    for (let round = 0; round < 60; round++) {
      CLIENTS.forEach((client, c) => {
        overload.push(driver.send((round + c) % ISOLATES, client, { path: "/slow/300", headers: SHEDDABLE }).done);
        if (round % 10 === c % 10) {
          critical.push(driver.send((round + 3) % ISOLATES, client, { path: "/slow/300", headers: CRITICAL }).done);
        }
      });
      await sleep(100);
    }
    const sheddable = await Promise.all(overload);
    const criticals = await Promise.all(critical);
    const shed = sheddable.filter((r) => r.status === 503);
    console.log(
      `overload: sheddable ${sheddable.length} sent, ${shed.length} shed; critical ${criticals.length} sent, ${criticals.filter((r) => r.status === 200).length} through`,
    );
    expect(shed.length).toBeGreaterThan(sheddable.length / 4);
    for (const r of shed) {
      expect(r.body).toContain(REDUCED);
      expect(quotaOf(r)).toBeLessThan(LIMIT);
    }
    // Every critical request gets through (the target is 99.5 %), on every isolate.
    expect(criticals.filter((r) => r.status !== 200).map((r) => `${r.status} on ${r.isolate}`)).toEqual([]);
    expect(new Set(criticals.map((r) => r.isolate)).size).toBe(ISOLATES);
    // Nothing but 200 and the 503 of the reduction.
    expect(sheddable.filter((r) => r.status !== 200 && r.status !== 503).map((r) => `${r.status} ${r.body}`)).toEqual(
      [],
    );

    // One controller: a sheddable request from a fresh client to each isolate shows one quota, the same
    // on every isolate, round after round.
    let agreed: number | null = null;
    let previous: (number | null)[] = [];
    for (let round = 0; round < 10 && agreed === null; round++) {
      const quotas = (
        await Promise.all(
          Array.from(
            { length: ISOLATES },
            (_, i) =>
              driver.send(i, `10.40.2.${round * ISOLATES + i + 1}`, { path: `/?${round}`, headers: SHEDDABLE }).done,
          ),
        )
      ).map(quotaOf);
      console.log(`sheddable quota per isolate, round ${round}: ${quotas.join(", ")}`);
      if (new Set(quotas).size === 1 && previous.join() === quotas.join()) agreed = quotas[0]!;
      previous = quotas;
      await sleep(300);
    }
    expect(agreed).not.toBeNull();
    expect(agreed!).toBeLessThan(LIMIT);

    // The origin is fast again: light traffic of every priority from many clients over every isolate,
    // until each shows the configured limit for sheddable requests.
    const healthyAt = performance.now();
    const lastQuota = new Map<number, number | null>();
    let n = 0;
    while (performance.now() - healthyAt < 15_000) {
      // Every isolate gets a sheddable request, and one of another priority beside it.
      const round = await Promise.all(
        Array.from({ length: ISOLATES }, (_, i) => {
          const other = [CRITICAL, {}][n % 2]!;
          driver.send(i, `10.41.${n >> 8}.${n++ & 255}`, { path: "/", headers: other });
          return driver.send(i, `10.41.${n >> 8}.${n++ & 255}`, { path: "/", headers: SHEDDABLE }).done;
        }),
      );
      for (const r of round) lastQuota.set(r.isolate, quotaOf(r));
      if ([...lastQuota.values()].every((q) => q === LIMIT) && lastQuota.size === ISOLATES) break;
      await sleep(50);
    }
    const backMs = performance.now() - healthyAt;
    console.log(
      `sheddable limit back at ${LIMIT} on every isolate ${(backMs / 1000).toFixed(1)} s after the origin recovered`,
    );
    expect([...lastQuota.values()]).toEqual(Array(ISOLATES).fill(LIMIT));
    expect(backMs).toBeLessThan(10_000);
    expect(edge.failures(mark)).toEqual([]);
  });
});
