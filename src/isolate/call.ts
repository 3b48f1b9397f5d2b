/**
 * @module
 * One call to a key's object, and what the isolate keeps of its answer: it
 * hands back what is owed, asks for a lease sized by this isolate's demand
 * (or, for a rule with `max_delay`, asks the object to hold the request),
 * tells the object how long its counts may be taken back, and keeps the
 * lease and the refusals that come back in the key's state before the call
 * lands at its gate, so that a request woken by the landing finds them.
 */
import type { Settings } from "../config/settings.ts";
import { hashKey } from "../core/keys.ts";
import { type CountedRule, settledByAnswer } from "../core/rules.ts";
import { checkKey, type LimiterNamespace } from "../object/client.ts";
import { type CheckOptions, LEASE_MIN_UNITS } from "../object/protocol.ts";
import type { AdaptiveRules } from "./adaptive.ts";
import type { Batch } from "./batch.ts";
import type { ClientKeys } from "./client-keys.ts";
import { type Effects, watchLateBatch } from "./effects.ts";
import type { Flight } from "./flight.ts";
import type { Gate } from "./gate.ts";
import type { KeyState } from "./key-state.ts";
import type { KeyCall, KeyGroup, Landing } from "./vocabulary.ts";

/** How long an origin may take to answer, for counts settled by its answer. */
export const ANSWER_WINDOW_MS = 100_000;

/** What a call needs besides the group. */
export type CallContext = Effects & {
  settings: Pick<Settings, "timeoutMs">;
  ns: LimiterNamespace;
  isolate: { keys: ClientKeys; clock: () => number; adaptive: AdaptiveRules };
};

/**
 * Whether requests for this group that wait for a call in flight go to the
 * object together once it lands (see batch.ts): when every rule enforces (a
 * batch's admissions then share one verdict per rule), and leases are on
 * (with them off, every request makes its own call).
 */
export const batchable = (group: KeyGroup, keys: ClientKeys): boolean =>
  keys.leasing && group.rules.every((rule) => rule.action === "block") && !holds(group);

/**
 * Whether the object may hold a request of this group until its turn: an
 * enforcing rule has `max_delay`. Such a group's requests each call alone,
 * with no lease: a unit leased ahead would let a later request go before
 * the held ones, which must go in the order they came.
 */
export const holds = (group: KeyGroup): boolean =>
  group.rules.some((rule) => rule.action === "block" && rule.maxDelayMs !== undefined);

/**
 * How long what a call counts under every rule of the group may still be
 * taken back, in milliseconds, or 0 when it will not be: when another key
 * (or a concurrency rule's place) may refuse the request, or the call times
 * out under a rule that fails closed (the 503 means the request was not
 * served), one more timeout after the answer, and `waitMs` more when the
 * request may be held, or wait for a place, before that is known. Until then the object's refusals of the key rest on a
 * count that may go, so no isolate remembers them. (A rule whose count the
 * origin's answer settles may give its own back for longer: see
 * {@link refundWindows}.)
 */
export function refundableForMs(group: KeyGroup, otherKeys: boolean, timeoutMs: number, waitMs = 0): number {
  const refunds = otherKeys || group.rules.some((rule) => rule.action === "block" && rule.onError === "closed");
  return refunds ? 2 * timeoutMs + waitMs : 0;
}

/**
 * What a call tells the object of how long its counts may be taken back:
 * `allMs` (see {@link refundableForMs}) for every rule, and for a rule whose
 * count the origin's answer settles (`count`, `cost_header`) as long as an
 * origin may take to answer, at least {@link ANSWER_WINDOW_MS}. Only that
 * rule's row: the rules beside it on the key give nothing back when the
 * response comes, so their refusals are remembered as any other's.
 */
function refundWindows(
  rules: CountedRule[],
  allMs: number,
  timeoutMs: number,
): Pick<CheckOptions, "refundableForMs" | "refundableByRuleMs"> {
  const answerMs = Math.max(allMs, 2 * timeoutMs, ANSWER_WINDOW_MS);
  let settled = 0;
  for (const rule of rules) if (settledByAnswer(rule)) settled++;
  if (settled === 0) return allMs > 0 ? { refundableForMs: allMs } : {};
  if (settled === rules.length) return { refundableForMs: answerMs };
  return {
    refundableForMs: answerMs,
    refundableByRuleMs: rules.map((rule) => (settledByAnswer(rule) ? answerMs : allMs)),
  };
}

