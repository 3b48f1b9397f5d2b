/**
 * @module
 * Once the origin answered: a rule whose `count` does not match the
 * response's status gives its count back (a lease unit to its lease, a count
 * taken by a call to its object, in the background), and the rate-limit
 * headers say what is left after the give-back.
 */
import { countsResponse } from "../core/count.ts";
import type { Rule } from "../core/rules.ts";
import type { Policy, Reported } from "../http/rate-limit-headers.ts";
import { rateLimitHeaders } from "../http/rate-limit-headers.ts";
import { costOf, type Refund } from "../object/protocol.ts";
import type { DecideOptions } from "./decide.ts";
import { refundInBackground } from "./give-back.ts";
import type { KeyGroup, Settlement } from "./settle.ts";

/** Takes the response's status; gives back what it does not count, and returns the headers to add. */
export type AfterResponse = (status: number) => Record<string, string>;

/** Whether any of these groups' rules counts only some responses. */
export const countsSome = (groups: KeyGroup[]): boolean => groups.some((g) => g.rules.some((rule) => !rule.count.all));

/** What an admitted request does once its response is known. */
export function afterResponse(
  groups: KeyGroup[],
  settlements: Settlement[],
  headers: { policies: Policy[]; reports: Reported[] },
  options: DecideOptions,
): AfterResponse {
  return (status) => {
    const givenBack = new Set<string>();
    const costs = new Map(groups.flatMap((g) => g.rules.map((rule) => [rule.id, costOf(rule)] as const)));
    settlements.forEach((settlement, i) => {
      const rules = groups[i]!.rules;
      const uncounted = rules.flatMap((rule, j) => (countsResponse(rule.count, status) ? [] : [j]));
      if (uncounted.length === 0) return;
      if (giveBack(settlement, uncounted, rules, options)) for (const j of uncounted) givenBack.add(rules[j]!.id);
    });
    const reports = headers.reports.map((r) =>
      givenBack.has(r.id)
        ? { ...r, verdict: { ...r.verdict, remaining: r.verdict.remaining + (costs.get(r.id) ?? 1) } }
        : r,
    );
    return rateLimitHeaders(headers.policies, reports);
  };
}

/** Gives back the counts of the rules at `indexes`; true when there was one to give back. */
function giveBack(settlement: Settlement, indexes: number[], rules: Rule[], options: DecideOptions): boolean {
  if (settlement.via === "lease") {
    options.isolate.leases.giveBack(settlement.spent, indexes);
    return true;
  }
  if (settlement.via !== "call" || !settlement.call.outcome.ok) return false;
  const { verdicts } = settlement.call.outcome.result;
  const refunds = indexes.flatMap((j): Refund[] => {
    const receipt = verdicts[j]?.counted;
    return receipt ? [{ receipt, count: costOf(rules[j]!) }] : [];
  });
  if (refunds.length > 0) refundInBackground(settlement.call.name, refunds, options);
  return refunds.length > 0;
}
