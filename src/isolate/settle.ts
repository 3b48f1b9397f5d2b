/**
 * @module
 * Settles one key group of one request: from a lease held here, from a
 * refusal this isolate knows of, or with a call to the key's object. While
 * another request's call for the key is in flight and may bring a lease,
 * waits for it, on this request's own timers and within this request's own
 * deadline, then decides on its own.
 */
import type { Settings } from "../config/settings.ts";
import { hashKey } from "../core/keys.ts";
import type { Rule } from "../core/rules.ts";
import { checkKey, type LimiterNamespace } from "../object/client.ts";
import { LEASE_MIN_UNITS, type LimiterOutcome, ruleCheckOf } from "../object/protocol.ts";
import type { Landing } from "./in-flight.ts";
import type { Isolate } from "./isolate.ts";
import type { KnownRefusal } from "./known-refusals.ts";
import type { SpentUnits } from "./leases.ts";
import { ruleUid } from "./rule-ids.ts";

/** The rules of one request that share a client key, and so one Durable Object. */
export type KeyGroup = {
  canonical: string;
  /** The isolate's digest of `canonical`. */
  digest: string;
  rules: Rule[];
};

/** A refusal the isolate knows of, for one rule of a group, and the group's key digest. */
export type RuleRefusal = { rule: Rule; digest: string; refusal: KnownRefusal };

/** A group's call to its object: the object's name, what came back, and when it was sent (isolate time). */
export type KeyCall = { name: string; outcome: LimiterOutcome; sentAtMs: number };

/** How a key group was settled. */
export type Settlement =
  | { via: "lease"; spent: SpentUnits }
  | { via: "known"; known: RuleRefusal[] }
  | { via: "call"; call: KeyCall }
  /** Another request's call for this key failed while this one waited for it: the failure is shared, not repeated. */
  | { via: "shared"; failure: Extract<Landing, { ok: false }> };

/** What settling needs besides the group. */
export type SettleContext = {
  settings: Settings;
  ns: LimiterNamespace;
  isolate: Isolate;
  /** Whether the request has other key groups, which may refuse it: then counts taken here may be refunded. */
  otherKeys: boolean;
};

/** The refusals the isolate knows of for a group's enforcing rules. */
export function knownRefusals(group: KeyGroup, isolate: Isolate, nowMs: number): RuleRefusal[] {
  const known: RuleRefusal[] = [];
  for (const rule of group.rules) {
    if (rule.action !== "block") continue;
    const refusal = isolate.refusals.lookup(rule, group.digest, nowMs);
    if (refusal) known.push({ rule, digest: group.digest, refusal });
  }
  return known;
}

/**
 * How long what this call counts may still be taken back, in milliseconds,
 * or 0 when it will not be. Until then the object's refusals of the key rest
 * on a count that may go, so no isolate remembers them:
 * - when another key may refuse the request, or the call times out under a
 *   rule that fails closed (the 503 means the request was not served): one
 *   more timeout after the answer;
 * - when a rule settles its count by the origin's answer (`count`,
 *   `cost_header`): as long as an origin may take to answer, at least
 *   {@link ANSWER_WINDOW_MS}.
 */
function refundableForMs(group: KeyGroup, ctx: SettleContext): number {
  const twoTimeouts = 2 * ctx.settings.timeoutMs;
  if (group.rules.some((rule) => !rule.count.all || rule.costHeader !== undefined)) {
    return Math.max(twoTimeouts, ANSWER_WINDOW_MS);
  }
  const refunds = ctx.otherKeys || group.rules.some((rule) => rule.action === "block" && rule.onError === "closed");
  return refunds ? twoTimeouts : 0;
}

/** How long an origin may take to answer, for counts settled by its answer. */
export const ANSWER_WINDOW_MS = 100_000;

/** The key the calls in flight for a group are filed under: its key and its exact set of rules. */
export const flightKey = (group: Pick<KeyGroup, "digest" | "rules">): string =>
  `${group.digest}|${group.rules.map(ruleUid).join(",")}`;

/**
 * Settles a group no lease or known refusal covered when the request came
 * in. `deadlineMs` is this request's own deadline, in isolate time.
 */
