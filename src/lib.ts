/**
 * @module
 * The library: the Hono middleware and the Durable Object class it needs.
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
export { type RateLimitOptions, rateLimit } from "./worker/middleware.ts";
