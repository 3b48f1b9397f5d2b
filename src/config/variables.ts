/**
 * @module
 * Every variable and secret the Worker reads, by name: the one list that
 * `Env` (src/worker/env.ts) is checked against, that check-config tells a
 * misspelled name by, and that the configuration reference documents.
 */

/** A variable's name, whether it is a secret (set with `wrangler secret put`, never in the file), and what it is. */
export type Variable = { secret: boolean; about: string };

export const VARIABLES = {
  RULES: { secret: false, about: "the rules: `[[vars.RULES]]` tables, or the same list as JSON" },
  TIERS: { secret: false, about: "named sets of per-rule limits an override or a token can put a client in" },
  JWT: { secret: false, about: "verified bearer tokens for `jwt:<claim>` keys and `tier_claim`" },
  JWT_JWKS: { secret: true, about: "the JSON Web Key Set tokens are verified with" },
  JWT_JWKS_URL: { secret: false, about: "the URL of the JSON Web Key Set" },
  ORIGIN_URL: { secret: false, about: "where allowed requests go: scheme, host and port" },
  ORIGIN_SECRET: { secret: true, about: "set on every forwarded request, so the origin can refuse the others" },
  ORIGIN_SECRET_HEADER: { secret: false, about: "the header ORIGIN_SECRET goes in" },
  IPV6_PREFIX: { secret: false, about: "leading bits of an IPv6 address that are one client" },
  TRUSTED_IP_HEADER: { secret: false, about: "a header your own proxy in front of Cloudflare sets to the client IP" },
  LIMITER_TIMEOUT_MS: { secret: false, about: "how long a decision may take before a rule's on_error applies" },
  ADMIN_TOKEN: { secret: true, about: "the admin API's bearer token; unset, the admin API is off" },
  ADMIN_PREFIX: { secret: false, about: "the admin API's path prefix" },
  STATS_RAW_KEYS: { secret: false, about: "the statistics keep refused clients' keys as written" },
  CLIENT_LIMITS_PATH: { secret: false, about: "where a client reads its own limits; unset, the endpoint is off" },
  LEGACY_HEADERS: {
    secret: false,
    about: "false leaves out the X-RateLimit-* headers; the draft's RateLimit headers stay",
  },
} as const satisfies Record<string, Variable>;

export type VariableName = keyof typeof VARIABLES;

/** A variable that holds rules besides `RULES`: `RULES_` and a group name, such as `RULES_AUTH`. */
export const RULE_GROUP = /^RULES_[A-Za-z0-9_]+$/;

/** Whether the Worker reads a variable of this name. */
export const isVariable = (name: string): boolean => Object.hasOwn(VARIABLES, name) || RULE_GROUP.test(name);
