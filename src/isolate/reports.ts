/**
 * @module
 * Reading how a request's key groups were settled, and its places: the
 * verdict each rule reports in the rate-limit headers, whether the request
 * is refused, and the rules that fail closed. Refusals, retries and
 * failures are logged here (a refusal at most once per key and rule per
 * interval).
 */
import type { Rule } from "../core/rules.ts";
import type { Reported } from "../http/rate-limit-headers.ts";
import type { FailureReason, PlaceAcquired, PlaceRefused, RuleVerdict } from "../object/protocol.ts";
import { keyHashPrefix, logEvent } from "../observe/log.ts";
import type { ClientKeys } from "./client-keys.ts";
import {
  type Applied,
  failureOf,
  type KeyGroup,
  nameOf,
  type PlaceSettlement,
  type RuleRefusal,
  type Settlement,
} from "./vocabulary.ts";

/** A rule's verdict as the rate-limit headers report it. */
const report = (rule: Rule, verdict: RuleVerdict, nowMs: number): Reported => ({
  id: rule.id,
  kind: rule.kind,
  limit: verdict.limit ?? rule.limit,
  quota: rule.quota,
  verdict,
  nowMs,
});

/**
 * How long a request refused a place is told to wait, in milliseconds: a
 * place frees whenever a request of the client ends, which nothing here
 * can foresee, so the shortest wait `Retry-After` can say (1 second) is
 * the honest one; a client that comes back sooner is refused again, at
 * the cost of one call.
 */
export const PLACE_RETRY_MS = 1_000;

/** A concurrency rule's place, or its refusal, as the rate-limit headers report it: `remaining` is the places free. */
function placeReport(rule: Rule, answer: PlaceAcquired | PlaceRefused, nowMs: number): Reported {
  const acquired = answer.status === "acquired";
  const verdict: RuleVerdict = {
    allowed: acquired,
    ruleAllows: acquired,
    weighted: acquired ? (answer.limit ?? rule.limit) - answer.free : answer.inUse,
    remaining: acquired ? answer.free : 0,
    retryAfterMs: acquired ? 0 : PLACE_RETRY_MS,
    resetMs: 0,
    counted: null,
    holdsForMs: 0,
    ...(answer.limit !== undefined ? { limit: answer.limit } : {}),
    ...(!acquired && answer.reduced === true ? { reduced: true } : {}),
    ...(answer.override !== undefined ? { override: answer.override } : {}),
    ...(answer.tier !== undefined ? { tier: answer.tier } : {}),
  };
  return report(rule, verdict, nowMs);
}

/**
 * Reads a request's places: the verdicts for the headers, whether a rule
 * refuses it (none free, or the client denied), and the rules that refuse it
 * because their object could not be asked (`on_error = "closed"`). A shadow
 * rule's would-be refusal is logged; the request goes on without its place.
 */
export function readPlaces(
  places: PlaceSettlement[],
  keys: ClientKeys,
  asked: { group: KeyGroup }[],
  nowMs: number,
): { reports: Reported[]; refused: boolean; closedBy: string[] } {
  const reports: Reported[] = [];
  const closedBy: string[] = [];
  let refused = false;
  places.forEach((p, i) => {
    if (p.via === "gone") return;
    const { rule, name } = p;
    const group = asked[i]!.group;
    if (p.via === "failed") {
      closedBy.push(...failed([rule], name, { ...p, attempts: 1 }));
      return;
    }
    const answer = p.via === "place" ? p.place : p.refusal;
    const denied = answer.override === "deny";
    if (p.via === "no place") {
      if (rule.action === "block" || denied) refused = true;
      const weighted = p.refusal.inUse;
      logRefusal({ rule, digest: group.digest, name, weighted, applied: p.refusal }, keys, nowMs);
    }
    if (rule.action === "block" || denied) reports.push(placeReport(rule, answer, nowMs));
  });
  return { reports, refused, closedBy };
}

