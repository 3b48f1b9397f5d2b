/**
 * @module
 * One request's decision: the rules that match, one settlement per distinct
 * client key (a lease held here, a refusal this isolate knows of, or a call
 * to the key's Durable Object), and the answer: go on (with headers), 429 or
 * 503. A request refused by one key counts nowhere: the other keys' counts
 * and lease units are given back.
 */
import type { Settings } from "../config/settings.ts";
import { canonicalKey, type RequestFacts } from "../core/keys.ts";
import { pathnameOf, requestPath } from "../core/paths.ts";
import { type Rule, ruleMatches } from "../core/rules.ts";
import { send } from "../http/problem.ts";
import { type Policy, type Reported, rateLimitHeaders } from "../http/rate-limit-headers.ts";
import { limiterUnavailable, tooManyRequests, tooManyRequestsParts } from "../http/refusals.ts";
import { requestFacts } from "../http/request-facts.ts";
import { type LimiterNamespace, refundKey } from "../object/client.ts";
import { type CheckResult, type FailureReason, type Refund, type RuleVerdict, unitsOf } from "../object/protocol.ts";
import { keyHashPrefix, logEvent } from "../observe/log.ts";
import type { Isolate } from "./isolate.ts";
import type { Spent } from "./leases.ts";
import { ruleUid } from "./rule-ids.ts";
import { type KeyCall, type KeyGroup, type Known, knownRefusals, type Settled, settle } from "./settle.ts";

export type Outcome =
  /** Go on to the origin, then add these headers to its response. */
  | { kind: "allow"; headers: Record<string, string> }
  /** Answer this instead; the origin is not contacted. */
  | { kind: "refuse"; response: Response };

/** What a decision needs besides the request. */
export type DecideOptions = {
  settings: Settings;
  ns: LimiterNamespace;
  isolate: Isolate;
  /** Receives work that must not delay the answer: refunds, and watching a call that timed out. */
  background: (task: Promise<unknown>) => void;
};

const NO_HEADERS: Outcome = { kind: "allow", headers: {} };

/**
 * Decides one request. When the isolate can decide alone (a known refusal,
 * or leases for every key) the answer is returned at once, not as a promise:
 * those are the paths every blocked and most allowed requests take.
 */
export function decide(request: Request, options: DecideOptions): Outcome | Promise<Outcome> {
  const { settings, isolate } = options;
  const path = requestPath(pathnameOf(request.url));
  const matched = settings.rules.filter((rule) => ruleMatches(rule, request.method, path));
  if (matched.length === 0) return NO_HEADERS;

  const groups = groupByKey(matched, requestFacts(request, path, settings), isolate);
  const policies = matched.filter((rule) => rule.action === "block");
  const nowMs = isolate.clock();
  const spent = groups.map((group) => isolate.leases.spend(group.digest, group.rules, nowMs));
  const known = groups.flatMap((group, i) => (spent[i] ? [] : knownRefusals(group, isolate, nowMs)));
  if (known.length > 0) {
    for (const s of spent) if (s) isolate.leases.giveBack(s);
    return { kind: "refuse", response: knownRefusal(policies, known, isolate, nowMs) };
  }
  for (const group of groups) isolate.leases.noteRequest(group.digest, nowMs);
  sendOutbox(options);
  if (spent.every((s) => s !== undefined)) {
    const settled = spent.map((s): Settled => ({ via: "lease", spent: s! }));
    return {
      kind: "allow",
      headers: rateLimitHeaders(policies, readSettlements(groups, settled, options, nowMs).reports),
    };
  }
  return settleAll(groups, spent, policies, nowMs, options);
}

/** Settles the key groups no lease covered, and reads what came back. */
async function settleAll(
  groups: KeyGroup[],
  spent: (Spent | undefined)[],
  policies: Policy[],
  startedAtMs: number,
  options: DecideOptions,
): Promise<Outcome> {
  const { settings, isolate } = options;
  const deadlineMs = startedAtMs + settings.timeoutMs;
  const context = { ...options, otherKeys: groups.length > 1 };
  const settled = await Promise.all(
    groups.map((group, i): Settled | Promise<Settled> => {
      const s = spent[i];
      return s ? { via: "lease", spent: s } : settle(group, deadlineMs, context);
    }),
  );
  const nowMs = isolate.clock();
  const { reports, refused, closedBy } = readSettlements(groups, settled, options, nowMs);
  const turnedAway = refused || closedBy.length > 0;
  if (turnedAway) giveBackAll(settled, options);
  settled.forEach((s, i) => {
    if (s.via === "call") watchLate(s.call, groups[i]!, turnedAway, options);
  });
  sendOutbox(options);
  if (refused) return { kind: "refuse", response: tooManyRequests(policies, reports) };
  if (closedBy.length > 0) return { kind: "refuse", response: limiterUnavailable(closedBy, policies, reports) };
  return { kind: "allow", headers: rateLimitHeaders(policies, reports) };
}

