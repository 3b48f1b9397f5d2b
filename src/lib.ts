/**
 * @module
 * The library: everything needed to run the limiter in your own Hono app.
 * The rate-limit middleware, the admin API, and the Durable Object classes
 * they use; export the classes from your Worker and bind them in
 * `wrangler.toml` (see docs/library.md).
 *
 * @example
 * ```ts
 * import { Hono } from "hono";
 * import { rateLimit, RateLimiter } from "edge-rate-limiter";
 * export { RateLimiter };
 * const app = new Hono();
 * app.post("/login", rateLimit({ rules: { id: "login", limit: 5, period: "1m" } }), (c) => c.text("ok"));
 * export default app;
 * ```
 */

export type { Duration } from "./core/duration.ts";
export type { RuleInput } from "./core/rules.ts";
export * as slidingWindow from "./core/sliding-window.ts";
export { createIsolate, type Isolate, type IsolateOptions } from "./isolate/isolate.ts";
export type { CheckResult, RuleCheck, RuleVerdict } from "./object/protocol.ts";
export { RateLimiter } from "./object/rate-limiter.ts";
export { OverrideRegistry } from "./object/registry.ts";
export { StatsObject } from "./object/stats.ts";
export { type AdminApiOptions, adminApi } from "./worker/admin/api.ts";
export {
  type ClientLimits,
  type ClientLimitsOptions,
  clientLimits,
  type PerRequestRuleLimit,
} from "./worker/client-limits.ts";
export type {
  RateLimitDecision,
  RateLimitVariables,
  RuleLimit,
} from "./worker/decision.ts";
export type { Env } from "./worker/env.ts";
export { type RateLimitOptions, type Refusal, rateLimit } from "./worker/middleware.ts";
