/**
 * @module
 * Verified bearer tokens: where the token is read from, what it must say,
 * and the keys it is verified with. From the variables `JWT` (a table),
 * `JWT_JWKS` (a secret holding a JSON Web Key Set) and `JWT_JWKS_URL`.
 *
 * ```toml
 * JWT_JWKS_URL = "https://auth.example.com/.well-known/jwks.json"
 * [vars.JWT]
 * issuer = "https://auth.example.com/"
 * audience = "api"
 * tier_claim = "plan"
 * ```
 */
import { parseDurationMs } from "../core/duration.ts";
import { all, fail, mapAll, ok, type Result } from "../core/result.ts";
import { CLAIM_PATH, isClaim, type Rule } from "../core/rules.ts";
import { show } from "../core/show.ts";

/** The signature algorithms a token may use. `none` is never one. */
export const JWT_ALGORITHMS = ["RS256", "ES256", "EdDSA", "HS256"] as const;
export type JwtAlgorithm = (typeof JWT_ALGORITHMS)[number];

/** Where the keys come from. */
export type KeySource =
  /** `JWT_JWKS`: the keys themselves. */
  | { kind: "inline"; jwks: { keys: JsonWebKey[] } }
  /** `JWT_JWKS_URL`: fetched once per isolate, kept `ttlMs`, then refreshed in the background. */
  | { kind: "url"; url: string; ttlMs: number };

export type JwtSettings = {
  /** The lower-case header the token is read from; `authorization` takes `Bearer <token>`. */
  header: string;
  /** A cookie the token is read from when the header has none; null for none. */
  cookie: string | null;
  /** The `iss` a token must have, one of these; absent to accept any. */
  issuer?: string[];
  /** An `aud` a token must have, one of these; absent to accept any. */
  audience?: string[];
  /** How far `exp` and `nbf` may be off from the isolate's clock, in milliseconds. */
  clockSkewMs: number;
  algorithms: JwtAlgorithm[];
  /** The claim (a dot path) whose value names a tier of `TIERS` for the request; null for none. */
  tierClaim: string | null;
  keys: KeySource;
};

/** The variables a token's settings are made from. */
export type JwtInput = { JWT?: unknown; JWT_JWKS?: unknown; JWT_JWKS_URL?: unknown };

export const DEFAULT_CLOCK_SKEW_MS = 30_000;
export const DEFAULT_JWKS_TTL_MS = 10 * 60_000;
/** The most keys an inline set may have. */
const MAX_KEYS = 100;
/** The fields of `[vars.JWT]` (docs/configuration.md documents each). */
export const JWT_FIELDS: readonly string[] = [
  "header",
  "cookie",
  "issuer",
  "audience",
  "clock_skew",
  "algorithms",
  "tier_claim",
  "jwks_ttl",
];
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

const isTable = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * The token settings, or null when no variable sets them. Rules that key on
 * `jwt:<claim>` need a key set: without one they are an error, not a
 * characteristic that is silently always missing.
 */
export function parseJwt(input: JwtInput, rules: Rule[]): Result<JwtSettings | null> {
  const table = jwtTable(input.JWT);
  const keys = keySource(input, table.ok ? table.value : {});
  if (!table.ok || !keys.ok) return fail(...(table.ok ? [] : table.errors), ...(keys.ok ? [] : keys.errors));
  const claimRules = rules.filter((rule) => rule.key.flat().some(isClaim)).map((rule) => rule.id);
  if (keys.value === null) {
    if (claimRules.length > 0) {
      return fail(
        `JWT_JWKS or JWT_JWKS_URL: rule${claimRules.length > 1 ? "s" : ""} ${claimRules.map((id) => `"${id}"`).join(", ")} key on a token's claims, so the keys that verify tokens must be set`,
      );
    }
    if (input.JWT !== undefined) return fail("JWT: is set, but neither JWT_JWKS nor JWT_JWKS_URL gives the keys");
    return ok(null);
  }
  return fieldsOf(table.value, keys.value);
}

