/**
 * @module
 * Tests start clear of a minute's edge. Most tests count a fresh client to its
 * limit under a `1m` or `1h` window with one bucket (`precision = 1`), and
 * expect the request past the limit to be refused. That holds inside one
 * window. A test whose requests straddle the window's edge sees the
 * algorithm's documented behaviour instead: just after the edge the earlier
 * window's count is weighted by a share just under 1, so `limit` requests made
 * a moment before leave room for one more (`2 × 0.99999 < 2`). A CI run across
 * 19:00:00 admitted a third request under `limit = 2, period = "1h"` that way.
 *
 * Every window whose period is a whole number of minutes has its edges on
 * the minute (buckets count from the Unix epoch), so a test that starts at
 * least {@link EDGE_GUARD_MS} before the next minute, and takes less than
 * that, never straddles one. A test that would start closer waits until the
 * minute has turned. Shorter periods (`1s`, `10s`) are the tests' own to time.
 *
 * A setup file of the workers pool (test/vitest.config.ts), and of the e2e
 * and edge tiers: only `setTimeout` and `Date.now`, so it runs in both
 * runtimes.
 */
import { beforeEach } from "vitest";

/** How close to a minute's edge a test may start. Tests longer than this are few, and time themselves. */
export const EDGE_GUARD_MS = 750;

const MINUTE_MS = 60_000;

/**
 * How long a test starting at `nowMs` waits: 0 when the next minute is at
 * least `guardMs` away, otherwise until just past it (a few milliseconds
 * past, so that a clock read a little earlier elsewhere is past it too).
 */
export function waitBeforeEdge(nowMs: number, guardMs: number = EDGE_GUARD_MS): number {
  const untilEdge = MINUTE_MS - (nowMs % MINUTE_MS);
  return untilEdge < guardMs ? untilEdge + 5 : 0;
}

beforeEach(async () => {
  const wait = waitBeforeEdge(Date.now());
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
});
