/**
 * @module
 * A rule's variants: one rule object per rule, tier and priority, so the
 * isolate keeps a client's leases and refusals under a tier, or of a
 * priority, apart from the rule's own (its maps are keyed by rule object).
 */
import { getOrCreate } from "../core/maps.ts";
import type { Priority } from "../core/priorities.ts";
import { quotaUnder, type Rule } from "../core/rules.ts";

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
  // Its kind's own fields the tier gives too (a token bucket's burst): the variant reads as a rule written with them.
  const own = rule.tierOwn?.[tier];
  return getOrCreate(
    getOrCreate(variants, rule, () => new Map()),
    tier,
    () =>
      own === undefined
        ? { ...rule, limit, tier }
        : ({ ...rule, limit, tier, ...own, quota: quotaUnder(rule, own) } as Rule),
  );
}

/**
 * The rule for a request of `priority`, under an adaptive rule with
 * priorities: one object per rule (or tier variant) and priority, so that a
 * lease granted to one priority is never spent by another, nor a refusal of
 * one answered to another. The rule itself when it has no priorities.
 */
export function priorityVariant(rule: Rule, priority: Priority): Rule {
  if (rule.adaptive?.priorities === undefined) return rule;
  return getOrCreate(
    getOrCreate(variants, rule, () => new Map()),
    `priority:${priority}`,
    () => ({ ...rule, priority }),
  );
}

/**
 * The rule for a sheddable request its isolate found crowded (adaptive.ts):
 * one object per rule (or tier variant), so that the refusal the isolate
 * remembers of it never answers a sheddable request once the crowd is gone.
 */
export const crowdedVariant = (rule: Rule): Rule =>
  getOrCreate(
    getOrCreate(variants, rule, () => new Map()),
    "crowded",
    () => ({ ...rule, crowded: true as const }),
  );

/** The rule and every variant made of it (and of those): what an admin reset must forget. */
export const variantsOf = (rule: Rule): Rule[] => [
  rule,
  ...[...(variants.get(rule)?.values() ?? [])].flatMap((variant) => variantsOf(variant)),
];
