/**
 * @module
 * One request's decision: the rules that match, one Durable Object call per
 * distinct client key, and the answer: go on (with headers), 429 or 503.
 */
import type { Settings } from "./config.ts";
import { describePeriod } from "./core/duration.ts";
import { canonicalKey, hashKey } from "./core/keys.ts";
import { normalizePath } from "./core/paths.ts";
import { type Rule, ruleMatches } from "./core/rules.ts";
import { type Reported, rateLimitHeaders, retryAfter } from "./headers.ts";
import { checkKey, type LimiterNamespace, type LimiterOutcome, refundKey, toRuleCheck } from "./limiter-client.ts";
import { keyHashPrefix, logEvent } from "./log.ts";
import { LIMITER_UNAVAILABLE, problemResponse, QUOTA_EXCEEDED } from "./problem.ts";
import { requestFacts } from "./request-facts.ts";

export type Outcome =
  /** Go on to the origin, then add these headers to its response. */
  | { kind: "allow"; headers: Record<string, string> }
  /** Answer this instead; the origin is not contacted. */
  | { kind: "refuse"; response: Response };

/** The parts of a request a decision reads. */
export type Call = { request: Request; url: URL };

type KeyCall = { name: string; rules: Rule[]; outcome: LimiterOutcome };

/**
 * Decides one request. `background` receives work that must not delay the
 * answer (refunds of counts taken by a key whose request another key refused).
 */
export async function decide(
  { request, url }: Call,
  settings: Settings,
  ns: LimiterNamespace,
  background: (task: Promise<unknown>) => void,
): Promise<Outcome> {
  const path = normalizePath(url.pathname);
  const matched = settings.rules.filter((rule) => ruleMatches(rule, request.method, path));
  if (matched.length === 0) return { kind: "allow", headers: {} };

  const facts = requestFacts(request, url, path, settings);
  const byKey = new Map<string, Rule[]>();
  for (const rule of matched) {
    const canonical = canonicalKey(rule.key, facts);
    byKey.set(canonical, [...(byKey.get(canonical) ?? []), rule]);
  }
  const calls = await Promise.all(
    [...byKey].map(async ([canonical, rules]): Promise<KeyCall> => {
      const name = await hashKey(canonical);
      return { name, rules, outcome: await checkKey(ns, name, rules.map(toRuleCheck), settings.timeoutMs) };
    }),
  );

  const reports: Reported[] = [];
  const closedBy: string[] = [];
  let refused = false;
  for (const { name, rules, outcome } of calls) {
    if (!outcome.ok) {
      for (const rule of rules) {
        const closed = rule.action === "block" && rule.onError === "closed";
        if (closed) closedBy.push(rule.id);
        logEvent(
          {
            event: "limiter_unavailable",
            rule: rule.id,
            key: keyHashPrefix(name),
            reason: outcome.reason,
            message: outcome.message,
            attempts: outcome.attempts,
            outcome: closed ? "refused" : "forwarded",
          },
          "error",
        );
      }
      continue;
    }
    const { nowMs, allowed, verdicts } = outcome.result;
    refused ||= !allowed;
    rules.forEach((rule, i) => {
      const verdict = verdicts[i]!;
      if (!verdict.ruleAllows) {
        logEvent({
          event: rule.action === "log" ? "ratelimit_shadow" : "ratelimit_blocked",
          rule: rule.id,
          key: keyHashPrefix(name),
          weighted: verdict.weighted,
          limit: rule.limit,
          decision: rule.action === "log" ? "would_block" : "blocked",
        });
      }
      if (rule.action === "block")
        reports.push({ id: rule.id, limit: rule.limit, periodMs: rule.periodMs, verdict, nowMs });
    });
  }

  if (refused || closedBy.length > 0) refundAdmitted(calls, ns, background);
  if (refused) return { kind: "refuse", response: tooManyRequests(reports) };
  if (closedBy.length > 0) {
    return {
      kind: "refuse",
      response: problemResponse(
        {
          type: LIMITER_UNAVAILABLE,
          title: "Service Unavailable",
          status: 503,
          detail: "The rate limiter could not decide, and this endpoint does not go on without a decision.",
          "failed-policies": closedBy,
        },
        rateLimitHeaders(reports),
      ),
    };
  }
  return { kind: "allow", headers: rateLimitHeaders(reports) };
}

/** A refused request counts nowhere: keys that admitted it give their counts back. */
function refundAdmitted(calls: KeyCall[], ns: LimiterNamespace, background: (task: Promise<unknown>) => void): void {
  for (const { name, rules, outcome } of calls) {
    if (!outcome.ok || !outcome.result.allowed) continue;
    const refunds = outcome.result.verdicts
      .map((v, i) => ({ id: rules[i]!.id, bucket: v.bucket }))
      .filter((r) => r.bucket >= 0);
    if (refunds.length > 0) background(refundKey(ns, name, refunds));
  }
}

function tooManyRequests(reports: Reported[]): Response {
  const violated = reports.filter((r) => !r.verdict.ruleAllows);
  const wait = retryAfter(violated);
  const names = violated.map((r) => `"${r.id}" (${r.limit} per ${describePeriod(r.periodMs)})`).join(", ");
  return problemResponse(
    {
      type: QUOTA_EXCEEDED,
      title: "Too Many Requests",
      status: 429,
      detail: `Rate limit exceeded: ${names}. Retry in ${wait} second${wait === 1 ? "" : "s"}.`,
      retry_after: wait,
      "violated-policies": violated.map((r) => r.id),
    },
    { ...rateLimitHeaders(reports), "Retry-After": String(wait) },
  );
}
