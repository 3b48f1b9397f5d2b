/**
 * @module
 * One request's decision: the rules that match, one settlement per distinct
 * client key (a lease held here, a refusal this isolate knows of, or a call
 * to the key's Durable Object), and the answer: go on (with headers), 429 or
 * 503. A request refused by one key counts nowhere: the other keys' counts
 * and lease units are given back.
 */
import type { Settings } from "../config/settings.ts";
import { type Claims, claimAt } from "../core/claims.ts";
import { type Address, parseAddress } from "../core/ip.ts";
import { canonicalKey, customCanonicalKey, type RequestFacts } from "../core/keys.ts";
import { pathnameOf, type RequestPath, requestPath } from "../core/paths.ts";
import { type Rule, ruleCoversClient, ruleMatches } from "../core/rules.ts";
import { send } from "../http/problem.ts";
import { type Policy, type Reported, rateLimitHeaders } from "../http/rate-limit-headers.ts";
import {
  clientClosedRequest,
  denied,
  deniedBy,
  limiterUnavailable,
  tooManyRequests,
  tooManyRequestsParts,
} from "../http/refusals.ts";
import { clientAddress, requestFacts } from "../http/request-facts.ts";
import type { LimiterNamespace } from "../object/client.ts";
import { type AfterResponse, afterResponse, settlesAfter } from "./after-response.ts";
import { giveBackAll, sendOutbox, watchLate } from "./effects.ts";
import type { Isolate } from "./isolate.ts";
import { knownReport, logKnown, readSettlements } from "./reports.ts";
import { tierVariant } from "./rule-ids.ts";
import { knownRefusals, settle } from "./settle.ts";
import { flushStats, type StatsNamespace } from "./stats.ts";
import { type AnalyticsSink, type TallyContext, tallyKnown, tallySettled } from "./tally.ts";
import { giveBackSpent, type KeyGroup, type RuleRefusal, type Settlement, type SpentUnits } from "./vocabulary.ts";

export type Outcome =
  /**
   * Go on to the origin, then add these headers to its response; when a rule
   * counts only some responses, call `afterResponse` with the response's
   * status instead: it gives back what that status does not count, and
   * returns the headers.
   */
  | { kind: "allow"; headers: Record<string, string>; afterResponse?: AfterResponse }
  /** Answer this instead (429, or 503 from a rule that fails closed); the origin is not contacted. */
  | { kind: "refuse"; response: Response };

/** What a decision needs besides the request. */
export type DecideOptions = {
  settings: Settings;
  ns: LimiterNamespace;
  isolate: Isolate;
  /** Receives work that must not delay the answer: refunds, and watching a call that timed out. */
  background: (task: Promise<unknown>) => void;
  /**
   * The client, as the caller names it: every matched rule counts this key
   * instead of the one its `key` characteristics make.
   * @default undefined: each rule's own `key`
   */
  clientKey?: string | undefined;
  /**
   * The statistics object's binding: the isolate counts its decisions and
   * sends them there, at most every 10 s, in the background.
   * @default undefined: no statistics
   */
  stats?: StatsNamespace | undefined;
  /**
   * A Workers Analytics Engine dataset: one data point per rule and decision.
   * @default undefined: none
   */
  analytics?: AnalyticsSink | undefined;
  /**
   * The request's path, when the caller has worked it out already (the
   * Worker, for its admin API's prefix): `requestPath` of its pathname.
   * @default worked out from `request.url`
   */
  path?: RequestPath | undefined;
  /**
   * `request.method`, when the caller has read it already.
   * @default read from the request
   */
  method?: string | undefined;
};

const NO_HEADERS: Outcome = { kind: "allow", headers: {} };

/**
 * Decides one request. When the isolate can decide alone (a known refusal,
 * or leases for every key) the answer is returned at once, not as a promise:
 * those are the paths every blocked and most allowed requests take.
 */
export function decide(request: Request, options: DecideOptions): Outcome | Promise<Outcome> {
  const { settings, isolate } = options;
  const path = options.path ?? requestPath(pathnameOf(request.url));
  const address = clientAddressOf(request, settings);
  // Read once: each read of a request's property is a call into the runtime.
  const method = options.method ?? request.method;
  const matched = settings.rules.filter((rule) => ruleMatches(rule, method, path) && ruleCoversClient(rule, address));
  if (matched.length === 0) return NO_HEADERS;
  const claims = claimsFor(request, matched, options);
  if (claims instanceof Promise) {
    const startedAtMs = isolate.clock();
    return claims.then((verified) =>
      decideMatched({ request, method, path, matched, claims: verified, startedAtMs }, options),
    );
  }
  return decideMatched({ request, method, path, matched, claims }, options);
}

