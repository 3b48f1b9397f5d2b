/**
 * @module
 * `rateLimit()`: the limiter as Hono middleware, for the Worker in this
 * project and for your own Hono app.
 */
import type { Context, MiddlewareHandler } from "hono";
import { settingsFromEnv } from "../config/memo.ts";
import { parseSettings, type Settings, type SettingsInput } from "../config/settings.ts";
import type { Result } from "../core/result.ts";
import type { RuleInput } from "../core/rules.ts";
import { invalidConfigResponse } from "../http/problem.ts";
import { decide } from "../isolate/decide.ts";
import { defaultIsolate, type Isolate } from "../isolate/isolate.ts";
import type { LimiterNamespace } from "../object/client.ts";
import { logEvent } from "../observe/log.ts";

export type RateLimitOptions = {
  /** The rules; default: the `RULES` variable of the Worker (`[[vars.RULES]]`). */
  rules?: RuleInput | RuleInput[];
  /** Name of the Durable Object binding to the `RateLimiter` class. Default `"RATE_LIMITER"`. */
  binding?: string;
  /** Leading bits of an IPv6 address that count as one client. Default: `IPV6_PREFIX`, else 56. */
  ipv6Prefix?: number;
  /** A header your own proxy sets to the client IP. Default: `TRUSTED_IP_HEADER`, else only `CF-Connecting-IP`. */
  trustedIpHeader?: string;
  /** Milliseconds a decision may take before `on_error` applies. Default: `LIMITER_TIMEOUT_MS`, else 1000. */
  timeoutMs?: number;
  /**
   * What the isolate remembers between requests (leases, known refusals,
   * calls in flight): `createIsolate({ maxKeys, maxLeaseUnits, … })` to size
   * it, or the same value in several middlewares to share it.
   * @default one per isolate, shared by every `rateLimit()` and the admin API
   */
  isolate?: Isolate;
};

/**
 * Rate-limits requests with sliding-window counters in Durable Objects.
 * A request over a limit gets 429 and goes no further; others go on, and the
 * rate-limit headers are added to whatever answers them.
 *
 * @param [options.rules] rules to apply; default the Worker's `RULES` variable
 * @param [options.binding="RATE_LIMITER"] the Durable Object binding
 * @throws when `options` hold an invalid rule, naming the rule and field
 * @example
 * ```ts
 * app.post("/login", rateLimit({ rules: { id: "login", limit: 5, period: "1m" } }), login);
 * ```
 */
export const rateLimit = (options: RateLimitOptions = {}): MiddlewareHandler => {
  const binding = options.binding ?? "RATE_LIMITER";
  const overrides: Partial<SettingsInput> = {};
  if (options.ipv6Prefix !== undefined) overrides.IPV6_PREFIX = options.ipv6Prefix;
  if (options.trustedIpHeader !== undefined) overrides.TRUSTED_IP_HEADER = options.trustedIpHeader;
  if (options.timeoutMs !== undefined) overrides.LIMITER_TIMEOUT_MS = options.timeoutMs;

  let fixed: Result<Settings> | null = null;
  if (options.rules !== undefined) {
    const parsed = parseSettings({ ...overrides, RULES: [options.rules].flat() });
    if (!parsed.ok) throw new Error(`rateLimit(): invalid options:\n${parsed.errors.join("\n")}`);
    fixed = parsed;
  }
  const hasOverrides = Object.keys(overrides).length > 0;

  return async function rateLimitMiddleware(c, next) {
    const env = (c.env ?? {}) as Record<string, unknown>;
    const settings =
      fixed ?? settingsFromEnv(hasOverrides ? { ...(env as SettingsInput), ...overrides } : (env as SettingsInput));
    const ns = env[binding] as LimiterNamespace | undefined;
    if (!settings.ok || !ns) {
      const missing = ns
        ? []
        : [`${binding}: no Durable Object binding by this name; bind the RateLimiter class to it`];
      return invalidConfig([...(settings.ok ? [] : settings.errors), ...missing]);
    }

    const decided = decide(c.req.raw, {
      settings: settings.value,
      ns,
      isolate: options.isolate ?? defaultIsolate(),
      background: background(c),
    });
    const outcome = decided instanceof Promise ? await decided : decided;
    if (outcome.kind === "refuse") return outcome.response;
    await next();
    addHeaders(c, outcome.headers);
  };
};

function invalidConfig(errors: string[]): Response {
  logEvent({ event: "invalid_config", errors }, "error");
  return invalidConfigResponse();
}

/** Runs work after the response when the runtime allows it, and lets it run loose otherwise. */
const background =
  (c: Context) =>
  (task: Promise<unknown>): void => {
    try {
      c.executionCtx.waitUntil(task);
    } catch {
      void task;
    }
  };

function addHeaders(c: Context, headers: Record<string, string>): void {
  const entries = Object.entries(headers);
  if (entries.length === 0) return;
  try {
    for (const [name, value] of entries) c.res.headers.set(name, value);
  } catch {
    // Headers of a response straight from fetch() are immutable; copy it once.
    c.res = new Response(c.res.body, c.res);
    for (const [name, value] of entries) c.res.headers.set(name, value);
  }
}
