/**
 * @module
 * A rule's tier variants: one rule object per rule and tier, so the
 * isolate keeps a client's leases and refusals under a tier apart from the
 * rule's own (its maps are keyed by rule object).
 */
import { getOrCreate } from "../core/maps.ts";
import type { Rule } from "../core/rules.ts";

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
