/**
 * @module
 * A stable number per rule object, for the isolate's cache keys: rules with
 * equal ids but different limits (two `rateLimit()`s) never share entries.
 */
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
