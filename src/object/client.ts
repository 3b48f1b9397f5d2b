/**
 * @module
 * Calls a key's Durable Object under a deadline, with one retry where the
 * runtime says a retry is safe. Failures come back as labelled results.
 */

import type { CheckOptions, CheckResult, LimiterOutcome, Refund, RuleCheck } from "./protocol.ts";
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
      if (tried.kind === "timeout") return timedOut(tried.call, check.timeoutMs, attempts);
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

/** A call past its deadline; what it answers within one more timeout is still read (see `late`). */
function timedOut(call: Promise<CheckResult>, timeoutMs: number, attempts: number): LimiterOutcome {
  // Watched for one more timeout at most: a call that never ends must not hold the isolate.
  const late = Promise.race([
    call.catch(() => undefined),
    new Promise<undefined>((resolve) => setTimeout(resolve, timeoutMs)),
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
