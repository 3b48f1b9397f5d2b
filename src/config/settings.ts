/**
 * @module
 * The Worker's variables, validated: the limiter's settings (once per
 * isolate), `ORIGIN_URL` and `ADMIN_PREFIX`. Pure, so the offline config
 * checker runs the same code.
 */
import { show } from "../core/duration.ts";
import { DEFAULT_IPV6_PREFIX } from "../core/ip.ts";
import { parseRules, type Rule } from "../core/rules.ts";

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
};

export const DEFAULT_TIMEOUT_MS = 1000;

/** The variables settings are made from (see `Env`); every one is optional. */
export type SettingsInput = {
  RULES?: unknown;
  IPV6_PREFIX?: string | number;
  TRUSTED_IP_HEADER?: string;
  LIMITER_TIMEOUT_MS?: string | number;
};

export type Parsed<T> = { ok: true; value: T } | { ok: false; errors: string[] };

/** The rules from `RULES`: a list, or the same list as a JSON string (a secret or `.dev.vars`). */
function rulesFrom(raw: unknown): ReturnType<typeof parseRules> {
  if (typeof raw !== "string") return parseRules(raw ?? []);
  let list: unknown;
  try {
    list = JSON.parse(raw);
  } catch (error) {
    return { ok: false, errors: [`RULES: is a string but not valid JSON (${(error as Error).message})`] };
  }
  return parseRules(list);
}

/** Validates settings, reporting every problem with the variable (and rule and field) it is in. */
export function parseSettings(input: SettingsInput): Parsed<Settings> {
  const errors: string[] = [];
  const rules = rulesFrom(input.RULES);
  if (!rules.ok) errors.push(...rules.errors);

  const ipv6PrefixBits = integerVar(input.IPV6_PREFIX, "IPV6_PREFIX", DEFAULT_IPV6_PREFIX, 1, 128, errors);
  const timeoutMs = integerVar(input.LIMITER_TIMEOUT_MS, "LIMITER_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 1, 60_000, errors);

  let trustedIpHeader: string | null = null;
  if (input.TRUSTED_IP_HEADER !== undefined && input.TRUSTED_IP_HEADER !== "") {
    if (
      typeof input.TRUSTED_IP_HEADER !== "string" ||
      !/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(input.TRUSTED_IP_HEADER)
    ) {
      errors.push(`TRUSTED_IP_HEADER: must be a header name; got ${show(input.TRUSTED_IP_HEADER)}`);
    } else trustedIpHeader = input.TRUSTED_IP_HEADER.toLowerCase();
  }

  if (errors.length > 0 || !rules.ok) return { ok: false, errors };
  const keyHeaders = new Set(
    rules.rules.flatMap((rule) => rule.key.flat().flatMap((source) => (source.kind === "header" ? [source.name] : []))),
  );
  if (trustedIpHeader !== null) keyHeaders.add(trustedIpHeader);
  return { ok: true, value: { rules: rules.rules, ipv6PrefixBits, trustedIpHeader, timeoutMs, keyHeaders } };
}

function integerVar(raw: unknown, name: string, fallback: number, min: number, max: number, errors: string[]): number {
  if (raw === undefined || raw === "") return fallback;
  const n = typeof raw === "string" ? Number(raw) : raw;
  if (typeof n !== "number" || !Number.isInteger(n) || n < min || n > max) {
    errors.push(`${name}: must be an integer from ${min} to ${max}; got ${show(raw)}`);
    return fallback;
  }
  return n;
}

/** The value stored under `key`, made and stored first if missing. */
export function getOrCreate<K, V>(map: Map<K, V>, key: K, make: () => V): V {
  let value = map.get(key);
  if (value === undefined) {
    value = make();
    map.set(key, value);
  }
  return value;
}

/**
 * Memoises a parse per isolate, keyed by the identity of the rules value (an
 * object) or its text, so a request costs a map lookup, not a parse.
 */
export function memoByInput<T>(parse: (input: SettingsInput) => T): (input: SettingsInput) => T {
  const byObject = new WeakMap<object, Map<string, T>>();
  const byText = new Map<string, Map<string, T>>();
  return (input) => {
    const rules = input.RULES;
    const rest = `${input.IPV6_PREFIX}\u0000${input.TRUSTED_IP_HEADER}\u0000${input.LIMITER_TIMEOUT_MS}`;
    let slot: Map<string, T>;
    if (typeof rules === "object" && rules !== null) {
      slot = byObject.get(rules) ?? new Map();
      byObject.set(rules, slot);
    } else {
      slot = getOrCreate(byText, String(rules), () => new Map());
    }
    return getOrCreate(slot, rest, () => parse(input));
  };
}

/**
 * The Worker's settings, parsed once per isolate and shared by every reader,
 * so that all of them hold the same Rule objects (the isolate's caches are
 * keyed by them: an admin reset must reach the middleware's entries).
 */
export const settingsFromEnv = memoByInput(parseSettings);

/** Where requests go: a base URL whose scheme, host and port replace the request's, or null to keep the request's own URL. */
export type Origin = URL | null;

/**
 * Parses `ORIGIN_URL`. Only a scheme, host and port are allowed: the path and
 * query always come from the request.
 */
export function parseOrigin(raw: string | undefined): { ok: true; value: Origin } | { ok: false; error: string } {
  if (raw === undefined || raw === "") return { ok: true, value: null };
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, error: `ORIGIN_URL: is not a URL; got ${JSON.stringify(raw)}` };
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return { ok: false, error: `ORIGIN_URL: must be http: or https:; got ${JSON.stringify(raw)}` };
  }
  if (url.pathname !== "/" || url.search !== "" || url.hash !== "" || url.username !== "") {
    return {
      ok: false,
      error: `ORIGIN_URL: must be only a scheme, host and port, such as "https://origin.example.com"; got ${JSON.stringify(raw)}`,
    };
  }
  return { ok: true, value: url };
}

export const DEFAULT_ADMIN_PREFIX = "/__ratelimit";

/**
 * Parses `ADMIN_PREFIX`: one or more path segments of unreserved characters,
 * with no trailing slash, such as `/__ratelimit` or `/ops/limits`.
 */
export function parseAdminPrefix(raw: unknown): { ok: true; prefix: string } | { ok: false; error: string } {
  if (raw === undefined || raw === "") return { ok: true, prefix: DEFAULT_ADMIN_PREFIX };
  if (typeof raw !== "string" || !/^(\/[A-Za-z0-9._~-]+)+$/.test(raw)) {
    return {
      ok: false,
      error: `ADMIN_PREFIX: must be a path such as "/__ratelimit": segments of [A-Za-z0-9._~-], no trailing slash; got ${show(raw)}`,
    };
  }
  return { ok: true, prefix: raw };
}
