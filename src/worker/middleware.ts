/**
 * @module
 * `rateLimit()`: the limiter as Hono middleware, for the Worker in this
 * project and for your own Hono app.
 */
import type { Context, Env as HonoEnv, MiddlewareHandler } from "hono";
import type { ConfigInput } from "../config/configuration.ts";
import { configurationFromEnv } from "../config/memo.ts";
import { parseSettings, type Settings, type SettingsInput } from "../config/settings.ts";
import type { RuleInput } from "../core/rules.ts";
import { invalidConfigResponse, reportInvalidConfig } from "../http/problem.ts";
import { type Ending, untilSent } from "../http/until-sent.ts";
import type { HealthWatch } from "../isolate/adaptive.ts";
import { decide, type Outcome } from "../isolate/decide.ts";
import type { InFlight } from "../isolate/effects.ts";
import { defaultIsolate, type Isolate } from "../isolate/isolate.ts";
import type { StatsNamespace } from "../isolate/stats.ts";
import type { AnalyticsSink } from "../isolate/tally.ts";
import type { LimiterNamespace } from "../object/client.ts";
import { decisionOf, type RateLimitDecision, skipped } from "./decision.ts";
import { registerRules } from "./library-rules.ts";

declare module "hono" {
  /** `c.get("rateLimit")`: what `rateLimit()` decided for the request, typed in every handler. */
  interface ContextVariableMap {
    rateLimit: RateLimitDecision;
  }
}

/** What `onRefused` is given: the limiter's own 429, and the wait it names. */
export type Refusal = {
  /** The 429 the limiter would send: problem+json, `Retry-After` and the `RateLimit` headers. */
  response: Response;
  /** Whole seconds until a request is admitted again, as `Retry-After` says. */
  retryAfterSeconds: number;
};

/**
 * Options of {@link rateLimit}. `E` is your app's Hono environment, so the
 * hooks see your bindings and variables typed.
 */
// biome-ignore lint/suspicious/noExplicitAny: Hono's own default for an app's environment
export type RateLimitOptions<E extends HonoEnv = any> = {
  /**
   * The rules. Each is checked against every request this middleware sees.
   * @default the Worker's `RULES` variable (`[[vars.RULES]]` in wrangler.toml)
   */
  rules?: RuleInput | RuleInput[];
  /**
   * Name of the Durable Object binding to the `RateLimiter` class.
   * @default "RATE_LIMITER"
   */
  binding?: string;
  /**
   * Leading bits of an IPv6 address that count as one client.
   * @default the `IPV6_PREFIX` variable, else 56
   */
  ipv6Prefix?: number;
  /**
   * A header your own proxy sets to the client IP.
   * @default the `TRUSTED_IP_HEADER` variable, else none: only `CF-Connecting-IP` is trusted
   */
  trustedIpHeader?: string;
  /**
   * Milliseconds a decision may take before each rule's `on_error` applies.
   * @default the `LIMITER_TIMEOUT_MS` variable, else 1000
   */
  timeoutMs?: number;
  /**
   * Whether responses carry `X-RateLimit-Limit`, `X-RateLimit-Remaining`
   * and `X-RateLimit-Reset` besides `RateLimit-Policy` and `RateLimit`, as
   * express-rate-limit's `legacyHeaders`.
   * @default the `LEGACY_HEADERS` variable, else true
   */
  legacyHeaders?: boolean;
  /**
   * What the isolate remembers between requests (leases, known refusals,
   * calls in flight): `createIsolate({ maxKeys, maxLeaseUnits, … })` to size
   * it, or the same value in several middlewares to share it.
   * @default one per isolate, shared by every `rateLimit()` and the admin API
   */
  isolate?: Isolate;
  /**
   * The client key, computed from the request: a user ID your auth
   * middleware set, a tenant, an API key you looked up. Every matched rule
   * counts this key instead of the one its own `key` makes. Return
   * `undefined` to use the rules' own keys for this request.
   * @default undefined: each rule's `key` (by default the client IP)
   * @example key: (c) => c.get("userId")
   */
  key?: (c: Context<E>) => string | undefined | Promise<string | undefined>;
  /**
   * Builds the answer to a request over a limit, instead of the limiter's
   * problem+json 429. The limiter adds its `Retry-After` and `RateLimit`
   * headers to what you return, unless you set them yourself. Not called
   * for a 503 from a rule that fails closed.
   * @default undefined: the limiter's 429
   * @example onRefused: (c, { retryAfterSeconds }) => c.json({ error: "slow down", retryAfterSeconds }, 429)
   */
  onRefused?: (c: Context<E>, refusal: Refusal) => Response | Promise<Response>;
  /**
   * Returns true to let a request through without checking or counting it,
   * and without rate-limit headers.
   * @default undefined: every request is checked
   * @example skip: (c) => c.req.header("x-internal-token") === c.env.INTERNAL_TOKEN
   */
  skip?: (c: Context<E>) => boolean | Promise<boolean>;
};