/** Rules grouped by their canonical client key, in the order they first appear. */
function groupByKey(rules: Rule[], facts: RequestFacts, isolate: Isolate): KeyGroup[] {
  const groups: KeyGroup[] = [];
  for (const rule of rules) {
    const canonical = canonicalKey(rule.key, facts);
    const group = groups.find((g) => g.canonical === canonical);
    if (group) group.rules.push(rule);
    else groups.push({ canonical, digest: isolate.digest(canonical), rules: [rule] });
  }
  return groups;
}

const report = (rule: Rule, verdict: RuleVerdict, nowMs: number): Reported => ({
  id: rule.id,
  limit: rule.limit,
  periodMs: rule.periodMs,
  verdict,
  nowMs,
});

/** A known refusal as the object's verdict, with the wait that is left. */
function knownReport({ rule, refusal }: Known, nowMs: number): Reported {
  const waitMs = refusal.retryAtMs - nowMs;
  const verdict: RuleVerdict = {
    allowed: false,
    ruleAllows: false,
    weighted: refusal.weighted,
    remaining: 0,
    retryAfterMs: waitMs,
    resetMs: waitMs,
    counted: null,
    holdsForMs: refusal.untilMs - nowMs,
  };
  return report(rule, verdict, nowMs);
}

/** Logs a refusal answered from what the isolate knows (throttled like the object's). */
const logKnown = ({ rule, digest, refusal }: Known, isolate: Isolate, nowMs: number): void =>
  logRefusal(rule, digest, refusal.name, refusal.weighted, isolate, nowMs);

/**
 * The 429 for refusals the isolate knows of. Under attack one key is refused
 * over and over: while the wait reads the same whole seconds, and the same
 * rules matched, the answer is the same, so its parts are made once.
 */
function knownRefusal(policies: Rule[], known: Known[], isolate: Isolate, nowMs: number): Response {
  for (const k of known) logKnown(k, isolate, nowMs);
  const reports = () => known.map((k) => knownReport(k, nowMs));
  const [only, ...others] = known;
  if (!only || others.length > 0) return tooManyRequests(policies, reports());
  const key = `${Math.ceil((only.refusal.retryAtMs - nowMs) / 1000)}|${policies.map(ruleUid).join(",")}`;
  return send(only.refusal.reuse(key, () => tooManyRequestsParts(policies, reports())));
}

/**
 * Reads how each group was settled: the verdicts for the headers, whether the
 * request is refused, and the rules that refuse it because their object
 * failed. Logs refusals (at most one line per key and rule per interval),
 * retries and failures.
 */
function readSettlements(groups: KeyGroup[], settled: Settled[], options: DecideOptions, nowMs: number) {
  const { isolate } = options;
  const reports: Reported[] = [];
  const closedBy: string[] = [];
  let refused = false;
  settled.forEach((s, i) => {
    const group = groups[i]!;
    if (s.via === "lease") {
      group.rules.forEach((rule, j) => {
        if (rule.action === "block") reports.push(report(rule, s.spent.verdicts[j]!, nowMs));
      });
    } else if (s.via === "known") {
      refused = true;
      for (const k of s.known) {
        logKnown(k, isolate, nowMs);
        reports.push(knownReport(k, nowMs));
      }
    } else if (s.via === "shared") {
      closedBy.push(...failed(group, s.failure.name, s.failure));
    } else if (!s.call.outcome.ok) {
      closedBy.push(...failed(group, s.call.name, s.call.outcome));
    } else {
      const { result, attempts, retriedAfter } = s.call.outcome;
      if (retriedAfter !== undefined) {
        const rules = group.rules.map((r) => r.id);
        logEvent(
          { event: "limiter_retried", rules, key: keyHashPrefix(s.call.name), attempts, message: retriedAfter },
          "warn",
        );
      }
      refused ||= !result.allowed;
      group.rules.forEach((rule, j) => {
        const verdict = result.verdicts[j]!;
        if (!verdict.ruleAllows) logRefusal(rule, group.digest, s.call.name, verdict.weighted, isolate, nowMs);
        if (rule.action === "block") reports.push(report(rule, verdict, nowMs));
      });
    }
  });
  return { reports, refused, closedBy };
}

