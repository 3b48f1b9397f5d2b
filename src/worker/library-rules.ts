/**
 * @module
 * The rules `rateLimit({ rules })` middlewares were built with in this
 * isolate, for the admin API: in your own app, its overrides, status and
 * rule list reach the very rule objects the middlewares count with (the
 * isolate's caches are keyed by them, so an override's change is met at once).
 */
import type { Settings } from "../config/settings.ts";
import type { Rule } from "../core/rules.ts";

const byId = new Map<string, Rule>();

/** The ids of rules a middleware with a `key` function counts by it; `all`: one such middleware reads the Worker's `RULES`. */
const keyed = { ids: new Set<string>(), all: false };

/**
 * Records a middleware's rules. A rule's id names its count (and the admin
 * API names the rule by it): middlewares may share a rule, with the same
 * fields, to share its count; a rule with another's id and other fields
 * throws, as a duplicate id in `RULES` is an error.
 * `byKeyFunction`: the middleware has a `key` function, whose clients the
 * admin API then names `key()=<value>` under these rules.
 */
export function registerRules(rules: readonly Rule[], byKeyFunction = false): void {
  for (const rule of rules) {
    const had = byId.get(rule.id);
    if (had !== undefined && JSON.stringify(had) !== JSON.stringify(rule)) {
      throw new Error(
        `rateLimit(): rule "${rule.id}" is already counted by another rateLimit() with other fields; every middleware with this id would share its count, so give this rule its own id (or the same fields, to share the count on purpose)`,
      );
    }
  }
  for (const rule of rules) {
    if (!byId.has(rule.id)) byId.set(rule.id, rule);
    if (byKeyFunction) keyed.ids.add(rule.id);
  }
}

/** A middleware with a `key` function and no rules of its own: the Worker's rules may be counted by it. */
export function registerKeyFunctionOverAll(): void {
  keyed.all = true;
}

/** Whether a `rateLimit({ key })` function may name the clients of rule `id` in this isolate. */
export const keyedByFunction = (id: string): boolean => keyed.all || keyed.ids.has(id);

/** `settings` with the middlewares' rules added after its own; a rule of the Worker's `RULES` keeps its id. */
export function withLibraryRules(settings: Settings): Settings {
  if (byId.size === 0) return settings;
  const own = new Set(settings.rules.map((rule) => rule.id));
  const extra = [...byId.values()].filter((rule) => !own.has(rule.id));
  return extra.length === 0 ? settings : { ...settings, rules: [...settings.rules, ...extra] };
}
