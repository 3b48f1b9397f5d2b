/**
 * @module
 * The objects' answers to one request's calls: read (verdicts, refusals to
 * remember, log lines), and what to take back when the request is turned
 * away or a call answers after its deadline.
 */
import type { BlockedCache } from "./blocked-cache.ts";
import type { Rule } from "./core/rules.ts";
import type { Reported } from "./headers.ts";
import { type LimiterNamespace, refundKey } from "./limiter-client.ts";
import type { LimiterOutcome, Refund } from "./limiter-protocol.ts";
import { keyHashPrefix, logEvent } from "./log.ts";

/** The rules that share one client key, and so one Durable Object. */
export type KeyGroup = { canonical: string; rules: Rule[] };
/** A key group's call to its object: the object's name and what came back. */
export type KeyCall = KeyGroup & { name: string; outcome: LimiterOutcome };

/**
 * Reads the objects' answers: adds their verdicts to `reports`, remembers
 * refusals, and logs every refusal, shadow refusal, retry and failure.
 */
export function readCalls(calls: KeyCall[], blocked: BlockedCache, sentAtMs: number, reports: Reported[]) {
  const closedBy: string[] = [];
  let refused = false;
  for (const call of calls) {
    const { outcome } = call;
    if (!outcome.ok) {
      closedBy.push(...failed(call, outcome));
      continue;
    }
    if (outcome.retriedAfter !== undefined) {
      const [key, rules] = [keyHashPrefix(call.name), call.rules.map((r) => r.id)];
      logEvent(
        { event: "limiter_retried", rules, key, attempts: outcome.attempts, message: outcome.retriedAfter },
        "warn",
      );
    }
    const { nowMs, allowed, verdicts } = outcome.result;
    refused ||= !allowed;
    call.rules.forEach((rule, i) => {
      const verdict = verdicts[i]!;
      if (!verdict.ruleAllows) {
        const repeats =
          rule.action === "block"
            ? blocked.remember(rule, call.canonical, sentAtMs, verdict.retryAfterMs, verdict.weighted)
            : 0;
        logEvent({
          event: rule.action === "log" ? "ratelimit_shadow" : "ratelimit_blocked",
          rule: rule.id,
          key: keyHashPrefix(call.name),
          weighted: Math.round(verdict.weighted * 1000) / 1000, // for people reading logs; decisions are exact
          limit: rule.limit,
          decision: rule.action === "log" ? "would_block" : "blocked",
          ...(repeats > 0 ? { repeats } : {}),
        });
      }
      if (rule.action === "block")
        reports.push({ id: rule.id, limit: rule.limit, periodMs: rule.periodMs, verdict, nowMs });
    });
  }
  return { refused, closedBy };
}

/** Logs a key's failed call; returns the rules that refuse the request because of it. */
function failed(call: KeyCall, outcome: Extract<LimiterOutcome, { ok: false }>): string[] {
  const closedBy: string[] = [];
  for (const rule of call.rules) {
    const closed = rule.action === "block" && rule.onError === "closed";
    if (closed) closedBy.push(rule.id);
    logEvent(
      {
        event: "limiter_unavailable",
        rule: rule.id,
        key: keyHashPrefix(call.name),
        reason: outcome.reason,
        message: outcome.message,
        attempts: outcome.attempts,
        outcome: closed ? "refused" : "forwarded",
      },
      "error",
    );
  }
  return closedBy;
}

/** A refused request counts nowhere: keys that admitted it give their counts back. */
export function refundAdmitted(
  calls: KeyCall[],
  ns: LimiterNamespace,
  background: (task: Promise<unknown>) => void,
): void {
  for (const { name, rules, outcome } of calls) {
    if (!outcome.ok || !outcome.result.allowed) continue;
    const refunds = outcome.result.verdicts
      .map((v, i) => ({ id: rules[i]!.id, bucket: v.bucket }))
      .filter((r) => r.bucket >= 0);
    if (refunds.length > 0) background(refundKey(ns, name, refunds));
  }
}

/**
 * A call that timed out may still decide. Whatever it counted for a request
 * that was then turned away, and any lease it granted (nobody holds it), is
 * taken back once it does.
 */
export function takeBackLate(
  call: KeyCall,
  ns: LimiterNamespace,
  turnedAway: boolean,
  background: (task: Promise<unknown>) => void,
): void {
  const late = call.outcome.ok ? undefined : call.outcome.late;
  if (!late) return;
  background(
    late.then((result) => {
      if (!result?.allowed) return;
      const refunds: Refund[] = [];
      call.rules.forEach((rule, i) => {
        const verdict = result.verdicts[i]!;
        if (turnedAway && verdict.bucket >= 0) refunds.push({ id: rule.id, bucket: verdict.bucket });
        if (result.lease) refunds.push({ id: rule.id, bucket: result.lease.buckets[i]!, count: result.lease.units });
      });
      return refunds.length > 0 ? refundKey(ns, call.name, refunds) : undefined;
    }),
  );
}
