/**
 * @module
 * An edge isolate of the hot-key bench: the Worker's own app, exactly as
 * src/index.ts serves it, with two additions under `/__hot/`, which never
 * reach the app:
 *
 * - every other request's arrival (the isolate's clock when it came in),
 *   status and duration are recorded by path, for the bench to replay the arrivals
 *   through one exact object and compare; `GET /__hot/log` hands them over
 *   and starts a new record;
 * - `GET /__hot/capacity?concurrency=N&ms=M&key=K` measures one object's
 *   capacity: N loops, each calling `check` on the object named K (one rule,
 *   named by `rule`,
 *   far below its limit, so every check counts and writes SQLite) and
 *   awaiting its answer before the next, for M milliseconds.
 */
import type { RuleCheck } from "../../../../src/object/protocol.ts";
import { app } from "../../../../src/worker/app.ts";
import type { Env } from "../../../../src/worker/env.ts";

/** Per path, per request, flattened: arrival (Unix ms), status, duration (ms). */
let records = new Map<string, number[]>();
let inFlight = 0;
let maxInFlight = 0;

/** The rule of the capacity loops: far below its limit, so every check admits, counts and writes. */
const capacityRule = (id: string): RuleCheck => ({
  id,
  limit: 1_000_000_000,
  periodMs: 3_600_000,
  precision: 1,
  strict: false,
  enforce: true,
});

async function capacity(env: Env, params: URLSearchParams): Promise<Response> {
  const concurrency = Number(params.get("concurrency") ?? 1);
  const ms = Number(params.get("ms") ?? 2000);
  const stub = env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(params.get("key") ?? "capacity"));
  const rules = [capacityRule(params.get("rule") ?? "capacity")];
  // One call first, so the object exists and its table is made before the clock starts.
  await stub.check(rules);
  const latencies: number[] = [];
  let errors = 0;
  const started = performance.now();
  const until = started + ms;
  const loop = async () => {
    while (performance.now() < until) {
      const sent = performance.now();
      try {
        await stub.check(rules);
        latencies.push(performance.now() - sent);
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const elapsedMs = performance.now() - started;
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
  return Response.json({ calls: latencies.length, errors, elapsedMs, p50Ms: at(0.5), p99Ms: at(0.99) });
}

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    if (request.url.includes("/__hot/")) {
      const url = new URL(request.url);
      if (url.pathname === "/__hot/capacity") return capacity(env, url.searchParams);
      if (url.pathname === "/__hot/log") {
        const body = Response.json({ records: Object.fromEntries(records), maxInFlight });
        records = new Map();
        maxInFlight = inFlight;
        return body;
      }
      return new Response("not found\n", { status: 404 });
    }
    const arrivedAtMs = Date.now();
    inFlight++;
    if (inFlight > maxInFlight) maxInFlight = inFlight;
    try {
      const response = await app.fetch(request, env, ctx);
      // By path: wrk sends every isolate the Host of the URL it was given.
      const path = request.url.slice(request.url.indexOf("/", 8));
      let record = records.get(path);
      if (!record) {
        record = [];
        records.set(path, record);
      }
      record.push(arrivedAtMs, response.status, Date.now() - arrivedAtMs);
      return response;
    } finally {
      inFlight--;
    }
  },
};
