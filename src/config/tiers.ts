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
import { isTierName } from "../core/overrides.ts";
import { fail, mapAll, ok, type Result } from "../core/result.ts";
import { MAX_CONCURRENCY, MAX_LIMIT, parseIntegerFrom1, type Rule } from "../core/rules.ts";
import { show } from "../core/show.ts";

/** Tier name → rule id → the limit the tier gives that rule. */
export type Tiers = ReadonlyMap<string, ReadonlyMap<string, number>>;

const isTable = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** Parses `TIERS`: a table, or the same as a JSON string. */
export function parseTiers(raw: unknown): Result<Tiers> {
  if (raw === undefined || raw === "") return ok(new Map());
  let value = raw;
  if (typeof raw === "string") {
    try {
      value = JSON.parse(raw);
    } catch (error) {
      return fail(`TIERS: is a string but not valid JSON (${(error as Error).message})`);
    }
  }
  if (!isTable(value)) {
    return fail(
      `TIERS: must be a table of tiers, such as [vars.TIERS.pro] with api-per-key = 10000; got ${show(value)}`,
    );
  }
  const tiers = mapAll(Object.entries(value), ([name, limits]) => parseTier(name, limits));
  return tiers.ok ? ok(new Map(tiers.value)) : tiers;
}

function parseTier(name: string, limits: unknown): Result<[string, Map<string, number>]> {
  if (!isTierName(name)) return fail(`TIERS: a tier's name must be 1 to 64 of [A-Za-z0-9_-]; got ${show(name)}`);
  if (!isTable(limits)) {
    return fail(`TIERS.${name}: must be a table of rule ids and limits, such as login = 20; got ${show(limits)}`);
  }
  const entries = mapAll(Object.entries(limits), ([id, limit]): Result<[string, number]> => {
    const parsed = parseIntegerFrom1(limit, MAX_LIMIT);
    return parsed.ok ? ok([id, parsed.value]) : fail(`TIERS.${name}.${id}: ${parsed.errors[0]}`);
  });
  return entries.ok ? ok([name, new Map(entries.value)]) : entries;
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
 * an override or a token's `tier_claim`) would ever fit; above a
 * concurrency rule's most places (`concurrency` is 1 to 10000), it is more
 * than the rule itself may give. `rules` are the valid ones, with where
 * each is written (`RULES[2]`, `RULES_AUTH[0]`).
 */
export function tierLimitErrors(tiers: Tiers, rules: { rule: Rule; where: string }[]): string[] {
  return [...tiers].flatMap(([tier, limits]) =>
    rules.flatMap(({ rule, where }) => {
      const limit = limits.get(rule.id);
      const cost = rule.cost ?? 1;
      if (limit === undefined) return [];
      if (limit < cost) {
        return [
          `TIERS.${tier}.${rule.id}: ${limit} is below the cost of ${where} ${show(rule.id)} (field "cost": ${cost}), so no request of a client in tier ${show(tier)} could ever be admitted; make it at least ${cost}`,
        ];
      }
      if (rule.concurrency !== undefined && limit > MAX_CONCURRENCY) {
        return [
          `TIERS.${tier}.${rule.id}: ${limit} is above the most places ${where} ${show(rule.id)} may give a client (field "concurrency": at most ${MAX_CONCURRENCY}), so it cannot be enforced as written; make it at most ${MAX_CONCURRENCY}`,
        ];
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
