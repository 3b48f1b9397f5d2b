/**
 * @module
 * Held requests and a kill -9, over real sockets: a client's requests held
 * until their turns (`max_delay`) die with workerd. After the restart, the
 * bookings they left are claimed by nobody, so they go within 5 s of the
 * object's restart: the client's next request waits at most that long
 * behind them (not until their turns, 15 s on), and none of them reaches
 * the origin or counts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { type Edge, startEdge } from "./support/harness.ts";

const ISOLATES = 4;
const KEY = "198.51.100.77";
/** 1 every 3 s, held up to 20 s: of 6 at once, 1 goes, and 5 are held until 3, 6, 9, 12 and 15 s on. */
const RULE = {
  id: "held-crash",
  path: "/x",
  limit: 1,
  period: "3s",
  max_delay: "20s",
  key: ["ip"],
} satisfies RuleInput;
/** The bound the docs state: a booking nobody claims goes this long after the object's restart. */
const CLAIM_WITHIN_MS = 5_000;

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: [RULE], isolates: ISOLATES });
}, 60_000);
afterAll(async () => {
  await edge?.stop();
});

describe("held requests killed with workerd (kill -9) and a restart", () => {
  it("leave bookings that go within 5 s of the restart: the next request is not held behind them, and none counts", async () => {
    const driver = edge.driver(60_000);
    const before = Array.from({ length: 6 }, (_, i) => driver.send(i % ISOLATES, KEY, { path: "/x" }));
    await new Promise((resolve) => setTimeout(resolve, 500));
    // The first went on; the other five are held, their isolates waiting for their turns.
    expect(edge.origin.arrivals().filter((a) => a.key === KEY)).toHaveLength(1);
    await edge.workerd.kill();
    const killedAtMs = Date.now();
    await edge.workerd.restart();
    const cut = await Promise.all(before.map((r) => r.done));
    const restartedAtMs = Date.now();
    const next = await driver.send(0, KEY, { path: "/x" }).done;
    const answeredInMs = Date.now() - restartedAtMs;
    const arrivals = edge.origin.arrivals().filter((a) => a.key === KEY && a.atMs > killedAtMs);
    console.log({ answeredInMs, status: next.status, before: cut.map((r) => r.status ?? r.error) });
    // One went on before the kill; the held five died with workerd, unanswered.
    expect(cut.map((r) => r.status).sort()).toEqual([200, null, null, null, null, null]);
    expect(next.status).toBe(200);
    // Held at most the claim's 5 s (and the call's way), not behind the dead bookings' turns (15 s on).
    expect(answeredInMs).toBeLessThan(CLAIM_WITHIN_MS + 2_000);
    // Only the next request reached the origin after the kill; the dead bookings count nowhere.
    expect(arrivals).toHaveLength(1);
    const status = await edge.status(RULE.id, KEY);
    expect(status.weighted).toBeLessThanOrEqual(1.01);
  });
});
