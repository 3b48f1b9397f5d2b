/**
 * @module
 * The answers a decision gives: go on with the rate-limit headers (and what
 * to settle once the response is known), 429 (or 403 for a client an
 * override denies), 503, or the 429 for refusals the isolate knows of,
 * made once while it reads the same.
 */
import type { CountedRule, Rule } from "../core/rules.ts";
import { send } from "../http/problem.ts";
import { type Policy, type Reported, rateLimitHeaders } from "../http/rate-limit-headers.ts";
import {
  clientClosedRequest,
  denied,
  deniedBy,
  limiterUnavailable,
  reducedCapacity,
  reducedCapacityParts,
  reducedOnly,
  tooManyRequests,
  tooManyRequestsParts,
} from "../http/refusals.ts";
import { KEY_PREFIX_LENGTH, noteDecision } from "./adaptive.ts";
import { AfterAnswer, type AnswerContext } from "./after-answer.ts";
import { settlesAfter } from "./after-response.ts";
import type { ClientKeys } from "./client-keys.ts";
import { type Effects, giveBackAll, type HeldPlace } from "./effects.ts";
import { knownReport, logKnown } from "./reports.ts";
import { nameOf, type Part, type RuleRefusal } from "./vocabulary.ts";
import type { Sink } from "./work.ts";

export type Outcome =
  /**
   * Go on to the origin, then add these headers to its response. `after`,
   * when the request holds places, counts by its response, is held, or is
   * forwarded under adaptive rules: hand the answer to it instead (see
   * after-answer.ts), which adds the headers and settles the rest. A
   * `Server-Timing` header is appended, not set: the origin's own entries
   * stay.
   */
  (
    | {
        kind: "allow";
        headers: Record<string, string>;
        after?: AfterAnswer;
        /** What the headers were made from; absent when no rule matched. */
        reading?: Reading;
        /** How long the limiter held the request before it went on, in milliseconds; absent when it did not. */
        heldMs?: number;
        /** What it counted, to give back if it is refused after all (see {@link turnedAway}); absent when nothing was. */
        counted?: { parts: readonly Part<CountedRule>[]; context: AnswerContext & Effects };
      }
    /**
     * Answer this instead (429, or 503 from a rule that fails closed); the
     * origin is not contacted. `reading`: what its headers were made from,
     * worked out when asked (a refusal the isolate knows of is answered
     * without it).
     */
    | { kind: "refuse"; response: Response; reading?: () => Reading }
  ) & {
    /** The decision's own work past its answer (refunds, hand-backs, a late answer watched), for `waitUntil`. */
    pending?: Promise<void>;
  };

/** What a decision's rate-limit headers are made from: the enforcing rules' policies, and each decided rule's verdict. */
export type Reading = { policies: Policy[]; reports: Reported[] };

/** No rule matched: go on, with no headers. */
export const NO_HEADERS: Outcome = Object.freeze({ kind: "allow", headers: Object.freeze({}) }) as Outcome;

/**
 * The answer for an admitted request: its headers, and what to do once its
 * response is known, if anything. `parts`: every part of its decision;
 * `counted`: its counted ones; `places`: the places it holds while in
 * flight.
 */
export function allowed(
  parts: readonly Part[],
  counted: readonly Part<CountedRule>[],
  headers: Reading,
  context: AnswerContext & Effects,
  heldMs?: number,
  places?: HeldPlace[],
): Outcome {
  const now = rateLimitHeaders(headers.policies, headers.reports, context.settings.legacyHeaders);
  const watched = noteDecision(headers.reports, true, context);
  const settles = settlesAfter(counted);
  if (heldMs === undefined && places === undefined && watched === undefined && !settles) {
    return { kind: "allow", headers: now, reading: headers, counted: { parts: counted, context } };
  }
  const timing = heldMs === undefined ? undefined : serverTiming(heldMs);
  const all = timing === undefined ? now : { ...now, "Server-Timing": timing };
  const { settings, ns, isolate } = context;
  const after = new AfterAnswer({
    context: { settings, ns, isolate },
    headers: all,
    ...(timing === undefined ? {} : { timing }),
    ...(settles ? { settles: { parts: counted, reading: headers } } : {}),
    ...(places === undefined ? {} : { places }),
    ...(watched === undefined
      ? {}
      : { watched: { reporters: watched, keyOf: (ruleId) => clientKeyOf(ruleId, parts) } }),
  });
  const outcome: Extract<Outcome, { kind: "allow" }> = {
    kind: "allow",
    headers: all,
    reading: headers,
    after,
    counted: { parts: counted, context },
  };
  if (heldMs !== undefined) outcome.heldMs = heldMs;
  return outcome;
}

