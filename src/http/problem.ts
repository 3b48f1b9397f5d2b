/**
 * @module
 * RFC 9457 problem details: every error the limiter itself answers.
 */

export const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/** draft-ietf-httpapi-ratelimit-headers-11, section 5.2: the quota is lowered for a while (an adaptive rule's reduction). */
export const TEMPORARY_REDUCED_CAPACITY = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";
export const LIMITER_UNAVAILABLE = "urn:edge-rate-limiter:limiter-unavailable";
export const ORIGIN_UNREACHABLE = "urn:edge-rate-limiter:origin-unreachable";
export const INVALID_CONFIG = "urn:edge-rate-limiter:invalid-config";
export const DENIED = "urn:edge-rate-limiter:denied";
export const LOOP_DETECTED = "urn:edge-rate-limiter:loop-detected";

export type Problem = { type: string; title: string; status: number; detail: string } & Record<string, unknown>;

/** A problem+json answer, not yet sent: it can be sent as many times as needed. */
export type ProblemParts = { status: number; body: string; headers: Headers };

/** The body and headers of a problem+json response; `headers` are added to it. */
export function problemParts(problem: Problem, headers: Record<string, string> = {}): ProblemParts {
  return {
    status: problem.status,
    body: JSON.stringify(problem),
    headers: new Headers({ "Content-Type": "application/problem+json", "Cache-Control": "no-store", ...headers }),
  };
}

/** A response from its parts; the parts stay unchanged, ready to send again. */
export const send = ({ status, body, headers }: ProblemParts): Response => new Response(body, { status, headers });

/** A problem+json response; `headers` are added to it. */
export const problemResponse = (problem: Problem, headers: Record<string, string> = {}): Response =>
  send(problemParts(problem, headers));

/** The answer while the configuration is invalid; the problems themselves go to the logs, not to clients. */
export const invalidConfigResponse = (): Response =>
  problemResponse({
    type: INVALID_CONFIG,
    title: "Internal Server Error",
    status: 500,
    detail: "The rate limiter's configuration is invalid; the Worker's logs name each problem.",
  });
