/**
 * @module
 * The Worker: rate-limits every request with the rules in wrangler.toml,
 * then proxies the allowed ones to the origin. The admin API, when on,
 * answers under its prefix before any rule is applied.
 */
import { Hono } from "hono";
import { settingsFromEnv } from "../config/memo.ts";
import { type Origin, parseOrigin } from "../config/origin.ts";
import { getOrCreate } from "../core/maps.ts";
import { invalidConfigResponse } from "../http/problem.ts";
import { forward } from "../http/proxy.ts";
import { logEvent } from "../observe/log.ts";
import { adminApi } from "./admin/api.ts";
import type { Env } from "./env.ts";
import { rateLimit } from "./middleware.ts";

const origins = new Map<string, ReturnType<typeof parseOrigin>>();

const originOf = (env: Env) => getOrCreate(origins, env.ORIGIN_URL ?? "", () => parseOrigin(env.ORIGIN_URL));

export const app = new Hono<{ Bindings: Env }>();

// First: admin requests are never counted by the user's rules, and never reach the origin.
app.use("*", adminApi());
app.use("*", rateLimit());

app.all("*", (c) => {
  const origin = originOf(c.env);
  if (!origin.ok) {
    logEvent({ event: "invalid_config", errors: origin.errors }, "error");
    return invalidConfigResponse();
  }
  const settings = settingsFromEnv(c.env);
  return forward(c.req.raw, origin.value satisfies Origin, settings.ok ? settings.value.keyHeaders : undefined);
});