/** A request whose matching rules are known, and its token's claims. */
type Matched = {
  request: Request;
  method: string;
  path: RequestPath;
  matched: Rule[];
  claims: Claims | null;
  /** When the decision started, if it waited for the token's keys: its deadline counts from here. */
  startedAtMs?: number;
};

/** The request's verified claims, when a matched rule reads them; null at once when none does. */
function claimsFor(request: Request, matched: Rule[], options: DecideOptions): Claims | null | Promise<Claims | null> {
  const { settings, isolate, background } = options;
  const jwt = settings.jwt;
  if (jwt === null || !matched.some((rule) => settings.tokenRules.has(rule))) return null;
  // Half the decision's time at most goes to fetching keys; the counting call keeps the rest.
  return isolate.tokens.claimsOf(request.headers, jwt, { waitMs: settings.timeoutMs / 2, background });
}

/** The rules with the limits of the tier the token's `tier_claim` names, if it names one of `TIERS`. */
function inClaimedTier(rules: Rule[], claims: Claims | null, settings: Settings): Rule[] {
  const claim = settings.jwt?.tierClaim;
  if (claims === null || claim == null) return rules;
  const tier = claimAt(claims, claim);
  return tier !== null && settings.tiers.has(tier) ? rules.map((rule) => tierVariant(rule, tier)) : rules;
}

function decideMatched(request: Matched, options: DecideOptions): Outcome | Promise<Outcome> {
  const { settings, isolate } = options;
  const matched = inClaimedTier(request.matched, request.claims, settings);
  const groups =
    options.clientKey === undefined
      ? groupByKey(
          matched,
          requestFacts(request.request, request.path, settings, request.claims, request.method),
          isolate,
        )
      : [oneGroup(matched, customCanonicalKey(options.clientKey), isolate)];
  const policies = matched.filter((rule) => rule.action === "block");
  const nowMs = isolate.clock();
  const { keys } = isolate;
  const spent = groups.map((group) => keys.peek(group.digest)?.spend(group.rules, nowMs));
  const known = groups.flatMap((group, i) => (spent[i] ? [] : knownRefusals(group, keys, nowMs)));
  if (known.length > 0) {
    for (const s of spent) if (s) giveBackSpent(s);
    const tally = tallyContext(request.request, options, nowMs);
    if (tally) tallyKnown(groups, known, tally);
    return { kind: "refuse", response: knownRefusal(policies, known, options, nowMs) };
  }
  for (const group of groups) keys.noteRequest(group.digest, nowMs);
  sendOutbox(options);
  if (spent.every((s) => s !== undefined)) {
    const settlements = spent.map((s): Settlement => ({ via: "lease", spent: s! }));
    const tally = tallyContext(request.request, options, nowMs);
    if (tally) tallySettled(groups, settlements, true, tally);
    return allowed(
      groups,
      settlements,
      { policies, reports: readSettlements(groups, settlements, keys, nowMs).reports },
      options,
    );
  }
  return settleRest(
    { request: request.request, groups, spent, policies, startedAtMs: request.startedAtMs ?? nowMs },
    options,
  );
}

/**
 * Where this decision is counted, or null when neither the statistics
 * object nor Analytics Engine is bound. Sends the isolate's statistics
 * first when a flush is due: in the background, one call.
 */
function tallyContext(request: Request, options: DecideOptions, nowMs: number): TallyContext | null {
  const { stats, analytics, isolate, settings } = options;
  if (stats === undefined && analytics === undefined) return null;
  if (stats !== undefined && isolate.stats.due(nowMs)) options.background(flushStats(isolate.stats, stats, { nowMs }));
  // Reading request.cf costs the runtime a copy of it: only Analytics Engine needs the colo.
  const colo = analytics === undefined ? undefined : (request as { cf?: { colo?: unknown } }).cf?.colo;
  return {
    isolate,
    stats: stats !== undefined,
    analytics,
    colo: typeof colo === "string" ? colo : "",
    rawKeys: settings.statsRawKeys,
    nowMs,
  };
}

/** A request's key groups, the lease units already spent for some, and when its decision started. */
type Pending = {
  request: Request;
  groups: KeyGroup[];
  /** Per group: the lease units spent for it, or undefined when it still needs settling. */
  spent: (SpentUnits | undefined)[];
  policies: Policy[];
  /** Isolate time; the request's deadline counts from here. */
  startedAtMs: number;
};

