/**
 * @module
 * The Worker: the proxy app and the Durable Object classes its bindings
 * name. The package exports it as `edge-rate-limiter/worker`, so a project
 * of your own can deploy it as it is; the classes are the library's own.
 */
import { app } from "./worker/app.ts";

export { OverrideRegistry, RateLimiter, StatsObject } from "./lib.ts";
export default app;
