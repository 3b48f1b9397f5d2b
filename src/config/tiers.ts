/**
 * @module
 * `TIERS`: named sets of per-rule limits, such as a `pro` tier that gives
 * `api-per-key` 10,000 an hour. An override puts a client in a tier; the
 * rule's period stays its own, so a client's counts carry over when its
 * tier changes.
 *
 * ```toml
 * [vars.TIERS.pro]
 * api-per-key = 10000
 * login = 20
 * search = { limit = 30, burst = 100 }   # a token bucket's burst too
 * ```
 */

import { parseIntegerFrom1 } from "../core/fields.ts";
import { CLIENT_FIELDS, clientFieldsOf, kindOf } from "../core/kinds/registry.ts";
import { MAX_LIMIT } from "../core/kinds/window.ts";
import { isTierName } from "../core/overrides.ts";
import { fail, ok, type Result } from "../core/result.ts";
import type { Rule } from "../core/rules.ts";
import { show } from "../core/show.ts";

/** Tier name → rule id → the limit the tier gives that rule. */
export type Tiers = ReadonlyMap<string, ReadonlyMap<string, number>>;

/** Tier name → rule id → the fields of the rule's kind the tier gives beside the limit, as written (`burst`). */
export type TierGiven = ReadonlyMap<string, ReadonlyMap<string, Readonly<Record<string, unknown>>>>;

const isTable = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** Parses `TIERS`: a table, or the same as a JSON string. */
export function parseTiers(raw: unknown): Result<Tiers> {
  const { tiers, errors } = readTiers(raw);
  return errors.length > 0 ? fail(...errors) : ok(tiers);
}

/**
 * `TIERS` as far as it is valid, and every error in it: a tier whose name
 * or table is invalid is left out, and so is each invalid limit of a tier
 * (a client in that tier then keeps the rule's own limit).
 */
export function readTiers(raw: unknown): { tiers: Tiers; given: TierGiven; errors: string[] } {
  if (raw === undefined || raw === "") return { tiers: new Map(), given: new Map(), errors: [] };
  let value = raw;
  if (typeof raw === "string") {
    try {
      value = JSON.parse(raw);
    } catch (error) {
      return {
        tiers: new Map(),
        given: new Map(),
        errors: [`TIERS: is a string but not valid JSON (${(error as Error).message})`],
      };
    }
  }
  if (!isTable(value)) {
    return {
      tiers: new Map(),
      given: new Map(),
      errors: [
        `TIERS: must be a table of tiers, such as [vars.TIERS.pro] with api-per-key = 10000; got ${show(value)}`,
      ],
    };
  }
  const tiers = new Map<string, Map<string, number>>();
  const given = new Map<string, Map<string, Record<string, unknown>>>();
  const errors: string[] = [];
  for (const [name, limits] of Object.entries(value)) {
    if (!isTierName(name)) {
      errors.push(`TIERS: a tier's name must be 1 to 64 of [A-Za-z0-9_-]; got ${show(name)}`);
    } else if (!isTable(limits)) {
      errors.push(`TIERS.${name}: must be a table of rule ids and limits, such as login = 20; got ${show(limits)}`);
    } else {
      const tier = new Map<string, number>();
      const own = new Map<string, Record<string, unknown>>();
      for (const [id, value] of Object.entries(limits)) {
        // A limit, or a table of the limit and the kind's own fields given with it (a token bucket's burst).
        const { limit, ...fields } = isTable(value) ? value : { limit: value };
        const foreign = Object.keys(fields).filter((field) => !CLIENT_FIELDS.includes(field));
        if (foreign.length > 0) {
          errors.push(
            `TIERS.${name}.${id}: unknown ${foreign.map((f) => `field ${show(f)}`).join(", ")}; a tier gives a rule a limit (login = 20), or a table of "limit" and ${CLIENT_FIELDS.map((f) => show(f)).join(", ")} (search = { limit = 30, burst = 100 })`,
          );
          continue;
        }
        const parsed = parseIntegerFrom1(limit, MAX_LIMIT);
        if (!parsed.ok) {
          errors.push(`TIERS.${name}.${id}: ${isTable(value) ? 'field "limit": ' : ""}${parsed.errors[0]}`);
          continue;
        }
        tier.set(id, parsed.value);
        if (Object.keys(fields).length > 0) own.set(id, fields);
      }
      tiers.set(name, tier);
      if (own.size > 0) given.set(name, own);
    }
  }
  return { tiers, given, errors };
}