export async function settle(group: KeyGroup, deadlineMs: number, ctx: SettleContext): Promise<Settlement> {
  const { isolate } = ctx;
  const key = flightKey(group);
  for (;;) {
    const nowMs = isolate.clock();
    const flight = isolate.flights.current(key, nowMs);
    if (!flight) break;
    // Half of what is left at most, so that a call of its own still has time.
    const giveUpAtMs = nowMs + (deadlineMs - nowMs) / 2;
    const landing = await isolate.flights.await(flight, Math.min(flight.staleAtMs, giveUpAtMs), isolate.clock);
    if (landing === null) {
      if (isolate.clock() >= giveUpAtMs) break; // waited long enough: decide on our own
      continue; // the call is presumed lost: look again, so the first to look files the next call and the rest wait
    }
    // The object's own failure is shared; a timeout only says the caller's time ran out, not ours.
    if (!landing.ok && landing.reason !== "timeout") return { via: "shared", failure: landing };
    const afterMs = isolate.clock();
    const spent = isolate.leases.spend(group.digest, group.rules, afterMs);
    if (spent) return { via: "lease", spent };
    const known = knownRefusals(group, isolate, afterMs);
    if (known.length > 0) return { via: "known", known };
  }
  const call = await callObject(group, key, deadlineMs, ctx);
  if (call.outcome.ok && !call.outcome.result.allowed) {
    // A concurrent call may have brought a lease while this one was on its way, and the object counted it
    // when it refused: those units are admissions counted for this isolate, so one of them is this request's.
    const spent = isolate.leases.spend(group.digest, group.rules, isolate.clock());
    if (spent) return { via: "lease", spent };
  }
  return { via: "call", call };
}

/**
 * Calls the group's object, handing back what is owed and asking for a lease
 * sized by this isolate's demand. When it may bring a lease, the call is
 * filed as in flight first, so concurrent requests for the key wait for it.
 * What comes back (the lease, the refusals) is kept before the flight lands,
 * so that a waiter finds it.
 */
async function callObject(group: KeyGroup, key: string, deadlineMs: number, ctx: SettleContext): Promise<KeyCall> {
  const { isolate, settings } = ctx;
  const { leases } = isolate;
  const sentAtMs = isolate.clock();
  const lease = leases.leaseRequest(group.digest, sentAtMs);
  const flight =
    lease && leases.leasable(group.digest) ? isolate.flights.depart(key, sentAtMs, settings.timeoutMs) : undefined;
  const name = await hashKey(group.canonical);
  const returns = leases.takeReturns(group.digest, group.rules, sentAtMs);
  const refundable = refundableForMs(group, ctx);
  const check = {
    name,
    rules: group.rules.map(ruleCheckOf),
    leftMs: Math.max(1, deadlineMs - sentAtMs),
    timeoutMs: settings.timeoutMs,
  };
  const outcome = await checkKey(ctx.ns, check, {
    ...(lease ? { lease } : {}),
    ...(returns ? { returns: returns.refunds } : {}),
    // A refund comes after the answer and takes at most one more timeout.
    ...(refundable > 0 ? { refundableForMs: refundable } : {}),
  });
  if (returns) leases.landed(returns, outcome.ok && outcome.attempts === 1);
  if (outcome.ok) {
    const { verdicts, lease: granted } = outcome.result;
    // Only a demand of two or more, unanswered, says the key is near a limit: a key seen once gets no lease anyway.
    const asked = lease !== undefined && lease.seen >= LEASE_MIN_UNITS;
    leases.keep(group.digest, { name, rules: group.rules, verdicts, lease: granted, sentAtMs, asked });
    group.rules.forEach((rule, i) => {
      const verdict = verdicts[i]!;
      if (rule.action === "block" && !verdict.ruleAllows)
        isolate.refusals.remember(rule, group.digest, name, sentAtMs, verdict);
    });
  }
  if (flight) {
    const landing: Landing = outcome.ok
      ? { ok: true }
      : { ok: false, reason: outcome.reason, message: outcome.message, attempts: outcome.attempts, name };
    isolate.flights.land(key, flight, landing, isolate.clock());
  }
  return { name, outcome, sentAtMs };
}
