/**
 * @module
 * Rate-limit response headers, one small function per specification:
 * `RateLimit-Policy` and `RateLimit` as draft-ietf-httpapi-ratelimit-headers-11
 * defines them (Structured Field Lists of String items with Integer
 * parameters), and the legacy `X-RateLimit-*`.
 */
import type { KindName, Quota } from "../core/kinds/kind.ts";
import type { Priority } from "../core/priorities.ts";
import type { RuleVerdict } from "../object/protocol.ts";

/**
 * What a `RateLimit-Policy` entry says of a rule: its id and kind, its limit (`q`),
 * and its quota as its kind says it (the window `w` of a quota that renews
 * with time; a quota unit `qu` when it is not requests).
 */
export type Policy = {
  id: string;
  kind: KindName;
  limit: number;
  quota: Quota;
  /** `w` for this client now, when its verdict says it (a calendar quota's period), in milliseconds. */
  windowMs?: number;
};

/**
 * A rule's verdict, with what the headers need of the rule: what one
 * request costs under it, when more than 1 (and, under an adaptive rule
 * with priorities, the request's priority).
 */
export type Reported = Policy & { verdict: RuleVerdict; nowMs: number; cost?: number; priority?: Priority };

const seconds = (ms: number): number => Math.ceil(ms / 1000);

/**
 * A policy's window in milliseconds, as `RateLimit-Policy`'s `w` says it:
 * under the policy's limit (the client's, for a kind whose window goes with
 * its limit: a token bucket's depth), at `nowMs` for a quota whose window
 * is not the same at every instant (a verdict's own comes first); null for
 * a quota that does not renew with time.
 */
export function windowMsOf(p: Policy | Reported, nowMs?: number): number | null {
  if (p.quota.windowMs === undefined) return null;
  const at = nowMs ?? ("nowMs" in p ? p.nowMs : undefined);
  return (
    ("verdict" in p ? p.verdict.windowMs : undefined) ??
    p.windowMs ??
    p.quota.windowFor?.(p.limit) ??
    (at === undefined ? undefined : p.quota.windowAt?.(at)) ??
    p.quota.windowMs
  );
}

/** {@link windowMsOf} in whole seconds, rounded up, at least 1: `w` itself. */
export function windowSeconds(p: Policy | Reported, nowMs?: number): number | null {
  const ms = windowMsOf(p, nowMs);
  return ms === null ? null : Math.max(1, seconds(ms));
}

/**
 * The instant a rule's quota resets, to the second, as a problem's detail
 * names it: the boundary itself where the verdict names one (a calendar
 * quota's), else `nowMs` + `t`.
 */
export const resetAtMs = (r: Reported): number =>
  r.verdict.resetAtMs ?? Math.round((r.nowMs + r.verdict.resetMs) / 1000) * 1000;

/** A policy's quota `q`: its limit, or what its kind says the limit gives (a token bucket's burst). */
export const quotaOf = (p: Policy): number => p.quota.quota?.(p.limit) ?? p.limit;

/** Whole seconds until a rate rule's quota resets, as `RateLimit`'s `t` says it. */
export const resetSeconds = (r: Reported): number => seconds(r.verdict.resetMs);

/**
 * The Unix second at which a rate rule's quota resets, as `X-RateLimit-Reset`
 * says it: the boundary the verdict names (a calendar quota's, on the
 * object's clock), else the caller's `nowMs` + `t`, rounded up.
 */
export const resetEpochSeconds = (r: Reported): number => seconds(r.verdict.resetAtMs ?? r.nowMs + r.verdict.resetMs);

/**
 * `RateLimit-Policy`, listing every policy that applied: its quota `q`, its
 * unit `qu` when it is not requests (`concurrent-requests`), and its window
 * `w` when it renews with time (a rate's; requests in flight have none).
 * @see https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-ratelimit-headers-11#section-3
 * @example `"api-per-ip";q=100;w=60, "completions";q=2;qu="concurrent-requests"`
 */
export const rateLimitPolicy = (policies: Policy[], nowMs?: number): string =>
  policies.map((p) => policyEntry(p, nowMs)).join(", ");

const policyEntry = (p: Policy, nowMs: number | undefined): string => {
  const { unit } = p.quota;
  const w = windowSeconds(p, nowMs);
  return `"${p.id}";q=${quotaOf(p)}${unit === undefined ? "" : `;qu="${unit}"`}${w === null ? "" : `;w=${w}`}`;
};

/**
 * `RateLimit` for one policy: the available quota `r`, and the effective
 * window `t`, the seconds within which no more than `r` can be used (the
 * verdict's `resetMs`, rounded up; on a refusal the wait of `Retry-After`);
 * for a concurrency rule the places free, and no `t` (a place frees when a
 * request ends, not at a time the limiter knows); no `t` either for a
 * request that no wait would admit.
 * @see https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-ratelimit-headers-11#section-4
 * @example `"api-per-ip";r=42;t=17`, `"completions";r=1`
 */
