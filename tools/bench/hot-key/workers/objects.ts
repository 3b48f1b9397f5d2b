/**
 * @module
 * The `objects` service of the hot-key bench: the shipped `RateLimiter`,
 * with every check counted by the rule ids it carried, read back at
 * `GET /checks`.
 *
 * A check whose first rule's id starts with `serial-<ms>-` stands for an
 * object that takes `<ms>` per check: checks of one object are served one
 * after another, each `<ms>` after the previous one ended, so the object
 * decides at most 1000/`<ms>` checks a second and a queue forms in front of
 * it when more come. Its capacity can then be set far below what the edges
 * of this machine can send, as a real object's is below what the many
 * machines of a real edge can send. The check itself runs as shipped,
 * synchronously, at its turn. `GET /queued`: the most checks that waited at
 * once, by rule ids; `GET /batches`: checks that carried a batch, and the
 * requests they decided.
 */
import type { CheckOptions, CheckResult, RuleCheck } from "../../../../src/object/protocol.ts";
import { RateLimiter as ShippedRateLimiter } from "../../../../src/object/rate-limiter.ts";

const SERIAL = /^serial-(\d+)-/;

/** Checks received since this isolate started, by the rule ids they carried (joined with ","). */
const checks = new Map<string, number>();
/** Per rule ids, the most checks waiting for their turn at once. */
const queued = new Map<string, number>();
/** Per rule ids: checks that carried a batch of more than one request, and the requests those decided. */
const batches = new Map<string, { checks: number; requests: number }>();

export class RateLimiter extends ShippedRateLimiter {
  private tail: Promise<unknown> = Promise.resolve();
  private waiting = 0;

  override check(rules: RuleCheck[], options?: CheckOptions): CheckResult {
    const key = rules.map((rule) => rule.id).join(",");
    checks.set(key, (checks.get(key) ?? 0) + 1);
    if ((options?.batch ?? 1) > 1) {
      const seen = batches.get(key) ?? { checks: 0, requests: 0 };
      seen.checks++;
      seen.requests += options!.batch!;
      batches.set(key, seen);
    }
    const ms = Number(SERIAL.exec(rules[0]?.id ?? "")?.[1] ?? 0);
    if (ms === 0) return super.check(rules, options);
    this.waiting++;
    queued.set(key, Math.max(queued.get(key) ?? 0, this.waiting));
    const turn = this.tail
      .then(() => new Promise((resolve) => setTimeout(resolve, ms)))
      .then(() => {
        this.waiting--;
        return super.check(rules, options);
      });
    this.tail = turn.catch(() => undefined);
    // An RPC caller awaits whatever comes back; only the shipped class's signature says otherwise.
    return turn as unknown as CheckResult;
  }
}

export default {
  fetch: (request: Request): Response => {
    const path = new URL(request.url).pathname;
    if (path === "/checks") return Response.json(Object.fromEntries(checks));
    if (path === "/queued") return Response.json(Object.fromEntries(queued));
    if (path === "/batches") return Response.json(Object.fromEntries(batches));
    return new Response("objects service of the hot-key bench\n", { status: 404 });
  },
};