/**
 * Rate-limits requests with sliding-window counters in Durable Objects.
 * A request over a limit gets 429 and goes no further; others go on, and the
 * rate-limit headers are added to whatever answers them.
 *
 * @throws when `options` hold an invalid rule, naming the rule and field
 * @example
 * ```ts
 * app.post("/login", rateLimit({ rules: { id: "login", limit: 5, period: "1m" } }), login);
 * ```
 */
// biome-ignore lint/suspicious/noExplicitAny: Hono's own default for an app's environment
export const rateLimit = <E extends HonoEnv = any>(options: RateLimitOptions<E> = {}): MiddlewareHandler<E> =>
  rateLimitWith(options, () => undefined);

/** A decision made for a request before the middleware saw it, to take instead of deciding again; it may throw. */
export type Decided = () => Outcome | Promise<Outcome>;

/**
 * {@link rateLimit}, taking the decision `decidedFor` returns for a request
 * when it returns one (the Worker decides before its Hono app runs, see
 * app.ts); otherwise deciding as `rateLimit()` does.
 */
// biome-ignore lint/suspicious/noExplicitAny: Hono's own default for an app's environment
export const rateLimitWith = <E extends HonoEnv = any>(
  options: RateLimitOptions<E>,
  decidedFor: (request: Request) => Decided | undefined,
): MiddlewareHandler<E> => {
  const binding = options.binding ?? "RATE_LIMITER";
  const settingsOf = settingsSource(options);
  const { key, onRefused, skip } = options;

  return async function rateLimitMiddleware(c, next) {
    if (skip !== undefined && (await skip(c))) {
      c.set("rateLimit", skipped());
      return next();
    }
    const env = (c.env ?? {}) as Record<string, unknown>;
    const { settings, errors } = settingsOf(env as ConfigInput);
    const ns = env[binding] as LimiterNamespace | undefined;
    if (!ns) {
      const missing = `${binding}: no Durable Object binding by this name; bind the RateLimiter class to it`;
      reportInvalidConfig([...errors, missing]);
      return invalidConfigResponse();
    }
    // What is invalid is left out, and the rest applies; the errors are logged, at most every 10 s.
    if (errors.length > 0) reportInvalidConfig(errors);

    const early = decidedFor(c.req.raw);
    const decided =
      early !== undefined
        ? early()
        : decide(c.req.raw, {
            settings,
            ns,
            isolate: options.isolate ?? defaultIsolate(),
            background: inBackground(() => c.executionCtx),
            clientKey: key === undefined ? undefined : await key(c),
            stats: env.STATS as StatsNamespace | undefined,
            analytics: env.ANALYTICS as AnalyticsSink | undefined,
          });
    const outcome = decided instanceof Promise ? await decided : decided;
    // Before the handler (or onRefused) runs, so that it can show the client what is left.
    c.set("rateLimit", decisionOf(outcome));
    if (outcome.kind === "refuse") {
      const { response } = outcome;
      return onRefused !== undefined && response.status === 429 ? refusedBy(onRefused, c, response) : response;
    }
    const request = c.req.raw;
    if (outcome.inFlight !== undefined) endOnHangUp(request, outcome);
    const { health } = outcome;
    if (health !== undefined) {
      watchHealth(request, health);
      // The handler reads the body as it arrives: it is timed from the body's last byte, not the client's upload.
      const body = health.body(request);
      if (body !== null) c.req.raw = new Request(request, { body, duplex: "half" } as RequestInit);
    }
    try {
      await next();
    } catch (error) {
      if (health !== undefined && (health.broke || request.signal?.aborted)) health.gone();
      else health?.answered(0);
      outcome.inFlight?.end("origin failed");
      throw error;
    }
    if (health !== undefined) {
      if (health.broke || request.signal?.aborted) health.gone();
      else health.answered(c.res.status);
    }
    const response = admitted(c.res, outcome);
    if (response === c.res) return;
    // Assigning a response to `c.res` makes Hono copy it and set every header of the old one on the copy;
    // through `undefined` first, it is taken as it is.
    c.res = undefined;
    c.res = response;
  };
};

