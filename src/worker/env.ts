/**
 * @module
 * The Worker's bindings and variables, typed in one place (they are parsed
 * in config.ts).
 */

import type { VariableName } from "../config/variables.ts";
import type { RateLimiter } from "../object/rate-limiter.ts";
import type { OverrideRegistry } from "../object/registry.ts";
import type { StatsObject } from "../object/stats.ts";

export type Env = {
  /** The Durable Object namespace that holds one counter object per client key. */
  RATE_LIMITER: DurableObjectNamespace<RateLimiter>;
  /** The index of per-client overrides (one object), which the admin API writes through. Unset: no overrides API. */
  OVERRIDES?: DurableObjectNamespace<OverrideRegistry>;
  /** The statistics object (one for the deployment), which isolates send their counts to. Unset: no statistics. */
  STATS?: DurableObjectNamespace<StatsObject>;
  /** A Workers Analytics Engine dataset: one data point per rule and decision. Unset: none. */
  ANALYTICS?: AnalyticsEngineDataset;
  /** `true`: the statistics keep refused clients' keys as written (an IP, an API key) for admin readers. Default: hashes only. */
  STATS_RAW_KEYS?: string;
  /**
   * `false`: responses leave out `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`;
   * `RateLimit-Policy` and `RateLimit` stay. Default: sent (older clients read them).
   */
  LEGACY_HEADERS?: string | boolean;
  /** Named sets of per-rule limits an override can put a client in: `[vars.TIERS.pro]`, or the same as JSON. */
  TIERS?: unknown;
  /** Verified bearer tokens for `jwt:<claim>` keys and `tier_claim`: `[vars.JWT]`, or the same as JSON. */
  JWT?: unknown;
  /** Secret: the JSON Web Key Set tokens are verified with. Or set `JWT_JWKS_URL`. */
  JWT_JWKS?: string;
  /** Where the JSON Web Key Set is fetched from, once per isolate, then refreshed. */
  JWT_JWKS_URL?: string;
  /** The rules: `[[vars.RULES]]` in wrangler.toml, or the same list as a JSON string. */
  RULES?: unknown;
  /** More rules, in variables of their own (`[[vars.RULES_AUTH]]`), since Cloudflare limits each variable to 5 KB. */
  [group: `RULES_${string}`]: unknown;
  /** Where allowed requests go: scheme, host and port. Unset: forward to the request's own URL (the zone's origin). */
  ORIGIN_URL?: string;
  /**
   * Secret (`wrangler secret put ORIGIN_SECRET`): set on every request forwarded to the origin, in
   * `ORIGIN_SECRET_HEADER`, so the origin can refuse requests that did not come through the limiter.
   * A client's own value of that header is replaced. Unset: nothing is added.
   */
  ORIGIN_SECRET?: string;
  /** The header `ORIGIN_SECRET` goes in. Default `X-Origin-Secret`. */
  ORIGIN_SECRET_HEADER?: string;
  /** How many leading bits of an IPv6 address count as one client. Default 56. */
  IPV6_PREFIX?: string | number;
  /** A header your own proxy in front of Cloudflare sets to the client IP. Unset: only `CF-Connecting-IP` is trusted. */
  TRUSTED_IP_HEADER?: string;
  /** How long a decision may take before the rule's `on_error` applies, in milliseconds. Default 1000. */
  LIMITER_TIMEOUT_MS?: string | number;
  /**
   * Secret (`wrangler secret put ADMIN_TOKEN`): the bearer token of the admin API.
   * Unset or empty: the admin API is off, and its prefix is proxied like any other path.
   */
  ADMIN_TOKEN?: string;
  /** Path prefix of the admin API, such as `/ops/ratelimit`. Default `/__ratelimit`. */
  ADMIN_PREFIX?: string;
  /** Where a client reads its own limits, such as `/rate_limit` (docs/client-limits.md). Unset: the endpoint is off. */
  CLIENT_LIMITS_PATH?: string;
};

/** Every variable `Env` names is one check-config knows (src/config/variables.ts): a compile error names any that is not. */
type Bindings = "RATE_LIMITER" | "OVERRIDES" | "STATS" | "ANALYTICS";
const EVERY_VARIABLE_KNOWN: Exclude<keyof Env, Bindings | VariableName | `RULES_${string}`> extends never
  ? true
  : never = true;
const EVERY_KNOWN_VARIABLE: Exclude<VariableName, keyof Env> extends never ? true : never = true;
void EVERY_VARIABLE_KNOWN;
void EVERY_KNOWN_VARIABLE;
