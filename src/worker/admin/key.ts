/**
 * @module
 * How an operator names a client in the admin API (`key=` parameters), made
 * into the very canonical key that client's requests have, so it reaches the
 * same Durable Object.
 */
import { ipKey, UNKNOWN_IP } from "../../core/ip.ts";
import { canonicalKey, customCanonicalKey, type RequestFacts, sourceLabel } from "../../core/keys.ts";
import { matchingPath, normalizePath } from "../../core/paths.ts";
import { fail, ok, type Result } from "../../core/result.ts";
import type { Characteristic, Rule } from "../../core/rules.ts";
import { show } from "../../core/show.ts";
import { keyedByFunction } from "../library-rules.ts";

/** How a client that `rateLimit({ key })` names is written: `key()=` and what the function returned. */
const CUSTOM = "key()=";

export const keyAsWritten = (key: Characteristic[]): string[] =>
  key.map((sources) => sources.map(sourceLabel).join("|"));

/**
 * The canonical key a request from this client would have under `rule`,
 * from the `key` query parameters. Each is `<characteristic>=<value>`, such
 * as `ip=203.0.113.7` or `header:x-api-key=abc`, one per characteristic of
 * the rule; a rule with a single, fallback-free characteristic also takes the
 * bare value (`key=203.0.113.7`). Values are normalised as a request's are:
 * an IP through {@link ipKey} (so any address of an IPv6 prefix names it),
 * a path through {@link normalizePath} and {@link matchingPath} with the
 * rule's case sensitivity (so `/LOGIN/` names the key of `/login`); an empty
 * value is an absent one. A fallback's whole characteristic with an empty
 * value (`header:x-api-key|ip=`) names clients with none of its sources, as
 * the listing of overrides writes them (`keyParams` in core/keys.ts).
 * The string is made by {@link canonicalKey} itself, so it names the same object.
 * A client a `rateLimit({ key })` function names is `key()=<what it returned>`
 * (made by {@link customCanonicalKey}, as its requests' key is), under any rule.
 */
export function adminKey(rule: Rule, params: string[], ipv6PrefixBits: number): Result<string> {
  if (params.length === 0) return fail(`The "key" query parameter is required. ${keyUsage(rule)}`);
  const custom = params.length === 1 && params[0]!.startsWith(CUSTOM) ? params[0]!.slice(CUSTOM.length) : null;
  if (custom !== null && !keyedByFunction(rule.id)) {
    return fail(
      `${show(params[0])}: rule "${rule.id}" counts no client by a rateLimit({ key }) function here, so key()= names none of its clients. ${keyUsage(rule)}`,
    );
  }
  if (custom !== null) {
    return custom === ""
      ? fail(`"${CUSTOM}": names no client; give what your key function returned`)
      : ok(customCanonicalKey(custom));
  }
  const values = namedValues(rule, params, ipv6PrefixBits);
  if (!values.ok) return values;
  return ok(canonicalKey(rule.key, factsOf(values.value)));
}

/**
 * One `key` parameter read: the characteristic it names (its index in the
 * rule's key), the source (or, for `fallback`, the whole characteristic) and
 * the value.
 */
type Part = { index: number; label: string; value: string; fallback?: true };

/**
 * The normalised value of each source the parameters name, by the source's
 * label; one value for every characteristic of the rule, and no more.
 */
function namedValues(rule: Rule, params: string[], ipv6PrefixBits: number): Result<Map<string, string>> {
  const read = partReader(rule, params.length);
  const chosen = new Map<number, Part>();
  for (const param of params) {
    const part = read(param);
    if (part === null) return fail(`${show(param)} names no characteristic of this rule. ${keyUsage(rule)}`);
    if (chosen.has(part.index)) {
      return fail(`Two values for the characteristic "${keyAsWritten(rule.key)[part.index]}".`);
    }
    if (part.fallback && part.value !== "") {
      const sources = part.label.split("|");
      return fail(
        `${show(param)}: a value is named by the source it came from (${sources.map((s) => `${s}=…`).join(" or ")}); ${part.label}= with no value names clients with none of them.`,
      );
    }
    const value = normalise(part.label, part.value, ipv6PrefixBits, rule.caseSensitive);
    if (!value.ok) return fail(...value.errors.map((error) => `${show(param)}: ${error}`));
    chosen.set(part.index, { ...part, value: value.value });
  }
  const missing = keyAsWritten(rule.key).filter((_, index) => !chosen.has(index));
  if (missing.length > 0) return fail(`No value for ${missing.map((m) => `"${m}"`).join(", ")}. ${keyUsage(rule)}`);
  return ok(new Map([...chosen.values()].map(({ label, value }) => [label, value])));
}

