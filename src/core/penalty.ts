/**
 * @module
 * A rule's penalty (`block_for`): once the rule refuses a client, every
 * request of that client under the rule is refused until the penalty ends,
 * however the window slides. A refusal during the penalty does not extend it.
 *
 * Pure: a window's {@link Decision} and the penalty's remaining time in,
 * the decision under the penalty out. No I/O, no clock.
 */
import type { Decision } from "./sliding-window.ts";

/**
 * A window's decision under a penalty with `penaltyMs` still to run (0 or
 * less: none, and the decision is the window's). Refused, and admissible
 * again once the penalty has ended and the window admits: the later of the
 * two waits. Both are exact and, while nothing is admitted, each wait's
 * admissible instants are one interval from its start (the weighted count
 * never rises), so the later is exact too.
 */
export function underPenalty(window: Decision, penaltyMs: number): Decision {
  if (penaltyMs <= 0) return window;
  const waitMs = Math.max(penaltyMs, window.retryAfterMs);
  return { allowed: false, weighted: window.weighted, remaining: 0, retryAfterMs: waitMs, resetMs: waitMs };
}

/** What is left at `nowMs` of a penalty that ends at `untilMs` (0: none): 0 once it has ended. */
export const penaltyLeftMs = (untilMs: number, nowMs: number): number => Math.max(0, untilMs - nowMs);
