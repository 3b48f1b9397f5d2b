/**
 * @module
 * Concurrency rules across 8 isolates over real sockets, the issue's
 * "Show": 100 concurrent streaming requests for one client key against
 * `concurrency = 3` (waiting in line up to `max_delay`), a quarter of the
 * clients hanging up mid-stream, and workerd killed (SIGKILL) and restarted
 * in the middle of the run; clients cut off by the kill try again once it
 * is back. Measured at the origin:
 * - it never has more than 3 of the key's answers open at once;
 * - after the run, every place is free (the admin API reads the object);
 * - after the kill, places held by the isolates that died come back within
 *   the rule's `place_timeout` (5 s), the bound the README states.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { randomGenerator } from "../support/random.ts";
import type { RequestRecord } from "./support/driver.ts";
import { type Edge, startEdge } from "./support/harness.ts";

const ISOLATES = 8;
const CLIENTS = 100;
const CONCURRENCY = 3;
const PLACE_TIMEOUT_MS = 5_000;
/** Each answer streams for this long: its first part at once, the last then. */
const STREAM_MS = 300;
const CUT_SHARE = 0.25;
/** When workerd is killed, from the start of the run. */
const KILL_AFTER_MS = 1_500;
const KEY = "10.70.0.1";
const RULES: RuleInput[] = [
  {
    id: "three",
    path: "/stream/*",
    concurrency: CONCURRENCY,
    max_delay: "10s",
    place_timeout: `${PLACE_TIMEOUT_MS}ms`,
    key: ["ip"],
  },
];

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: RULES, isolates: ISOLATES, timeoutMs: 5_000 });
});
afterAll(async () => {
  await edge?.stop();
});

const outcome = (r: RequestRecord) =>
  r.aborted ? "cut" : r.gaveUp ? "no answer" : r.status !== null ? String(r.status) : "cut off by the kill";

describe("100 streaming requests for one key, 3 at a time, over 8 isolates, with a kill -9 mid-run", () => {
  it("never has more than 3 open at the origin; every place is free after the run; places come back within place_timeout of the kill", async () => {
    const random = randomGenerator(51);
    const driver = edge.driver(60_000);
    let back: Promise<void> | null = null;
    let killedAtMs = 0;
    let backAtMs = 0;
    const client = async (i: number): Promise<RequestRecord[]> => {
      const cutAfterMs = random.next() < CUT_SHARE ? 50 + random.int(200) : undefined;
      const tries: RequestRecord[] = [];
      for (let attempt = 0; attempt < 4; attempt++) {
        if (back !== null) await back;
        const record = await driver.send(i % ISOLATES, KEY, { path: `/stream/${STREAM_MS}`, cutAfterMs }).done;
        tries.push(record);
        // Cut off by the kill (no answer, or an answer cut short not by this client): try again once it is back.
        const cutByKill = !record.aborted && (record.status === null || !record.body.endsWith("last\n"));
        if (!cutByKill || back === null) break;
      }
      return tries;
    };
    const started = Date.now();
    const running = Array.from({ length: CLIENTS }, (_, i) => client(i));
    await new Promise((resolve) => setTimeout(resolve, KILL_AFTER_MS));
    killedAtMs = Date.now();
    back = edge.workerd.kill().then(async () => {
      await edge.workerd.restart();
      backAtMs = Date.now();
    });
    const records = (await Promise.all(running)).flat();
    const endedAtMs = Date.now();

    // Every place free after the run: the releases went in the background, so allow them a moment.
    let places = await edge.status("three", KEY);
    for (let i = 0; i < 20 && (places.inUse !== 0 || places.waiting !== 0); i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      places = await edge.status("three", KEY);
    }
    const outcomes: Record<string, number> = {};
    for (const r of records) outcomes[outcome(r)] = (outcomes[outcome(r)] ?? 0) + 1;
    const arrivals = edge.origin.arrivals().filter((a) => a.key === KEY);
    const firstAfterKill = arrivals.find((a) => a.atMs > killedAtMs);
    const placesBackMs = firstAfterKill === undefined ? null : Math.round(firstAfterKill.atMs - killedAtMs);
    // How long before the next request reached the origin it saw a cut-off one's connection close.
    const openings = edge.origin.openings(KEY);
    const cutTags = new Set(records.filter((r) => r.aborted).map((r) => r.tag));
    const closeToNextOpenMs = openings
      .map((o, i) => ({ o, next: openings.slice(i + 1).find((n) => n.change === 1) }))
      .filter(({ o, next }) => o.change === -1 && cutTags.has(o.tag) && next !== undefined)
      .map(({ o, next }) => next!.atMs - o.atMs);
    console.log({
      outcomes,
      closeOfCutToNextOpenMs: Math.round(Math.min(...closeToNextOpenMs) * 10) / 10,
      atOrigin: arrivals.length,
      maxOpenAtOrigin: edge.origin.maxOpen(KEY),
      restartTookMs: backAtMs - killedAtMs,
      placesBackMs,
      runMs: endedAtMs - started,
      placesAfter: places,
    });

    const over = edge.origin.openings(KEY).findIndex((o) => o.open > CONCURRENCY);
    if (over >= 0) {
      const byTag = new Map(records.map((r) => [r.tag, r]));
      const around = edge.origin.openings(KEY).slice(Math.max(0, over - 8), over + 4);
      console.log(
        `more than ${CONCURRENCY} open (the kill at ${killedAtMs}):\n${around
          .map((o) => {
            const r = byTag.get(o.tag);
            return `${o.atMs.toFixed(1)} ${o.change > 0 ? "open " : "close"} ${o.open} ${o.tag} ${r ? `edge-${r.isolate} ${outcome(r)}` : ""}`;
          })
          .join("\n")}`,
      );
    }
    // At most 3 of the key's answers open at the origin at any instant, the kill and restart included.
    expect(edge.origin.maxOpen(KEY)).toBe(CONCURRENCY);
    // Every place is free after the run, and nobody waits.
    expect({ inUse: places.inUse, waiting: places.waiting }).toEqual({ inUse: 0, waiting: 0 });
    // After the kill, the places the dead isolates held came back within place_timeout (plus the restart
    // and a request's way to the origin), and not before the restart.
    expect(placesBackMs).not.toBeNull();
    expect(placesBackMs!).toBeLessThanOrEqual(PLACE_TIMEOUT_MS + 1_000);
    // No 5xx, nothing left hanging.
    expect(records.filter((r) => r.status !== null && r.status >= 500).map((r) => r.body)).toEqual([]);
    expect(outcomes["no answer"]).toBeUndefined();
    // The run did what it meant to: clients were served, cut off mid-stream, and cut off by the kill.
    expect(outcomes["200"]).toBeGreaterThan(CLIENTS / 3);
    expect(outcomes.cut).toBeGreaterThan(CLIENTS / 10);
    expect(outcomes["cut off by the kill"]).toBeGreaterThan(0);
  });
});
