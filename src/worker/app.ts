/**
 * @module
 * The Worker: rate-limits every request with the rules in wrangler.toml,
 * then proxies the allowed ones to the origin. The admin API, when on,
 * answers under its prefix before any rule is applied, and so does the
 * client-limits endpoint at its path, when set.
 *
 * Every request but those (and HEAD) is decided and forwarded without the
 * Hono app, with the same answer the app would give: its routing costs
 * every request, and what it adds here is only those two.
 */
import { Hono, type MiddlewareHandler } from "hono";
import type { Configuration } from "../config/configuration.ts";
import { configurationFromEnv } from "../config/memo.ts";
import { getOrCreate } from "../core/maps.ts";
import { pathAsWritten, type RequestPath } from "../core/paths.ts";
import { fail, ok, type Result } from "../core/result.ts";
import { invalidConfigResponse, reportInvalidConfig } from "../http/problem.ts";
import { bodyNotForwarded, type ForwardOptions, forward, type Upstream } from "../http/proxy.ts";
import { withHeaders } from "../http/set-headers.ts";
import { hasPassed, loopDetected } from "../http/upstream.ts";
import type { Outcome } from "../isolate/answers.ts";
import { decide } from "../isolate/decide.ts";
import { defaultIsolate } from "../isolate/isolate.ts";
import type { Sink } from "../isolate/work.ts";
import { adminApi, adminPath, adminPrefix, isUnder, readsUnder } from "./admin/api.ts";
import { carries, mayCarry, tokenNotForwarded } from "./admin/auth.ts";
import { clientLimitsRoute, isClientLimitsPath } from "./client-limits.ts";
import type { Env } from "./env.ts";
import { rateLimit, waitUntilOf } from "./middleware.ts";

/** Where allowed requests go, made once per isolate and per configuration (and deployment mark). */
const upstreams = new WeakMap<Configuration, Map<string | undefined, Result<Upstream>>>();
/** The last answer: the Worker's env is one object per isolate, so a request costs two comparisons. */
let lastUpstream: { env: Env; config: Configuration; upstream: Result<Upstream> } | undefined;

/**
 * Where allowed requests go; a failure, with every error of the
 * configuration, while where or how to forward is invalid.
 */
function upstreamOf(env: Env, config: Configuration): Result<Upstream> {
  if (lastUpstream?.env === env && lastUpstream.config === config) return lastUpstream.upstream;
  const mark = markOf(env);
  const { forwarding, settings } = config;
  const upstream = getOrCreate(
    getOrCreate(upstreams, config, () => new Map()),
    mark,
    () => (forwarding.ok ? ok({ ...forwarding.value, keyHeaders: settings.keyHeaders, mark }) : fail(...config.errors)),
  );
  lastUpstream = { env, config, upstream };
  return upstream;
}

let lastMark: { ns: object; mark: string } | undefined;

/**
 * This deployment's mark, the same in every isolate and on every deploy, and
 * another in every other deployment: 64 bits of the id its counter namespace
 * gives a fixed name (short, as every forwarded request carries it).
 * Undefined without the binding (the app then answers 500).
 */
function markOf(env: Env): string | undefined {
  const ns = env.RATE_LIMITER;
  if (!ns) return undefined;
  if (lastMark?.ns !== ns) lastMark = { ns, mark: ns.idFromName("edge-rate-limiter:hop").toString().slice(0, 16) };
  return lastMark.mark;
}

type Admission = Extract<Outcome, { kind: "allow" }>;

const hono = new Hono<{ Bindings: Env }>();

/**
 * Refuses, before any rule counts it, a request the admin API did not take
 * that carries its token: whatever path it names, the origin never gets the token.
 */
const adminTokenKept = (): MiddlewareHandler<{ Bindings: Env }> =>
  async function adminTokenKeptMiddleware(c, next) {
    const prefix = adminPrefix(c.env);
    const token = c.env.ADMIN_TOKEN;
    // An invalid prefix: the admin API has answered every request with the token already.
    if (prefix === null || !prefix.ok || token === undefined) return next();
    const authorization = c.req.header("authorization");
    if (!mayCarry(authorization, token) || !(await carries(authorization, token))) return next();
    return tokenNotForwarded(prefix.value);
  };

// First: the client-limits endpoint (CLIENT_LIMITS_PATH, off unless set) and the admin API's requests are never
// counted by the user's rules, and never reach the origin; nor does the admin token.
hono.use("*", clientLimitsRoute());
hono.use("*", adminApi());
hono.use("*", adminTokenKept());
hono.use("*", rateLimit());

hono.all("*", (c) => forwarded(c.req.raw, upstreamOf(c.env, configurationFromEnv(c.env))));

