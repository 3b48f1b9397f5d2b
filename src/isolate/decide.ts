/**
 * @module
 * One request's decision, top-down: the rules that match and their client
 * keys (match.ts); the synchronous fast path, where a lease unit for every
 * key, or a refusal this isolate knows of, decides at once; `settle()` for
 * the keys left (settle.ts); the verdict read from the settlements
 * (reports.ts); what the decision leaves to the background (effects.ts);
 * and the answer (answers.ts). A request refused by one key counts nowhere:
 * the other keys' counts and lease units are given back.
 */
import type { Settings } from "../config/settings.ts";
import type { Claims } from "../core/claims.ts";
import { pathnameOf, type RequestPath, requestPath } from "../core/paths.ts";
import type { Rule } from "../core/rules.ts";
import type { Policy } from "../http/rate-limit-headers.ts";
import type { LimiterNamespace } from "../object/client.ts";
import { allowed, clientGone, knownRefusal, NO_HEADERS, type Outcome, refused, unavailable } from "./answers.ts";
import { flushStatsIfDue, giveBackAll, sendOutbox, watchLate } from "./effects.ts";
import type { Isolate } from "./isolate.ts";
import { claimsFor, inClaimedTier, keyGroups, matchingRules } from "./match.ts";
import { readSettlements } from "./reports.ts";
import { knownRefusals, settle } from "./settle.ts";
import type { StatsNamespace } from "./stats.ts";
import { type AnalyticsSink, type TallyContext, tallyKnown, tallySettled } from "./tally.ts";
import { giveBackSpent, type KeyGroup, type RuleRefusal, type Settlement, type SpentUnits } from "./vocabulary.ts";

export type { Outcome } from "./answers.ts";

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

/**
 * Decides one request. When the isolate can decide alone (a known refusal,
 * or leases for every key) the answer is returned at once, not as a promise:
 * those are the paths every blocked and most allowed requests take.
 */
export function decide(request: Request, options: DecideOptions): Outcome | Promise<Outcome> {
  const { settings, isolate } = options;
  const path = options.path ?? requestPath(pathnameOf(request.url));
  // Read once: each read of a request's property is a call into the runtime.
  const method = options.method ?? request.method;
  const matched = matchingRules(request, settings, method, path);
  if (matched.length === 0) return NO_HEADERS;
  const claims = claimsFor(request, matched, settings, isolate.tokens, options.background);
  if (!(claims instanceof Promise)) return decideMatched({ request, method, path, matched, claims }, options);
  const startedAtMs = isolate.clock();
  return claims.then((verified) =>
    decideMatched({ request, method, path, matched, claims: verified, startedAtMs }, options),
  );
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

function decideMatched(request: Matched, options: DecideOptions): Outcome | Promise<Outcome> {
  const { settings, isolate } = options;
  const { keys } = isolate;
  const rules = inClaimedTier(request.matched, request.claims, settings);
  const groups = keyGroups(rules, request, options.clientKey, settings, isolate.digest);
  const policies = rules.filter((rule) => rule.action === "block");
  const nowMs = isolate.clock();
  // The fast path: a lease unit for every key, or a refusal this isolate knows of.
  const spent = groups.map((group) => keys.peek(group.digest)?.spend(group.rules, nowMs));
  const known = knownFor(groups, spent, options, nowMs);
  if (known.length > 0) {
    for (const s of spent) if (s) giveBackSpent(s);
    const tally = tallyContext(request.request, options, nowMs);
    if (tally) tallyKnown(groups, known, tally);
    return knownRefusal(policies, known, keys, settings.legacyHeaders, nowMs);
  }
  for (const group of groups) keys.noteRequest(group.digest, nowMs);
  sendOutbox(options);
  if (spent.every((s) => s !== undefined)) {
    const settlements = spent.map((s): Settlement => ({ via: "lease", spent: s! }));
    const tally = tallyContext(request.request, options, nowMs);
    if (tally) tallySettled(groups, settlements, true, tally);
    const { reports } = readSettlements(groups, settlements, keys, nowMs);
    return allowed(groups, settlements, { policies, reports }, options);
  }
  const startedAtMs = request.startedAtMs ?? nowMs;
  return settleRest({ request: request.request, groups, spent, policies, startedAtMs }, options);
}

/** The refusals this isolate knows of for the groups no lease unit covered. */
function knownFor(groups: KeyGroup[], spent: (SpentUnits | undefined)[], options: DecideOptions, nowMs: number) {
  let known: RuleRefusal[] | undefined;
  for (let i = 0; i < groups.length; i++) {
    if (spent[i]) continue;
    const found = knownRefusals(groups[i]!, options.isolate.keys, nowMs);
    if (found.length > 0) known = known === undefined ? found : [...known, ...found];
  }
  return known ?? NONE;
}

const NONE: RuleRefusal[] = [];

/**
 * Where this decision is counted, or null when neither the statistics
 * object nor Analytics Engine is bound. Sends the isolate's statistics
 * first when a flush is due: in the background, one call.
 */
function tallyContext(request: Request, options: DecideOptions, nowMs: number): TallyContext | null {
  const { stats, analytics, isolate, settings } = options;
  if (stats === undefined && analytics === undefined) return null;
  if (stats !== undefined) flushStatsIfDue(isolate.stats, stats, nowMs, options);
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

/** Settles the key groups no lease covered, reads the verdict, and leaves the rest to the background. */
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
  // Its client hung up while it waited (it goes on only because it has work in the background): it counts
  // nowhere, like a request turned away, and nothing of it is logged or tallied; its answer reaches nobody.
  if (settlements.some((s) => s.via === "gone")) {
    leaveBehind(groups, settlements, true, options);
    return clientGone();
  }
  const nowMs = isolate.clock();
  const { reports, refused: isRefused, closedBy } = readSettlements(groups, settlements, isolate.keys, nowMs);
  const turnedAway = isRefused || closedBy.length > 0;
  const tally = tallyContext(request, options, nowMs);
  if (tally) {
    tallySettled(groups, settlements, !turnedAway, tally);
    if (tally.stats && settlements.some((s) => s.via === "call")) isolate.stats.latencyOf(nowMs - startedAtMs, nowMs);
  }
  leaveBehind(groups, settlements, turnedAway, options);
  const legacy = settings.legacyHeaders;
  if (isRefused) return refused(policies, reports, legacy);
  if (closedBy.length > 0) return unavailable(closedBy, policies, reports, legacy);
  return allowed(groups, settlements, { policies, reports }, options);
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
