/**
 * @module
 * The limiter's settings, from the variables `RULES` (and `RULES_<GROUP>`),
 * `IPV6_PREFIX`, `TRUSTED_IP_HEADER`, `LIMITER_TIMEOUT_MS`, `TIERS`, `STATS_RAW_KEYS`,
 * `LEGACY_HEADERS` and `CLIENT_LIMITS_PATH`.
 *
 * src/config/ is the Worker's variables, validated; pure, so the offline
 * checker (tools/check-config.ts) runs the same code.
 */
import { DEFAULT_IPV6_PREFIX } from "../core/ip.ts";
import { matchingPath } from "../core/paths.ts";
import { readsToken as prioritiesReadToken } from "../core/priorities.ts";
import { fail, ok, type Result } from "../core/result.ts";
import { isClaim, parseRule, parseRules, type Rule } from "../core/rules.ts";
import { show } from "../core/show.ts";
import { type JwtInput, type JwtSettings, parseJwt } from "./jwt.ts";
import { readTiers, type Tiers, tierLimitProblems, withTiers } from "./tiers.ts";
import { RULE_GROUP } from "./variables.ts";

export type Settings = {
  rules: Rule[];
  /** Leading bits of an IPv6 address that count as one client. */
  ipv6PrefixBits: number;
  /** Lower-case name of the trusted client-IP header, or null to trust only `CF-Connecting-IP`. */
  trustedIpHeader: string | null;
  /** Deadline for one decision, in milliseconds, retry included. */
  timeoutMs: number;
  /**
   * Lower-case names of the request headers the rules read a client from
   * (`header:<name>` characteristics and the trusted IP header): the proxy
   * never lets `Connection` remove them, so the origin sees what was counted.
   */
  keyHeaders: ReadonlySet<string>;
  /** `TIERS`: tier name → rule id → limit. Each rule also carries its own limits per tier. */
  tiers: Tiers;
  /** Verified bearer tokens (`JWT`, `JWT_JWKS`, `JWT_JWKS_URL`); null when none are set. */
  jwt: JwtSettings | null;
  /**
   * The rules that read the request's token: those keyed on a claim, and,
   * with a `tier_claim`, those a tier gives a limit.
   */
  tokenRules: ReadonlySet<Rule>;
  /** `STATS_RAW_KEYS`: the statistics keep refused clients' keys as written (an IP, an API key), not only hashes. */
  statsRawKeys: boolean;
  /** `LEGACY_HEADERS`: responses carry `X-RateLimit-Limit`, `-Remaining` and `-Reset` besides the draft's headers. */
  legacyHeaders: boolean;
  /**
   * `CLIENT_LIMITS_PATH`: where a client reads its own limits, as the
   * matching path of a case-insensitive rule spells it (lower case); null
   * when the endpoint is off.
   */
  clientLimitsPath: string | null;
};

export const DEFAULT_TIMEOUT_MS = 1000;

/**
 * The variables settings are made from (see `Env`); every one is optional.
 * Rules may be split across `RULES` and any number of `RULES_<GROUP>`
 * variables, since Cloudflare limits each variable to 5 KB.
 */
export type SettingsInput = {
  RULES?: unknown;
  [group: `RULES_${string}`]: unknown;
  IPV6_PREFIX?: string | number;
  TRUSTED_IP_HEADER?: string;
  LIMITER_TIMEOUT_MS?: string | number;
  TIERS?: unknown;
  STATS_RAW_KEYS?: string | boolean;
  LEGACY_HEADERS?: string | boolean;
  CLIENT_LIMITS_PATH?: string;
} & JwtInput;

/** Validates settings, reporting every problem with the variable (and rule and field) it is in. */
export function parseSettings(input: SettingsInput): Result<Settings> {
  const { settings, errors } = readSettings(input);
  return errors.length > 0 ? fail(...errors) : ok(settings);
}

/** The settings as far as they are valid, and every error in them, each naming its variable (and rule and field). */
export type ReadSettings = { settings: Settings; errors: string[] };

/**
 * Reads the settings, leaving out what is invalid, and reports every
 * problem: an invalid rule is left out (and every rule of a variable that
 * is not a list); an invalid variable is at its default; an invalid tier,
 * or a tier's invalid limit for a rule, is left out (a client in it keeps
 * the rule's own limit); with invalid token settings, there are none, and
 * the rules that key on a token's claims are left out. The errors are in
 * the order of the variables, rules first; {@link parseSettings} fails with
 * them.
 */
