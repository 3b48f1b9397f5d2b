/**
 * @module
 * Benchmark variant (f): the peer a Hono user would pick today,
 * hono-rate-limiter with @hono-rate-limiter/cloudflare's Durable Object
 * store, in front of the same origin.
 */
import { DurableObjectRateLimiter, DurableObjectStore } from "@hono-rate-limiter/cloudflare";
import { Hono } from "hono";
import { rateLimiter } from "hono-rate-limiter";
import { forward } from "../../../src/http/proxy.ts";
import { callsResponse, countingNamespace } from "./counting.ts";

export { DurableObjectRateLimiter };

type Env = { ORIGIN_URL: string; CACHE: DurableObjectNamespace };
const app = new Hono<{ Bindings: Env }>();
let store: DurableObjectStore<{ Bindings: Env }> | undefined;
let origin: URL | undefined;

app.use(async (c, next) => {
  const stats = callsResponse(c.req.raw);
  if (stats) return stats;
  store ??= new DurableObjectStore<{ Bindings: Env }>({ namespace: countingNamespace(c.env.CACHE) as never });
  return rateLimiter<{ Bindings: Env }>({
    windowMs: 3_600_000,
    limit: 1_000_000_000,
    standardHeaders: "draft-6",
    keyGenerator: (ctx) => ctx.req.header("cf-connecting-ip") ?? "",
    store,
  })(c, next);
});
app.all("*", (c) => {
  origin ??= new URL(c.env.ORIGIN_URL);
  return forward(c.req.raw, { origin });
});
export default app;