/**
 * The response to an admitted request, as its decision finishes it: the
 * rate-limit headers added, and, when a rule counts only some responses,
 * what the response's status settles (given back, or charged) and the
 * headers that settling strips. In place when the response's headers are
 * mutable, as the proxy's are; otherwise copied once.
 */
export function admitted(
  response: Response,
  outcome: Extract<Outcome, { kind: "allow" }>,
  origin?: AbortController,
): Response {
  const finished = finish(response, outcome);
  const { inFlight } = outcome;
  if (inFlight === undefined) return finished;
  // Its places are held until the response has ended: its body sent, the client gone, the origin failed mid-body.
  answering.add(inFlight);
  const ended = (how: Ending) => inFlight.end(how === "sent" ? "sent" : how === "closed" ? "closed" : "hung up");
  return untilSent(finished, ended, origin && (() => origin.abort()));
}

/** Requests in flight whose response is on its way: its end ends them, a hang-up included (see {@link endOnHangUp}). */
const answering = new WeakSet<InFlight>();

function finish(response: Response, outcome: Extract<Outcome, { kind: "allow" }>): Response {
  if (outcome.afterResponse === undefined) return withHeaders(response, outcome.headers);
  const changes = outcome.afterResponse({ status: response.status, headers: response.headers });
  const stripped = changes.strip.some((name) => response.headers.has(name))
    ? withoutHeaders(response, changes.strip)
    : response;
  return withHeaders(stripped, changes.headers);
}

/**
 * Ends an admitted request that holds places when its client hangs up
 * before its response has ended (with `enable_request_signal`), so that
 * its places go back at once; its response's end ends it otherwise.
 * `origin`, the forwarded request's own: aborted first, so that the origin
 * sees the request go before another may take its place.
 */
export function endOnHangUp(
  request: Request,
  outcome: Extract<Outcome, { kind: "allow" }>,
  origin?: AbortController,
): void {
  const { inFlight } = outcome;
  const signal = request.signal as AbortSignal | undefined;
  if (inFlight === undefined || signal === undefined) return;
  // Once its response is on its way, the response's end says when the client went, after the origin's body
  // was cancelled: a place freed before would let another request reach the origin while this one is open
  // there. A WebSocket handshake is a request like any other until it is upgraded; then the socket's close ends it.
  const hungUp = () => {
    if (answering.has(inFlight)) return;
    origin?.abort(); // the origin sees the request go before its places do
    inFlight.end("hung up");
  };
  if (signal.aborted) hungUp();
  else signal.addEventListener("abort", hungUp, { once: true });
}

/**
 * Tells a request's adaptive rules when its client hangs up before the
 * origin's headers arrive (with `enable_request_signal`): neither a success
 * nor a failure of the origin (see {@link HealthWatch.gone}).
 */
