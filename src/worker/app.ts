/**
 * @module
 * The Worker: rate-limits every request with the rules in wrangler.toml,
 * then proxies the allowed ones to the origin. The admin API, when on,
 * answers under its prefix before any rule is applied.
 *
 * A request the isolate refuses at once (a refusal it knows of: what every
 * request of a client over its limit meets) is answered before the Hono app
 * runs, with the same response the app would give; every other request goes
 * through the app, with the decision made for it.
 */
import { Hono } from "hono";
import { settingsFromEnv } from "../config/memo.ts";
import { type Origin, parseOrigin } from "../config/origin.ts";
import { getOrCreate } from "../core/maps.ts";
import { pathAsWritten, type RequestPath } from "../core/paths.ts";
import { invalidConfigResponse } from "../http/problem.ts";
import { forward } from "../http/proxy.ts";
import { decide } from "../isolate/decide.ts";
import { defaultIsolate } from "../isolate/isolate.ts";
import { logEvent } from "../observe/log.ts";
import { adminApi, adminPath, adminPrefix, isUnder } from "./admin/api.ts";
import type { Env } from "./env.ts";
import { type Decided, inBackground, rateLimitWith } from "./middleware.ts";

const origins = new Map<string, ReturnType<typeof parseOrigin>>();

const originOf = (env: Env) => getOrCreate(origins, env.ORIGIN_URL ?? "", () => parseOrigin(env.ORIGIN_URL));

/** Decisions made before the Hono app ran, for its `rateLimit()` to take (see {@link decideFirst}). */
const decisions = new WeakMap<Request, Decided>();

const hono = new Hono<{ Bindings: Env }>();

// First: admin requests are never counted by the user's rules, and never reach the origin.
hono.use("*", adminApi());
hono.use(
  "*",
  rateLimitWith({}, (request) => decisions.get(request)),
);

hono.all("*", (c) => {
  const origin = originOf(c.env);
  if (!origin.ok) {
    logEvent({ event: "invalid_config", errors: origin.errors }, "error");
    return invalidConfigResponse();
  }
  const settings = settingsFromEnv(c.env);
  return forward(c.req.raw, origin.value satisfies Origin, settings.ok ? settings.value.keyHeaders : undefined);
});

/** The Worker's `fetch`. */
export const app = {
  fetch(request: Request, env: Env, ctx?: ExecutionContext): Response | Promise<Response> {
    return decideFirst(request, env, ctx) ?? hono.fetch(request, env, ctx);
  },
};

/**
 * Decides a request as the app's `rateLimit()` would, where the app would
 * get to it: the refusal the isolate knows of, which is the whole answer; or
 * undefined, the decision (made, or under way) left for the app. Left to the
 * app undecided: HEAD (the app answers it with the GET's answer, bodiless),
 * the admin API's paths, and an invalid configuration, which the app
 * answers with a 500 and logs.
 */
function decideFirst(request: Request, env: Env, ctx: ExecutionContext | undefined): Response | undefined {
  const method = request.method;
  if (method === "HEAD") return undefined;
  const prefix = adminPrefix(env);
  let path: RequestPath | undefined;
  if (prefix !== null) {
    if (!prefix.ok) return undefined;
    const written = adminPath(request.url);
    if (isUnder(written, prefix.value)) return undefined;
    path = pathAsWritten(written);
  }
  const settings = settingsFromEnv(env);
  const ns = env.RATE_LIMITER;
  if (!settings.ok || !ns) return undefined;
  let outcome: ReturnType<typeof decide>;
  try {
    outcome = decide(request, {
      settings: settings.value,
      ns,
      isolate: defaultIsolate(),
      background: inBackground(() => ctx),
      stats: env.STATS,
      analytics: env.ANALYTICS,
      path,
      method,
    });
  } catch (error) {
    // Thrown where the app's rateLimit() would have thrown it, so the app answers as it always has.
    decisions.set(request, () => {
      throw error;
    });
    return undefined;
  }
  if (!(outcome instanceof Promise) && outcome.kind === "refuse") return outcome.response;
  decisions.set(request, () => outcome);
  return undefined;
}
