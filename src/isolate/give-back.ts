/**
 * @module
 * Giving back: a request turned away counts nowhere, so the lease units it
 * spent go back to their leases and the counts its calls took go back to
 * their objects, in the background. So do the units of keys the isolate
 * forgot, and what a call that answered too late counted.
 */

import type { Rule } from "../core/rules.ts";
import { refundKey } from "../object/client.ts";
import { type CheckResult, costOf, type Refund, unitsOf } from "../object/protocol.ts";
import type { DecideOptions } from "./decide.ts";
import type { KeyCall, KeyGroup, Settlement } from "./settle.ts";

/** A refused request counts nowhere: lease units go back to their leases, and counts to their objects. */
export function giveBackAll(groups: KeyGroup[], settlements: Settlement[], options: DecideOptions): void {
  settlements.forEach((s, i) => {
    if (s.via === "lease") options.isolate.leases.giveBack(s.spent);
    else if (s.via === "call" && s.call.outcome.ok) {
      refundCounted({ name: s.call.name, outcome: s.call.outcome }, groups[i]!.rules, options);
    }
  });
}

/** Takes back, in the background, what an answer counted for a request that was then turned away. */
function refundCounted(
  call: { name: string; outcome: { result: CheckResult } },
  rules: Rule[],
  options: DecideOptions,
) {
  const { result } = call.outcome;
  if (!result.allowed) return;
  const refunds = result.verdicts.flatMap((v, j): Refund[] =>
    v.counted ? [{ receipt: v.counted, count: costOf(rules[j]!) }] : [],
  );
  if (refunds.length > 0) refundInBackground(call.name, refunds, options);
}

/** Hands counts back to an object in the background; what fails to arrive is written off, and counted. */
export function refundInBackground(name: string, refunds: Refund[], options: DecideOptions): void {
  const units = unitsOf(refunds);
  options.background(
    refundKey(options.ns, name, refunds, options.settings.timeoutMs).then((taken) => {
      if (!taken) options.isolate.counters.writeOff("refund failed", units);
    }),
  );
}

/** Units of keys the isolate no longer remembers, handed back to their objects. */
export function sendOutbox(options: DecideOptions): void {
  for (const { name, refunds } of options.isolate.leases.takeOutbox()) refundInBackground(name, refunds, options);
}

/**
 * A call that timed out may still decide. What it counted for a request that
 * was then turned away is taken back once it does; a lease it brings is kept
 * (its units were counted for this isolate to spend).
 */
export function watchLate(call: KeyCall, group: KeyGroup, turnedAway: boolean, options: DecideOptions): void {
  const late = call.outcome.ok ? undefined : call.outcome.late;
  if (!late) return;
  options.background(
    late.then((result) => {
      if (!result) return;
      const { verdicts, lease } = result;
      options.isolate.leases.keep(group.digest, {
        name: call.name,
        rules: group.rules,
        verdicts,
        lease,
        sentAtMs: call.sentAtMs,
        asked: false,
      });
      if (turnedAway) refundCounted({ name: call.name, outcome: { result } }, group.rules, options);
      sendOutbox(options);
    }),
  );
}
