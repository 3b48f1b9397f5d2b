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
import { withHeaders } from "../http/set-headers.ts";
import { type Outcome, turnedAway } from "../isolate/answers.ts";
import { decide } from "../isolate/decide.ts";
import { defaultIsolate, type Isolate } from "../isolate/isolate.ts";
import type { StatsNamespace } from "../isolate/stats.ts";
import type { AnalyticsSink } from "../isolate/tally.ts";
import type { Sink } from "../isolate/work.ts";
import { limiterNamespace } from "./binding.ts";
import { decisionOf, type RateLimitDecision, REFUSAL_HEADERS, skipped } from "./decision.ts";
import { registerKeyFunctionOverAll, registerRules } from "./library-rules.ts";

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
   * `undefined` (or an empty string) to use the rules' own keys for this
   * request.
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
export const rateLimit = <E extends HonoEnv = any>(options: RateLimitOptions<E> = {}): MiddlewareHandler<E> => {
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
    const bound = limiterNamespace(env, binding);
    if ("error" in bound) {
      reportInvalidConfig([...errors, bound.error]);
      return invalidConfigResponse();
    }
    const { ns } = bound;
    // What is invalid is left out, and the rest applies; the errors are logged, at most every 10 s.
    if (errors.length > 0) reportInvalidConfig(errors);

    const decided = decide(c.req.raw, {
      settings,
      ns,
      isolate: options.isolate ?? defaultIsolate(),
      // An empty key is none (an empty header, say): the rules' own keys count the request.
      clientKey: key === undefined ? undefined : (await key(c)) || undefined,
      stats: env.STATS as StatsNamespace | undefined,
      analytics: env.ANALYTICS as AnalyticsSink | undefined,
    });
    const sink = waitUntilOf(() => c.executionCtx);
    // At once, before the outcome: a client that hangs up while its request waits must not take this work with it.
    if (decided.pending !== undefined) sink.add(decided.pending);
    const outcome = decided instanceof Promise ? await decided : decided;
    // Before the handler (or onRefused) runs, so that it can show the client what is left.
    const decision = decisionOf(outcome);
    c.set("rateLimit", decision);
    if (outcome.kind === "refuse") {
      const { response } = outcome;
      return onRefused !== undefined && response.status === 429 ? refusedBy(onRefused, c, response) : response;
    }
    const { after } = outcome;
    if (after === undefined) {
      await next();
      if (refusedBehind(c, decision)) return refusedAfter(c, outcome, sink);
      respond(c, withHeaders(c.res, outcome.headers));
      return;
    }
    const request = c.req.raw;
    // The handler reads the body as it arrives: under adaptive rules it is timed from the body's last byte.
    const body = after.begin(request, sink);
    if (body !== undefined && body !== null) c.req.raw = new Request(request, { body, duplex: "half" } as RequestInit);
    try {
      await next();
    } catch (error) {
      after.failed();
      throw error;
    }
    if (refusedBehind(c, decision)) {
      after.refusedAfter();
      return refusedAfter(c, outcome, sink);
    }
    respond(c, after.answered(c.res));
  };
};

/**
 * Whether another `rateLimit()` behind this one refused the request: the
 * decision it left is not this one's, and not an admission.
 */
function refusedBehind(c: Context, mine: RateLimitDecision): boolean {
  const last = c.get("rateLimit");
  return last !== mine && last !== undefined && last.outcome !== "allowed" && last.outcome !== "skipped";
}

/**
 * A request this middleware admitted and another behind it refused: a
 * refused request is not counted, so what this one counted goes back. The
 * refusal keeps its own `RateLimit` (the rule that refused it is the
 * closest to its limit); this middleware's policies join its
 * `RateLimit-Policy`, which lists every rule that decided the request.
 */
function refusedAfter(c: Context, outcome: Extract<Outcome, { kind: "allow" }>, sink: Sink): void {
  turnedAway(outcome, sink);
  const ours = outcome.headers["RateLimit-Policy"];
  if (ours === undefined) return;
  const theirs = c.res.headers.get("ratelimit-policy");
  respond(c, withHeaders(c.res, { "RateLimit-Policy": theirs === null ? ours : `${theirs}, ${ours}` }));
}

/** Makes `response`, made from `c.res`, the answer. */
function respond(c: Context, response: Response): void {
  if (response === c.res) return;
  // Assigning a response to `c.res` makes Hono copy it and set every header of the old one on the copy;
  // through `undefined` first, it is taken as it is.
  c.res = undefined;
  c.res = response;
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
    registerRules(parsed.value.rules, options.key !== undefined);
    const fixed = { settings: parsed.value, errors: [] };
    return () => fixed;
  }
  if (options.key !== undefined) registerKeyFunctionOverAll();
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
  for (const name of REFUSAL_HEADERS) {
    const value = response.headers.get(name);
    if (value !== null && !custom.headers.has(name)) missing[name] = value;
  }
  return withHeaders(custom, missing);
}

/** Where a request's work past its answer goes: its execution context's `waitUntil` (see {@link inBackground}). */
export const waitUntilOf = (executionCtx: () => { waitUntil(task: Promise<unknown>): void } | undefined): Sink => ({
  add: inBackground(executionCtx),
});

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
