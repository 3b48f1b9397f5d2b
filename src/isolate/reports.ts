/**
 * @module
 * Reading how a request's parts were settled (its key groups' counted
 * rules, and its places): the verdict each rule reports in the rate-limit
 * headers, whether the request is refused, and the rules that fail closed. Refusals, retries and
 * failures are logged here (a refusal at most once per key and rule per
 * interval).
 */
import { quotaUnder, type Rule } from "../core/rules.ts";
import type { Reported } from "../http/rate-limit-headers.ts";
import { costOf, type FailureReason, type RuleVerdict } from "../object/protocol.ts";
import { keyHashPrefix, logEvent } from "../observe/log.ts";
import type { ClientKeys } from "./client-keys.ts";
import { type Applied, failureOf, nameOf, type Part, type RuleRefusal, verdictOf } from "./vocabulary.ts";

/** A rule's verdict as the rate-limit headers report it. */
export const report = (rule: Rule, verdict: RuleVerdict, nowMs: number): Reported => ({
  id: rule.id,
  kind: rule.kind,
  limit: verdict.limit ?? rule.limit,
  quota: verdict.own === undefined ? rule.quota : quotaUnder(rule, verdict.own),
  verdict,
  nowMs,
  ...(costOf(rule) > 1 ? { cost: costOf(rule) } : {}),
  ...(rule.priority === undefined ? {} : { priority: rule.priority }),
});

/** A known refusal as the object's verdict, with the wait that is left. */
export function knownReport({ rule, refusal }: RuleRefusal, nowMs: number): Reported {
  // A refusal that no wait lifts (`never`) is remembered past its own wait, which is then only the bucket's refill.
  const waitMs = Math.max(0, refusal.retryAtMs - nowMs);
  const verdict: RuleVerdict = {
    allowed: false,
    ruleAllows: false,
    weighted: refusal.weighted,
    remaining: 0,
    retryAfterMs: waitMs,
    resetMs: waitMs,
    counted: null,
    holdsForMs: refusal.untilMs - nowMs,
    ...withoutUndefined(refusal.applied),
  };
  return report(rule, verdict, nowMs);
}

const withoutUndefined = <T extends object>(fields: T): Partial<T> =>
  Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)) as Partial<T>;

/** Logs a refusal answered from what the isolate knows (throttled like the object's). */
export function logKnown({ rule, digest, refusal }: RuleRefusal, keys: ClientKeys, nowMs: number): void {
  const { name, weighted, applied } = refusal;
  logRefusal({ rule, digest, name, weighted, applied }, keys, nowMs);
}

/**
 * Reads how a request's parts were settled: the verdicts for the headers,
 * whether the request is refused, and the rules that refuse it because
 * their object failed. Logs refusals and shadow rules' would-be refusals
 * (at most one line per key and rule per interval), retries and failures.
 * A rule's verdict is reported when it enforces, or an override denies the
 * client.
 */
export function readParts(parts: readonly Part[], keys: ClientKeys, nowMs: number) {
  const reports: Reported[] = [];
  const closedBy: string[] = [];
  let refused = false;
  for (const part of parts) {
    const { group, rules, settlement: s } = part;
    const failure = failureOf(s);
    if (failure !== null) {
      closedBy.push(...failed(rules, nameOf(s)!, failure));
      continue;
    }
    switch (s.via) {
      case "known":
        refused = true;
        for (const k of s.known) {
          logKnown(k, keys, nowMs);
          reports.push(knownReport(k, nowMs));
        }
        continue;
      case "gone":
        refused = true; // its client hung up: nothing of it is reported (decide answers it before this)
        continue;
      case "call":
        if (s.call.outcome.ok) {
          const { result, attempts, retriedAfter } = s.call.outcome;
          if (retriedAfter !== undefined) {
            const ids = rules.map((r) => r.id);
            logEvent(
              {
                event: "limiter_retried",
                rules: ids,
                key: keyHashPrefix(s.call.name),
                attempts,
                message: retriedAfter,
              },
              "warn",
            );
          }
          refused ||= !result.allowed;
        }
        break;
      case "no place":
        refused ||= rules[0]!.action === "block" || s.refusal.override === "deny";
        break;
    }
    // A lease unit, an answer, a held request's turn (its verdicts are its admission then), a place or none.
    const name = nameOf(s);
    rules.forEach((rule, j) => {
      const verdict = verdictOf(part, j)!;
      if (!verdict.ruleAllows && name !== null && s.via !== "lease" && s.via !== "held") {
        const { weighted } = verdict;
        logRefusal({ rule, digest: group.digest, name, weighted, applied: verdict }, keys, nowMs);
      }
      if (rule.action === "block" || verdict.override === "deny") reports.push(report(rule, verdict, nowMs));
    });
  }
  return { reports, refused, closedBy };
}

/** One rule's refusal of one key, as a log line names it, with what applied to the client (an override, a tier). */
type Refused = { rule: Rule; digest: string; name: string; weighted: number; applied: Applied };

/**
 * Logs a refusal, or a shadow rule's would-be refusal, unless a line for this key and rule went out lately.
 * The limit is the one that refused the client: its override's or tier's, else the rule's; a deny has none.
 */
function logRefusal({ rule, digest, name, weighted, applied }: Refused, keys: ClientKeys, nowMs: number) {
  const note = keys.noteLine(digest, "refusal", rule, nowMs);
  if (note === null) return;
  const { limit, override, tier } = applied;
  logEvent({
    event: rule.action === "log" ? "ratelimit_shadow" : "ratelimit_blocked",
    rule: rule.id,
    key: keyHashPrefix(name),
    weighted: Math.round(weighted * 1000) / 1000, // for people reading logs; decisions are exact
    ...(override === "deny" ? {} : { limit: limit ?? rule.limit }),
    ...(override !== undefined ? { override } : {}),
    ...(tier !== undefined ? { tier } : {}),
    decision: rule.action === "log" ? "would_block" : "blocked",
    ...(note.repeats > 0 ? { repeats: note.repeats } : {}),
  });
}

type Failure = { reason: FailureReason; message: string; attempts: number };

/** Logs a key's failed call; returns the rules that refuse the request because of it. */
function failed(rules: readonly Rule[], name: string, failure: Failure): string[] {
  const closedBy: string[] = [];
  for (const rule of rules) {
    const closed = rule.action === "block" && rule.onError === "closed";
    if (closed) closedBy.push(rule.id);
    logEvent(
      {
        event: "limiter_unavailable",
        rule: rule.id,
        key: keyHashPrefix(name),
        reason: failure.reason,
        message: failure.message,
        attempts: failure.attempts,
        outcome: closed ? "refused" : "forwarded",
      },
      "error",
    );
  }
  return closedBy;
}
