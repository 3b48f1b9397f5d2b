/**
 * @module
 * Counting what was decided: each matched rule's outcome for the request,
 * into the isolate's statistics and, when bound, Workers Analytics Engine
 * (one data point per rule and request). Nothing here can delay or change
 * a decision.
 */
import { keyParams } from "../core/keys.ts";
import type { Rule } from "../core/rules.ts";
import { atMostCharacters, firstCharacters } from "../core/text.ts";
import { costOf } from "../object/protocol.ts";
import type { StatsOutcome } from "../object/stats-protocol.ts";
import { keyHashPrefix } from "../observe/log.ts";
import type { StatsRecorder } from "./stats.ts";
import { failureOf, type KeyGroup, nameOf, type Part, type RuleRefusal, verdictOf, waitedFor } from "./vocabulary.ts";

/** A Workers Analytics Engine dataset, as far as the limiter writes to it. */
export type AnalyticsSink = {
  writeDataPoint(point: { blobs?: string[]; doubles?: number[]; indexes?: string[] }): void;
};

/** Where a decision is counted, and what it needs to say about the request. */
export type TallyContext = {
  isolate: { stats: StatsRecorder };
  /** Whether the isolate counts for the statistics object (it is bound). */
  stats: boolean;
  analytics?: AnalyticsSink | undefined;
  /** The data centre that decided (`request.cf.colo`); empty when unknown. */
  colo: string;
  /** Whether refused clients are kept as written (`STATS_RAW_KEYS`), not only as hashes. */
  rawKeys: boolean;
  nowMs: number;
};

/** One rule's outcome for a client: its key group, and its object's name when known. */
type Counted = { rule: Rule; outcome: StatsOutcome; group: KeyGroup; name: string | null };

const REFUSALS: ReadonlySet<StatsOutcome> = new Set(["refused", "refused_cached", "shadow_refused", "shed"]);

/** Counts a request answered from refusals the isolate knows of: each rule that refused it. */
export function tallyKnown(groups: KeyGroup[], known: RuleRefusal[], context: TallyContext): void {
  for (const k of known) {
    const group = groups.find((g) => g.digest === k.digest) ?? groups[0]!;
    // Refused only by an adaptive rule's reduction: shed, whether the object or the isolate knew it.
    const outcome = k.refusal.applied.reduced === true ? "shed" : "refused_cached";
    count({ rule: k.rule, outcome, group, name: k.refusal.name }, context);
  }
}

/**
 * Counts a settled request, per part and rule: admitted (when the request
 * went on), held (admitted at its turn, or given a place after a wait in
 * line), refused by its object or from what the isolate knew, shed
 * (refused only by an adaptive rule's reduction), a shadow rule's
 * would-be refusal, or a failure, open or closed. A rule that admitted a
 * request another rule refused counts nothing.
 */
export function tallyParts(parts: readonly Part[], admitted: boolean, context: TallyContext): void {
  for (const part of parts) {
    const { group, rules, settlement: s } = part;
    if (s.via === "known") {
      tallyKnown([group], s.known, context);
      continue;
    }
    if (s.via === "gone") continue;
    const failed = failureOf(s);
    // A failure shared from another request's call is counted without the key's name, as it always was.
    const name = s.via === "shared" ? null : nameOf(s);
    rules.forEach((rule, j) => {
      const outcome = failed ? failure(rule, failed.reason, context) : settledOutcome(rule, part, j, admitted);
      if (outcome !== null) count({ rule, outcome, group, name }, context);
    });
  }
}

function settledOutcome(rule: Rule, part: Part, j: number, admitted: boolean): StatsOutcome | null {
  const verdict = verdictOf(part, j);
  const enforced = rule.action === "block" || verdict?.override === "deny";
  // A shadow rule's would-be refusal is counted when the request went on: had another rule refused it, it counts nothing.
  if (verdict !== undefined && !verdict.ruleAllows)
    return enforced ? (verdict.reduced === true ? "shed" : "refused") : admitted ? "shadow_refused" : null;
  if (!admitted) return null;
  // Held until its turn, or in line for its place: under the rules that hold (a shadow rule counted it as it came).
  return waitedFor(part.settlement) && rule.action === "block" ? "held" : "admitted";
}

function failure(rule: Rule, reason: string, context: TallyContext): StatsOutcome {
  if (context.stats) context.isolate.stats.failure(reason);
  return rule.action === "block" && rule.onError === "closed" ? "failed_closed" : "failed_open";
}

function count({ rule, outcome, group, name }: Counted, context: TallyContext): void {
  const { isolate, nowMs } = context;
  if (context.stats) isolate.stats.count(rule, outcome, nowMs);
  if (context.stats && name !== null && REFUSALS.has(outcome)) {
    isolate.stats.refusedClient(rule, name, context.rawKeys ? () => asWritten(group.canonical) : null);
  }
  context.analytics?.writeDataPoint({
    blobs: [rule.id, outcome, name === null ? "" : keyHashPrefix(name), context.colo],
    doubles: [costOf(rule)],
    indexes: [rule.id],
  });
}

/** The most characters of each of a key's values shown in the statistics, "…" not included. */
export const MAX_VALUE_CHARS = 100;

/**
 * A canonical key as the admin API names it: `ip=203.0.113.7`, parts joined
 * by `&`; each value cut to {@link MAX_VALUE_CHARS}, marked "…" where it
 * was, so every part of a key shows however long one of them is.
 */
export function asWritten(canonical: string): string {
  try {
    return keyParams(canonical, cut).join("&");
  } catch {
    return canonical;
  }
}

const cut = (value: string): string =>
  atMostCharacters(value, MAX_VALUE_CHARS) ? value : `${firstCharacters(value, MAX_VALUE_CHARS)}…`;