/**
 * An admitted request refused after all, by something after the decision
 * (another `rateLimit()` behind this one): what it counted goes back, with
 * `sink` taking the work, as for a request turned away.
 */
export function turnedAway(outcome: Extract<Outcome, { kind: "allow" }>, sink: Sink): void {
  const counted = outcome.counted;
  if (counted === undefined || counted.parts.length === 0) return;
  giveBackAll(counted.parts, { ...counted.context, work: sink });
}

/**
 * The client key a rule counted a request under, as a controller's report
 * names it: a prefix of the key's object name (the same in every isolate).
 */
function clientKeyOf(ruleId: string, parts: readonly Part[]): string | undefined {
  const part = parts.find(({ rules }) => rules.some((rule) => rule.id === ruleId));
  const name = part === undefined ? null : nameOf(part.settlement);
  return name === null ? undefined : name.slice(0, KEY_PREFIX_LENGTH);
}

/**
 * `Server-Timing` for a request the limiter held (until its turn, or in line
 * for a place) before it went on: how long, in milliseconds. A registered
 * field made for a server's own durations, which clients and browsers'
 * developer tools read as they are.
 * @see https://www.w3.org/TR/server-timing/
 * @example `ratelimit;desc="held";dur=523`
 */
export const serverTiming = (heldMs: number): string => `ratelimit;desc="held";dur=${heldMs}`;

/**
 * 403 when an override denies the client; 503 (temporary reduced capacity)
 * when only adaptive rules' reductions refuse it; else 429.
 */
export function refused(policies: Policy[], reports: Reported[], legacy: boolean): Outcome {
  const denying = deniedBy(reports);
  const response =
    denying.length > 0
      ? denied(denying)
      : reducedOnly(reports)
        ? reducedCapacity(policies, reports, legacy)
        : tooManyRequests(policies, reports, legacy);
  return { kind: "refuse", response, reading: () => ({ policies, reports }) };
}

/** 503: rules that fail closed could not be decided. */
export const unavailable = (closedBy: string[], policies: Policy[], reports: Reported[], legacy: boolean): Outcome => ({
  kind: "refuse",
  response: limiterUnavailable(closedBy, policies, reports, legacy),
  reading: () => ({ policies, reports }),
});

/** The answer to a request whose client hung up: nobody reads it. */
export const clientGone = (): Outcome => ({ kind: "refuse", response: clientClosedRequest() });

/**
 * The 429 for refusals the isolate knows of, each logged (throttled). Under
 * attack one key is refused over and over: while the wait reads the same
 * whole seconds, and the same rules matched, the answer is the same, so its
 * parts are made once.
 */
export function knownRefusal(
  policies: Rule[],
  known: RuleRefusal[],
  keys: ClientKeys,
  legacy: boolean,
  nowMs: number,
): Outcome {
  for (const k of known) logKnown(k, keys, nowMs);
  const only = known[0];
  if (only === undefined || known.length > 1 || only.refusal.applied.override === "deny") {
    return refused(
      policies,
      known.map((k) => knownReport(k, nowMs)),
      legacy,
    );
  }
  const seconds = Math.ceil((only.refusal.retryAtMs - nowMs) / 1000);
  const parts = only.refusal.reuse(seconds, policies, () =>
    only.refusal.applied.reduced === true
      ? reducedCapacityParts(policies, [knownReport(only, nowMs)], legacy)
      : tooManyRequestsParts(policies, [knownReport(only, nowMs)], legacy),
  );
  return { kind: "refuse", response: send(parts), reading: () => ({ policies, reports: [knownReport(only, nowMs)] }) };
}
