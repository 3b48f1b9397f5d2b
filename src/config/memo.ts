/**
 * @module
 * The configuration, read once per isolate and shared by every request.
 *
 * src/config/ is the Worker's variables, validated; pure, so the offline
 * checker (tools/check-config.ts) runs the same code. This file holds the
 * folder's one cache, per isolate; the checker does not use it.
 */
import { type ConfigInput, readConfiguration } from "./configuration.ts";
import { RULE_GROUP } from "./variables.ts";

/** The variables a parse reads, besides the `RULES_<GROUP>` ones: equal values (the same objects), the same parse. */
const FIELDS = [
  "RULES",
  "TIERS",
  "JWT",
  "IPV6_PREFIX",
  "TRUSTED_IP_HEADER",
  "LIMITER_TIMEOUT_MS",
  "JWT_JWKS_URL",
  "JWT_JWKS",
  "STATS_RAW_KEYS",
  "LEGACY_HEADERS",
  "CLIENT_LIMITS_PATH",
  "ORIGIN_URL",
  "ORIGIN_SECRET",
  "ORIGIN_SECRET_HEADER",
  "ADMIN_PREFIX",
] as const satisfies readonly (keyof ConfigInput)[];
/** Every named variable a parse reads is compared: a compile error names any missing from {@link FIELDS}. */
const EVERY_FIELD: Exclude<keyof ConfigInput, (typeof FIELDS)[number] | `RULES_${string}`> extends never
  ? true
  : never = true;
void EVERY_FIELD;

/**
 * Memoises a parse per isolate. The Worker's `env` is one object for every
 * request of an isolate, so a request costs one comparison; another object
 * (a library's options merged into it) costs a comparison of the values it
 * is parsed from, and a new parse only when one of them changed: by the
 * identity of an object (a TOML table), or by the text of anything else.
 */
export function memoByInput<T>(parse: (input: ConfigInput) => T): (input: ConfigInput) => T {
  const cache: Trie<T> = trie();
  let lastInput: ConfigInput | undefined;
  let lastValues: unknown[] = [];
  let lastValue: T | undefined;
  return (input) => {
    if (input === lastInput) return lastValue as T;
    const values = valuesOf(input);
    if (lastInput === undefined || !sameValues(values, lastValues)) {
      lastValue = lookUp(cache, values, () => parse(input));
      lastValues = values;
    }
    lastInput = input;
    return lastValue as T;
  };
}

/** What a parse reads, in a fixed order: the named variables, then each rule group's name and value. */
function valuesOf(input: ConfigInput): unknown[] {
  const values: unknown[] = FIELDS.map((field) => input[field]);
  for (const name of Object.keys(input).sort()) {
    if (RULE_GROUP.test(name)) values.push(name, input[name as `RULES_${string}`]);
  }
  return values;
}

const sameValues = (a: unknown[], b: unknown[]): boolean => a.length === b.length && a.every((v, i) => v === b[i]);

/** Parses filed under the values they were made from, one level per value. */
type Trie<T> = { byObject: WeakMap<object, Trie<T>>; byText: Map<string, Trie<T>>; value?: { parsed: T } };
const trie = <T>(): Trie<T> => ({ byObject: new WeakMap(), byText: new Map() });

function lookUp<T>(root: Trie<T>, values: unknown[], make: () => T): T {
  let node = root;
  for (const value of values) node = childOf(node, value);
  node.value ??= { parsed: make() };
  return node.value.parsed;
}

function childOf<T>(node: Trie<T>, value: unknown): Trie<T> {
  if (typeof value === "object" && value !== null) {
    let child = node.byObject.get(value);
    if (child === undefined) {
      child = trie();
      node.byObject.set(value, child);
    }
    return child;
  }
  // undefined and the text "undefined" are kept apart.
  const key = value === undefined ? "\u0000" : `${typeof value}:${String(value)}`;
  let child = node.byText.get(key);
  if (child === undefined) {
    child = trie();
    node.byText.set(key, child);
  }
  return child;
}

/**
 * The Worker's configuration, read once per isolate and shared by every
 * reader, so that all of them hold the same Rule objects (the isolate's
 * caches are keyed by them: an admin reset must reach the middleware's
 * entries) and the same list of errors.
 */
export const configurationFromEnv = memoByInput(readConfiguration);
