/**
 * @module
 * How the admin API shows the configuration: each rule with its fields as
 * wrangler.toml spells them, and the settings beside them.
 */
import type { JwtSettings } from "../../config/jwt.ts";
import type { Settings } from "../../config/settings.ts";
import { formatDuration } from "../../core/duration.ts";
import { kindOf } from "../../core/kinds/registry.ts";
import { writtenOf } from "../../core/overrides.ts";
import { DEFAULT_MAX_HELD, type Rule } from "../../core/rules.ts";
import { keyAsWritten } from "./key.ts";

/** What every rule has, as wrangler.toml spells it. */
type CommonView = {
  id: string;
  path: string[];
  /** Upper-case methods; null for every method. */
  methods: string[] | null;
  exclude: string[];
  case_sensitive: boolean;
  key: string[];
  action: "block" | "log";
  on_error: "open" | "closed";
  /** The rule's IP ranges as written, when it has them. */
  ips?: string[];
  exclude_ips?: string[];
  /** How long a request may be held for its turn or place, as wrangler.toml spells it, when the rule holds requests. */
  max_delay?: string;
  maxDelayMs?: number;
  /** With `max_delay`: how many of a client's requests may be held at once. */
  max_held?: number;
  /** An adaptive rule's health target as wrangler.toml spells it, when it has one. */
  adaptive?: {
    latency: string;
    percentile: number;
    errors: string;
    floor: number;
    /** Under priorities: the matchers as written, and the reserve. */
    critical?: string[];
    sheddable?: string[];
    reserve?: string;
  };
};

/**
 * A rule as the API shows it: the fields every rule has and its kind's own
 * (`limit` and `period` for a rate, `concurrency` and `place_timeout` for
 * requests in flight: see each kind's `view`), as they would be written in
 * wrangler.toml, plus durations in milliseconds.
 */
export type RuleView = CommonView & {
  id: string;
  path: string[];
  methods: string[] | null;
  exclude: string[];
  case_sensitive: boolean;
  /** The limit in a line, in its kind's words: "50 per 1d", "2 in flight at once". */
  summary: string;
  /** Whether the rule keeps each client's usage by period, with credits ({prefix}/credits): a calendar quota. */
  credits: boolean;
  [field: string]: unknown;
};

export function ruleView(rule: Rule): RuleView {
  const { key, action, on_error, ...extra } = commonView(rule);
  const own = kindOf(rule).view(rule);
  return {
    id: rule.id,
    path: rule.paths.map((glob) => glob.source),
    methods: rule.methods === null ? null : [...rule.methods],
    exclude: rule.exclude.map((glob) => glob.source),
    case_sensitive: rule.caseSensitive,
    ...own.limit,
    key,
    action,
    on_error,
    ...own.counting,
    ...extra,
    summary: own.summary,
    credits: own.credits === true,
  };
}

/** The fields every rule shows, the optional ones only when set. */
function commonView(rule: Rule): Omit<CommonView, "id" | "path" | "methods" | "exclude" | "case_sensitive"> {
  return {
    key: keyAsWritten(rule.key),
    action: rule.action,
    on_error: rule.onError,
    ...(rule.ips === undefined ? {} : { ips: rule.ips.map((range) => range.source) }),
    ...(rule.excludeIps === undefined ? {} : { exclude_ips: rule.excludeIps.map((range) => range.source) }),
    ...(rule.maxDelayMs === undefined
      ? {}
      : {
          max_delay: formatDuration(rule.maxDelayMs),
          maxDelayMs: rule.maxDelayMs,
          max_held: rule.maxHeld ?? DEFAULT_MAX_HELD,
        }),
    ...(rule.adaptive === undefined
      ? {}
      : {
          adaptive: {
            latency: formatDuration(rule.adaptive.latencyMs),
            percentile: rule.adaptive.percentile,
            errors: `${Math.round(rule.adaptive.errorShare * 1000) / 10}%`,
            floor: rule.adaptive.floor,
            ...(rule.adaptive.priorities === undefined
              ? {}
              : {
                  critical: rule.adaptive.priorities.critical.map((m) => m.source),
                  sheddable: rule.adaptive.priorities.sheddable.map((m) => m.source),
                  reserve: `${Math.round(rule.adaptive.priorities.reserve * 1000) / 10}%`,
                }),
          },
        }),
  };
}

/** The body of `GET {prefix}/rules`. */
export const settingsView = (settings: Settings) => ({
  rules: settings.rules.map(ruleView),
  ipv6Prefix: settings.ipv6PrefixBits,
  trustedIpHeader: settings.trustedIpHeader,
  timeoutMs: settings.timeoutMs,
  // Each tier's limit per rule, as a table with the fields of the rule's kind it gives too (a bucket's burst).
  tiers: Object.fromEntries(
    [...settings.tiers].map(([tier, limits]) => [
      tier,
      Object.fromEntries(
        [...limits].map(([id, limit]) => {
          const own = settings.rules.find((rule) => rule.id === id)?.tierOwn?.[tier];
          return [id, own === undefined ? limit : { limit, ...writtenOf(own) }];
        }),
      ),
    ]),
  ),
  ...(settings.jwt === null ? {} : { jwt: jwtView(settings.jwt) }),
});

/** How tokens are verified; an inline key set by its key ids only, never its material. */
const jwtView = ({ keys, ...jwt }: JwtSettings) => ({
  ...jwt,
  keys:
    keys.kind === "url"
      ? { url: keys.url, ttlMs: keys.ttlMs }
      : { inline: keys.jwks.keys.map((key) => (key as { kid?: string }).kid ?? null) },
});

/** A JSON answer no cache keeps. */
export const json = (body: unknown): Response =>
  new Response(JSON.stringify(body), {
    headers: { "Content-Type": "application/json", "Cache-Control": "no-store" },
  });