/**
 * Reads one of `count` parameters for `rule`: `<label>=<value>` for any
 * source of the rule or any fallback characteristic as written, or a bare
 * value when it is the only parameter and the rule has a single source. Null
 * when it names none.
 */
function partReader(rule: Rule, count: number): (param: string) => Part | null {
  const labels: { label: string; index: number; fallback?: true }[] = rule.key.flatMap((sources, index) => [
    ...sources.map((source) => ({ label: sourceLabel(source), index })),
    ...(sources.length > 1 ? [{ label: sources.map(sourceLabel).join("|"), index, fallback: true as const }] : []),
  ]);
  // Longest first: `query:a=b` must not be read as `query:a` with the value `b=…`.
  labels.sort((x, y) => y.label.length - x.label.length);
  const sole = rule.key.length === 1 && rule.key[0]!.length === 1 ? sourceLabel(rule.key[0]![0]!) : null;
  return (param) => {
    const named = labels.find(({ label }) => namesSource(param, label));
    if (named) return { ...named, value: param.slice(named.label.length + 1) };
    return sole !== null && count === 1 ? { index: 0, label: sole, value: param } : null;
  };
}

/** A request that has exactly these sources, by label, and no others. */
function factsOf(values: Map<string, string>): RequestFacts {
  const read = (label: string): string | null => values.get(label) ?? null;
  return {
    method: read("method") ?? "",
    path: read("path") ?? "",
    host: () => read("host") ?? "",
    ip: () => read("ip") ?? "",
    header: (name) => read(`header:${name}`),
    cookie: (name) => read(`cookie:${name}`),
    query: (name) => read(`query:${name}`),
    network: (fact) => read(fact),
    claim: (path) => read(`jwt:${path}`),
  };
}

/** Whether `param` is `<label>=…`; header names are case-insensitive, as in a request. */
const namesSource = (param: string, label: string): boolean => {
  const head = param.slice(0, label.length + 1);
  return (label.startsWith("header:") ? head.toLowerCase() : head) === `${label}=`;
};

/** A value as a request's would be made, for the source `label`. */
function normalise(label: string, value: string, ipv6PrefixBits: number, caseSensitive: boolean): Result<string> {
  switch (label) {
    case "ip": {
      // `ip=` and `ip=unknown` name the key of requests that came without an IP.
      if (value === "" || value === UNKNOWN_IP) return ok(UNKNOWN_IP);
      // The form the key itself takes, `2001:db8:0:ab00::/56`, names the prefix too.
      const cidr = /^(.*)\/(\d{1,3})$/.exec(value);
      if (cidr && Number(cidr[2]) !== ipv6PrefixBits) {
        return fail(`is a /${cidr[2]} prefix, but IPv6 clients are grouped by /${ipv6PrefixBits} (IPV6_PREFIX)`);
      }
      const ip = ipKey(cidr ? cidr[1] : value, ipv6PrefixBits);
      return ip.startsWith("invalid:") ? fail("is not an IP address") : ok(ip);
    }
    case "path":
      return value === "" || value.startsWith("/")
        ? ok(matchingPath(normalizePath(value), caseSensitive))
        : fail('a path starts with "/"');
    case "method":
      // The Workers runtime upper-cases every method it accepts, not only the six the Fetch standard names.
      return ok(value.toUpperCase());
    case "host":
      return ok(value.toLowerCase());
    default:
      return ok(value);
  }
}

/** How to name a client for `rule`, for error messages. */
export function keyUsage(rule: Rule): string {
  const written = keyAsWritten(rule.key);
  const example = (label: string) => `key=${label}=${label === "ip" ? "203.0.113.7" : "…"}`;
  if (rule.key.length === 1 && rule.key[0]!.length === 1) {
    return `Rule "${rule.id}" counts by ${written[0]}: key=<value> or ${example(written[0]!)}.`;
  }
  const parts = rule.key.map((sources) => sources.map((s) => example(sourceLabel(s))).join(" or "));
  return `Rule "${rule.id}" counts by ${written.join(" and ")}: one key parameter per characteristic, naming the one the client has: ${parts.join("; ")}.`;
}
