/**
 * @module
 * RFC 9457 problem details: every error the limiter itself answers.
 */

export const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded";
export const LIMITER_UNAVAILABLE = "urn:edge-rate-limiter:limiter-unavailable";
export const ORIGIN_UNREACHABLE = "urn:edge-rate-limiter:origin-unreachable";
export const INVALID_CONFIG = "urn:edge-rate-limiter:invalid-config";

export type Problem = { type: string; title: string; status: number; detail: string } & Record<string, unknown>;

/** A problem+json response; `headers` are added to it. */
export function problemResponse(problem: Problem, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(problem), {
    status: problem.status,
    headers: { "Content-Type": "application/problem+json", "Cache-Control": "no-store", ...headers },
  });
}

/** The answer while the configuration is invalid; the problems themselves go to the logs, not to clients. */
export const invalidConfigResponse = (): Response =>
  problemResponse({
    type: INVALID_CONFIG,
    title: "Internal Server Error",
    status: 500,
    detail: "The rate limiter's configuration is invalid; the Worker's logs name each problem.",
  });