/** Logs a refusal, or a shadow rule's would-be refusal, unless a line for this key and rule went out lately. */
function logRefusal(rule: Rule, digest: string, name: string, weighted: number, isolate: Isolate, nowMs: number) {
  const note = isolate.refusalLog.note(rule, digest, nowMs);
  if (note === null) return;
  logEvent({
    event: rule.action === "log" ? "ratelimit_shadow" : "ratelimit_blocked",
    rule: rule.id,
    key: keyHashPrefix(name),
    weighted: Math.round(weighted * 1000) / 1000, // for people reading logs; decisions are exact
    limit: rule.limit,
    decision: rule.action === "log" ? "would_block" : "blocked",
    ...(note.repeats > 0 ? { repeats: note.repeats } : {}),
  });
}

type Failure = { reason: FailureReason; message: string; attempts: number };

/** Logs a key's failed call; returns the rules that refuse the request because of it. */
function failed(group: KeyGroup, name: string, failure: Failure): string[] {
  const closedBy: string[] = [];
  for (const rule of group.rules) {
    const closed = rule.action === "block" && rule.onError === "closed";
    if (closed) closedBy.push(rule.id);
    logEvent(
      {
        event: "limiter_unavailable",
        rule: rule.id,
        key: keyHashPrefix(name),
        reason: failure.reason,
        message: failure.message,
        attempts: failure.attempts,
        outcome: closed ? "refused" : "forwarded",
      },
      "error",
    );
  }
  return closedBy;
}

/** A refused request counts nowhere: lease units go back to their leases, and counts to their objects. */
function giveBackAll(settled: Settled[], options: DecideOptions): void {
  for (const s of settled) {
    if (s.via === "lease") options.isolate.leases.giveBack(s.spent);
    else if (s.via === "call" && s.call.outcome.ok) refundCounted(s.call.name, s.call.outcome.result, options);
  }
}

/** Takes back, in the background, what an answer counted for a request that was then turned away. */
function refundCounted(name: string, result: CheckResult, options: DecideOptions): void {
  if (!result.allowed) return;
  const refunds = result.verdicts.flatMap((v): Refund[] => (v.counted ? [{ receipt: v.counted, count: 1 }] : []));
  if (refunds.length > 0) refundInBackground(name, refunds, options);
}

/** Hands counts back to an object in the background; what fails to arrive is written off, and counted. */
function refundInBackground(name: string, refunds: Refund[], options: DecideOptions): void {
  const units = unitsOf(refunds);
  options.background(
    refundKey(options.ns, name, refunds, options.settings.timeoutMs).then((taken) => {
      if (!taken) options.isolate.counters.writeOff("refund failed", units);
    }),
  );
}

/** Units of keys the isolate no longer remembers, handed back to their objects. */
function sendOutbox(options: DecideOptions): void {
  for (const { name, refunds } of options.isolate.leases.takeOutbox()) refundInBackground(name, refunds, options);
}

/**
 * A call that timed out may still decide. What it counted for a request that
 * was then turned away is taken back once it does; a lease it brings is kept
 * (its units were counted for this isolate to spend).
 */
function watchLate(call: KeyCall, group: KeyGroup, turnedAway: boolean, options: DecideOptions): void {
  const late = call.outcome.ok ? undefined : call.outcome.late;
  if (!late) return;
  options.background(
    late.then((result) => {
      if (!result) return;
      const { verdicts, lease } = result;
      options.isolate.leases.keep(group.digest, {
        name: call.name,
        rules: group.rules,
        verdicts,
        lease,
        sentAtMs: call.sentAtMs,
        asked: false,
      });
      if (turnedAway) refundCounted(call.name, result, options);
      sendOutbox(options);
    }),
  );
}
