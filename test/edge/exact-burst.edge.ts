/**
 * @module
 * A burst exactly as large as the limit, all at once into one isolate, over
 * real sockets: every request of it is admitted, and the next is refused.
 * Concurrent calls for one key cross in flight there (one brings a lease
 * while the object refuses another, counting that lease), which one vitest
 * isolate rarely reproduces; the isolate must never refuse a request while
 * it holds units counted for it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Edge, startEdge } from "./support/harness.ts";

const LIMIT = 50;
const KEYS = Array.from({ length: 20 }, (_, i) => `10.50.0.${i + 1}`);

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({
    isolates: 2,
    rules: [{ id: "exact", path: "/*", limit: LIMIT, period: "1d", key: ["ip"] }],
  });
});
afterAll(async () => {
  await edge?.stop();
});

describe("a burst exactly as large as the limit, into one isolate", () => {
  it.each(KEYS.map((key, i) => ({ key, isolate: i % 2 })))(
    "admits all $key's 50 concurrent requests, then refuses the next",
    async ({ key, isolate }) => {
      const driver = edge.driver(30_000);
      const burst = await Promise.all(Array.from({ length: LIMIT }, () => driver.send(isolate, key).done));
      const next = await driver.send(isolate, key).done;
      expect({ admitted: burst.filter((r) => r.status === 200).length, next: next.status }).toEqual({
        admitted: LIMIT,
        next: 429,
      });
    },
  );
});
