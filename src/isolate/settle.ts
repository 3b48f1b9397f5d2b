/**
 * @module
 * Settles one key group of one request: from a lease held here, from a
 * refusal this isolate knows of, or with a call to the key's object. While
 * another request's call for the key is in flight and may bring a lease,
 * waits for it, on this request's own timer and within this request's own
 * deadline, then decides on its own. A request whose client hangs up gives
 * up its place and decides nothing more (`gone`).
 */
import type { Settings } from "../config/settings.ts";
import { hashKey } from "../core/keys.ts";
import { type Rule, settledByAnswer } from "../core/rules.ts";
import { checkKey, deadline, type LimiterNamespace } from "../object/client.ts";
import {
  type CheckOptions,
  type CheckResult,
  LEASE_MIN_UNITS,
  type LimiterOutcome,
  ruleCheckOf,
} from "../object/protocol.ts";
import { answerOf, type Batch, type Ticket, watchLateBatch, writeOffAbandoned } from "./batch.ts";
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
  /**
   * Another request's call for this key failed while this one waited for it: the failure is shared, not
   * repeated. Or this request's time ran out while it waited for a call: then, when it was in the batch
   * that call carries and its rules settle by the response, `late` is what the batch decides for it, if
   * it does in time.
   */
  | { via: "shared"; failure: Extract<Landing, { ok: false }>; late?: Promise<CheckResult | undefined> }
  /**
   * The request's client hung up while it waited: it decides nothing more. (The runtime cancels such a
   * request, unless it has work in the background: then it goes on, and must not send, or be served by,
   * what it waited for.)
   */
  | { via: "gone" };

const GONE: Settlement = Object.freeze({ via: "gone" });

