/**
 * @module
 * Calls a key's Durable Object under a deadline, with one retry where the
 * runtime says a retry is safe. Failures come back as labelled results.
 */

import { type ControllerView, controllerName, type FactorAnswer, type HealthReport } from "./controller-protocol.ts";
import type {
  Cancellation,
  CheckOptions,
  CheckResult,
  LimiterOutcome,
  PlaceAnswer,
  PlaceRequest,
  PlaceWait,
  Refund,
  Renewal,
  RuleCheck,
  TurnAnswer,
} from "./protocol.ts";
import type { RateLimiter } from "./rate-limiter.ts";

/** What the client needs of a namespace; a real `DurableObjectNamespace<RateLimiter>` fits. */
export type LimiterNamespace = Pick<DurableObjectNamespace<RateLimiter>, "idFromName" | "get">;

/** Errors the runtime marks on Durable Object failures. */
type RuntimeError = Error & { retryable?: boolean; overloaded?: boolean };

const stubFor = (ns: LimiterNamespace, name: string) => ns.get(ns.idFromName(name));

/** A deadline `ms` from now: `expired` resolves to "timeout" then, unless `clear()` comes first. */
export function deadline(ms: number): { expired: Promise<"timeout">; clear: () => void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), ms);
  });
  return { expired, clear: () => timer !== undefined && clearTimeout(timer) };
}

/** One check of one key: the object's name, its rules, and how long the call may take. */
export type KeyCheck = {
  name: string;
  rules: RuleCheck[];
  /** What is left of the request's deadline: the call, retry included, must finish within it. */
  leftMs: number;
  /** The deadline the call is part of, for messages, and how long a late answer is watched for. */
  timeoutMs: number;
};

/**
 * Checks a key's rules in its object. One retry, with a fresh stub, is made
 * when the error is `retryable` and not `overloaded`.
 */
export async function checkKey(
  ns: LimiterNamespace,
  check: KeyCheck,
  options: CheckOptions = {},
): Promise<LimiterOutcome> {
  const decision = deadline(check.leftMs);
  let firstError: string | undefined;
  try {
    for (let attempts = 1; ; attempts++) {
      // A retry does not return lease units again: the failed attempt may have taken them back already.
      const sent = attempts === 1 ? options : { ...options, returns: undefined };
      const tried = await attempt(stubFor(ns, check.name), check, sent, decision.expired);
      if (tried.kind === "timeout") return timedOut(tried.call, check, attempts);
      if (tried.kind === "answer") {
        const { result } = tried;
        return firstError === undefined
          ? { ok: true, result, attempts }
          : { ok: true, result, attempts, retriedAfter: firstError };
      }
      const { error } = tried;
      const message = String(error?.message ?? error);
      if (error?.overloaded) return { ok: false, reason: "overloaded", message, attempts };
      if (!error?.retryable || attempts > 1) return { ok: false, reason: "error", message, attempts };
      firstError = message;
    }
  } finally {
    decision.clear();
  }
}

/** How one attempt ended: the object's answer, its error, or the deadline (with the call, which may still answer). */
type Attempt =
  | { kind: "answer"; result: CheckResult }
  | { kind: "error"; error: RuntimeError }
  | { kind: "timeout"; call: Promise<CheckResult> };

async function attempt(
  stub: ReturnType<LimiterNamespace["get"]>,
  check: KeyCheck,
  options: CheckOptions,
  expired: Promise<"timeout">,
): Promise<Attempt> {
  const call = stub.check(check.rules, options) as Promise<CheckResult>;
  try {
    const result = await Promise.race([call, expired]);
    return result === "timeout" ? { kind: "timeout", call } : { kind: "answer", result };
  } catch (thrown) {
    return { kind: "error", error: thrown as RuntimeError };
  }
}

/**
 * A call past its deadline; what it answers within two timeouts of when it
 * was sent is still read (see `late`): as long as for a call sent with its
 * request's whole time left, however little was left when it was sent (a
 * request that waited for another's call first), so that what the object
 * counts for a request then refused can still be taken back.
 */
function timedOut(call: Promise<CheckResult>, check: KeyCheck, attempts: number): LimiterOutcome {
  const { timeoutMs, leftMs } = check;
  // Watched for a bounded time: a call that never ends must not hold the isolate.
  const late = Promise.race([
    call.catch(() => undefined),
    new Promise<undefined>((resolve) => setTimeout(resolve, Math.max(timeoutMs, 2 * timeoutMs - leftMs))),
  ]);
  return { ok: false, reason: "timeout", message: `no decision within ${timeoutMs}ms`, attempts, late };
}

/** What `call` answers within `ms`, or why it did not: its error, or the deadline. */
export async function withDeadline<T>(
  call: Promise<T>,
  ms: number,
): Promise<{ ok: true; value: T } | { ok: false; message: string }> {
  const answer = deadline(ms);
  try {
    const value = await Promise.race([call, answer.expired]);
    return value === "timeout" ? { ok: false, message: `no answer within ${ms}ms` } : { ok: true, value: value as T };
  } catch (error) {
    return { ok: false, message: String((error as Error)?.message ?? error) };
  } finally {
    answer.clear();
  }
}