function jwtTable(raw: unknown): Result<Record<string, unknown>> {
  if (raw === undefined || raw === "") return ok({});
  let value = raw;
  if (typeof raw === "string") {
    try {
      value = JSON.parse(raw);
    } catch (error) {
      return fail(`JWT: is a string but not valid JSON (${(error as Error).message})`);
    }
  }
  if (!isTable(value))
    return fail(`JWT: must be a table, such as [vars.JWT] with audience = "api"; got ${show(value)}`);
  const unknown = Object.keys(value).filter((name) => !JWT_FIELDS.includes(name));
  if (unknown.length > 0)
    return fail(`JWT: unknown field ${show(unknown[0])}; the fields are ${JWT_FIELDS.join(", ")}`);
  return ok(value);
}

function fieldsOf(table: Record<string, unknown>, keys: KeySource): Result<JwtSettings> {
  const parsed = all({
    header: name(table.header, "header", "authorization"),
    cookie: table.cookie === undefined ? ok(null) : name(table.cookie, "cookie", ""),
    issuer: strings(table.issuer, "issuer"),
    audience: strings(table.audience, "audience"),
    clockSkewMs: duration(table.clock_skew, "clock_skew", DEFAULT_CLOCK_SKEW_MS, 10 * 60_000),
    algorithms: algorithms(table.algorithms),
    tierClaim: claimPath(table.tier_claim),
    ttlMs: duration(table.jwks_ttl, "jwks_ttl", DEFAULT_JWKS_TTL_MS, 24 * 3_600_000),
  });
  if (!parsed.ok) return parsed;
  const { issuer, audience, ttlMs, header, ...rest } = parsed.value;
  return ok({
    ...rest,
    header: header.toLowerCase(),
    ...(issuer ? { issuer } : {}),
    ...(audience ? { audience } : {}),
    keys: keys.kind === "url" ? { ...keys, ttlMs } : keys,
  });
}

function name(raw: unknown, field: string, unset: string): Result<string> {
  if (raw === undefined) return ok(unset);
  return typeof raw === "string" && TOKEN.test(raw)
    ? ok(raw)
    : fail(`JWT.${field}: must be a ${field} name; got ${show(raw)}`);
}

function strings(raw: unknown, field: string): Result<string[] | undefined> {
  if (raw === undefined) return ok(undefined);
  const list = typeof raw === "string" ? [raw] : raw;
  if (!Array.isArray(list) || list.length === 0 || !list.every((s) => typeof s === "string" && s !== "")) {
    return fail(`JWT.${field}: must be a string or a non-empty list of strings; got ${show(raw)}`);
  }
  return ok(list as string[]);
}

function duration(raw: unknown, field: string, unset: number, maxMs: number): Result<number> {
  if (raw === undefined) return ok(unset);
  if (raw === 0 || (typeof raw === "string" && /^0(ms|s|m|h|d)?$/.test(raw))) return ok(0);
  const ms = parseDurationMs(raw);
  if (!ms.ok) return fail(`JWT.${field}: ${ms.errors[0]}`);
  return ms.value <= maxMs ? ms : fail(`JWT.${field}: must be at most ${maxMs / 1000} s; got ${show(raw)}`);
}

function algorithms(raw: unknown): Result<JwtAlgorithm[]> {
  if (raw === undefined) return ok([...JWT_ALGORITHMS]);
  const known = (s: unknown): s is JwtAlgorithm => JWT_ALGORITHMS.includes(s as JwtAlgorithm);
  if (!Array.isArray(raw) || raw.length === 0 || !raw.every(known)) {
    return fail(`JWT.algorithms: must be a non-empty list of ${JWT_ALGORITHMS.join(", ")}; got ${show(raw)}`);
  }
  return ok([...new Set(raw)]);
}

