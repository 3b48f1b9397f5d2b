/**
 * @module
 * Once the origin answered, what a request counts is settled:
 * - a rule whose `count` does not match the response's status gives its
 *   count back (a lease unit to its lease, a call's count to its object);
 * - a rule with a `cost_header` is charged the difference between what the
 *   response says the request cost and what it was admitted at (or given the
 *   difference back), in the background, at the bucket it was counted in;
 *   the header is stripped unless the rule keeps it;
 * - a request forwarded when its call, or the batch it waited in, timed out
 *   (`on_error = "open"`) is settled the same way once the late answer says
 *   where it was counted, if it does in time; so is a held request that went
 *   on its own timer before the object said where its turn counted it.
 * The rate-limit headers then say what is left after both.
 */
import type { Settings } from "../config/settings.ts";
import { countsResponse } from "../core/count.ts";
import { type CountedRule, settledByAnswer } from "../core/rules.ts";
import type { Policy, Reported } from "../http/rate-limit-headers.ts";
import { rateLimitHeaders } from "../http/rate-limit-headers.ts";
import { type CheckResult, costOf, type Receipt, type Refund } from "../object/protocol.ts";
import { keyHashPrefix, logEvent } from "../observe/log.ts";
import type { ClientKeys } from "./client-keys.ts";
import { charge, type Effects, refund, whenLate } from "./effects.ts";
import {
  giveBackSpent,
  type KeyGroup,
  lateAnswerOf,
  nameOf,
  type Part,
  receiptOf,
  type Settlement,
} from "./vocabulary.ts";

/** What settling after the response needs: the effects, and the isolate's keys and clock. */
export type AfterContext = Effects & {
  settings: Pick<Settings, "timeoutMs" | "legacyHeaders">;
  isolate: { keys: ClientKeys; clock: () => number };
};

/** What the limiter does to a response: headers to set, and headers to remove. */
export type ResponseChanges = { headers: Record<string, string>; strip: string[] };

/** Takes the origin's response; settles what the request counts, and says how to change the response. */
export type AfterResponse = (response: { status: number; headers: Headers }) => ResponseChanges;

/** The most a `cost_header` may report; more is not trusted. */
export const MAX_REPORTED_COST = 1_000_000_000;

/** Whether any rule of these parts settles its count once the response is known. */
export const settlesAfter = (parts: readonly Part<CountedRule>[]): boolean =>
  parts.some((part) => part.rules.some(settledByAnswer));

/** What an admitted request does once its response is known: `parts`, its key groups' counted rules as settled. */
export function afterResponse(
  parts: readonly Part<CountedRule>[],
  headers: { policies: Policy[]; reports: Reported[] },
  options: AfterContext,
): AfterResponse {
  return ({ status, headers: answer }) => {
    const moved = new Map<string, { units: number; cost: number }>(); // rule id → units counted after the answer (−: given back)
    const strip: string[] = [];
    for (const { group, rules, settlement } of parts) {
      const late = lateAnswerOf(settlement);
      let lateMoves: LateMove[] | undefined; // only for a call that timed out
      rules.forEach((rule, j) => {
        if (rule.costHeader !== undefined && !rule.keepCostHeader) strip.push(rule.costHeader);
        const receipt = receiptOf(settlement, j);
        if (receipt === null && late === undefined) return;
        const delta = countsResponse(rule.count, status)
          ? reportedExtra(rule, answer, { group, name: nameOf(settlement), options })
          : -costOf(rule);
        if (delta === 0) return;
        if (receipt === null) {
          lateMoves ??= [];
          lateMoves.push({ index: j, delta });
          return;
        }
        settle(settlement, { group, index: j, receipt, delta }, options);
        moved.set(rule.id, { units: (moved.get(rule.id)?.units ?? 0) + delta, cost: costOf(rule) });
      });
      if (late !== undefined && lateMoves !== undefined) settleLate(settlement, group, late, lateMoves, options);
    }
    const reports = headers.reports.map((r) => {
      const by = moved.get(r.id);
      return by === undefined ? r : { ...r, verdict: { ...r.verdict, ...afterMove(r, by) } };
    });
    return { headers: rateLimitHeaders(headers.policies, reports, options.settings.legacyHeaders), strip };
  };
}

/** A verdict's `remaining` and `resetMs` once `units` more were counted for its request (its kind says how the reset moves). */
function afterMove(
  r: Reported,
  { units, cost }: { units: number; cost: number },
): { remaining: number; resetMs: number } {
  const { remaining, resetMs } = r.verdict;
  return (
    r.quota.charged?.(r.limit, cost, { remaining, resetMs }, units) ?? {
      remaining: Math.max(0, remaining - units),
      resetMs,
    }
  );
}

/** A rule's count still to be moved by `delta` once the call's late answer says where it was taken. */
type LateMove = { index: number; delta: number };

/** Settles, in the background, what a call's late answer counted for the request, as its response says. */
function settleLate(
  settlement: Settlement,
  group: KeyGroup,
  late: Promise<CheckResult | undefined>,
  moves: LateMove[],
  options: AfterContext,
): void {
  whenLate(
    late,
    (result) => {
      if (result === undefined && settlement.via === "held") {
        // Held and gone on its own timer, and the object never said where its turn took its counts.
        const units = moves.reduce((sum, { delta }) => sum + Math.abs(delta), 0);
        options.isolate.counters.writeOff("turn unknown", units);
        return;
      }
      if (!result?.allowed) return; // refused late, or never answered: nothing was counted for the request
      for (const { index, delta } of moves) {
        const receipt = result.verdicts[index]?.counted ?? null;
        if (receipt !== null) settle(settlement, { group, index, receipt, delta }, options);
      }
    },
    options,
  );
}

/**
 * What the response says the request cost beyond what it was admitted at: 0
 * without a `cost_header`, and for a value that is missing, not a whole
 * number, or past {@link MAX_REPORTED_COST} (logged, never trusted).
 */
function reportedExtra(
  rule: CountedRule,
  answer: Headers,
  context: { group: KeyGroup; name: string | null; options: AfterContext },
): number {
  if (rule.costHeader === undefined) return 0;
  const raw = answer.get(rule.costHeader);
  const units = raw !== null && /^\d{1,10}$/.test(raw.trim()) ? Number(raw.trim()) : Number.NaN;
  if (Number.isInteger(units) && units <= MAX_REPORTED_COST) return units - costOf(rule);
  const { isolate } = context.options;
  if (isolate.keys.noteLine(context.group.digest, "cost", rule, isolate.clock()) !== null) {
    const key = context.name === null ? null : keyHashPrefix(context.name);
    logEvent({ event: "cost_header_ignored", rule: rule.id, key, header: rule.costHeader, value: raw }, "warn");
  }
  return 0;
}

/** One rule's count for this request, moved by `delta` units: charged when positive, given back when negative. */
type Move = { group: KeyGroup; index: number; receipt: Receipt; delta: number };

function settle(settlement: Settlement, { group, index, receipt, delta }: Move, options: AfterContext): void {
  const rule = group.rules[index]!;
  if (settlement.via === "lease" && delta === -costOf(rule)) {
    giveBackSpent(settlement.spent, [index]);
    return;
  }
  const name = nameOf(settlement);
  if (name === null) return;
  const moves: Refund[] = [{ receipt, count: Math.abs(delta) }];
  if (delta < 0) {
    refund(name, moves, options);
    return;
  }
  charge(name, moves, options);
  // Any lease this isolate holds for the rule was granted before the charge (by this request's call, or an
  // earlier one): the next request asks the object, which now knows.
  options.isolate.keys.peek(group.digest)?.leases.retire(rule);
}
