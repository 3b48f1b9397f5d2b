/**
 * @module
 * The Worker's entry point: the proxy app and the Durable Object class.
 */
import { app } from "./worker/app.ts";

export { RateLimiter } from "./object/rate-limiter.ts";
export { OverrideRegistry } from "./object/registry.ts";
export { StatsObject } from "./object/stats.ts";
export default app;
