/**
 * @module
 * How every decision ends, whichever way it came (decide.ts): its parts
 * read as one verdict, counted, what it leaves behind, its adaptive rules
 * told, and the answer.
 */
import type { Settings } from "../config/settings.ts";
import type { CountedRule, PlacedRule, Rule } from "../core/rules.ts";
import { noteDecision, noteKnown } from "./adaptive.ts";
import { allowed, clientGone, knownRefusal, type Outcome, refused, unavailable } from "./answers.ts";
import { type Effects, flushStatsIfDue, giveBackAll, type HeldPlace, sendOutbox, watchLate } from "./effects.ts";
import type { Isolate } from "./isolate.ts";
import { readParts } from "./reports.ts";
import type { StatsNamespace } from "./stats.ts";
import { type AnalyticsSink, type TallyContext, tallyKnown, tallyParts } from "./tally.ts";
import { calledObject, giveBackSpent, type KeyGroup, type Part, type RuleRefusal, waitedFor } from "./vocabulary.ts";

/** One request's decision under way: what every phase and the ending read. */
export type Run = {
  request: Request;
  /** What of the decision's options the ending reads. */
  options: {
    settings: Settings;
    isolate: Isolate;
    stats?: StatsNamespace | undefined;
    analytics?: AnalyticsSink | undefined;
  };
  /** What the effects need, the decision's own work its sink. */
  effects: Effects & { settings: Settings; isolate: Isolate };
  groups: KeyGroup[];
  /** Its enforcing rules: the policies its headers name. */
  policies: Rule[];
  /** Each of its rules that gives places, with its key group: the places it takes once its counted rules admit it. */
  asked: readonly { group: KeyGroup; rule: PlacedRule }[];
  /** Isolate time; the request's deadline counts from here. */
  startedAtMs: number;
};

const NO_PARTS: readonly Part<PlacedRule>[] = [];

/** How a decision came to its end: its parts as settled, and what else decided it. */
export type Ending =
  /** Refused at once by refusals this isolate knew of; `counted`: the parts a lease unit settled meanwhile. */
  | { known: RuleRefusal[]; counted: readonly (Part<CountedRule> | undefined)[] }
  | {
      known?: undefined;
      counted: readonly Part<CountedRule>[];
      /** Its places, when it asked for them. */
      placed?: readonly Part<PlacedRule>[];
      /** Its client hung up while it waited. */
      gone?: boolean;
      /** Its counted parts as already read, when they were read before its places were asked for. */
      read?: Verdict;
    };

/** The parts read: the verdicts for the headers, whether a part refuses, and the rules a failure closes. */
export type Verdict = ReturnType<typeof readParts>;

/**
 * Every decision ends here: its parts read as one verdict (refused by any
 * part, closed by a failure, or admitted), counted, what it leaves behind
 * (for a request turned away, everything it was given goes back), its
 * adaptive rules told, and the answer.
 */
export function conclude(run: Run, ending: Ending): Outcome {
  return ending.known !== undefined ? refusedAtOnce(run, ending.known, ending.counted) : settled(run, ending);
}

/** Refused by what this isolate knew: the lease units spent for other keys go back. */
function refusedAtOnce(run: Run, known: RuleRefusal[], counted: readonly (Part<CountedRule> | undefined)[]): Outcome {
  const { isolate, settings } = run.options;
  const nowMs = isolate.clock();
  for (const part of counted) if (part?.settlement.via === "lease") giveBackSpent(part.settlement.spent);
  const tally = tallyContext(run, nowMs);
  if (tally) tallyKnown(run.groups, known, tally);
  noteKnown(known, run.effects);
  return knownRefusal(run.policies, known, isolate.keys, settings.legacyHeaders, nowMs);
}

