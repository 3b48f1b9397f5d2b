/**
 * @module
 * The settings, parsed once per isolate and shared by every request.
 *
 * src/config/ is the Worker's variables, validated; pure, so the offline
 * checker (tools/check-config.ts) runs the same code. This file holds the
 * folder's one cache, per isolate; the checker does not use it.
 */
import { getOrCreate } from "../core/maps.ts";
import { parseSettings, type SettingsInput } from "./settings.ts";

/** The variables a parse reads: equal values (the same objects), the same parse. */
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
] as const satisfies readonly (keyof SettingsInput)[];
/** Every variable a parse reads is compared: a compile error names any missing from {@link FIELDS}. */
const EVERY_FIELD: Exclude<keyof SettingsInput, (typeof FIELDS)[number]> extends never ? true : never = true;
void EVERY_FIELD;

/**
 * Memoises a parse per isolate, keyed by the identity of the rules value (an
 * object) or its text, so a request costs a map lookup, not a parse; and
 * less than that when the variables are those of the call before, as they
 * are on every request but the first: their values are compared, not looked
 * up.
 */
export function memoByInput<T>(parse: (input: SettingsInput) => T): (input: SettingsInput) => T {
  const cache: Slots<Slots<Slots<Map<string, T>>>> = slots();
  const last: unknown[] = [];
  let lastValue: { value: T } | undefined;
  return (input) => {
    if (lastValue !== undefined && FIELDS.every((field, i) => input[field] === last[i])) return lastValue.value;
    const value = lookUp(input);
    FIELDS.forEach((field, i) => {
      last[i] = input[field];
    });
    lastValue = { value };
    return value;
  };

  function lookUp(input: SettingsInput): T {
    const byTiers = slotOf(cache, input.RULES, () => slots<Slots<Map<string, T>>>());
    const byJwt = slotOf(byTiers, input.TIERS, () => slots<Map<string, T>>());
    const byRest = slotOf(byJwt, input.JWT, () => new Map<string, T>());
    const rest = [
      input.IPV6_PREFIX,
      input.TRUSTED_IP_HEADER,
      input.LIMITER_TIMEOUT_MS,
      input.JWT_JWKS_URL,
      input.JWT_JWKS,
      input.STATS_RAW_KEYS,
    ].join("\u0000");
    return getOrCreate(byRest, rest, () => parse(input));
  }
}

/** Values filed under a variable's value: by identity for an object (a TOML table), by text otherwise. */
type Slots<V> = { byObject: WeakMap<object, V>; byText: Map<string, V> };
const slots = <V>(): Slots<V> => ({ byObject: new WeakMap(), byText: new Map() });

function slotOf<V>(from: Slots<V>, key: unknown, make: () => V): V {
  if (typeof key !== "object" || key === null) return getOrCreate(from.byText, String(key), make);
  let value = from.byObject.get(key);
  if (value === undefined) {
    value = make();
    from.byObject.set(key, value);
  }
  return value;
}

/**
 * The Worker's settings, parsed once per isolate and shared by every reader,
 * so that all of them hold the same Rule objects (the isolate's caches are
 * keyed by them: an admin reset must reach the middleware's entries).
 */
export const settingsFromEnv = memoByInput(parseSettings);
