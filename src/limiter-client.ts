/**
 * @module
 * Calls a key's Durable Object under a deadline, with one retry where the
 * runtime says a retry is safe. Failures come back as labelled results.
 */
import type { Rule } from "./core/rules.ts";
import type { CheckOptions, CheckResult, RateLimiter, Refund, RuleCheck } from "./limiter-object.ts";

export type FailureReason = "timeout" | "overloaded" | "error";

export type LimiterOutcome =
  | { ok: true; result: CheckResult; attempts: number }
  | { ok: false; reason: FailureReason; message: string; attempts: number };

/** What the client needs of a namespace; a real `DurableObjectNamespace<RateLimiter>` fits. */
export type LimiterNamespace = Pick<DurableObjectNamespace<RateLimiter>, "idFromName" | "get">;

/** Errors the runtime marks on Durable Object failures. */
type RuntimeError = Error & { retryable?: boolean; overloaded?: boolean };

/** What the object needs to know of a rule. */
export const toRuleCheck = (rule: Rule): RuleCheck => ({
  id: rule.id,
  limit: rule.limit,
  periodMs: rule.periodMs,
  precision: rule.precision,
  strict: rule.strict,
  enforce: rule.action === "block",
});

const checks = new WeakMap<Rule, RuleCheck>();
/** {@link toRuleCheck}, made once per rule rather than per request. */
export function ruleCheckOf(rule: Rule): RuleCheck {
  let check = checks.get(rule);
  if (!check) {
    check = toRuleCheck(rule);
    checks.set(rule, check);
  }
  return check;
}

const stubFor = (ns: LimiterNamespace, name: string) => ns.get(ns.idFromName(name));

/**
 * Checks `rules` in the object named `name`. The whole decision, retry
 * included, must finish within `timeoutMs`. One retry, with a fresh stub, is
 * made when the error is `retryable` and not `overloaded`.
 */
export async function checkKey(
  ns: LimiterNamespace,
  name: string,
  rules: RuleCheck[],
  timeoutMs: number,
  options: CheckOptions = {},
): Promise<LimiterOutcome> {
  let timer: ReturnType<typeof setTimeout> | null = null;
  const deadline = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), timeoutMs);
  });
  let attempts = 0;
  try {
    for (;;) {
      attempts++;
      try {
        // A retry does not return lease units again: the failed attempt may have taken them back already.
        const sent = attempts === 1 ? options : { ...options, returns: undefined };
        const result = await Promise.race([stubFor(ns, name).check(rules, sent), deadline]);
        if (result === "timeout") {
          return { ok: false, reason: "timeout", message: `no decision within ${timeoutMs}ms`, attempts };
        }
        return { ok: true, result: result as CheckResult, attempts };
      } catch (thrown) {
        const error = thrown as RuntimeError;
        const message = String(error?.message ?? error);
        if (error?.overloaded) return { ok: false, reason: "overloaded", message, attempts };
        if (!error?.retryable || attempts > 1) return { ok: false, reason: "error", message, attempts };
      }
    }
  } finally {
    if (timer !== null) clearTimeout(timer);
  }
}

/** Takes back counts in an object; best effort, as the request was refused anyway. */
export async function refundKey(ns: LimiterNamespace, name: string, refunds: Refund[]): Promise<void> {
  try {
    await stubFor(ns, name).refund(refunds);
  } catch {
    // A lost refund only makes the limit stricter for a moment; never worth failing a response.
  }
}
