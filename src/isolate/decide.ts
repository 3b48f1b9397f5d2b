/**
 * @module
 * One request's decision, top-down: the rules that match and their client
 * keys (match.ts); the synchronous fast path, where a lease unit for every
 * key, or a refusal this isolate knows of, decides at once; `settle()` for
 * the keys left (settle.ts); the verdict read from the settlements
 * (reports.ts); a place under each concurrency rule once the rate rules
 * admit it (settle.ts); what the decision leaves to the background
 * (effects.ts); and the answer (answers.ts). A request refused by one key
 * counts nowhere: the other keys' counts and lease units are given back,
 * and so are a held request's booking and the places it was given.
 */
import type { Settings } from "../config/settings.ts";
import type { Claims } from "../core/claims.ts";
import { pathnameOf, type RequestPath, requestPath } from "../core/paths.ts";
import type { Rule } from "../core/rules.ts";
import type { Policy, Reported } from "../http/rate-limit-headers.ts";
import type { LimiterNamespace } from "../object/client.ts";
import { noteDecision, noteKnown } from "./adaptive.ts";
import { allowed, clientGone, knownRefusal, NO_HEADERS, type Outcome, refused, unavailable } from "./answers.ts";
import { holds } from "./call.ts";
import {
  flushStatsIfDue,
  giveBack,
  giveBackAll,
  type HeldPlace,
  holdPlaces,
  sendOutbox,
  watchLate,
} from "./effects.ts";
import type { Isolate } from "./isolate.ts";
import { claimsFor, inClaimedTier, keyGroups, matchingRules } from "./match.ts";
import { readPlaces, readSettlements } from "./reports.ts";
import { knownRefusals, settle, settlePlace } from "./settle.ts";
import type { StatsNamespace } from "./stats.ts";
import { type AnalyticsSink, type TallyContext, tallyKnown, tallyPlaces, tallySettled } from "./tally.ts";
import {
  giveBackSpent,
  type KeyGroup,
  type PlaceSettlement,
  type RuleRefusal,
  type Settlement,
  type SpentUnits,
} from "./vocabulary.ts";

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
  const all = keyGroups(rules, request, options.clientKey, settings, isolate.digest);
  const policies = rules.filter((rule) => rule.action === "block");
  // The groups with rate rules: every group, unless concurrency rules are among the rules.
  const placed = hasPlaces(all);
  const groups = placed ? all.filter((group) => group.rules.length > 0) : all;
  const nowMs = isolate.clock();
  // The fast path: a lease unit for every key, or a refusal this isolate knows of.
  const spent = groups.map((group) => keys.peek(group.digest)?.leases.spend(group.rules, nowMs));
  const known = knownFor(groups, spent, options, nowMs);
  if (known.length > 0) {
    for (const s of spent) if (s) giveBackSpent(s);
    const tally = tallyContext(request.request, options, nowMs);
    if (tally) tallyKnown(groups, known, tally);
    noteKnown(known, options);
    return knownRefusal(policies, known, keys, settings.legacyHeaders, nowMs);
  }
  for (const group of groups) keys.noteRequest(group.digest, nowMs);
  sendOutbox(options);
  const startedAtMs = request.startedAtMs ?? nowMs;
  if (spent.every((s) => s !== undefined)) {
    const settlements = spent.map((s): Settlement => ({ via: "lease", spent: s! }));
    if (placed) {
      const { reports } = readSettlements(groups, settlements, keys, nowMs);
      const rated: Rated = { settlements, reports };
      return takePlaces({ request: request.request, groups, all, policies, startedAtMs }, rated, options);
    }
    const tally = tallyContext(request.request, options, nowMs);
    if (tally) tallySettled(groups, settlements, true, tally);
    const { reports } = readSettlements(groups, settlements, keys, nowMs);
    return allowed(groups, settlements, { policies, reports }, options);
  }
  return settleRest({ request: request.request, groups, all, spent, policies, startedAtMs }, options);
}

