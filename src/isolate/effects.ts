/**
 * @module
 * Work a decision leaves to run past its answer, in one place: the only
 * caller of `background` and of the refund and charge calls. Counts taken
 * for a request that was turned away go back (lease units to their leases,
 * a call's counts to its object); units of keys the isolate no longer keeps
 * are handed back; a call that timed out is watched for its late answer; a
 * call other requests wait for goes on when its own request's client hangs
 * up; a `cost_header` charge is sent. Everything sent in the background
 * that does not arrive is written off and counted.
 */
import type { Settings } from "../config/settings.ts";
import type { Rule } from "../core/rules.ts";
import { chargeKey, type LimiterNamespace, refundKey } from "../object/client.ts";
import { type CheckResult, costOf, type LimiterOutcome, type Refund, unitsOf } from "../object/protocol.ts";
import type { Batch } from "./batch.ts";
import type { ClientKeys } from "./client-keys.ts";
import type { IsolateCounters } from "./counters.ts";
import { flushStats, type StatsNamespace, type StatsRecorder } from "./stats.ts";
import { admittedBy, giveBackSpent, type KeyCall, type KeyGroup, type Settlement } from "./vocabulary.ts";

/** What the effects need: a decision's options carry them. */
export type Effects = {
  settings: Pick<Settings, "timeoutMs">;
  ns: LimiterNamespace;
  isolate: { keys: ClientKeys; counters: IsolateCounters };
  /** Runs work past the response (the request's `waitUntil`). */
  background: (task: Promise<unknown>) => void;
};

/**
 * Keeps a call going past its request: when the request's client hangs up
 * the runtime cancels the request, and with it the call, which other
 * requests may be waiting for (the lease it may bring, the batch it
 * carries, how it lands).
 */
export function keepGoing(call: Promise<unknown>, effects: Effects): void {
  effects.background(call);
}

/** A refused request counts nowhere: lease units go back to their leases, and counts to their objects. */
export function giveBackAll(groups: KeyGroup[], settlements: Settlement[], effects: Effects): void {
  settlements.forEach((s, i) => {
    if (s.via === "lease") {
      giveBackSpent(s.spent);
      return;
    }
    const admitted = admittedBy(s);
    if (admitted !== null) refundCounted(admitted.name, admitted.result, groups[i]!.rules, effects);
  });
}

/** Takes back, in the background, what an answer counted for a request that was then turned away. */
function refundCounted(name: string, result: CheckResult, rules: Rule[], effects: Effects): void {
  if (!result.allowed) return;
  const refunds = result.verdicts.flatMap((v, j): Refund[] =>
    v.counted ? [{ receipt: v.counted, count: costOf(rules[j]!) }] : [],
  );
  if (refunds.length > 0) refund(name, refunds, effects);
}

/** Hands counts back to an object in the background; what fails to arrive is written off, and counted. */
export function refund(name: string, refunds: Refund[], effects: Effects): void {
  const units = unitsOf(refunds);
  effects.background(
    refundKey(effects.ns, name, refunds, effects.settings.timeoutMs).then((taken) => {
      if (!taken) effects.isolate.counters.writeOff("refund failed", units);
    }),
  );
}

/** Charges counts to an object in the background (a `cost_header` said the request cost more). */
export function charge(name: string, charges: Refund[], effects: Effects): void {
  effects.background(chargeKey(effects.ns, name, charges, effects.settings.timeoutMs));
}

/** Units of keys the isolate no longer keeps, handed back to their objects. */
export function sendOutbox(effects: Effects): void {
  for (const { name, refunds } of effects.isolate.keys.takeOutbox()) refund(name, refunds, effects);
}

/**
 * A call that timed out may still decide. What it counted for a request that
 * was then turned away is taken back once it does; a lease it brings is kept
 * (its units were counted for this isolate to spend).
 */
export function watchLate(call: KeyCall, group: KeyGroup, turnedAway: boolean, effects: Effects): void {
  const late = call.outcome.ok ? undefined : call.outcome.late;
  if (!late) return;
  effects.background(
    late.then((result) => {
      if (!result) return;
      const { verdicts, lease } = result;
      effects.isolate.keys.use(group.digest, call.sentAtMs).keep({
        name: call.name,
        rules: group.rules,
        verdicts,
        lease,
        sentAtMs: call.sentAtMs,
        asked: false,
      });
      if (turnedAway) refundCounted(call.name, result, group.rules, effects);
      sendOutbox(effects);
    }),
  );
}

/** A batch's call that timed out: what it admits when it answers is written off (see {@link Batch.lateDecision}). */
export function watchLateBatch(
  batch: Batch,
  size: number,
  outcome: LimiterOutcome,
  rules: Rule[],
  effects: Effects,
): void {
  const late = outcome.ok ? undefined : outcome.late;
  if (late) effects.background(batch.lateDecision(size, late, rules, effects.isolate.counters));
}

/** Settles, in the background, what a call's late answer says, once it says it. */
export function whenLate(
  late: Promise<CheckResult | undefined>,
  then: (result: CheckResult | undefined) => void,
  effects: Effects,
): void {
  effects.background(late.then(then));
}

/** Sends the isolate's statistics to the statistics object, in the background, when a flush is due. */
export function flushStatsIfDue(recorder: StatsRecorder, ns: StatsNamespace, nowMs: number, effects: Effects): void {
  if (recorder.due(nowMs)) effects.background(flushStats(recorder, ns, { nowMs }));
}