function settled(run: Run, ending: Exclude<Ending, { known: RuleRefusal[] }>): Outcome {
  const { counted, placed = NO_PARTS, gone = false, read } = ending;
  const { options, effects } = run;
  const { isolate, settings } = options;
  const nowMs = isolate.clock();
  const parts: readonly Part[] = placed.length === 0 ? counted : [...counted, ...placed];
  if (gone) {
    // Its client hung up: it counts nowhere, like a request turned away, and nothing of it is logged or
    // tallied; its answer reaches nobody.
    leaveBehind(parts, true, effects);
    return clientGone();
  }
  const verdict = read ?? readParts(counted, isolate.keys, nowMs);
  const ofPlaces = placed.length === 0 ? null : readParts(placed, isolate.keys, nowMs);
  const reports = ofPlaces === null ? verdict.reports : [...verdict.reports, ...ofPlaces.reports];
  const isRefused = verdict.refused || ofPlaces?.refused === true;
  const closedBy = ofPlaces === null ? verdict.closedBy : [...verdict.closedBy, ...ofPlaces.closedBy];
  const admitted = !isRefused && closedBy.length === 0;
  const tally = tallyContext(run, nowMs);
  if (tally) {
    tallyParts(parts, admitted, tally);
    if (tally.stats && parts.some((part) => calledObject(part.settlement))) {
      isolate.stats.latencyOf(nowMs - run.startedAtMs, nowMs);
    }
  }
  leaveBehind(parts, !admitted, effects);
  const legacy = settings.legacyHeaders;
  const { policies } = run;
  if (isRefused) {
    noteDecision(reports, false, effects);
    return refused(policies, reports, legacy);
  }
  if (closedBy.length > 0) return unavailable(closedBy, policies, reports, legacy);
  const held = heldPlaces(placed, isolate);
  const heldMs = parts.some((part) => waitedFor(part.settlement))
    ? Math.max(0, Math.round(nowMs - run.startedAtMs))
    : undefined;
  return allowed(parts, counted, { policies, reports }, effects, heldMs, held);
}

/**
 * Where this decision is counted, or null when neither the statistics
 * object nor Analytics Engine is bound. Sends the isolate's statistics
 * first when a flush is due: in the background, one call.
 */
function tallyContext(run: Run, nowMs: number): TallyContext | null {
  const { stats, analytics, isolate, settings } = run.options;
  if (stats === undefined && analytics === undefined) return null;
  if (stats !== undefined) flushStatsIfDue(isolate.stats, stats, nowMs, run.effects);
  // Reading request.cf costs the runtime a copy of it: only Analytics Engine needs the colo.
  const colo = analytics === undefined ? undefined : (run.request as { cf?: { colo?: unknown } }).cf?.colo;
  return {
    isolate,
    stats: stats !== undefined,
    analytics,
    colo: typeof colo === "string" ? colo : "",
    rawKeys: settings.statsRawKeys,
    nowMs,
  };
}

/** The places an admitted request was given, as it holds them while in flight; undefined when it has none. */
function heldPlaces(placed: readonly Part<PlacedRule>[], isolate: Isolate): HeldPlace[] | undefined {
  let held: HeldPlace[] | undefined;
  for (const { group, rules, settlement: s } of placed) {
    if (s.via !== "place") continue;
    held ??= [];
    held.push({
      keyPlaces: isolate.keys.use(group.digest, isolate.clock()).places,
      name: s.name,
      placeId: s.place.placeId,
      rule: rules[0]!.id,
      timeoutMs: s.place.expiresAtMs - s.place.nowMs,
    });
  }
  return held;
}

/**
 * What a decided request leaves to the background: for a request turned
 * away, everything it was given back (lease units, counts, a booking, its
 * places); every call's late answer watched; what is owed for forgotten
 * keys sent.
 */
function leaveBehind(parts: readonly Part[], turnedAway: boolean, effects: Effects): void {
  if (turnedAway) giveBackAll(parts, effects);
  for (const { group, settlement } of parts) {
    if (settlement.via === "call") watchLate(settlement.call, group, turnedAway, effects);
  }
  sendOutbox(effects);
}