export function readSettings(input: SettingsInput): ReadSettings {
  const placed = rulesVars(ruleVariables(input));
  const ipv6PrefixBits = integerVar(input.IPV6_PREFIX, {
    name: "IPV6_PREFIX",
    unset: DEFAULT_IPV6_PREFIX,
    min: 1,
    max: 128,
  });
  const timeoutMs = integerVar(input.LIMITER_TIMEOUT_MS, {
    name: "LIMITER_TIMEOUT_MS",
    unset: DEFAULT_TIMEOUT_MS,
    min: 1,
    max: 60_000,
  });
  const trustedIpHeader = headerNameVar(input.TRUSTED_IP_HEADER);
  const read = readTiers(input.TIERS);
  const statsRawKeys = booleanVar(input.STATS_RAW_KEYS, "STATS_RAW_KEYS");
  const legacyHeaders = booleanVar(input.LEGACY_HEADERS, "LEGACY_HEADERS", true);
  const clientLimitsPath = clientLimitsPathVar(input.CLIENT_LIMITS_PATH);
  const tierProblems = tierLimitProblems(read.tiers, placed.rules, read.given);
  const jwt = parseJwt(
    input,
    placed.rules.map(({ rule }) => rule),
  );
  const errors = [
    ...placed.errors,
    ...[ipv6PrefixBits, timeoutMs, trustedIpHeader].flatMap(errorsOf),
    ...read.errors,
    ...[statsRawKeys, legacyHeaders, clientLimitsPath].flatMap(errorsOf),
    ...tierProblems.map(({ message }) => message),
    ...errorsOf(jwt),
  ];
  const tiers = withoutLimits(read.tiers, tierProblems);
  const token = jwt.ok ? jwt.value : null;
  // Without valid token settings, a rule keyed on a claim cannot tell its clients apart.
  const placedRules = placed.rules.map(({ rule }) => rule).filter((rule) => jwt.ok || !rule.key.flat().some(isClaim));
  const rules = withTiers(placedRules, tiers, read.given);
  const trusted = valueOr(trustedIpHeader, null);
  const headers = keyHeaders(rules, trusted);
  if (token !== null) headers.add(token.header);
  const settings: Settings = {
    rules,
    ipv6PrefixBits: valueOr(ipv6PrefixBits, DEFAULT_IPV6_PREFIX),
    trustedIpHeader: trusted,
    timeoutMs: valueOr(timeoutMs, DEFAULT_TIMEOUT_MS),
    keyHeaders: headers,
    tiers,
    jwt: token,
    tokenRules: new Set(rules.filter((rule) => readsToken(rule, token))),
    statsRawKeys: valueOr(statsRawKeys, false),
    legacyHeaders: valueOr(legacyHeaders, true),
    clientLimitsPath: valueOr(clientLimitsPath, null),
  };
  return { settings, errors };
}

const errorsOf = (result: Result<unknown>): string[] => (result.ok ? [] : result.errors);
const valueOr = <T>(result: Result<T>, otherwise: T): T => (result.ok ? result.value : otherwise);

/** `tiers` without the limits `problems` name. */
function withoutLimits(tiers: Tiers, problems: { tier: string; rule: string }[]): Tiers {
  if (problems.length === 0) return tiers;
  return new Map(
    [...tiers].map(([tier, limits]) => [
      tier,
      new Map([...limits].filter(([rule]) => !problems.some((p) => p.tier === tier && p.rule === rule))),
    ]),
  );
}

/** The variables that hold rules, with their values: `RULES` first, then each `RULES_<GROUP>` in name order. */
export function ruleVariables(input: Readonly<Record<string, unknown>>): [name: string, value: unknown][] {
  const groups = Object.keys(input)
    .filter((name) => RULE_GROUP.test(name) && input[name] !== undefined)
    .sort();
  return [["RULES", input.RULES], ...groups.map((name): [string, unknown] => [name, input[name]])];
}

/** A rule and where it is written, such as `RULES_AUTH[2]`, as errors name it. */
type PlacedRule = { rule: Rule; where: string };

/**
 * The valid rules of every rule variable, in order, and the errors of the
 * others; each variable a list, or the same list as a JSON string (a secret
 * or `.dev.vars`). Ids are unique across them: a rule whose id an earlier
 * one has is an error, and left out.
 */
