/**
 * @module
 * The `objects` service of the multi-isolate harness: the real `RateLimiter`
 * Durable Object, slowed down on request so that a test can hold a call in
 * flight while it does something else (hangs up a client, kills workerd),
 * and counted, so that a test can tell how many calls the edges made.
 *
 * A check with a rule whose id starts with `slow-<ms>-` waits that long
 * first. Only the wait comes before the check; the check itself runs as
 * shipped, synchronously, so it stays atomic.
 */

import type { CheckOptions, CheckResult, RuleCheck } from "../../../src/object/protocol.ts";
import { RateLimiter as ShippedRateLimiter } from "../../../src/object/rate-limiter.ts";

const SLOW = /^slow-(\d+)-/;

/** The longest wait asked for by any rule of the check, in milliseconds. */
const delayOf = (rules: RuleCheck[]): number =>
  Math.max(0, ...rules.map((rule) => Number(SLOW.exec(rule.id)?.[1] ?? 0)));

/**
 * Checks received, by the rule ids they carried (joined with ","), since
 * this isolate started: every object of the namespace runs in it, and so
 * does the fetch handler below that reports them.
 */
const checks = new Map<string, number>();

export class RateLimiter extends ShippedRateLimiter {
  override check(rules: RuleCheck[], options?: CheckOptions): CheckResult {
    const rulesKey = rules.map((rule) => rule.id).join(",");
    checks.set(rulesKey, (checks.get(rulesKey) ?? 0) + 1);
    const ms = delayOf(rules);
    if (ms === 0) return super.check(rules, options);
    const delayed = new Promise<void>((resolve) => setTimeout(resolve, ms)).then(() => super.check(rules, options));
    // An RPC caller awaits whatever comes back, so a promise of the result is as good as the result;
    // only the shipped class's signature says otherwise.
    return delayed as unknown as CheckResult;
  }
}

export default {
  /** `GET /checks`: the counts above, as JSON. */
  fetch: (request: Request): Response =>
    new URL(request.url).pathname === "/checks"
      ? Response.json(Object.fromEntries(checks))
      : new Response("objects service of the edge harness\n", { status: 404 }),
};