/** What settling needs besides the group. */
export type SettleContext = {
  settings: Settings;
  ns: LimiterNamespace;
  isolate: Isolate;
  /** Whether the request has other key groups, which may refuse it: then counts taken here may be refunded. */
  otherKeys: boolean;
  /** Runs work past the response (the request's `waitUntil`). */
  background: (task: Promise<unknown>) => void;
  /** Aborts when the request's client hangs up (with `enable_request_signal`): a waiter is then no longer woken. */
  gone?: AbortSignal;
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
 * How long what this call counts under every rule of the group may still be
 * taken back, in milliseconds, or 0 when it will not be: when another key
 * may refuse the request, or the call times out under a rule that fails
 * closed (the 503 means the request was not served), one more timeout
 * after the answer. Until then the object's refusals of the key rest on a
 * count that may go, so no isolate remembers them. (A rule whose count the
 * origin's answer settles may give its own back for longer: see
 * {@link refundWindows}.)
 */
function refundableForMs(group: KeyGroup, ctx: SettleContext): number {
  const refunds = ctx.otherKeys || group.rules.some((rule) => rule.action === "block" && rule.onError === "closed");
  return refunds ? 2 * ctx.settings.timeoutMs : 0;
}

/** How long an origin may take to answer, for counts settled by its answer. */
export const ANSWER_WINDOW_MS = 100_000;

/**
 * What a call tells the object of how long its counts may be taken back:
 * `allMs` (see {@link refundableForMs}) for every rule, and for a rule whose
 * count the origin's answer settles (`count`, `cost_header`) as long as an
 * origin may take to answer, at least {@link ANSWER_WINDOW_MS}. Only that
 * rule's row: the rules beside it on the key give nothing back when the
 * response comes, so their refusals are remembered as any other's.
 */
function refundWindows(
  rules: Rule[],
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

/** The key the calls in flight for a group are filed under: its key and its exact set of rules. */
export const flightKey = (group: Pick<KeyGroup, "digest" | "rules">): string =>
  `${group.digest}|${group.rules.map(ruleUid).join(",")}`;

/**
 * Whether requests for this group that wait for a call in flight go to the
 * object together once it lands (see {@link Batch}): when every rule
 * enforces (a batch's admissions then share one verdict per rule), and
 * leases are on (with them off, every request makes its own call).
 */
const batchable = (group: KeyGroup, isolate: Isolate): boolean =>
  isolate.leases.enabled && group.rules.every((rule) => rule.action === "block");

/**
 * Settles a group no lease or known refusal covered when the request came
 * in. `deadlineMs` is this request's own deadline, in isolate time.
 *
 * While a call for the key is in flight, the request waits for it; if it
 * lands without deciding the request (no lease unit left for it, no
 * refusal), the request goes with the others that waited for it in one
 * batch: one call decides them all.
 */
export async function settle(group: KeyGroup, deadlineMs: number, ctx: SettleContext): Promise<Settlement> {
  // The batch place this request holds while it waits, if any: given up if its client hangs up.
  const place: Place = { batch: undefined, ticket: undefined };
  // An event listener returns nothing: the runtime warns of any value returned.
  const hungUp = () => {
    if (place.ticket) place.batch!.hangUp(place.ticket);
  };
  ctx.gone?.addEventListener("abort", hungUp);
  try {
    return await settleWaiting(group, deadlineMs, ctx, place);
  } finally {
    ctx.gone?.removeEventListener("abort", hungUp);
  }
}

/** A request's place in a batch, while it has one. */
type Place = { batch: Batch | undefined; ticket: Ticket | undefined };

async function settleWaiting(
  group: KeyGroup,
  deadlineMs: number,
  ctx: SettleContext,
  place: Place,
): Promise<Settlement> {
  const { isolate } = ctx;
  const key = flightKey(group);
  const batching = batchable(group, isolate);
  for (;;) {
    if (ctx.gone?.aborted) return GONE;
    const nowMs = isolate.clock();
    const flight = isolate.flights.current(key, nowMs);
    if (!flight) break;
    const batch = batching ? flight.batch() : undefined;
    const ticket = batch?.join(refundableForMs(group, ctx));
    place.batch = batch;
    place.ticket = ticket;
    // Without batches: half of what is left at most, so that a call of its own still has time. With them,
    // a call that is slow but not presumed lost is waited for to the end: a call of its own would queue
    // behind it at the same object, and one per waiter is how a slow object's queue grows without bound.
    const giveUpAtMs = batching ? deadlineMs : nowMs + (deadlineMs - nowMs) / 2;
    const landing = await isolate.flights.await(
      flight,
      Math.min(flight.staleAtMs, giveUpAtMs),
      isolate.clock,
      ctx.gone,
    );
    if (ctx.gone?.aborted) return GONE; // its place in the batch, if any, was given up when it hung up
    if (landing === null) {
      if (ticket) batch!.leave(ticket);
      if (isolate.clock() >= giveUpAtMs) {
        if (batching) return ranOut(group, ctx); // as a call of its own would have: on_error applies
        break; // waited long enough: decide on our own
      }
      continue; // the call is presumed lost: look again, so the first to look files the next call and the rest wait
    }
    // The object's own failure is shared; a timeout only says the caller's time ran out, not ours.
    if (!landing.ok && landing.reason !== "timeout") {
      if (ticket) batch!.leave(ticket);
      return { via: "shared", failure: landing };
    }
    if (ticket && ticket.slot !== null) {
      // Another request that waited with this one has sent the batch, with this one in it.
      const read = await readBatch(batch!, ticket, group.rules, deadlineMs, ctx);
      if (read === "ran out") return ranOut(group, ctx, lateAnswer(group, batch!, ticket, ctx));
      if (read === "look again") continue; // its call is presumed lost, or ended without an answer in its time
      return orHeldUnit(read, group, isolate);
    }
    const afterMs = isolate.clock();
    const spent = isolate.leases.spend(group.digest, group.rules, afterMs);
    const known = spent ? [] : knownRefusals(group, isolate, afterMs);
    if (spent || known.length > 0) {
      if (ticket) batch!.leave(ticket);
      return spent ? { via: "lease", spent } : { via: "known", known };
    }
    // The first of the batch to find nothing: it sends the batch, this request in it.
    if (ticket) {
      const sent = await sendBatch(group, key, deadlineMs, ctx, batch!, ticket);
      if (sent === "look again") continue; // the object decided the first request alone
      return sent;
    }
  }
  const call = callObject(group, key, deadlineMs, ctx);
  const release = goesOnIfGone(call, ctx);
  try {
    const answered = await call;
    // Gone while its call went on for the others: what the call counted for it stands, as for any request
    // cancelled once its call has answered.
    if (ctx.gone?.aborted) return GONE;
    return orHeldUnit({ via: "call", call: answered }, group, isolate);
  } finally {
    release();
  }
}

/**
 * Keeps a call going past its request if the request's client hangs up: the
 * runtime then cancels the request, and with it the call, which other
 * requests for the key may be waiting for (the lease it may bring, the
 * batch it carries, how it lands). Returns what undoes this once the
 * request has the call's answer.
 */
function goesOnIfGone(call: Promise<unknown>, ctx: SettleContext): () => void {
  const { gone } = ctx;
  if (!gone) return () => {};
  const goOn = () => {
    ctx.background(call);
  };
  gone.addEventListener("abort", goOn);
  return () => gone.removeEventListener("abort", goOn);
}

/**
 * Sends a batch, this request in it. The batch holds requests that came
 * after this one, whose deadlines are later: its call gets a whole timeout
 * of its own, and this request waits for it only until its own deadline.
 * (Bound to this request's deadline, a batch sent by a request that had
 * waited long would time out with the answers of all the others in it.)
 */
async function sendBatch(
  group: KeyGroup,
  key: string,
  deadlineMs: number,
  ctx: SettleContext,
  batch: Batch,
  ticket: Ticket,
): Promise<Settlement | "look again"> {
  const { isolate } = ctx;
  const call = callObject(group, key, isolate.clock() + ctx.settings.timeoutMs, ctx, batch);
  const own = deadline(Math.max(0, deadlineMs - isolate.clock()));
  const release = goesOnIfGone(call, ctx);
  try {
    const answered = await Promise.race([call, own.expired]);
    // Gone: what the batch admits for it is written off (Batch.hangUp), so it is not served too.
    if (ctx.gone?.aborted) return GONE;
    if (answered !== "timeout") {
      const answer = answerOf(answered, ticket.slot!);
      return answer === null ? "look again" : orHeldUnit(answer, group, isolate);
    }
  } finally {
    own.clear();
    release();
  }
  ticket.abandoned = true; // what the call admits for it is written off when it answers
  // The call carries the others' answers: it must not end with this request's response.
  ctx.background(call);
  return ranOut(group, ctx, lateAnswer(group, batch, ticket, ctx));
}

/**
 * What the batch a request ran out waiting for decides for it, when its
 * rules settle what it counts by the response (`count`, `cost_header`): the
 * request may go on (`on_error = "open"`), and its response then settles
 * that. Watched for as long as the batch's call and its late answer may
 * take. Undefined for other rules, and when a rule fails closed (the
 * request is refused): nothing is watched.
 */
function lateAnswer(
  group: KeyGroup,
  batch: Batch,
  ticket: Ticket,
  ctx: SettleContext,
): Promise<CheckResult | undefined> | undefined {
  const goesOn = group.rules.every((rule) => rule.action === "log" || rule.onError === "open");
  if (!goesOn || !group.rules.some(settledByAnswer)) return undefined;
  return batch.lateAnswer(ticket, 2 * ctx.settings.timeoutMs);
}

/**
 * A refusal by the object, unless this isolate holds a unit for the key: a
 * concurrent call may have brought a lease while this one was on its way,
 * and the object counted it when it refused. Those units are admissions
 * counted for this isolate, so one of them is this request's.
 */
function orHeldUnit(settlement: Settlement, group: KeyGroup, isolate: Isolate): Settlement {
  if (settlement.via !== "call" || !settlement.call.outcome.ok || settlement.call.outcome.result.allowed) {
    return settlement;
  }
  const spent = isolate.leases.spend(group.digest, group.rules, isolate.clock());
  return spent ? { via: "lease", spent } : settlement;
}

/**
 * Waits, on this request's own timers and until its own deadline at most,
 * for the batch it was sent with: its answer; or, when it stops waiting (an
 * admission the batch counted for it is then written off), whether its time
 * ran out or the batch's call is presumed lost or ended without an answer
 * in its caller's time.
 */
async function readBatch(
  batch: Batch,
  ticket: Ticket,
  rules: Rule[],
  deadlineMs: number,
  ctx: SettleContext,
): Promise<Settlement | "ran out" | "look again"> {
  const { isolate } = ctx;
  const flight = batch.flight!;
  const landing = await isolate.flights.await(flight, Math.min(flight.staleAtMs, deadlineMs), isolate.clock, ctx.gone);
  if (ctx.gone?.aborted) return GONE;
  if (landing?.ok && batch.call) return answerOf(batch.call, ticket.slot!) ?? "look again";
  if (landing && !landing.ok && landing.reason !== "timeout") return { via: "shared", failure: landing };
  ticket.abandoned = true;
  writeOffAbandoned(batch, rules, isolate.counters); // if it answered already; else its caller does when it does
  return landing === null && isolate.clock() >= deadlineMs ? "ran out" : "look again";
}

/**
 * A request whose time ran out while it waited for a call that was not
 * presumed lost: the same failure as a call of its own that timed out.
 */
async function ranOut(
  group: KeyGroup,
  ctx: SettleContext,
  late?: Promise<CheckResult | undefined>,
): Promise<Settlement> {
  const name = await hashKey(group.canonical);
  const message = `no decision within ${ctx.settings.timeoutMs}ms`;
  const failure = { ok: false, reason: "timeout", message, attempts: 0, name } as const;
  return late === undefined ? { via: "shared", failure } : { via: "shared", failure, late };
}

/**
 * Calls the group's object, handing back what is owed and asking for a lease
 * sized by this isolate's demand. When it may bring a lease, or carries a
 * batch, the call is filed as in flight first, so concurrent requests for
 * the key wait for it (and form the next batch behind it). What comes back
 * (the lease, the refusals, the batch's answer) is kept before the flight
 * lands, so that a waiter finds it.
 */
async function callObject(
  group: KeyGroup,
  key: string,
  deadlineMs: number,
  ctx: SettleContext,
  batch?: Batch,
): Promise<KeyCall> {
  const { isolate, settings } = ctx;
  const { leases } = isolate;
  const sentAtMs = isolate.clock();
  // A batch asks for no lease: it carries the demand that waited, which it serves; units leased on top of it
  // would sit unspent here once a burst is over, counted against the key in every isolate. The next call
  // alone asks, if requests keep coming.
  const lease = batch === undefined ? leases.leaseRequest(group.digest, sentAtMs) : undefined;
  const files = batch !== undefined || (lease && leases.leasable(group.digest)) || batchable(group, isolate);
  const flight = files ? isolate.flights.depart(key, sentAtMs, settings.timeoutMs) : undefined;
  const sealed = batch ? batch.seal(flight!) : { size: 1, refundableMs: 0 };
  const size = sealed.size;
  const name = await hashKey(group.canonical);
  const returns = leases.takeReturns(group.digest, group.rules, sentAtMs);
  const refundable = refundWindows(
    group.rules,
    Math.max(refundableForMs(group, ctx), sealed.refundableMs),
    settings.timeoutMs,
  );
  const check = {
    name,
    rules: group.rules.map(ruleCheckOf),
    leftMs: Math.max(1, deadlineMs - sentAtMs),
    timeoutMs: settings.timeoutMs,
  };
  const outcome = await checkKey(ctx.ns, check, {
    ...(lease ? { lease } : {}),
    ...(returns ? { returns: returns.refunds } : {}),
    ...refundable,
    ...(size > 1 ? { batch: size } : {}),
  });
  if (returns) leases.landed(returns, outcome.ok && outcome.attempts === 1);
  if (outcome.ok) {
    const { verdicts, lease: granted, refused } = outcome.result;
    // Only a demand of two or more, unanswered, says the key is near a limit: a key seen once gets no lease anyway.
    const asked = lease !== undefined && lease.seen >= LEASE_MIN_UNITS;
    leases.keep(group.digest, { name, rules: group.rules, verdicts, lease: granted, sentAtMs, asked });
    const refusal = refused ?? verdicts;
    group.rules.forEach((rule, i) => {
      const verdict = refusal[i]!;
      if (rule.action === "block" && !verdict.ruleAllows)
        isolate.refusals.remember(rule, group.digest, name, sentAtMs, verdict);
    });
  }
  const call = { name, outcome, sentAtMs };
  if (batch) {
    batch.call = call;
    writeOffAbandoned(batch, group.rules, isolate.counters);
    if (outcome.ok || outcome.late === undefined) batch.decided(outcome.ok ? outcome.result : undefined);
    watchLateBatch(batch, size, outcome, group.rules, isolate.counters, ctx.background);
  }
  if (flight) {
    const landing: Landing = outcome.ok
      ? { ok: true }
      : { ok: false, reason: outcome.reason, message: outcome.message, attempts: outcome.attempts, name };
    isolate.flights.land(key, flight, landing, isolate.clock());
  }
  return call;
}
