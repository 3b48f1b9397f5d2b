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

/** How long a call may take: what is left of its request's deadline, and the deadline it is part of, for messages. */
export type CallDeadline = { leftMs: number; timeoutMs: number };

/**
 * Checks `rules` in the object named `name`. The call, retry included, must
 * finish within `within.leftMs`. One retry, with a fresh stub, is made when
 * the error is `retryable` and not `overloaded`.
 */
export async function checkKey(
  ns: LimiterNamespace,
  name: string,
  rules: RuleCheck[],
  within: CallDeadline,
  options: CheckOptions = {},
): Promise<LimiterOutcome> {
  const { leftMs, timeoutMs } = within;
  const decision = deadline(leftMs);
  let attempts = 0;
  let firstError: string | undefined;
  try {
    for (;;) {
      attempts++;
      try {
        // A retry does not return lease units again: the failed attempt may have taken them back already.
        const sent = attempts === 1 ? options : { ...options, returns: undefined };
        const call = stubFor(ns, name).check(rules, sent) as Promise<CheckResult>;
        const result = await Promise.race([call, decision.expired]);
        if (result === "timeout") {
          // Watched for one more timeout at most: a call that never ends must not hold the isolate.
          const late = Promise.race([
            call.catch(() => undefined),
            new Promise<undefined>((resolve) => setTimeout(resolve, timeoutMs)),
          ]);
          return { ok: false, reason: "timeout", message: `no decision within ${timeoutMs}ms`, attempts, late };
        }
        return firstError === undefined
          ? { ok: true, result, attempts }
          : { ok: true, result, attempts, retriedAfter: firstError };
      } catch (thrown) {
        const error = thrown as RuntimeError;
        const message = String(error?.message ?? error);
        if (error?.overloaded) return { ok: false, reason: "overloaded", message, attempts };
        if (!error?.retryable || attempts > 1) return { ok: false, reason: "error", message, attempts };
        firstError = message;
      }
    }
  } finally {
    decision.clear();
  }
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
  try {
    return (await withDeadline(stubFor(ns, name).refund(refunds), timeoutMs)).ok;
  } catch {
    return false; // the stub itself could not be made
  }
}
