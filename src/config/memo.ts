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