/** Whether any group has concurrency rules. */
function hasPlaces(groups: KeyGroup[]): boolean {
  for (const group of groups) if (group.places.length > 0) return true;
  return false;
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

/** A request's key groups and its policies, and when its decision started. */
type Grouped = {
  request: Request;
  /** The groups with rate rules. */
  groups: KeyGroup[];
  /** Every group, those with concurrency rules only included. */
  all: KeyGroup[];
  policies: Policy[];
  /** Isolate time; the request's deadline counts from here. */
  startedAtMs: number;
};

/** A request's key groups, the lease units already spent for some, and when its decision started. */
type Pending = Grouped & {
  /** Per group: the lease units spent for it, or undefined when it still needs settling. */
  spent: (SpentUnits | undefined)[];
};

/** Settles the key groups no lease covered, reads the verdict, and leaves the rest to the background. */
async function settleRest(pending: Pending, options: DecideOptions): Promise<Outcome> {
  const { request, groups, all, spent, policies, startedAtMs } = pending;
  const { settings, isolate } = options;
  const deadlineMs = startedAtMs + settings.timeoutMs;
  const placed = all.length > groups.length || hasPlaces(groups);
  const waitMs = placed || groups.length > 1 ? longestWaitMs(all) : 0;
  const context = {
    ...options,
    otherKeys: groups.length > 1 || placed,
    ...(waitMs > 0 ? { waitMs } : {}),
    gone: goneSignal(request.signal, groups),
  };
  const settlements = await Promise.all(
    groups.map((group, i): Settlement | Promise<Settlement> => {
      const s = spent[i];
      if (s) return { via: "lease", spent: s };
      const settled = settle(group, deadlineMs, context);
      // Another key's refusal ends a wait for a held turn: its booking goes back at once.
      return context.gone === request.signal ? settled : settled.then((r) => stopHoldsIfRefused(r, context.gone));
    }),
  );
  // Its client hung up while it waited (it goes on only because it has work in the background): it counts
  // nowhere, like a request turned away, and nothing of it is logged or tallied; its answer reaches nobody.
  if (request.signal?.aborted || (context.gone === request.signal && settlements.some((s) => s.via === "gone"))) {
    leaveBehind(groups, settlements, true, options);
    return clientGone();
  }
  const nowMs = isolate.clock();
  const { reports, refused: isRefused, closedBy } = readSettlements(groups, settlements, isolate.keys, nowMs);
  const turnedAway = isRefused || closedBy.length > 0;
  if (placed && !turnedAway) return takePlaces(pending, { settlements, reports }, options);
  const tally = tallyContext(request, options, nowMs);
  if (tally) {
    tallySettled(groups, settlements, !turnedAway, tally);
    if (tally.stats && settlements.some(calledObject)) isolate.stats.latencyOf(nowMs - startedAtMs, nowMs);
  }
  leaveBehind(groups, settlements, turnedAway, options);
  const legacy = settings.legacyHeaders;
  if (isRefused) {
    noteDecision(reports, false, options);
    return refused(policies, reports, legacy);
  }
  if (closedBy.length > 0) return unavailable(closedBy, policies, reports, legacy);
  return allowed(groups, settlements, { policies, reports }, options, heldFor(settlements, [], startedAtMs, nowMs));
}

/** Whether a settlement took a call to the object (its latency is worth counting). */
const calledObject = (s: Settlement): boolean => s.via === "call" || s.via === "held";

/**
 * The longest a request of these groups may wait before every key has
 * decided: held under a rate rule, then in line for a place.
 */
function longestWaitMs(groups: KeyGroup[]): number {
  let held = 0;
  let inLine = 0;
  for (const group of groups) {
    for (const rule of group.rules) if (rule.action === "block") held = Math.max(held, rule.maxDelayMs ?? 0);
    for (const rule of group.places) if (rule.action === "block") inLine = Math.max(inLine, rule.maxDelayMs ?? 0);
  }
  return held + inLine;
}

/**
 * What tells the request's key groups to stop waiting: its client hanging
 * up; and, when a held turn may be waited for beside another key's
 * decision, that key refusing it too.
 */
function goneSignal(signal: AbortSignal | undefined, groups: KeyGroup[]): AbortSignal | undefined {
  if (groups.length < 2 || !groups.some(holds)) return signal;
  const stop = new AbortController();
  stoppers.set(stop.signal, stop);
  if (signal?.aborted) stop.abort();
  else signal?.addEventListener("abort", () => stop.abort(), { once: true });
  return stop.signal;
}

/** Stops the request's other keys' waits when this key refuses it. */
function stopHoldsIfRefused(settlement: Settlement, stop: AbortSignal | undefined): Settlement {
  if (stop === undefined || stop.aborted) return settlement;
  const refusing =
    settlement.via === "known" ||
    (settlement.via === "call" && settlement.call.outcome.ok && !settlement.call.outcome.result.allowed);
  if (refusing) stoppers.get(stop)?.abort();
  return settlement;
}

/** The controller behind each stop signal made by {@link goneSignal}. */
const stoppers = new WeakMap<AbortSignal, AbortController>();

/** A request's rate rules as settled: each group's settlement, and the verdicts its headers report. */
type Rated = { settlements: Settlement[]; reports: Reported[] };

/**
 * The request's rate rules admitted it: a place under each concurrency rule
 * of its groups, asked for in parallel. All of them, and it goes on holding
 * them until it ends; otherwise the places it got go back, and so does what
 * its rate rules counted, and it is refused (or, where the object could not
 * be asked, its rule's `on_error` applies).
 */
async function takePlaces(pending: Grouped, rated: Rated, options: DecideOptions): Promise<Outcome> {
  const { request, groups, all, policies, startedAtMs } = pending;
  const { settings, isolate } = options;
  const { settlements } = rated;
  const deadlineMs = isolate.clock() + settings.timeoutMs;
  const context = { ...options, otherKeys: true, gone: request.signal };
  const asked = all.flatMap((group) => group.places.map((rule) => ({ group, rule })));
  const places = await Promise.all(asked.map(({ group, rule }) => settlePlace(group, rule, deadlineMs, context)));
  const taken = placesTaken(asked, places, isolate);
  if (request.signal?.aborted || places.some((p) => p.via === "gone")) {
    for (const place of taken) giveBack({ kind: "place", name: place.name, id: place.placeId }, options);
    leaveBehind(groups, settlements, true, options);
    return clientGone();
  }
  const nowMs = isolate.clock();
  const placed = readPlaces(places, isolate.keys, asked, nowMs);
  const reports = [...rated.reports, ...placed.reports];
  const turnedAway = placed.refused || placed.closedBy.length > 0;
  const tally = tallyContext(request, options, nowMs);
  if (tally) {
    tallySettled(groups, settlements, !turnedAway, tally);
    tallyPlaces(asked, places, !turnedAway, tally);
    isolate.stats.latencyOf(nowMs - startedAtMs, nowMs);
  }
  leaveBehind(groups, settlements, turnedAway, options);
  const legacy = settings.legacyHeaders;
  if (turnedAway) {
    for (const place of taken) giveBack({ kind: "place", name: place.name, id: place.placeId }, options);
    if (placed.refused) {
      noteDecision(reports, false, options);
      return refused(policies, reports, legacy);
    }
    return unavailable(placed.closedBy, policies, reports, legacy);
  }
  const inFlight = taken.length > 0 ? holdPlaces(taken, options) : undefined;
  const headers = { policies, reports };
  const heldMs = heldFor(settlements, places, startedAtMs, nowMs);
  return allowed(groups, settlements, headers, options, heldMs, inFlight, taken);
}

/** The places a request was given, as it holds them while in flight. */
function placesTaken(
  asked: { group: KeyGroup; rule: Rule }[],
  places: PlaceSettlement[],
  isolate: Isolate,
): HeldPlace[] {
  const taken: HeldPlace[] = [];
  places.forEach((p, i) => {
    if (p.via !== "place") return;
    const { group, rule } = asked[i]!;
    taken.push({
      keyPlaces: isolate.keys.use(group.digest, isolate.clock()).places,
      name: p.name,
      placeId: p.place.placeId,
      rule: rule.id,
      timeoutMs: p.place.expiresAtMs - p.place.nowMs,
    });
  });
  return taken;
}

/**
 * How long the request was held before it went on, in milliseconds: since
 * its decision started, when a rule held it until its turn or it waited in
 * line for a place; undefined when it did neither.
 */
function heldFor(
  settlements: Settlement[],
  places: PlaceSettlement[],
  startedAtMs: number,
  nowMs: number,
): number | undefined {
  const waited = settlements.some((s) => s.via === "held") || places.some((p) => p.via === "place" && p.waited);
  return waited ? Math.max(0, Math.round(nowMs - startedAtMs)) : undefined;
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
