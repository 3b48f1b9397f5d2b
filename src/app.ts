/**
 * @module
 * The Worker: rate-limits every request with the rules in wrangler.toml,
 * then proxies the allowed ones to the origin.
 */
import { Hono } from "hono";
import { getOrCreate } from "./config";
import type { Env } from "./env";
import { logEvent } from "./log";
import { rateLimit } from "./middleware";
import { invalidConfigResponse } from "./problem";
import { forward, type Origin, parseOrigin } from "./proxy";

const origins = new Map<string, ReturnType<typeof parseOrigin>>();

const originOf = (env: Env) => getOrCreate(origins, env.ORIGIN_URL ?? "", () => parseOrigin(env.ORIGIN_URL));

export const app = new Hono<{ Bindings: Env }>();

app.use("*", rateLimit());

app.all("*", (c) => {
  const origin = originOf(c.env);
  if (!origin.ok) {
    logEvent({ event: "invalid_config", errors: [origin.error] }, "error");
    return invalidConfigResponse();
  }
  return forward(c.req.raw, origin.value satisfies Origin);
});
