/**
 * @module
 * RFC 9457 problem details: every error the limiter itself answers; and
 * the log line of an invalid configuration.
 */
import { logEvent } from "../observe/log.ts";

export const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/** draft-ietf-httpapi-ratelimit-headers-11, section 5.2: the quota is lowered for a while (an adaptive rule's reduction). */
export const TEMPORARY_REDUCED_CAPACITY = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";
export const LIMITER_UNAVAILABLE = "urn:edge-rate-limiter:limiter-unavailable";
export const ORIGIN_UNREACHABLE = "urn:edge-rate-limiter:origin-unreachable";
export const INVALID_CONFIG = "urn:edge-rate-limiter:invalid-config";
export const DENIED = "urn:edge-rate-limiter:denied";
export const LOOP_DETECTED = "urn:edge-rate-limiter:loop-detected";
export const BODY_NOT_FORWARDED = "urn:edge-rate-limiter:body-not-forwarded";

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

/** How often an isolate logs the same configuration's errors again, at most. */
export const INVALID_CONFIG_LOG_EVERY_MS = 10_000;
/** When each list of errors was last logged, by its text: a few configurations an isolate has seen at most. */
const loggedAt = new Map<string, number>();

/**
 * Logs a configuration's errors as one `invalid_config` line at error level:
 * at once for a list this isolate has not logged, then at most once per
 * {@link INVALID_CONFIG_LOG_EVERY_MS} while it lasts, however many requests
 * meet it.
 */
export function reportInvalidConfig(errors: readonly string[], nowMs = Date.now()): void {
  const key = errors.join("\n");
  const last = loggedAt.get(key);
  if (last !== undefined && nowMs - last < INVALID_CONFIG_LOG_EVERY_MS) return;
  if (last === undefined && loggedAt.size >= 64) loggedAt.clear();
  loggedAt.set(key, nowMs);
  logEvent(
    {
      event: "invalid_config",
      errors,
      message:
        "The configuration has errors: what each names is left out, and the rest applies; while ORIGIN_URL or the origin secret is invalid, nothing is forwarded (docs/configuration.md, Invalid configuration). Fix them and deploy again: npm run check-config lists them.",
    },
    "error",
  );
}
