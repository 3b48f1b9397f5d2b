/**
 * @module
 * Logs in the tests. Vitest shows what a test printed only when it fails
 * (`silent: "passed-only"`). An error-level line is a failure of the test
 * it was logged in, unless that test expected it: `expectErrorLogs(event)`
 * claims them, and returns them for the test to check. Reports of workerd's
 * own (an origin that is down) are claimed with `expectRuntimeReports`.
 *
 * A setup file of the workers pool (test/vitest.config.ts): it runs in every
 * test file, in the runtime, where the Worker and its objects log.
 */
import { afterEach, beforeEach, inject } from "vitest";

type Line = { text: string; claimed: boolean };
let errors: Line[] = [];

const original = console.error.bind(console);
console.error = (...args: unknown[]) => {
  errors.push({ text: args.map(String).join(" "), claimed: false });
  original(...args);
};

beforeEach(() => {
  errors = [];
});

afterEach(() => {
  const unexpected = errors.filter((line) => !line.claimed).map((line) => line.text);
  errors = [];
  if (unexpected.length > 0) {
    throw new Error(
      `${unexpected.length} error-level log line(s) this test did not expect (claim them with expectErrorLogs):\n${unexpected.join("\n")}`,
    );
  }
});

/**
 * The error-level JSON lines of `event` logged so far in this test, claimed:
 * they no longer fail it. Check how many there are, and what they say.
 */
export function expectErrorLogs(event: string): Record<string, unknown>[] {
  const found: Record<string, unknown>[] = [];
  for (const line of errors) {
    if (line.claimed) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line.text);
    } catch {
      continue;
    }
    if (typeof parsed === "object" && parsed !== null && (parsed as { event?: unknown }).event === event) {
      line.claimed = true;
      found.push(parsed as Record<string, unknown>);
    }
  }
  return found;
}

/**
 * Claims `count` reports of the runtime's own that contain `match`, waiting
 * for them (they reach the test process apart from the test's own output),
 * or all of them once no more come; returns how many it claimed.
 */
export async function expectRuntimeReports(match: string, count: number | "all"): Promise<number> {
  const url = `http://127.0.0.1:${inject("originPort")}/__runtime-reports?match=${encodeURIComponent(match)}&count=${count}`;
  return ((await (await fetch(url)).json()) as { claimed: number }).claimed;
}

/**
 * Each fetch to an origin that is down makes workerd report three things:
 * the refused connection, and the lost one, twice (the rejected promise,
 * and the exception under it), though the Worker handles the rejection.
 */
export async function expectOriginDownReports(fetches: number): Promise<void> {
  const kinds = [
    "Connection refused",
    "Uncaught (in promise); stack = Error: Network connection lost",
    "jsg.Error: Network connection lost",
  ];
  const claimed: number[] = [];
  for (const kind of kinds) claimed.push(await expectRuntimeReports(kind, fetches));
  if (claimed.some((n) => n !== fetches)) {
    throw new Error(`expected ${fetches} runtime reports of each of: ${kinds.join("; ")}; got ${claimed.join(", ")}`);
  }
}
