/**
 * @module
 * A stable number per rule object, for the isolate's cache keys: rules with
 * equal ids but different limits (two `rateLimit()`s) never share entries.
 */
import { getOrCreate } from "../core/maps.ts";
import type { Rule } from "../core/rules.ts";

const ruleIds = new WeakMap<Rule, number>();
let nextRuleId = 0;

export function ruleUid(rule: Rule): number {
  let uid = ruleIds.get(rule);
  if (uid === undefined) {
    uid = nextRuleId++;
    ruleIds.set(rule, uid);
  }
  return uid;
}

const variants = new WeakMap<Rule, Map<string, Rule>>();

/**
 * The rule with a tier's limit, for a request a token's `tier_claim` puts
 * in that tier; the rule itself when the tier gives it no limit. One object
 * per rule and tier, so the isolate's caches hold its leases and refusals
 * apart from the rule's own.
 */
export function tierVariant(rule: Rule, tier: string): Rule {
  const limit = rule.tiers?.[tier];
  if (limit === undefined) return rule;
  return getOrCreate(
    getOrCreate(variants, rule, () => new Map()),
    tier,
    () => ({ ...rule, limit, tier }),
  );
}

/** The rule and every tier variant made of it: what an admin reset must forget. */
export const variantsOf = (rule: Rule): Rule[] => [rule, ...(variants.get(rule)?.values() ?? [])];