/**
 * The rule ids a tier names that no rule has. They are ignored, so renaming a
 * rule never stops the Worker; `npm run check-config` warns of each.
 */
export function unknownRules(tiers: Tiers, rules: Rule[]): { tier: string; rule: string }[] {
  const ids = new Set(rules.map((rule) => rule.id));
  return [...tiers].flatMap(([tier, limits]) =>
    [...limits.keys()].filter((id) => !ids.has(id)).map((rule) => ({ tier, rule })),
  );
}

/**
 * An error for each limit a tier gives a rule that cannot be enforced as
 * written: below the rule's `cost`, no request of a client in that tier (by
 * an override or a token's `tier_claim`) would ever fit; above the most its
 * kind lets a rule give (a concurrency rule's places are 1 to 10000), it is
 * more than the rule itself may give. `rules` are the valid ones, with where
 * each is written (`RULES[2]`, `RULES_AUTH[0]`).
 */
export function tierLimitErrors(
  tiers: Tiers,
  rules: { rule: Rule; where: string }[],
  given: TierGiven = new Map(),
): string[] {
  return tierLimitProblems(tiers, rules, given).map(({ message }) => message);
}

/** {@link tierLimitErrors}, each with the tier and the rule it is about. */
export function tierLimitProblems(
  tiers: Tiers,
  rules: { rule: Rule; where: string }[],
  given: TierGiven = new Map(),
): { tier: string; rule: string; message: string }[] {
  return [...tiers].flatMap(([tier, limits]) =>
    rules.flatMap(({ rule, where }) => {
      const limit = limits.get(rule.id);
      const cost = rule.cost ?? 1;
      const problem = (message: string) => [{ tier, rule: rule.id, message }];
      if (limit === undefined) return [];
      const own = ownOf(given, tier, rule, limit);
      if (!own.ok)
        return own.errors.map((error) => ({ tier, rule: rule.id, message: `TIERS.${tier}.${rule.id}: ${error}` }));
      if (limit < cost) {
        return problem(
          `TIERS.${tier}.${rule.id}: ${limit} is below the cost of ${where} ${show(rule.id)} (field "cost": ${cost}), so no request of a client in tier ${show(tier)} could ever be admitted; make it at least ${cost}`,
        );
      }
      const kind = kindOf(rule);
      const { maxLimit, limitNoun, limitField } = kind;
      if (limit > maxLimit) {
        return problem(
          `TIERS.${tier}.${rule.id}: ${limit} is above the most ${limitNoun} ${where} ${show(rule.id)} may give a client (field "${limitField}": at most ${maxLimit}), so it cannot be enforced as written; make it at most ${maxLimit}`,
        );
      }
      // Own fields given with the limit (a bucket's burst) are the tier's: the rule's do not grow with it then.
      const cap = own.value === undefined ? kind.limitCap?.(rule) : undefined;
      if (cap !== undefined && limit > cap.max) {
        return problem(
          `TIERS.${tier}.${rule.id}: ${limit} is above the most ${where} ${show(rule.id)} may give a client (${cap.max}): ${cap.because}; make it at most ${cap.max}`,
        );
      }
      return [];
    }),
  );
}

/**
 * The fields of `rule`'s kind that `tier` gives it beside `limit` (a token
 * bucket's burst), as its kind reads them: undefined when it gives none; an
 * error for one the rule's kind does not take.
 */
function ownOf(
  given: TierGiven,
  tier: string,
  rule: Rule,
  limit: number,
): Result<Readonly<Record<string, number>> | undefined> {
  const fields = given.get(tier)?.get(rule.id);
  return fields === undefined ? ok(undefined) : clientFieldsOf(rule, fields, Object.keys(fields), limit);
}

/** The rules, each given its limit per tier, and the own fields a tier gives with it (rules no tier names are returned as they are). */
export function withTiers(rules: Rule[], tiers: Tiers, given: TierGiven = new Map()): Rule[] {
  return rules.map((rule) => {
    const limits: Record<string, number> = {};
    const owns: Record<string, Readonly<Record<string, number>>> = {};
    for (const [tier, byRule] of tiers) {
      const limit = byRule.get(rule.id);
      if (limit === undefined) continue;
      limits[tier] = limit;
      const own = ownOf(given, tier, rule, limit);
      if (own.ok && own.value !== undefined) owns[tier] = own.value;
    }
    if (Object.keys(limits).length === 0) return rule;
    return Object.keys(owns).length > 0 ? { ...rule, tiers: limits, tierOwn: owns } : { ...rule, tiers: limits };
  });
}