/** The origin's answer to `request`, or the invalid configuration's 500 when there is no upstream to forward to. */
function forwarded(
  request: Request,
  upstream: Result<Upstream>,
  options?: ForwardOptions,
): Promise<Response> | Response {
  if (!upstream.ok) {
    reportInvalidConfig(upstream.errors);
    return invalidConfigResponse();
  }
  return forward(request, upstream.value, options);
}

/** The Worker's `fetch`. */
export const app = {
  fetch(request: Request, env: Env, ctx?: ExecutionContext): Response | Promise<Response> {
    // A request this deployment forwarded, back again: forwarding it once more would never end.
    const mark = markOf(env);
    if (mark !== undefined && hasPassed(request.headers, mark)) return loopDetected(request.url, Date.now());
    return bodyNotForwarded(request) ?? decideFirst(request, env, ctx) ?? hono.fetch(request, env, ctx);
  },
};

/**
 * Decides and answers a request without the Hono app, as the app would:
 * the refusal, or the origin's answer finished by the decision. Left to the
 * app (undefined): HEAD (the app answers it with the GET's answer,
 * bodiless), the admin API's paths (and those that read as its, see
 * `readsUnder`), a request that may carry its token, the client-limits endpoint's path, and
 * a Worker without its counters' binding, which the app answers with a 500
 * and logs. A decision that throws is answered as the app answers any
 * error: logged, and a plain 500. A configuration with errors is decided
 * here with what of it is valid.
 */
function decideFirst(
  request: Request,
  env: Env,
  ctx: ExecutionContext | undefined,
): Response | Promise<Response> | undefined {
  const method = request.method;
  if (method === "HEAD") return undefined;
  const prefix = adminPrefix(env);
  let path: RequestPath | undefined;
  if (prefix !== null) {
    if (!prefix.ok) return undefined;
    const written = adminPath(request.url);
    // The admin API's, however spelt, and whatever may carry its token: the app answers them.
    if (isUnder(written, prefix.value) || readsUnder(written, prefix.value)) return undefined;
    if (mayCarry(request.headers.get("authorization"), env.ADMIN_TOKEN!)) return undefined;
    path = pathAsWritten(written);
  }
  const config = configurationFromEnv(env);
  const ns = env.RATE_LIMITER;
  if (!ns) return undefined;
  // What is invalid is left out, and the rest applies; the errors are logged, at most every 10 s.
  if (config.errors.length > 0) reportInvalidConfig(config.errors);
  if (config.settings.clientLimitsPath !== null) {
    path ??= pathAsWritten(adminPath(request.url));
    if (isClientLimitsPath(path, config.settings)) return undefined;
  }
  let decided: ReturnType<typeof decide>;
  try {
    decided = decide(request, {
      settings: config.settings,
      ns,
      isolate: defaultIsolate(),
      stats: env.STATS,
      analytics: env.ANALYTICS,
      path,
      method,
    });
  } catch (error) {
    return internalError(error);
  }
  const sink = waitUntilOf(() => ctx);
  // At once, before the outcome: a client that hangs up while its request waits must not take this work with it.
  if (decided.pending !== undefined) sink.add(decided.pending);
  if (!(decided instanceof Promise)) return answer(request, decided, sink, env, config);
  return decided.then((outcome) => answer(request, outcome, sink, env, config), internalError);
}

/** The answer to a decided request: its refusal, or the origin's answer finished by its decision. */
function answer(
  request: Request,
  outcome: Outcome,
  sink: Sink,
  env: Env,
  config: Configuration,
): Response | Promise<Response> {
  if (outcome.kind === "refuse") return outcome.response;
  return answered(request, outcome, sink, upstreamOf(env, config));
}

/**
 * An admitted request forwarded, and the origin's answer finished by its
 * decision (headers, `count`, `cost_header`); a request holding places holds
 * them until its response has ended, its client hangs up, or it fails.
 * Under adaptive rules, how the origin answered (its status, and how long
 * its headers took) is told to their reporters.
 */
async function answered(
  request: Request,
  outcome: Admission,
  sink: Sink,
  upstream: Result<Upstream>,
): Promise<Response> {
  const { after } = outcome;
  try {
    if (after === undefined) return withHeaders(await forwarded(request, upstream), outcome.headers);
    // With places, the forwarded request can be cut off, so that the origin sees it go before its places do.
    const origin = after.holdsPlaces ? new AbortController() : undefined;
    const body = after.begin(request, sink, origin);
    const options: ForwardOptions | undefined =
      body === undefined && origin === undefined
        ? undefined
        : { signal: origin?.signal, body, broke: () => after.broke };
    let response: Response;
    try {
      response = await forwarded(request, upstream, options);
    } catch (error) {
      after.failed();
      throw error;
    }
    return after.answered(response);
  } catch (error) {
    return internalError(error);
  }
}

/** What the Hono app answers an error it did not expect with: logged, and a plain 500. */
function internalError(error: unknown): Response {
  console.error(error);
  return new Response("Internal Server Error", { status: 500 });
}