/** A known refusal as the object's verdict, with the wait that is left. */
export function knownReport({ rule, refusal }: RuleRefusal, nowMs: number): Reported {
  // A refusal that no wait lifts (`never`) is remembered past its own wait, which is then only the bucket's refill.
  const waitMs = Math.max(0, refusal.retryAtMs - nowMs);
  const verdict: RuleVerdict = {
    allowed: false,
    ruleAllows: false,
    weighted: refusal.weighted,
    remaining: 0,
    retryAfterMs: waitMs,
    resetMs: waitMs,
    counted: null,
    holdsForMs: refusal.untilMs - nowMs,
    ...withoutUndefined(refusal.applied),
  };
  return report(rule, verdict, nowMs);
}

const withoutUndefined = <T extends object>(fields: T): Partial<T> =>
  Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)) as Partial<T>;

/** Logs a refusal answered from what the isolate knows (throttled like the object's). */
export function logKnown({ rule, digest, refusal }: RuleRefusal, keys: ClientKeys, nowMs: number): void {
  const { name, weighted, applied } = refusal;
  logRefusal({ rule, digest, name, weighted, applied }, keys, nowMs);
}

/**
 * Reads how each group was settled: the verdicts for the headers, whether the
 * request is refused, and the rules that refuse it because their object
 * failed. Logs refusals (at most one line per key and rule per interval),
 * retries and failures.
 */
export function readSettlements(groups: KeyGroup[], settlements: Settlement[], keys: ClientKeys, nowMs: number) {
  const reports: Reported[] = [];
  const closedBy: string[] = [];
  let refused = false;
  settlements.forEach((s, i) => {
    const group = groups[i]!;
    const failure = failureOf(s);
    if (failure !== null) {
      closedBy.push(...failed(group.rules, nameOf(s)!, failure));
    } else if (s.via === "lease") {
      group.rules.forEach((rule, j) => {
        if (rule.action === "block") reports.push(report(rule, s.spent.verdicts[j]!, nowMs));
      });
    } else if (s.via === "known") {
      refused = true;
      for (const k of s.known) {
        logKnown(k, keys, nowMs);
        reports.push(knownReport(k, nowMs));
      }
    } else if (s.via === "gone") {
      refused = true; // its client hung up: nothing of it is reported (decide answers it before this)
    } else if (s.via === "held") {
      // Held until its turn, which has come: its verdicts are its admission then.
      const { verdicts } = s.call.outcome.result;
      group.rules.forEach((rule, j) => {
        if (rule.action === "block") reports.push(report(rule, verdicts[j]!, nowMs));
      });
    } else if (s.via === "call" && s.call.outcome.ok) {
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
        if (!verdict.ruleAllows) {
          const { weighted } = verdict;
          logRefusal({ rule, digest: group.digest, name: s.call.name, weighted, applied: verdict }, keys, nowMs);
        }
        if (rule.action === "block" || verdict.override === "deny") reports.push(report(rule, verdict, nowMs));
      });
    }
  });
  return { reports, refused, closedBy };
}

/** One rule's refusal of one key, as a log line names it, with what applied to the client (an override, a tier). */
type Refused = { rule: Rule; digest: string; name: string; weighted: number; applied: Applied };

/**
 * Logs a refusal, or a shadow rule's would-be refusal, unless a line for this key and rule went out lately.
 * The limit is the one that refused the client: its override's or tier's, else the rule's; a deny has none.
 */
function logRefusal({ rule, digest, name, weighted, applied }: Refused, keys: ClientKeys, nowMs: number) {
  const note = keys.noteLine(digest, "refusal", rule, nowMs);
  if (note === null) return;
  const { limit, override, tier } = applied;
  logEvent({
    event: rule.action === "log" ? "ratelimit_shadow" : "ratelimit_blocked",
    rule: rule.id,
    key: keyHashPrefix(name),
    weighted: Math.round(weighted * 1000) / 1000, // for people reading logs; decisions are exact
    ...(override === "deny" ? {} : { limit: limit ?? rule.limit }),
    ...(override !== undefined ? { override } : {}),
    ...(tier !== undefined ? { tier } : {}),
    decision: rule.action === "log" ? "would_block" : "blocked",
    ...(note.repeats > 0 ? { repeats: note.repeats } : {}),
  });
}

type Failure = { reason: FailureReason; message: string; attempts: number };

/** Logs a key's failed call; returns the rules that refuse the request because of it. */
function failed(rules: readonly Rule[], name: string, failure: Failure): string[] {
  const closedBy: string[] = [];
  for (const rule of rules) {
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
