/**
 * @module
 * The simulated origin (model.ts) behind a real HTTP server in Node, on the
 * wall clock: each request is answered when the model says it finishes (a
 * 200), or at once with a 503 when its queue is full. It records what it
 * served and refused, as the origin sees it, for the figures.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { ServedRecord } from "./metrics.ts";
import { originOf, type Scenario } from "./scenario.ts";

export type OriginServer = {
  url: string;
  /** Requests served, as the origin saw them, in ms from `startMs`. */
  served: ServedRecord[];
  /** When each request it refused (queue full) arrived, in ms from `startMs`. */
  refusedAtMs: number[];
  /** Halves its capacity from now on. */
  halve: () => void;
  /** Its latency drifts up from now on, as the scenario says (capacity unchanged). */
  drift: () => void;
  /** Starts the clock the records are in (the run's start). */
  start: (startMs: number) => void;
  close: () => Promise<void>;
};

export async function startOrigin(scenario: Scenario): Promise<OriginServer> {
  const model = originOf(scenario);
  const served: ServedRecord[] = [];
  const refusedAtMs: number[] = [];
  let startMs = performance.now();
  const body = JSON.stringify({ ok: true });
  const server = createServer((req, res) => {
    req.resume();
    const nowMs = performance.now() - startMs;
    const answer = model.arrive(nowMs);
    if (answer.kind === "refused") {
      refusedAtMs.push(nowMs);
      res.writeHead(503, { "content-type": "text/plain", "retry-after": "1" });
      res.end("queue full");
      return;
    }
    served.push({ arriveMs: nowMs, finishMs: answer.finishMs });
    // The work is done whether or not the client is still there: a real origin does not notice either.
    setTimeout(
      () => {
        if (res.destroyed) return;
        res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
        res.end(body);
      },
      Math.max(0, answer.finishMs - nowMs),
    );
  });
  server.keepAliveTimeout = 60_000;
  server.maxConnections = 20_000;
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    served,
    refusedAtMs,
    halve: () => model.setCapacity(scenario.capacityPerSecond / 2),
    drift: () => model.setExtraDelay(scenario.driftExtraMs, scenario.driftJitter),
    start: (at) => {
      startMs = at;
    },
    close: () =>
      new Promise<void>((done) => {
        server.closeAllConnections();
        server.close(() => done());
      }),
  };
}
