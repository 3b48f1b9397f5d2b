/**
 * @module
 * Benchmark variants (b), (c), (d), and (h), (i) with overrides stored: the
 * limiter Worker exactly as shipped, with its Durable Object calls counted.
 */
import { app } from "../../../src/worker/app.ts";
import type { Env } from "../../../src/worker/env.ts";
import { callsResponse, countingNamespace } from "./counting.ts";

export { RateLimiter } from "../../../src/object/rate-limiter.ts";
export { OverrideRegistry } from "../../../src/object/registry.ts";

let counted: Env | undefined;

export default {
  fetch(request: Request, env: Env, ctx: ExecutionContext) {
    counted ??= { ...env, RATE_LIMITER: countingNamespace(env.RATE_LIMITER) };
    return callsResponse(request) ?? app.fetch(request, counted, ctx);
  },
};
