/**
 * @module
 * The limiter's decision as your handler reads it, `c.get("rateLimit")`,
 * and each rule's state in the terms of the `RateLimit` headers (which the
 * client-limits endpoint answers with too). The numbers are worked out by
 * the very functions that write the headers, from the same verdicts.
 */

import type { KindName } from "../core/kinds/kind.ts";
import {
  closestToLimit,
  forThisClient,
  hasReset,
  quotaOf,
  type Reported,
  resetEpochSeconds,
  resetSeconds,
  windowSeconds,
} from "../http/rate-limit-headers.ts";
import { reducedOnly } from "../http/refusals.ts";
import type { Outcome, Reading } from "../isolate/answers.ts";

/** What one rule says of the client, as the `RateLimit` headers say it. */
type RuleCommon = {
  /** The rule's id, as `RateLimit-Policy` names it. */
  id: string;
  /**
   * The quota that applies to this client (`q`): the rule's limit, or an
   * override's, a tier's, or an adaptive rule's current reduced one. In
   * requests, or in units for a rule with a `cost`; a concurrency rule's
   * places; a token bucket's burst.
   */
  limit: number;
  /** What is left of the quota (`r`): after this request, for a decision; now, for the endpoint. */
  remaining: number;
  /** Whether this rule admits the request (for the endpoint: would admit one now). */
  allowed: boolean;
  /** This rule refuses only because its adaptive limit is lowered (the request is shed with a 503). */
  shed: boolean;
};

/**
 * One rule's state for the client: what every rule says, and, for a quota
 * that renews with time (every kind but requests in flight), its window and
 * when it resets. `kind` is the rule's kind: `"window"` (requests per
 * period), `"bucket"` (a token bucket: its limit is its burst, its window
 * its depth), `"quota"` (units per calendar period: its window is the period
 * the client is in) or `"concurrency"` (places for requests in flight, which
 * free when requests end, at no time known in advance).
 */
export type RuleLimit = RuleCommon & {
  kind: KindName;
  /** The policy's window in seconds (`RateLimit-Policy`'s `w`); absent for requests in flight. */
  windowSeconds?: number;
  /**
   * Seconds until the quota resets (`RateLimit`'s `t`), rounded up; when
   * the rule refuses, until a request is admitted again (`Retry-After`).
   * Absent for requests in flight.
   */
  resetSeconds?: number;
  /**
   * The request costs more than this rule ever admits at once: no wait
   * admits it, and there is no reset to name (`resetSeconds` and
   * `resetEpochSeconds` are absent, as `t` and `X-RateLimit-Reset` are).
   */
  never?: true;
  /** The same instant in Unix seconds (`X-RateLimit-Reset`); absent for requests in flight. */
  resetEpochSeconds?: number;
};

/**
 * What the limiter decided for a request, as `c.get("rateLimit")` gives it
 * to your handler (and to `onRefused`, and to a middleware before
 * `rateLimit()` once `next()` returns).
 */
export type RateLimitDecision = {
  /**
   * - `allowed`: the request goes on (the only outcome a handler behind `rateLimit()` sees);
   * - `refused`: 429, over a limit;
   * - `shed`: 503, refused only by an adaptive rule's lowered limit;
   * - `denied`: 403, an override denies the client;
   * - `unavailable`: 503, a rule with `on_error = "closed"` could not be decided;
   * - `gone`: the client hung up while the request waited;
   * - `skipped`: your `skip` let it through, unchecked and uncounted.
   */
  outcome: "allowed" | "refused" | "shed" | "denied" | "unavailable" | "gone" | "skipped";
  /** Whether the limiter held the request (`max_delay`, or in line for a concurrency place) before it went on. */
  held: boolean;
  /** How long it was held, in milliseconds (the `Server-Timing` `dur`); 0 when it was not. */
  heldMs: number;
  /** Whole seconds until a request is admitted again (`Retry-After`), when refused or shed; 0 otherwise. */
  retryAfterSeconds: number;
  /**
   * Every enforcing rule that decided the request, in the order
   * `RateLimit-Policy` lists them; a rule an override lifts (`unlimited`),
   * a shadow rule (`action = "log"`), and a rule whose object could not be
   * asked (`on_error = "open"`) are not among them, as in the headers.
   */
  rules: RuleLimit[];
  /** The rule `RateLimit` and `X-RateLimit-*` describe: the one closest to its limit; undefined with no rules. */
  closest: RuleLimit | undefined;
  /**
   * The rate-limit headers the response gets (`RateLimit-Policy`,
   * `RateLimit`, `X-RateLimit-*`, `Retry-After`, `Server-Timing`). Under a
   * rule with `count` or `cost_header`, what the response settles changes
   * them once it is known: see docs/library.md.
   */
  headers: Readonly<Record<string, string>>;
};