function claimPath(raw: unknown): Result<string | null> {
  if (raw === undefined) return ok(null);
  return typeof raw === "string" && CLAIM_PATH.test(raw)
    ? ok(raw)
    : fail(`JWT.tier_claim: must be a claim or a dot path to one, such as "plan" or "org.plan"; got ${show(raw)}`);
}

/** The key set: `JWT_JWKS` or `JWT_JWKS_URL`, never both; null for neither. */
function keySource(input: JwtInput, table: Record<string, unknown>): Result<KeySource | null> {
  const inline = input.JWT_JWKS === undefined || input.JWT_JWKS === "" ? undefined : input.JWT_JWKS;
  const url = input.JWT_JWKS_URL === undefined || input.JWT_JWKS_URL === "" ? undefined : input.JWT_JWKS_URL;
  if (inline !== undefined && url !== undefined) return fail("JWT_JWKS and JWT_JWKS_URL: set one, not both");
  if (url !== undefined) return jwksUrl(url, table);
  return inline === undefined ? ok(null) : inlineJwks(inline);
}

function jwksUrl(raw: unknown, table: Record<string, unknown>): Result<KeySource> {
  let url: URL | undefined;
  try {
    url = typeof raw === "string" ? new URL(raw) : undefined;
  } catch {
    // Reported below.
  }
  if (url === undefined || (url.protocol !== "https:" && url.protocol !== "http:")) {
    return fail(`JWT_JWKS_URL: must be an http or https URL; got ${show(raw)}`);
  }
  const ttl = table.jwks_ttl === undefined ? ok(DEFAULT_JWKS_TTL_MS) : parseDurationMs(table.jwks_ttl);
  return ok({ kind: "url", url: url.href, ttlMs: ttl.ok ? ttl.value : DEFAULT_JWKS_TTL_MS });
}

/**
 * `JWT_JWKS`: a JSON Web Key Set, as JSON or a table. It is a secret (it may
 * hold HS256 keys), so errors name the key by its index and `kid`, never
 * show its material.
 */
function inlineJwks(raw: unknown): Result<KeySource> {
  const jwks = parseKeySet(raw, "JWT_JWKS");
  return jwks.ok ? ok({ kind: "inline", jwks: jwks.value }) : jwks;
}

/**
 * A JSON Web Key Set, as JSON text or a value: `{"keys": [...]}` with 1 to
 * 100 keys of a known type. `where` names it in errors.
 */
export function parseKeySet(raw: unknown, where: string): Result<{ keys: JsonWebKey[] }> {
  let value = raw;
  if (typeof raw === "string") {
    try {
      value = JSON.parse(raw);
    } catch {
      return fail(`${where}: is not valid JSON; it must be a key set, {"keys": [...]}`);
    }
  }
  const keys = isTable(value) ? value.keys : undefined;
  if (!Array.isArray(keys) || keys.length === 0 || keys.length > MAX_KEYS) {
    return fail(`${where}: must be a key set, {"keys": [...]}, with 1 to ${MAX_KEYS} keys`);
  }
  const checked = mapAll([...keys.entries()], ([i, key]) => checkJwk(key, `${where}.keys[${i}]`));
  return checked.ok ? ok({ keys: checked.value }) : checked;
}

const KEY_TYPES = ["RSA", "EC", "OKP", "oct"];

/** A key's shape, enough to say which one is wrong; its material is checked when it is imported. */
function checkJwk(key: unknown, where: string): Result<JsonWebKey> {
  if (!isTable(key)) return fail(`${where}: must be a JSON Web Key`);
  const named = typeof key.kid === "string" ? ` (kid ${show(key.kid)})` : "";
  if (!KEY_TYPES.includes(key.kty as string)) {
    return fail(`${where}${named}: kty must be one of ${KEY_TYPES.join(", ")}; got ${show(key.kty)}`);
  }
  if (key.kty === "oct" && typeof key.k !== "string") return fail(`${where}${named}: an "oct" key needs "k"`);
  return ok(key as unknown as JsonWebKey);
}
