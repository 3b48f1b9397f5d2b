/**
 * @module
 * Benchmark variant (l): a Worker that only answers the limiter's own 429,
 * made by the limiter's own code once and sent as the blocked path sends it
 * (the same headers and body as (d) answers, with a wait of the same number
 * of digits), without deciding anything. The physical limit for the blocked
 * path with the limiter's answer: (d) against (l) is what deciding costs,
 * and (l) against (e) what the longer answer costs.
 */
import { windowQuota } from "../../../src/core/kinds/window.ts";
import { type ProblemParts, send } from "../../../src/http/problem.ts";
import { tooManyRequestsParts } from "../../../src/http/refusals.ts";

/** The bench's blocked rule (run.ts): 1 request per hour; its client waits most of an hour. */
const rule = { id: "blocked", kind: "window", limit: 1, quota: windowQuota(3_600_000) } as const;
const WAIT_MS = 3_000_000;
let parts: ProblemParts | undefined;

export default {
  fetch(): Response {
    parts ??= tooManyRequestsParts(
      [rule],
      [
        {
          ...rule,
          nowMs: Date.now(),
          verdict: {
            allowed: false,
            ruleAllows: false,
            weighted: 2,
            remaining: 0,
            retryAfterMs: WAIT_MS,
            resetMs: WAIT_MS,
            counted: null,
            holdsForMs: WAIT_MS,
          },
        },
      ],
    );
    return send(parts);
  },
};
