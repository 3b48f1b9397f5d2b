/**
 * @module
 * The limiter's refusals: 429 over a limit, 503 when an adaptive rule's
 * reduction alone refuses (temporary reduced capacity), 503 when a rule
 * that fails closed could not be decided. The origin is not contacted for
 * any of them.
 */
import {
  DENIED,
  LIMITER_UNAVAILABLE,
  type ProblemParts,
  problemParts,
  problemResponse,
  QUOTA_EXCEEDED,
  send,
  TEMPORARY_REDUCED_CAPACITY,
} from "./problem.ts";
import { type Policy, type Reported, rateLimitHeaders, resetAtMs, retryAfter } from "./rate-limit-headers.ts";

/** 429 with `Retry-After`, the rate-limit headers and a quota-exceeded problem naming every violated policy. */
export const tooManyRequests = (policies: Policy[], reports: Reported[], legacy = true): Response =>
  send(tooManyRequestsParts(policies, reports, legacy));

/**
 * The parts of {@link tooManyRequests}, to send again while the wait reads
 * the same. A request that a rule never admits, whatever the wait (it costs
 * more than a token bucket ever holds), is told so, with no `Retry-After`.
 */
export function tooManyRequestsParts(policies: Policy[], reports: Reported[], legacy = true): ProblemParts {
  const violated = reports.filter((r) => !r.verdict.ruleAllows);
  if (violated.some((r) => r.verdict.never)) return neverParts(policies, reports, violated, legacy);
  const wait = retryAfter(violated);
  const names = violated.map((r) => `"${r.id}" (${quotaOf(r)}${tierOf(r)})`).join(", ");
  return problemParts(
    {
      type: QUOTA_EXCEEDED,
      title: "Too Many Requests",
      status: 429,
      detail: `Rate limit exceeded: ${names}. Retry in ${wait} second${wait === 1 ? "" : "s"}.`,
      retry_after: wait,
      "violated-policies": violated.map((r) => r.id),
    },
    { ...rateLimitHeaders(policies, reports, legacy), "Retry-After": String(wait) },
  );
}

/** A 429 for a request some rule never admits: no wait helps, so there is no `Retry-After`. */
function neverParts(policies: Policy[], reports: Reported[], violated: Reported[], legacy: boolean): ProblemParts {
  const never = violated.filter((r) => r.verdict.never);
  const names = never.map((r) => `"${r.id}" (${quotaOf(r)}${tierOf(r)})`).join(", ");
  return problemParts(
    {
      type: QUOTA_EXCEEDED,
      title: "Too Many Requests",
      status: 429,
      detail: `This request costs more than ${never.length === 1 ? "its rule admits" : "these rules admit"} at once, so it will never be admitted, whatever the wait: ${names}. Send smaller requests; retrying this one will not help.`,
      "violated-policies": violated.map((r) => r.id),
    },
    rateLimitHeaders(policies, reports, legacy),
  );
}

/**
 * Whether a refusal is only the reductions' doing: every rule that refuses
 * does so only because its adaptive factor lowered its limit (the limit as
 * configured would have admitted the request).
 */
export function reducedOnly(reports: Reported[]): boolean {
  let refusing = 0;
  for (const r of reports) {
    if (r.verdict.ruleAllows) continue;
    if (r.verdict.reduced !== true) return false;
    refusing++;
  }
  return refusing > 0;
}

/**
 * 503 with `Retry-After`, the rate-limit headers (`RateLimit-Policy` with
 * the current, reduced quota) and the temporary-reduced-capacity problem
 * of draft-ietf-httpapi-ratelimit-headers-11 (§5.2), naming every reduced policy.
 */
export const reducedCapacity = (policies: Policy[], reports: Reported[], legacy = true): Response =>
  send(reducedCapacityParts(policies, reports, legacy));

/** The parts of {@link reducedCapacity}, to send again while the wait reads the same. */
export function reducedCapacityParts(policies: Policy[], reports: Reported[], legacy = true): ProblemParts {
  const violated = reports.filter((r) => !r.verdict.ruleAllows);
  const wait = retryAfter(violated);
  const names = violated.map((r) => `"${r.id}" (${quotaOf(r)} for now${tierOf(r)})`).join(", ");
  return problemParts(
    {
      type: TEMPORARY_REDUCED_CAPACITY,
      title: "Temporary Reduced Capacity",
      status: 503,
      detail: `Capacity is reduced while the origin recovers: ${names}. Retry in ${wait} second${wait === 1 ? "" : "s"}.`,
      retry_after: wait,
      "violated-policies": violated.map((r) => r.id),
    },
    { ...rateLimitHeaders(policies, reports, legacy), "Retry-After": String(wait) },
  );
}

/**
 * A rule's quota in words, as its kind says it: "100 per minute", "2
 * requests in flight at once", "100000 per month, resets
 * 2026-12-01T00:00:00-05:00" (given the instant it resets, where it resets).
 */
const quotaOf = (r: Reported): string =>
  r.quota.windowMs === undefined ? r.quota.words(r.limit) : r.quota.words(r.limit, resetAtMs(r));

const tierOf = (r: Reported): string => (r.verdict.tier === undefined ? "" : `, tier "${r.verdict.tier}"`);

/** 403: an override denies this client every request under these rules. No rate-limit headers: no wait will help. */
export const denied = (rules: string[]): Response =>
  problemResponse({
    type: DENIED,
    title: "Forbidden",
    status: 403,
    detail: "This client is denied by the API's operator.",
    "denied-by": rules,
  });

/** The rules whose verdicts deny the client: an override says `deny`. */
export const deniedBy = (reports: Reported[]): string[] =>
  reports.filter((r) => r.verdict.override === "deny").map((r) => r.id);

/** 503: a rule with `on_error = "closed"` could not be decided. */
export function limiterUnavailable(
  closedBy: string[],
  policies: Policy[],
  reports: Reported[],
  legacy = true,
): Response {
  return problemResponse(
    {
      type: LIMITER_UNAVAILABLE,
      title: "Service Unavailable",
      status: 503,
      detail: "The rate limiter could not decide, and this endpoint does not go on without a decision.",
      "failed-policies": closedBy,
    },
    rateLimitHeaders(policies, reports, legacy),
  );
}

/**
 * 499 (as nginx names it, "client closed request"): the answer to a request
 * whose client hung up before it was decided. Nobody reads it.
 */
export const clientClosedRequest = (): Response => new Response(null, { status: 499 });