export function watchHealth(request: Request, health: HealthWatch): void {
  const signal = request.signal as AbortSignal | undefined;
  if (signal === undefined) return;
  if (signal.aborted) health.gone();
  else signal.addEventListener("abort", () => health.gone(), { once: true });
}

/** The settings a middleware decides with, and the errors left out of them: fixed by its options, or the Worker's variables with its overrides. */
export function settingsSource<E extends HonoEnv>(
  options: RateLimitOptions<E>,
): (env: ConfigInput) => { settings: Settings; errors: readonly string[] } {
  const overrides: Partial<SettingsInput> = {};
  if (options.ipv6Prefix !== undefined) overrides.IPV6_PREFIX = options.ipv6Prefix;
  if (options.trustedIpHeader !== undefined) overrides.TRUSTED_IP_HEADER = options.trustedIpHeader;
  if (options.timeoutMs !== undefined) overrides.LIMITER_TIMEOUT_MS = options.timeoutMs;
  if (options.legacyHeaders !== undefined) overrides.LEGACY_HEADERS = options.legacyHeaders;
  if (options.rules !== undefined) {
    const parsed = parseSettings({ ...overrides, RULES: [options.rules].flat() });
    if (!parsed.ok) throw new Error(`rateLimit(): invalid options:\n${parsed.errors.join("\n")}`);
    registerRules(parsed.value.rules);
    const fixed = { settings: parsed.value, errors: [] };
    return () => fixed;
  }
  if (Object.keys(overrides).length === 0) return configurationFromEnv;
  return (env) => configurationFromEnv({ ...env, ...overrides });
}

/** The user's answer to a refusal, with the limiter's headers on it where the user set none. */
async function refusedBy<E extends HonoEnv>(
  onRefused: NonNullable<RateLimitOptions<E>["onRefused"]>,
  c: Context<E>,
  response: Response,
): Promise<Response> {
  const retryAfterSeconds = Number(response.headers.get("retry-after"));
  const custom = await onRefused(c, { response, retryAfterSeconds });
  const missing: Record<string, string> = {};
  for (const name of ["retry-after", "ratelimit", "ratelimit-policy"]) {
    const value = response.headers.get(name);
    if (value !== null && !custom.headers.has(name)) missing[name] = value;
  }
  return withHeaders(custom, missing);
}

/**
 * Runs work after the response when the runtime gives an execution context
 * (`waitUntil`), and lets it run loose otherwise. `executionCtx` may throw
 * when there is none, as Hono's does.
 */
export const inBackground =
  (executionCtx: () => { waitUntil(task: Promise<unknown>): void } | undefined) =>
  (task: Promise<unknown>): void => {
    try {
      const ctx = executionCtx();
      if (ctx !== undefined) {
        ctx.waitUntil(task);
        return;
      }
    } catch {
      // no execution context
    }
    void task;
  };

/** `response` without the headers `names`; a response straight from fetch() has immutable headers, so it is copied. */
function withoutHeaders(response: Response, names: string[]): Response {
  try {
    for (const name of names) response.headers.delete(name);
    return response;
  } catch {
    const copy = new Response(response.body, response);
    for (const name of names) copy.headers.delete(name);
    return copy;
  }
}

/** `response` with `headers` set on it; a response straight from fetch() has immutable headers, so it is copied once. */
function withHeaders(response: Response, headers: Record<string, string>): Response {
  const entries = Object.entries(headers);
  if (entries.length === 0) return response;
  try {
    for (const [name, value] of entries) setHeader(response.headers, name, value);
    return response;
  } catch {
    const copy = new Response(response.body, response);
    for (const [name, value] of entries) setHeader(copy.headers, name, value);
    return copy;
  }
}

/** Sets a header; `Server-Timing` is appended, so that the origin's own entries stay. */
function setHeader(headers: Headers, name: string, value: string): void {
  if (name === "Server-Timing") headers.append(name, value);
  else headers.set(name, value);
}
