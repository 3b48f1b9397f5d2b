/**
 * @module
 * Client keys: what a rule counts by, resolved from a request, made canonical
 * and hashed. The hash names the Durable Object, so a raw API key or IP never
 * appears as an object name and a huge header value costs one digest.
 */
import { matchingPath } from "./paths.ts";
import type { Characteristic, NetworkFact, Source } from "./rules.ts";

/** What a key can be made of, read from one request. Lazy where reading costs. */
export type RequestFacts = {
  method: string;
  /** The path as written, normalised (see `normalizePath`). */
  path: string;
  /**
   * The matching path for a rule's case sensitivity (see `matchingPath`),
   * worked out once per request. Absent, it is worked out from `path`.
   */
  matchingPath?: (caseSensitive: boolean) => string;
  /** Lower-case host, with the port if one was given. */
  host: () => string;
  /** The client's IP key (see `ipKey`). */
  ip: () => string;
  header: (name: string) => string | null;
  cookie: (name: string) => string | null;
  query: (name: string) => string | null;
  /** A fact of `request.cf`, as a string; null where the runtime gives none. */
  network: (fact: NetworkFact) => string | null;
  /** A claim of the request's verified bearer token (see `claimAt`); null without one. */
  claim: (path: string) => string | null;
};

export const sourceLabel = (s: Source): string => ("name" in s ? `${s.kind}:${s.name}` : s.kind);

function sourceValue(s: Source, facts: RequestFacts): string | null {
  switch (s.kind) {
    case "ip":
      return facts.ip();
    case "path":
      // The path every spelling shares, so that `/LOGIN` or `/login/` is not a fresh key.
      return facts.matchingPath?.(s.caseSensitive) ?? matchingPath(facts.path, s.caseSensitive);
    case "method":
      return facts.method;
    case "host":
      return facts.host();
    case "header":
      return facts.header(s.name);
    case "cookie":
      return facts.cookie(s.name);
    case "query":
      return facts.query(s.name);
    case "jwt":
      return facts.claim(s.name);
    default:
      return facts.network(s.kind);
  }
}

/**
 * The canonical string of a client key: for each characteristic, the first
 * source that is present (an empty value counts as absent) and its value.
 * When none is present, all requests without them share one key, so leaving
 * a header out never escapes a limit.
 */
export function canonicalKey(key: Characteristic[], facts: RequestFacts): string {
  // JSON.stringify of the parts, `[[label, value], …]`, written out directly: this runs on every request.
  let canonical = "[";
  for (let i = 0; i < key.length; i++) {
    if (i > 0) canonical += ",";
    canonical += canonicalPart(key[i]!, facts);
  }
  return `${canonical}]`;
}

/** One characteristic's part of a canonical key, as JSON: the first source present and its value, or all of them and null. */
function canonicalPart(sources: Characteristic, facts: RequestFacts): string {
  for (const source of sources) {
    const value = sourceValue(source, facts);
    if (value !== null && value !== "") return `[${quotedLabel(source)},${JSON.stringify(value)}]`;
  }
  return `[${JSON.stringify(sources.map(sourceLabel).join("|"))},null]`;
}

const quotedLabels = new WeakMap<Source, string>();

/** A source's label as a JSON string, made once per source. */
function quotedLabel(source: Source): string {
  let quoted = quotedLabels.get(source);
  if (quoted === undefined) {
    quoted = JSON.stringify(sourceLabel(source));
    quotedLabels.set(source, quoted);
  }
  return quoted;
}

/**
 * The admin API's `key=` parameters that name the client of a canonical key
 * (what `adminKey` in src/worker/admin/key.ts reads back into the same key):
 * `<label>=<value>` for each part, in its order. A part no source was present
 * for has an empty value after its label, which for a fallback is the whole
 * characteristic (`header:x-api-key|ip=`): clients with none of its sources.
 * `showValue` may shorten each value for display.
 */
export const keyParams = (canonical: string, showValue = (value: string) => value): string[] =>
  (JSON.parse(canonical) as [string, string | null][]).map(
    ([label, value]) => `${label}=${value === null ? "" : showValue(value)}`,
  );

/**
 * The canonical string of a client key the caller computed itself (the
 * `key` option of `rateLimit()`). Its one part is labelled `key()`, which no
 * source is, so it never names the same object as a key made by
 * {@link canonicalKey}.
 */
export const customCanonicalKey = (value: string): string => JSON.stringify([["key()", value]]);

const encoder = new TextEncoder();

/** SHA-256 of a canonical key, in hex: the Durable Object's name. */
export async function hashKey(canonical: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", encoder.encode(canonical));
  let hex = "";
  for (const byte of new Uint8Array(digest)) hex += byte.toString(16).padStart(2, "0");
  return hex;
}

/** A value with its percent-escapes decoded, as an origin decodes a cookie's; as it is when they are not UTF-8. */
function percentDecoded(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/** The value of cookie `name` in a `Cookie` header, unquoted and percent-decoded as an origin reads it, or null. */
export function readCookie(header: string | null, name: string): string | null {
  if (header === null) return null;
  for (const pair of header.split(";")) {
    const eq = pair.indexOf("=");
    if (eq < 0 || pair.slice(0, eq).trim() !== name) continue;
    const raw = pair.slice(eq + 1).trim();
    const value = raw.length >= 2 && raw.startsWith('"') && raw.endsWith('"') ? raw.slice(1, -1) : raw;
    return value.includes("%") ? percentDecoded(value) : value;
  }
  return null;
}
