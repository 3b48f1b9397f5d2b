/**
 * @module
 * One request's decision, composed, without knowing the kinds of limit:
 * the rules that match and their client keys (match.ts) make the request's
 * parts: each key group's counted rules, and each rule that gives places.
 * The counted parts are settled first: by a lease unit or a refusal this
 * isolate knows of, at once, where it can (the synchronous fast path that
 * every blocked and most allowed requests take); else through the key's
 * gate (settle.ts). Once they admit the request, its places are taken
 * (settle-place.ts). Then every path ends the same way ({@link conclude}):
 * the parts read as one verdict (reports.ts), counted (tally.ts), what the
 * request leaves behind (effects.ts), and the answer (answers.ts). A
 * request refused by one part counts nowhere: the others' counts, lease
 * units, bookings and places are given back. The decision's own work past
 * its answer is returned with it, as one `pending`.
 */
import type { Settings } from "../config/settings.ts";
import type { Claims } from "../core/claims.ts";
import { pathnameOf, type RequestPath, requestPath } from "../core/paths.ts";
import type { CountedRule, PlacedRule, Rule } from "../core/rules.ts";
import type { LimiterNamespace } from "../object/client.ts";
import { NO_HEADERS, type Outcome } from "./answers.ts";
import { holds } from "./call.ts";
import { conclude, type Run } from "./conclude.ts";
import { sendOutbox } from "./effects.ts";
import type { Isolate } from "./isolate.ts";
import { claimsFor, inClaimedTier, inPriority, keyGroups, matchingRules } from "./match.ts";
import { readParts } from "./reports.ts";
import { knownRefusals, settle } from "./settle.ts";
import { settlePlace } from "./settle-place.ts";
import type { StatsNamespace } from "./stats.ts";
import type { AnalyticsSink } from "./tally.ts";
import { type KeyGroup, NOTHING_COUNTED, type Part, type RuleRefusal, type Settlement } from "./vocabulary.ts";
import { Work } from "./work.ts";

export type { Outcome } from "./answers.ts";

