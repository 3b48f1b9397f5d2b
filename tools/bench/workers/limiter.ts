/**
 * @module
 * Benchmark variants (b), (c), (d), (h), (i) with overrides stored, and (j),
 * (k) with statistics on: the limiter Worker exactly as shipped, with its
 * Durable Object calls counted. One bundle for all of them; only the bindings
 * differ (STATS is bound for (j) and (k) alone).
 */
import { app } from "../../../src/worker/app.ts";
import type { Env } from "../../../src/worker/env.ts";
import { callsResponse, countingNamespace } from "./counting.ts";

export { RateLimiter } from "../../../src/object/rate-limiter.ts";
export { OverrideRegistry } from "../../../src/object/registry.ts";
export { StatsObject } from "../../../src/object/stats.ts";

let counted: Env | undefined;

export default {
  fetch(request: Request, env: Env, ctx: ExecutionContext) {
    counted ??= { ...env, RATE_LIMITER: countingNamespace(env.RATE_LIMITER) };
    return callsResponse(request) ?? app.fetch(request, counted, ctx);
  },
};
