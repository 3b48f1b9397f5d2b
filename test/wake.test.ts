/**
 * The object's one timer (src/object/wake.ts): it fires at the instant set,
 * and never early for an instant far ahead (an override expiring in years),
 * which a runtime's timer cannot hold in one delay.
 */
import { describe, expect, it } from "vitest";
import { Wake } from "../src/object/wake.ts";

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("the object's timer", () => {
  it("fires at the instant set", async () => {
    let fired = 0;
    const wake = new Wake(() => fired++);
    wake.set(Date.now() + 50, Date.now());
    await pause(20);
    expect(fired).toBe(0);
    await pause(150);
    expect(fired).toBe(1);
  });

  it.each([
    ["100 days", 100 * 86_400_000],
    ["30 years", 30 * 365 * 86_400_000],
  ])("set %s ahead, past the longest delay a timer holds (2^31 − 1 ms), does not fire now", async (_, aheadMs) => {
    let fired = 0;
    const wake = new Wake(() => fired++);
    const nowMs = Date.now();
    wake.set(nowMs + aheadMs, nowMs);
    await pause(200);
    expect(fired).toBe(0);
    expect(wake.dueAtMs).toBe(nowMs + aheadMs);
    wake.set(null, Date.now());
  });
});