/** Who a call is for: one request, or a batch the gate has filed and sealed. */
export type Caller =
  | { alone: true; refundableMs: number }
  | { alone: false; batch: Batch; flight: Flight; size: number; refundableMs: number };

/**
 * The key's object name (the SHA-256 of its canonical key), hashed once per
 * key state: every call for the key, and each of its requests' places,
 * needs it.
 */
export async function objectName(group: KeyGroup, state: KeyState | undefined): Promise<string> {
  if (state !== undefined && state.name !== null) return state.name;
  const name = await hashKey(group.canonical);
  if (state !== undefined) state.name = name;
  return name;
}

/**
 * Calls the group's object. A call alone that may bring a lease, or whose
 * waiters would form a batch, is filed at the gate first, so concurrent
 * requests for the key wait for it; a batch's call was filed by the gate
 * when it sealed the batch. What comes back is kept before the flight lands.
 */
export async function callObject(
  group: KeyGroup,
  gate: Gate,
  deadlineMs: number,
  caller: Caller,
  ctx: CallContext,
): Promise<KeyCall> {
  const { isolate, settings } = ctx;
  const { keys } = isolate;
  const sentAtMs = isolate.clock();
  const sent = keys.stamp();
  const state = keys.peek(group.digest);
  // A batch asks for no lease: it carries the demand that waited, which it serves; units leased on top of it
  // would sit unspent here once a burst is over, counted against the key in every isolate. The next call
  // alone asks, if requests keep coming.
  const hold = caller.alone && holds(group);
  const lease = caller.alone && !hold ? state?.leaseRequest(sentAtMs) : undefined;
  let flight: Flight | null = null;
  if (!caller.alone) flight = caller.flight;
  else if ((lease && (state?.leases.leasable ?? true)) || batchable(group, keys))
    flight = gate.depart(sentAtMs, settings.timeoutMs);
  const name = await objectName(group, state);
  const returns = keys.peek(group.digest)?.leases.takeReturns(group.rules, sentAtMs) ?? null;
  const refundable = refundWindows(group.rules, caller.refundableMs, settings.timeoutMs);
  const check = {
    name,
    // An adaptive rule's check carries the factor the isolate last learned.
    rules: group.rules.map(isolate.adaptive.checkOf),
    leftMs: Math.max(1, deadlineMs - sentAtMs),
    timeoutMs: settings.timeoutMs,
  };
  const size = caller.alone ? 1 : caller.size;
  const outcome = await checkKey(ctx.ns, check, {
    ...(lease ? { lease } : {}),
    ...(returns ? { returns: returns.refunds } : {}),
    ...refundable,
    ...(size > 1 ? { batch: size } : {}),
    ...(hold ? { hold: true } : {}),
  });
  if (returns) returns.leases.landed(returns, outcome.ok && outcome.attempts === 1);
  if (outcome.ok) {
    const { verdicts, lease: granted, refused } = outcome.result;
    // Only a demand of two or more, unanswered, says the key is near a limit: a key seen once gets no lease anyway.
    const asked = lease !== undefined && lease.seen >= LEASE_MIN_UNITS;
    keys
      .use(group.digest, sentAtMs)
      .keep({ name, rules: group.rules, verdicts, lease: granted, sentAtMs, sent, asked });
    const refusal = refused ?? verdicts;
    // Held: booked for its turn, never a refusal to remember.
    if (outcome.result.held === undefined)
      group.rules.forEach((rule, i) => {
        const verdict = refusal[i]!;
        if (rule.action === "block" && !verdict.ruleAllows)
          keys.remember(group.digest, rule, name, sentAtMs, sent, verdict);
      });
  }
  const call = { name, outcome, sentAtMs, sent };
  if (!caller.alone) {
    caller.batch.answered(call, group.rules, ctx.isolate.keys);
    watchLateBatch(caller.batch, size, outcome, group.rules, ctx);
  }
  if (flight !== null) {
    const landing: Landing = outcome.ok
      ? { ok: true }
      : { ok: false, reason: outcome.reason, message: outcome.message, attempts: outcome.attempts, name };
    gate.land(flight, landing, isolate.clock());
  }
  return call;
}