/** Settles the key groups no lease covered, and reads what came back. */
async function settleRest(
  { request, groups, spent, policies, startedAtMs }: Pending,
  options: DecideOptions,
): Promise<Outcome> {
  const { settings, isolate } = options;
  const deadlineMs = startedAtMs + settings.timeoutMs;
  const context = { ...options, otherKeys: groups.length > 1, gone: request.signal };
  const settlements = await Promise.all(
    groups.map((group, i): Settlement | Promise<Settlement> => {
      const s = spent[i];
      return s ? { via: "lease", spent: s } : settle(group, deadlineMs, context);
    }),
  );
  if (settlements.some((s) => s.via === "gone")) return clientGone(groups, settlements, options);
  const nowMs = isolate.clock();
  const { reports, refused, closedBy } = readSettlements(groups, settlements, isolate.keys, nowMs);
  const turnedAway = refused || closedBy.length > 0;
  const tally = tallyContext(request, options, nowMs);
  if (tally) {
    tallySettled(groups, settlements, !turnedAway, tally);
    if (tally.stats && settlements.some((s) => s.via === "call")) isolate.stats.latencyOf(nowMs - startedAtMs, nowMs);
  }
  leaveBehind(groups, settlements, turnedAway, options);
  const legacy = settings.legacyHeaders;
  if (refused) return { kind: "refuse", response: refusal(policies, reports, legacy) };
  if (closedBy.length > 0) return { kind: "refuse", response: limiterUnavailable(closedBy, policies, reports, legacy) };
  return allowed(groups, settlements, { policies, reports }, options);
}

/**
 * A request whose client hung up while it waited (it goes on only because it
 * has work in the background): it counts nowhere, like a request turned
 * away, and nothing of it is logged or tallied; its answer reaches nobody.
 */
function clientGone(groups: KeyGroup[], settlements: Settlement[], options: DecideOptions): Outcome {
  leaveBehind(groups, settlements, true, options);
  return { kind: "refuse", response: clientClosedRequest() };
}

/**
 * What a settled request leaves to the background: for a request turned
 * away, its lease units and counts given back; every call's late answer
 * watched; what is owed for forgotten keys sent.
 */
function leaveBehind(groups: KeyGroup[], settlements: Settlement[], turnedAway: boolean, options: DecideOptions) {
  if (turnedAway) giveBackAll(groups, settlements, options);
  settlements.forEach((s, i) => {
    if (s.via === "call") watchLate(s.call, groups[i]!, turnedAway, options);
  });
  sendOutbox(options);
}

/** The answer for an admitted request: its headers, and what to do once the response is known, if anything. */
function allowed(
  groups: KeyGroup[],
  settlements: Settlement[],
  headers: { policies: Policy[]; reports: Reported[] },
  options: DecideOptions,
): Outcome {
  const now = rateLimitHeaders(headers.policies, headers.reports, options.settings.legacyHeaders);
  if (!settlesAfter(groups)) return { kind: "allow", headers: now };
  return { kind: "allow", headers: now, afterResponse: afterResponse(groups, settlements, headers, options) };
}

/** 403 when an override denies the client, else 429. */
function refusal(policies: Policy[], reports: Reported[], legacy: boolean): Response {
  const denying = deniedBy(reports);
  return denying.length > 0 ? denied(denying) : tooManyRequests(policies, reports, legacy);
}

/** The client's address, parsed on first use (only rules with IP ranges need it). */
function clientAddressOf(request: Request, settings: Settings): () => Address | null {
  let address: Address | null | undefined;
  return () => {
    if (address === undefined) address = parseAddress(clientAddress(request.headers, settings.trustedIpHeader));
    return address;
  };
}

/** Rules grouped by their canonical client key, in the order they first appear. */
function groupByKey(rules: Rule[], facts: RequestFacts, isolate: Isolate): KeyGroup[] {
  const groups: KeyGroup[] = [];
  for (const rule of rules) {
    const canonical = canonicalKey(rule.key, facts);
    const group = groups.find((g) => g.canonical === canonical);
    if (group) group.rules.push(rule);
    else groups.push(oneGroup([rule], canonical, isolate));
  }
  return groups;
}

const oneGroup = (rules: Rule[], canonical: string, isolate: Isolate): KeyGroup => ({
  canonical,
  digest: isolate.digest(canonical),
  rules,
});

/**
 * The 429 for refusals the isolate knows of. Under attack one key is refused
 * over and over: while the wait reads the same whole seconds, and the same
 * rules matched, the answer is the same, so its parts are made once.
 */
function knownRefusal(policies: Rule[], known: RuleRefusal[], options: DecideOptions, nowMs: number): Response {
  const { isolate, settings } = options;
  const legacy = settings.legacyHeaders;
  for (const k of known) logKnown(k, isolate.keys, nowMs);
  const only = known[0];
  if (only === undefined || known.length > 1 || only.refusal.applied.override === "deny") {
    return refusal(
      policies,
      known.map((k) => knownReport(k, nowMs)),
      legacy,
    );
  }
  const seconds = Math.ceil((only.refusal.retryAtMs - nowMs) / 1000);
  return send(
    only.refusal.reuse(seconds, policies, () => tooManyRequestsParts(policies, [knownReport(only, nowMs)], legacy)),
  );
}
