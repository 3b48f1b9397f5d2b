/**
 * @module
 * The Worker's entry point: the proxy app and the Durable Object class.
 */
import { app } from "./app.ts";

export { RateLimiter } from "./limiter-object.ts";
export default app;
