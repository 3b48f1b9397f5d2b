/**
 * @module
 * The Worker's entry point: the proxy app and the Durable Object class.
 */
import { app } from "./app";

export { RateLimiter } from "./limiter-object";
export default app;