/** What a decision needs besides the request. */
export type DecideOptions = {
  settings: Settings;
  ns: LimiterNamespace;
  isolate: Isolate;
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
 * A decision: its outcome, or the promise of it, and the decision's work
 * past its answer as one `pending` (refunds, hand-backs, a late answer
 * watched, and, while the outcome is to come, the decision itself), when
 * there is any. Hand `pending` to `waitUntil` at once, before awaiting the
 * outcome: a client that hangs up while its request waits has the runtime
 * cancel the request, unless it has work in the background, and what a
 * waiting request gives back when its client hangs up (a booking, a
 * ticket) must still be sent.
 */
export type Decided = (Outcome | Promise<Outcome>) & { pending?: Promise<void> };

/**
 * Decides one request. When the isolate can decide alone (a known refusal,
 * or leases for every key) the answer is returned at once, not as a promise:
 * those are the paths every blocked and most allowed requests take.
 */
export function decide(request: Request, options: DecideOptions): Decided {
  const { settings, isolate } = options;
  const path = options.path ?? requestPath(pathnameOf(request.url));
  // Read once: each read of a request's property is a call into the runtime.
  const method = options.method ?? request.method;
  const matched = matchingRules(request, settings, method, path);
  if (matched.length === 0) return NO_HEADERS;
  const work = new Work();
  const claims = claimsFor(request, matched, settings, isolate.tokens, (task) => work.add(task));
  const decided =
    claims instanceof Promise
      ? claimsThen(claims, { request, method, path, matched }, options, work)
      : decideMatched({ request, method, path, matched, claims }, options, work);
  // The decision itself, while it runs: what it hands to the background then is awaited too. (Its failure is
  // its caller's to answer: it is not the background's.)
  if (decided instanceof Promise) work.add(decided.then(noop, noop));
  const pending = work.pending();
  if (pending === undefined) return decided;
  return decided instanceof Promise ? Object.assign(decided, { pending }) : { ...decided, pending };
}

const noop = (): void => {};

/** A decision once the request's token has been verified: its deadline counts from now. */
function claimsThen(
  claims: Promise<Claims | null>,
  request: Omit<Matched, "claims">,
  options: DecideOptions,
  work: Work,
): Promise<Outcome> {
  const startedAtMs = options.isolate.clock();
  return claims.then((verified) => decideMatched({ ...request, claims: verified, startedAtMs }, options, work));
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

function decideMatched(request: Matched, options: DecideOptions, work: Work): Outcome | Promise<Outcome> {
  const { settings, isolate } = options;
  const { keys } = isolate;
  const nowMs = isolate.clock();
  const rules = isolate.adaptive.crowdedIn(
    inPriority(inClaimedTier(request.matched, request.claims, settings), request, settings),
    nowMs,
  );
  const groups = keyGroups(rules, request, options.clientKey, settings, isolate.digest);
  const run: Run = {
    request: request.request,
    options,
    effects: { settings, ns: options.ns, isolate, work },
    groups,
    policies: rules.filter((rule) => rule.action === "block"),
    asked: placesAsked(groups),
    startedAtMs: request.startedAtMs ?? nowMs,
  };
  // The fast path: a lease unit for every key's counted rules, or a refusal this isolate knows of.
  const counted = groups.map((group): Part<CountedRule> | undefined => {
    if (group.rules.length === 0) return { group, rules: group.rules, settlement: NOTHING_COUNTED };
    const spent = keys.peek(group.digest)?.leases.spend(group.rules, nowMs);
    return spent && { group, rules: group.rules, settlement: { via: "lease", spent } };
  });
  const known = knownFor(groups, counted, keys, nowMs);
  if (known.length > 0) return conclude(run, { counted, known });
  for (const group of groups) if (group.rules.length > 0) keys.noteRequest(group.digest, nowMs);
  sendOutbox(run.effects);
  if (counted.every((part) => part !== undefined)) {
    if (run.asked.length > 0) return takePlaces(run, counted as Part<CountedRule>[]);
    return conclude(run, { counted: counted as Part<CountedRule>[] });
  }
  return settleCounted(run, counted);
}

/** The request's rules that give places, each with its key group; none shared, never written to. */
function placesAsked(groups: KeyGroup[]): Run["asked"] {
  let asked: { group: KeyGroup; rule: PlacedRule }[] | undefined;
  for (const group of groups) {
    for (const rule of group.places) {
      asked ??= [];
      asked.push({ group, rule });
    }
  }
  return asked ?? NO_PLACES;
}

const NO_PLACES: Run["asked"] = [];

/** The refusals this isolate knows of for the groups no lease unit covered. */
function knownFor(
  groups: KeyGroup[],
  counted: (Part | undefined)[],
  keys: Isolate["keys"],
  nowMs: number,
): RuleRefusal[] {
  let known: RuleRefusal[] | undefined;
  for (let i = 0; i < groups.length; i++) {
    if (counted[i] !== undefined) continue;
    const found = knownRefusals(groups[i]!, keys, nowMs);
    if (found.length > 0) known = known === undefined ? found : [...known, ...found];
  }
  return known ?? NONE;
}

const NONE: RuleRefusal[] = [];

/**
 * Settles the counted parts no lease covered, each through its key's gate;
 * then, if they admit the request, its places.
 */
async function settleCounted(run: Run, spent: (Part<CountedRule> | undefined)[]): Promise<Outcome> {
  const { request, groups, options } = run;
  const deadlineMs = run.startedAtMs + options.settings.timeoutMs;
  const placing = run.asked.length > 0;
  const waitMs = placing || groups.length > 1 ? longestWaitMs(groups) : 0;
  // A held turn waited for beside another key's decision ends when that key refuses the request.
  const stop = holdsBeside(groups) ? stopWith(request.signal) : null;
  const context = {
    ...run.effects,
    otherKeys: groups.length > 1 || placing,
    ...(waitMs > 0 ? { waitMs } : {}),
    gone: stop?.signal ?? request.signal,
  };
  const counted = await Promise.all(
    groups.map((group, i): Part<CountedRule> | Promise<Part<CountedRule>> => {
      const part = spent[i];
      if (part !== undefined) return part;
      return settle(group, deadlineMs, context).then((settlement) => {
        if (stop !== null && refuses(settlement)) stop.abort();
        return { group, rules: group.rules, settlement };
      });
    }),
  );
  // Its client hung up while it waited (it goes on only because it has work in the background).
  const gone = request.signal?.aborted === true || (stop === null && counted.some(isGone));
  if (!gone && placing) return takePlaces(run, counted);
  return conclude(run, { counted, gone });
}

/** Whether a part's settlement refuses the request: a refusal the isolate knew of, or its object's. */
const refuses = (s: Settlement): boolean =>
  s.via === "known" || (s.via === "call" && s.call.outcome.ok && !s.call.outcome.result.allowed);

const isGone = (part: Part): boolean => part.settlement.via === "gone";

/** Whether a key group may be held until its turn while another key group's counted rules are decided. */
function holdsBeside(groups: KeyGroup[]): boolean {
  let counting = 0;
  let holding = false;
  for (const group of groups) {
    if (group.rules.length === 0) continue;
    counting++;
    holding ||= holds(group);
  }
  return counting > 1 && holding;
}

/** A signal that aborts when the request's client hangs up, or when {@link AbortController.abort} is called. */
function stopWith(signal: AbortSignal | undefined): AbortController {
  const stop = new AbortController();
  if (signal?.aborted) stop.abort();
  else signal?.addEventListener("abort", () => stop.abort(), { once: true });
  return stop;
}

/**
 * The longest a request of these groups may wait before every key has
 * decided: held under a counted rule, then in line for a place.
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
 * The request's counted parts admitted it, unless they refuse it: then it
 * ends there. Otherwise a place under each of its rules that give places,
 * asked for in parallel.
 */
async function takePlaces(run: Run, counted: Part<CountedRule>[]): Promise<Outcome> {
  const { options, request } = run;
  const { isolate } = options;
  const read = readParts(counted, isolate.keys, isolate.clock());
  if (read.refused || read.closedBy.length > 0) return conclude(run, { counted, read });
  const deadlineMs = isolate.clock() + options.settings.timeoutMs;
  const context = { ...run.effects, gone: request.signal };
  const placed = await Promise.all(
    run.asked.map(
      async ({ group, rule }): Promise<Part<PlacedRule>> => ({
        group,
        rules: [rule],
        settlement: await settlePlace(group, rule, deadlineMs, context),
      }),
    ),
  );
  const gone = request.signal?.aborted === true || placed.some(isGone);
  return conclude(run, { counted, placed, gone, read });
}
