/**
 * @module
 * The mark a forwarded request carries that it passed through this
 * deployment, so that a request that comes back to it is answered
 * `508 Loop Detected` instead of forwarded again.
 */
import { HOP_HEADER } from "../config/origin.ts";
import { logEvent } from "../observe/log.ts";
import { LOOP_DETECTED, problemResponse } from "./problem.ts";

export { HOP_HEADER };

/** Whether a request's hop header holds this deployment's mark: it has passed through here before. */
export function hasPassed(headers: Headers, mark: string): boolean {
  const hops = headers.get(HOP_HEADER);
  if (hops === null) return false;
  return hops.split(",").some((hop) => hop.trim() === mark);
}

const LOG_EVERY_MS = 10_000;
let loggedAtMs = Number.NEGATIVE_INFINITY;

/** The answer to a request that has passed through this deployment before; logged at most once per 10 s per isolate. */
export function loopDetected(url: string, nowMs: number): Response {
  if (nowMs - loggedAtMs >= LOG_EVERY_MS) {
    loggedAtMs = nowMs;
    logEvent(
      {
        event: "loop_detected",
        url,
        message:
          "A request came back to the Worker that forwarded it: set ORIGIN_URL, or put the Worker on a route of the origin's zone.",
      },
      "error",
    );
  }
  return problemResponse({
    type: LOOP_DETECTED,
    title: "Loop Detected",
    status: 508,
    detail:
      "This request has already passed through this rate limiter, which would forward it to itself again. " +
      "Its ORIGIN_URL is unset or points back at it.",
  });
}
