/**
 * @module
 * `count` when the client hangs up: the origin never answered it, so it
 * counts as failed. Over real sockets, because only a real TCP reset makes
 * workerd cancel the request, the way a client that goes away does.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { outcomeOf } from "./support/driver.ts";
import { type Edge, startEdge } from "./support/harness.ts";

const FAILED: RuleInput = { id: "count-failed", path: "/*", limit: 2, period: "1h", key: ["ip"], count: "failed" };

let edge: Edge;

beforeAll(async () => {
  edge = await startEdge({ rules: [FAILED], isolates: 1 });
  expect(outcomeOf(await edge.driver().send(0, "10.9.0.1").done)).toBe(200);
});

afterAll(async () => {
  await edge?.stop();
});

describe('count = "failed" when the client hangs up', () => {
  it("counts a request whose client hung up before the origin answered, and never one that succeeded", async () => {
    const driver = edge.driver();
    const ip = "10.9.0.2";
    // Successes never count: five in a row, and the client still has both of its failures.
    for (let i = 0; i < 5; i++) expect(outcomeOf(await driver.send(0, ip).done)).toBe(200);
    // Two requests to a slow answer, each abandoned (a TCP reset) after 100 ms: the origin never answered them.
    for (let i = 0; i < 2; i++) {
      const gone = await driver.send(0, ip, { path: "/slow/1000", abortAfterMs: 100 }).done;
      expect(outcomeOf(gone)).toBe("aborted");
    }
    // Both counted as failed: the limit of 2 is spent.
    expect(outcomeOf(await driver.send(0, ip).done)).toBe(429);
  });
});