/** The variables `rateLimit()` sets on the context, for `new Hono<{ Variables: RateLimitVariables }>()`. */
export type RateLimitVariables = { rateLimit: RateLimitDecision };

/** Each rule's state, from what the headers are made of, in `RateLimit-Policy`'s order. */
export function ruleLimits(reading: Reading): { rules: RuleLimit[]; closest: RuleLimit | undefined } {
  const { policies, reports } = forThisClient(reading.policies, reading.reports);
  const byId = new Map(reports.map((r) => [r.id, r]));
  const rules: RuleLimit[] = [];
  for (const policy of policies) {
    const report = byId.get(policy.id);
    if (report !== undefined) rules.push(ruleLimit(report));
  }
  const closestId = closestToLimit(reports)?.id;
  return { rules, closest: rules.find((rule) => rule.id === closestId) };
}

/** One rule's verdict in the headers' terms. */
function ruleLimit(r: Reported): RuleLimit {
  const common = {
    kind: r.kind,
    id: r.id,
    limit: quotaOf(r),
    remaining: r.verdict.remaining,
    allowed: r.verdict.ruleAllows,
    shed: r.verdict.reduced === true,
  };
  const w = windowSeconds(r);
  if (w === null) return r.verdict.never ? { ...common, never: true } : common;
  if (!hasReset(r)) return { ...common, windowSeconds: w, never: true };
  return { ...common, windowSeconds: w, resetSeconds: resetSeconds(r), resetEpochSeconds: resetEpochSeconds(r) };
}

/** The headers of a refusal that carry its limits: the decision's `headers`, and what `onRefused`'s answer gets. */
export const REFUSAL_HEADERS = [
  "RateLimit-Policy",
  "RateLimit",
  "X-RateLimit-Limit",
  "X-RateLimit-Remaining",
  "X-RateLimit-Reset",
  "Retry-After",
];

/** A decision as the handler reads it. */
export function decisionOf(outcome: Outcome): RateLimitDecision {
  if (outcome.kind === "allow") {
    const { rules, closest } = outcome.reading === undefined ? NONE() : ruleLimits(outcome.reading);
    const heldMs = outcome.heldMs ?? 0;
    const held = outcome.heldMs !== undefined;
    return { outcome: "allowed", held, heldMs, retryAfterSeconds: 0, rules, closest, headers: outcome.headers };
  }
  const { response } = outcome;
  const reading = outcome.reading?.();
  const { rules, closest } = reading === undefined ? NONE() : ruleLimits(reading);
  const headers: Record<string, string> = {};
  for (const name of REFUSAL_HEADERS) {
    const value = response.headers.get(name);
    if (value !== null) headers[name] = value;
  }
  const retryAfterSeconds = Number(headers["Retry-After"] ?? 0);
  return {
    outcome: refusedAs(response.status, reading),
    held: false,
    heldMs: 0,
    retryAfterSeconds,
    rules,
    closest,
    headers,
  };
}

/** A request `skip` let through: nothing checked, nothing counted, no headers. */
export const skipped = (): RateLimitDecision => ({
  outcome: "skipped",
  held: false,
  heldMs: 0,
  retryAfterSeconds: 0,
  rules: [],
  closest: undefined,
  headers: {},
});

const NONE = (): { rules: RuleLimit[]; closest: undefined } => ({ rules: [], closest: undefined });

function refusedAs(status: number, reading: Reading | undefined): RateLimitDecision["outcome"] {
  if (status === 429) return "refused";
  if (status === 403) return "denied";
  if (status === 503) return reading !== undefined && reducedOnly(reading.reports) ? "shed" : "unavailable";
  return "gone";
}
