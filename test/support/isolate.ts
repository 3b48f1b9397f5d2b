/**
 * Isolates for tests: each `createIsolate()` is what one Worker isolate
 * remembers, so a test can run several side by side, give each its own
 * clock, or turn its caches off to see what the object alone decides.
 */
import { parseSettings, type Settings } from "../../src/config/settings.ts";
import { type CountedRule, isCounted, type PlacedRule, type Rule, type RuleOf } from "../../src/core/rules.ts";
import { decide, type Outcome } from "../../src/isolate/decide.ts";
import { createIsolate, type Isolate, type IsolateOptions } from "../../src/isolate/isolate.ts";
import type { Sink } from "../../src/isolate/work.ts";
import type { LimiterNamespace } from "../../src/object/client.ts";

export { createIsolate, type Isolate };

/** An isolate that remembers nothing: every request is decided by its object. */
export const objectAlone = (options: IsolateOptions = {}): Isolate =>
  createIsolate({ ...options, maxLeaseUnits: 0, maxRefusalMs: 0 });

export const settingsFor = (rules: unknown[], timeoutMs?: number): Settings => {
  const parsed = parseSettings({ RULES: rules, ...(timeoutMs ? { LIMITER_TIMEOUT_MS: timeoutMs } : {}) });
  if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
  return parsed.value;
};

/**
 * Background work of the decisions made through {@link decider} (their
 * `pending`), and of what their answers settle, to await when a test needs
 * it done.
 */
export type Background = { tasks: Promise<unknown>[]; sink: Sink; settled: () => Promise<void> };

/**
 * Decides requests in `isolate`, collecting background work (refunds,
 * hand-backs). `answer(request, outcome, response)` hands an admitted
 * request's answer to it, as the Worker does once the origin has answered:
 * its adaptive rules told, what it counts by the response settled; returns
 * the response as the client gets it.
 */
export function decider(settings: Settings, ns: LimiterNamespace, isolate: Isolate) {
  const tasks: Promise<unknown>[] = [];
  const background: Background = {
    tasks,
    sink: { add: (task) => tasks.push(task) },
    settled: async () => {
      while (tasks.length > 0) await Promise.all(tasks.splice(0));
    },
  };
  const run = (request: Request): Promise<Outcome> => {
    const decided = decide(request, { settings, ns, isolate });
    if (decided.pending !== undefined) tasks.push(decided.pending);
    return Promise.resolve(decided);
  };
  const answer = (request: Request, outcome: Outcome, response: Response): Response => {
    if (outcome.kind !== "allow") return response;
    const { after } = outcome;
    if (after === undefined) return response;
    after.begin(request, background.sink);
    return after.answered(response);
  };
  return { run, background, answer };
}

/** The status an outcome answers with: 200 for a request that goes on to the origin. */
export const statusOf = (outcome: Outcome): number => (outcome.kind === "allow" ? 200 : outcome.response.status);

/** A request from this client IP, as Cloudflare's edge sets it. */
export const requestFrom = (ip: string, path = "/x", headers: Record<string, string> = {}): Request =>
  new Request(`http://limiter.test${path}`, { headers: { "cf-connecting-ip": ip, ...headers } });

/** Rules a test wrote as counted ones (a window, …): typed so, and checked. */
export function counted(rules: Rule[]): CountedRule[] {
  if (!rules.every(isCounted)) throw new Error(`not all counted rules: ${rules.map((r) => r.kind).join(", ")}`);
  return rules;
}

/** Rules a test wrote as sliding windows, to replay through the window's arithmetic: typed so, and checked. */
export function windows(rules: Rule[]): RuleOf<"window">[] {
  if (!rules.every((rule) => rule.kind === "window")) throw new Error(`not all windows: ${rules.map((r) => r.kind)}`);
  return rules as RuleOf<"window">[];
}

/** A rule a test wrote as one that gives places (concurrency): typed so, and checked. */
export function placed(rule: Rule | undefined): PlacedRule {
  if (rule === undefined || isCounted(rule)) throw new Error(`not a rule that gives places: ${rule?.kind}`);
  return rule;
}
