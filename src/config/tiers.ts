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
 * ```
 */

import { parseIntegerFrom1 } from "../core/fields.ts";
import { kindOf } from "../core/kinds/registry.ts";
import { MAX_LIMIT } from "../core/kinds/window.ts";
import { isTierName } from "../core/overrides.ts";
import { fail, ok, type Result } from "../core/result.ts";
import type { Rule } from "../core/rules.ts";
import { show } from "../core/show.ts";

/** Tier name → rule id → the limit the tier gives that rule. */
export type Tiers = ReadonlyMap<string, ReadonlyMap<string, number>>;

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
export function readTiers(raw: unknown): { tiers: Tiers; errors: string[] } {
  if (raw === undefined || raw === "") return { tiers: new Map(), errors: [] };
  let value = raw;
  if (typeof raw === "string") {
    try {
      value = JSON.parse(raw);
    } catch (error) {
      return { tiers: new Map(), errors: [`TIERS: is a string but not valid JSON (${(error as Error).message})`] };
    }
  }
  if (!isTable(value)) {
    return {
      tiers: new Map(),
      errors: [
        `TIERS: must be a table of tiers, such as [vars.TIERS.pro] with api-per-key = 10000; got ${show(value)}`,
      ],
    };
  }
  const tiers = new Map<string, Map<string, number>>();
  const errors: string[] = [];
  for (const [name, limits] of Object.entries(value)) {
    if (!isTierName(name)) {
      errors.push(`TIERS: a tier's name must be 1 to 64 of [A-Za-z0-9_-]; got ${show(name)}`);
    } else if (!isTable(limits)) {
      errors.push(`TIERS.${name}: must be a table of rule ids and limits, such as login = 20; got ${show(limits)}`);
    } else {
      const tier = new Map<string, number>();
      for (const [id, limit] of Object.entries(limits)) {
        const parsed = parseIntegerFrom1(limit, MAX_LIMIT);
        if (parsed.ok) tier.set(id, parsed.value);
        else errors.push(`TIERS.${name}.${id}: ${parsed.errors[0]}`);
      }
      tiers.set(name, tier);
    }
  }
  return { tiers, errors };
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
export function tierLimitErrors(tiers: Tiers, rules: { rule: Rule; where: string }[]): string[] {
  return tierLimitProblems(tiers, rules).map(({ message }) => message);
}

/** {@link tierLimitErrors}, each with the tier and the rule it is about. */
export function tierLimitProblems(
  tiers: Tiers,
  rules: { rule: Rule; where: string }[],
): { tier: string; rule: string; message: string }[] {
  return [...tiers].flatMap(([tier, limits]) =>
    rules.flatMap(({ rule, where }) => {
      const limit = limits.get(rule.id);
      const cost = rule.cost ?? 1;
      const problem = (message: string) => [{ tier, rule: rule.id, message }];
      if (limit === undefined) return [];
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
      const cap = kind.limitCap?.(rule);
      if (cap !== undefined && limit > cap.max) {
        return problem(
          `TIERS.${tier}.${rule.id}: ${limit} is above the most ${where} ${show(rule.id)} may give a client (${cap.max}): ${cap.because}; make it at most ${cap.max}`,
        );
      }
      return [];
    }),
  );
}

/** The rules, each given its limit per tier (rules no tier names are returned as they are). */
export function withTiers(rules: Rule[], tiers: Tiers): Rule[] {
  return rules.map((rule) => {
    const limits: Record<string, number> = {};
    for (const [tier, byRule] of tiers) {
      const limit = byRule.get(rule.id);
      if (limit !== undefined) limits[tier] = limit;
    }
    return Object.keys(limits).length > 0 ? { ...rule, tiers: limits } : rule;
  });
}