export const rateLimit = (r: Reported): string =>
  hasReset(r) ? `"${r.id}";r=${r.verdict.remaining};t=${resetSeconds(r)}` : `"${r.id}";r=${r.verdict.remaining}`;

/**
 * Whether a verdict has a reset to name (`t`, `X-RateLimit-Reset`): not for
 * requests in flight (a place frees when a request ends, at no time the
 * limiter knows), nor for a request no wait would admit (it costs more than
 * the rule ever admits at once): a `t` of 0 would tell its client "now".
 */
export const hasReset = (r: Reported): boolean => r.quota.windowMs !== undefined && r.verdict.never !== true;

/**
 * The policy closest to its limit: a refusing one first (one that no wait
 * lifts, then the longest wait), then the one with the fewest requests left
 * (its remaining units over what a request costs under it: a rule of cost 3
 * with 7 units left has 2), then the longest effective window (with those
 * requests spent, the next waits for every rule: for the longest), then the
 * fewest units left.
 */
export function closestToLimit(reports: Reported[]): Reported | undefined {
  const refusing = (r: Reported) => (r.verdict.ruleAllows ? 0 : r.verdict.never ? 2 : 1);
  const requestsLeft = (r: Reported) => Math.floor(r.verdict.remaining / (r.cost ?? 1));
  return reports.reduce<Reported | undefined>((best, r) => {
    if (!best) return r;
    const order =
      refusing(r) - refusing(best) ||
      (refusing(r) ? r.verdict.retryAfterMs - best.verdict.retryAfterMs : 0) ||
      requestsLeft(best) - requestsLeft(r) ||
      r.verdict.resetMs - best.verdict.resetMs ||
      best.verdict.remaining - r.verdict.remaining;
    return order > 0 ? r : best;
  }, undefined);
}

/** `Retry-After` in whole seconds, rounded up so a retry then is admitted (RFC 9110 §10.2.3). */
export const retryAfter = (reports: Reported[]): number =>
  seconds(Math.max(0, ...reports.map((r) => r.verdict.retryAfterMs)));

/**
 * Every rate-limit header: the policy of every enforcing rule that applied,
 * and the state of the one closest to its limit among those decided; with
 * `legacy`, the `X-RateLimit-*` headers too, as express-rate-limit's
 * `legacyHeaders` sends them.
 */
export function rateLimitHeaders(given: Policy[], decided: Reported[], legacy = true): Record<string, string> {
  const { policies, reports } = forThisClient(given, decided);
  const closest = closestToLimit(reports);
  if (!closest) return policies.length > 0 ? { "RateLimit-Policy": rateLimitPolicy(policies) } : {};
  const policy = rateLimitPolicy(policies, closest.nowMs);
  if (!legacy) return { "RateLimit-Policy": policy, RateLimit: rateLimit(closest) };
  if (!hasReset(closest)) {
    // Places free when requests end, at no time the limiter knows; a request no wait admits: no reset.
    return {
      "RateLimit-Policy": policy,
      RateLimit: rateLimit(closest),
      "X-RateLimit-Limit": String(quotaOf(closest)),
      "X-RateLimit-Remaining": String(closest.verdict.remaining),
    };
  }
  return {
    "RateLimit-Policy": policy,
    RateLimit: rateLimit(closest),
    "X-RateLimit-Limit": String(quotaOf(closest)),
    "X-RateLimit-Remaining": String(closest.verdict.remaining),
    "X-RateLimit-Reset": String(resetEpochSeconds(closest)),
  };
}

/**
 * The policies and reports as they apply to this client: a rule an override
 * lifts is left out, and a policy shows the limit its verdict says applied
 * (an override's or a tier's, or an adaptive rule's current quota) rather
 * than the rule's.
 */
export function forThisClient(policies: Policy[], reports: Reported[]): { policies: Policy[]; reports: Reported[] } {
  if (!reports.some(appliedOwnLimit)) return { policies, reports };
  const lifted = new Set(reports.filter((r) => r.verdict.override === "unlimited").map((r) => r.id));
  const byId = new Map(reports.map((r) => [r.id, r]));
  const forClient = (p: Policy): Policy => {
    const r = byId.get(p.id);
    if (r === undefined) return p;
    // Its quota as the report has it: a tier's or an override's own fields (a bucket's burst) make it the client's.
    return r.verdict.windowMs === undefined
      ? { ...p, limit: r.limit, quota: r.quota }
      : { ...p, limit: r.limit, quota: r.quota, windowMs: r.verdict.windowMs };
  };
  return {
    policies: policies.filter((p) => !lifted.has(p.id)).map(forClient),
    reports: reports.filter((r) => !lifted.has(r.id)),
  };
}

/**
 * Whether a verdict says what its policy is for this client: a limit other
 * than the rule's own (an override's, or an adaptive rule's reduction), or
 * a window of its own (a calendar quota's period).
 */
const appliedOwnLimit = (r: Reported): boolean =>
  r.verdict.override !== undefined || r.verdict.limit !== undefined || r.verdict.windowMs !== undefined;