/**
 * Takes back counts in an object, within `timeoutMs`. Best effort, as the
 * request was refused anyway (a lost refund only makes the limit stricter
 * for a moment): resolves to whether the object took them, so the caller
 * can count what it had to write off.
 */
export async function refundKey(
  ns: LimiterNamespace,
  name: string,
  refunds: Refund[],
  timeoutMs: number,
): Promise<boolean> {
  return sendToKey(ns, name, (stub) => stub.refund(refunds), timeoutMs);
}

/** Charges counts to a key's object (see `RateLimiter.charge`); resolves to whether they arrived. */
export function chargeKey(ns: LimiterNamespace, name: string, charges: Refund[], timeoutMs: number): Promise<boolean> {
  return sendToKey(ns, name, (stub) => stub.charge(charges), timeoutMs);
}

async function sendToKey(
  ns: LimiterNamespace,
  name: string,
  send: (stub: ReturnType<LimiterNamespace["get"]>) => Promise<unknown>,
  timeoutMs: number,
): Promise<boolean> {
  try {
    return (await withDeadline(send(stubFor(ns, name)), timeoutMs)).ok;
  } catch {
    return false; // the stub itself could not be made
  }
}

/** A call's answer within its deadline, or why there was none. */
export type Answered<T> = { ok: true; value: T } | { ok: false; message: string };

/** One call to a key's object, within `timeoutMs`; no retry (each of these is either safe to repeat by hand or not). */
async function callKey<T>(
  ns: LimiterNamespace,
  name: string,
  call: (stub: ReturnType<LimiterNamespace["get"]>) => Promise<unknown>,
  timeoutMs: number,
): Promise<Answered<T>> {
  try {
    return await withDeadline(call(stubFor(ns, name)) as Promise<T>, timeoutMs);
  } catch (error) {
    return { ok: false, message: String((error as Error)?.message ?? error) }; // the stub itself could not be made
  }
}

/**
 * Awaits a held request's turn (`CheckResult.held`). `timeoutMs` should
 * reach past the turn: the answer comes then. When the call fails, the
 * caller goes on its own timer at `held.atMs`, which is as safe.
 */
export const awaitTurn = (ns: LimiterNamespace, name: string, bookingId: string, timeoutMs: number) =>
  callKey<TurnAnswer>(ns, name, (stub) => stub.awaitTurn(bookingId), timeoutMs);

/** Gives a held request's place back: its client hung up, or another key refused it. */
export const cancelBooking = (ns: LimiterNamespace, name: string, bookingId: string, timeoutMs: number) =>
  callKey<Cancellation>(ns, name, (stub) => stub.cancelBooking(bookingId), timeoutMs);

/** Asks for a place under a concurrency rule (see `RateLimiter.acquire`). */
export const acquirePlace = (
  ns: LimiterNamespace,
  name: string,
  ruleId: string,
  request: PlaceRequest,
  timeoutMs: number,
) => callKey<PlaceAnswer>(ns, name, (stub) => stub.acquire(ruleId, request), timeoutMs);

/** Awaits a place for a queued request; `timeoutMs` should reach past its deadline. */
export const awaitPlace = (ns: LimiterNamespace, name: string, ticketId: string, timeoutMs: number) =>
  callKey<PlaceWait>(ns, name, (stub) => stub.awaitPlace(ticketId), timeoutMs);

/** Drops a queued request's ticket: its client hung up. */
export const cancelTicket = (ns: LimiterNamespace, name: string, ticketId: string, timeoutMs: number) =>
  callKey<Cancellation>(ns, name, (stub) => stub.cancelTicket(ticketId), timeoutMs);

/** Frees places: their requests ended. A lost release costs a place until it expires (its timeout). */
export const releasePlaces = (ns: LimiterNamespace, name: string, placeIds: string[], timeoutMs: number) =>
  callKey<{ nowMs: number; released: string[]; unknown: string[] }>(
    ns,
    name,
    (stub) => stub.release(placeIds),
    timeoutMs,
  );

/** Renews places still in flight; the answer's `unknown` were taken back (their requests no longer count). */
export const renewPlaces = (ns: LimiterNamespace, name: string, placeIds: string[], timeoutMs: number) =>
  callKey<Renewal>(ns, name, (stub) => stub.renew(placeIds), timeoutMs);

/**
 * Sends an isolate's report on an adaptive rule to the rule's controller
 * (see `RateLimiter.reportHealth`): the answer is the factor now. A lost
 * report costs nothing but that answer: the isolate keeps the factor it
 * knew and reports again at its next turn.
 */
export const reportHealth = (ns: LimiterNamespace, report: HealthReport, timeoutMs: number) =>
  callKey<FactorAnswer>(ns, controllerName(report.rule), (stub) => stub.reportHealth(report), timeoutMs);

/** An adaptive rule's controller and its history since `sinceMs` (null: the rule has never reported). */
export const readController = (ns: LimiterNamespace, ruleId: string, sinceMs: number, timeoutMs: number) =>
  callKey<ControllerView | null>(ns, controllerName(ruleId), (stub) => stub.controllerView(sinceMs), timeoutMs);
