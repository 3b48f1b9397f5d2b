/**
 * A key's log throttle (src/isolate/log-throttle.ts), alone, on plain
 * numbers (isolate milliseconds): under attack, one line of a kind per key
 * and rule per interval, with the count of those held back since.
 */
import { describe, expect, it } from "vitest";
import { type LogLine, LogThrottle } from "../src/isolate/log-throttle.ts";

const EVERY_MS = 10_000;

describe("a key's log lines, throttled", () => {
  it("lets the first line out, holds back the rest for the interval, then lets one out with their count", () => {
    const lines = new LogThrottle<string>();
    const notes = [0, 1, 2_000, 9_999, 10_000, 10_001, 25_000].map((atMs) =>
      lines.note("refusal", "api", atMs, EVERY_MS),
    );
    expect(notes).toEqual([{ repeats: 0 }, null, null, null, { repeats: 3 }, null, { repeats: 1 }]);
  });

  it.each([
    ["another rule", "refusal", "other"],
    ["another kind of line", "cost", "api"],
  ] as const)("throttles %s apart", (_, line: LogLine, rule) => {
    const lines = new LogThrottle<string>();
    expect(lines.note("refusal", "api", 0, EVERY_MS)).toEqual({ repeats: 0 });
    expect(lines.note(line, rule, 1, EVERY_MS)).toEqual({ repeats: 0 });
    expect(lines.note(line, rule, 2, EVERY_MS)).toBeNull();
    expect(lines.note("refusal", "api", 3, EVERY_MS)).toBeNull();
  });

  it("lets every line out with an interval of 0", () => {
    const lines = new LogThrottle<string>();
    expect([0, 0, 1].map((atMs) => lines.note("cost", "api", atMs, 0))).toEqual([
      { repeats: 0 },
      { repeats: 0 },
      { repeats: 0 },
    ]);
  });
});