function rulesVars(variables: [name: string, value: unknown][]): { rules: PlacedRule[]; errors: string[] } {
  const errors: string[] = [];
  const rules: PlacedRule[] = [];
  const seen = new Map<string, { name: string; index: number }>();
  for (const [name, raw] of variables) {
    const list = listVar(name, raw);
    if (!list.ok || !Array.isArray(list.value)) {
      // Not a list: parseRules says so.
      errors.push(...errorsOf(list.ok ? parseRules(list.value, name) : list));
      continue;
    }
    for (const [index, input] of (list.value as unknown[]).entries()) {
      const parsed = parseRule(input, `${name}[${index}]`);
      if (!parsed.ok) {
        errors.push(...parsed.errors);
        continue;
      }
      const rule = parsed.value;
      const first = seen.get(rule.id);
      if (first === undefined) {
        seen.set(rule.id, { name, index });
        rules.push({ rule, where: `${name}[${index}]` });
      } else if (first.name === name) {
        errors.push(
          `${name}[${index}] "${rule.id}": field "id": duplicates ${name}[${first.index}]; ids must be unique`,
        );
      } else {
        errors.push(
          `${name}[${index}] "${rule.id}": field "id": duplicates ${first.name}[${first.index}]; ids must be unique across RULES and RULES_*`,
        );
      }
    }
  }
  return { rules, errors };
}

/** A rule variable's list: as it is, or parsed from JSON; unset is none. */
function listVar(name: string, raw: unknown): Result<unknown> {
  if (raw === undefined) return ok([]);
  if (typeof raw !== "string") return ok(raw);
  try {
    return ok(JSON.parse(raw));
  } catch (error) {
    return fail(`${name}: is a string but not valid JSON (${(error as Error).message})`);
  }
}

/** A variable that is `true` or `false` (unset or empty: false). */
/** A boolean variable: true or false, as TOML or as text; `unset` when unset or empty. */
function booleanVar(raw: unknown, name: string, unset = false): Result<boolean> {
  if (raw === undefined || raw === "") return ok(unset);
  if (raw === false || raw === "false") return ok(false);
  if (raw === true || raw === "true") return ok(true);
  return fail(`${name}: must be true or false; got ${show(raw)}`);
}

/** An integer variable: its name, its value when unset or empty, and its bounds. */
type IntegerVar = { name: string; unset: number; min: number; max: number };

function integerVar(raw: unknown, { name, unset, min, max }: IntegerVar): Result<number> {
  if (raw === undefined || raw === "") return ok(unset);
  const n = typeof raw === "string" ? Number(raw) : raw;
  if (typeof n !== "number" || !Number.isInteger(n) || n < min || n > max) {
    return fail(`${name}: must be an integer from ${min} to ${max}; got ${show(raw)}`);
  }
  return ok(n);
}

/** `TRUSTED_IP_HEADER`, lower-cased; null when unset or empty. */
function headerNameVar(raw: unknown): Result<string | null> {
  if (raw === undefined || raw === "") return ok(null);
  if (typeof raw !== "string" || !/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(raw)) {
    return fail(`TRUSTED_IP_HEADER: must be a header name; got ${show(raw)}`);
  }
  return ok(raw.toLowerCase());
}

/** `CLIENT_LIMITS_PATH`: a path such as `/rate_limit`, as its requests' matching path reads; null when unset or empty. */
function clientLimitsPathVar(raw: unknown): Result<string | null> {
  if (raw === undefined || raw === "") return ok(null);
  if (typeof raw !== "string" || !/^(\/[A-Za-z0-9._~-]+)+$/.test(raw) || /\/\.{1,2}(\/|$)/.test(raw)) {
    return fail(
      `CLIENT_LIMITS_PATH: must be a path such as "/rate_limit": segments of [A-Za-z0-9._~-], not "." or "..", no trailing slash; got ${show(raw)}`,
    );
  }
  return ok(matchingPath(raw, false));
}

/** See {@link Settings.tokenRules}. */
const readsToken = (rule: Rule, jwt: JwtSettings | null): boolean =>
  jwt !== null &&
  (rule.key.flat().some(isClaim) ||
    (jwt.tierClaim !== null && rule.tiers !== undefined) ||
    (rule.adaptive?.priorities !== undefined && prioritiesReadToken(rule.adaptive.priorities)));

/** See {@link Settings.keyHeaders}. */
function keyHeaders(rules: Rule[], trustedIpHeader: string | null): Set<string> {
  const names = new Set(
    rules.flatMap((rule) => rule.key.flat().flatMap((source) => (source.kind === "header" ? [source.name] : []))),
  );
  if (trustedIpHeader !== null) names.add(trustedIpHeader);
  return names;
}
