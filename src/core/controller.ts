/**
 * @module
 * The controller of an adaptive rule: the factor its configured limit is
 * multiplied by, moved by the origin's health as isolates report it.
 * Multiplicative both ways (docs/adaptive.md says why, with the
 * measurements behind every parameter):
 *
 * - a queue forming at the origin, seen before the answers breach the
 *   target: the mean latency of the window against the origin's calm
 *   latency (as measured here), and requests found still in flight long
 *   after the calm latency. Over `holdAt` × calm: no raise; over `cutAt`:
 *   a cut;
 * - unhealthy (slow or failing beyond chance), or a queue: cut at once, to
 *   what the origin kept up with (its successful answers over what it was
 *   sent), less what drains the queue in `drainMs`, by at most a half; but
 *   not while its backlog drains that fast on its own; and the last of a
 *   rule's priorities only for a queue of its own, not the others' backlog;
 * - healthy while the reduction refuses requests: raise by up to 15 %, in
 *   proportion to the room left under `holdAt`, and by 2 % near the level
 *   where the last queue formed;
 * - healthy while it refuses none: double (a limit above the demand holds
 *   nothing back, and says nothing about the origin);
 * - slow (or a queue), and two cuts did not make it faster while the
 *   origin kept up with what it was sent: no more cuts for now; and after
 *   `driftAfterMs` of it, the slowness is the origin's calm, not a queue (a
 *   baseline drift). The calm latency is measured again, and while the
 *   origin is slower than the target without a queue, slow answers cut
 *   nothing (`drift`); errors and queues still do;
 * - never below the floor, never above the configured limit, and no
 *   decision on too few answers: the factor stays.
 *
 * Each decision rests only on counts isolates gathered under the current
 * factor (a report names the version it applied), over at least one
 * interval: a change is judged by what came after it, once, as TCP cuts once
 * per round trip. The one exception is the onset of trouble at the
 * configured limit: a window that shows it clearly is judged at once.
 *
 * Pure: `(state, counts, version, nowMs, target)` in (and the late mark the
 * counts were counted against), `(state, step)` out. No I/O, no clock.
 */
import {
  addCounts,
  addTroubled,
  badOf,
  busyCapOf,
  type HealthCounts,
  type KeyCounts,
  noCounts,
  worstableIn,
} from "./health.ts";
import { type Priority, type Stages, stageAt } from "./priorities.ts";

/** What the controller needs of a rule's target, as shares. */
export type ControlTarget = {
  /** The share of answered requests that may be slow: 0.01 for the 99th percentile. */
  slowShare: number;
  /** The share of answered requests that may fail. */
  errorShare: number;
  /** The floor as a share of the configured limit: the lowest factor, in (0, 1]. */
  minFactor: number;
  /**
   * The latency target, ms: isolates count each answer's time at most
   * `busyCapOf(latencyMs, lateMs)`, and a mean at that cap measures nothing
   * (absent: no cap known).
   */
  latencyMs?: number;
  /**
   * Under a rule with priorities, the stages the factor goes through
   * (core/priorities.ts): its lowest is then `stages.minFactor`, below
   * `minFactor`, and each priority's factor is `factorsAt(stages, factor)`.
   */
  stages?: Stages;
};

export type ControllerParams = {
  /** How often an isolate reports while the configured limit applies, in ms. */
  steadyReportMs: number;
  /** How often while the limit is reduced: changes reach isolates sooner, and evidence the controller sooner. */
  activeReportMs: number;
  /** An isolate whose own counts breach the target reports early, but no sooner than this after its last report. */
  earliestReportMs: number;
  /** …and only with at least this many answers (and requests found late in flight) counted. */
  urgentSamples: number;
  /** A decision rests on counts gathered over at least this long under the current factor. */
  intervalMs: number;
  /** Fewer answers than this (and requests found late in flight): no decision, the counts gather on. */
  minSamples: number;
  /** Counts gathered this long without reaching `minSamples` are dropped: too few, too old to judge by. */
  staleMs: number;
  /** …this long, while the reduction refused at least `minSamples` and nothing was sent to the origin in the window. */
  thinStaleMs: number;
  /**
   * A breach while the origin answers successfully at least this share of
   * what is forwarded to it is its backlog draining: no cut.
   */
  drainingAt: number;
  /** A cut aims to drain the queue's excess latency (the mean over the calm one) in about this long, ms. */
  drainMs: number;
  /** A cut never takes the limit below this share of itself in one step… */
  cutDeepest: number;
  /** …and a cut on slow or failed answers at least this deep… */
  cutShallowest: number;
  /** …and one on a queue alone at least this deep. */
  cutQueueShallowest: number;
  /** The raise while healthy and the reduction refuses requests, while no calm latency is known: a probe for capacity. */
  raiseBinding: number;
  /** …with a calm latency known: up to this, in proportion to the room left under `holdAt`. */
  raiseMost: number;
  /** …and at most this within `nearTrouble` of the level where the last queue formed, unless the mean is within `nearCalm`. */
  raiseNear: number;
  nearTrouble: number;
  nearCalm: number;
  /** The raise while healthy and it refuses none: the limit is above the demand and holds nothing back. */
  raiseIdle: number;
  /**
   * Once a queue has drained, the share of the highest factor at which the
   * origin kept up with a standing queue that the limit goes back to at once
   * (cuts that drained the queue went below it); 0: none, raises only.
   */
  resumeAt: number;
  /** The origin kept up at a factor when it answered successfully more than it was sent by this many standard deviations. */
  keptUpZ: number;
  /** The level is resumed, too, while the mean says a queue stands but under this × the calm latency and nothing is late… */
  resumeQuietUnder: number;
  /** …and then, at this × the calm latency or more, the calm latency is measured again: it moved. */
  calmMovedAt: number;
  /**
   * The client keys with the most slow, failed or late answers that a
   * judgement leaves out: the origin is judged by the answers of the clients
   * beyond them, unless they are all the clients there are. No client, and
   * no set of this many, can then move the limit for everyone; an origin
   * slow for every client is still seen.
   */
  leaveOut: number;
  /**
   * Keys whose answers were mostly slow, failed or late, when they are fewer
   * than this share of the clients, are left out instead, all of them, if
   * that leaves less trouble than leaving out the `leaveOut` worst, and the
   * others' mean is within `cutAt` × the calm latency: a slow endpoint slows
   * the clients that call it, a queue slows every client.
   */
  fewClients: number;
  /**
   * How far over its allowed share a count must be to be a breach, in
   * standard deviations of a binomial count at that share: a few slow
   * requests among few answers are chance, not an unhealthy origin.
   */
  z: number;
  /** The calm latency is the lowest mean of a window without a queue, over the current period and the one before, ms. */
  calmPeriodMs: number;
  /**
   * The calm latency is taken to be at least this, ms: below it, a clock's
   * granularity and a busy host's hiccups are larger than a queue.
   */
  calmFloorMs: number;
  /** An answer, or a request still in flight, longer than the calm latency × this is late. */
  lateOver: number;
  /** More than this share late (beyond chance): a queue, before the answers breach the target. */
  lateCut: number;
  /** The window's mean latency over the calm one × this: a queue forming, no raise… */
  holdAt: number;
  /** …over × this: a queue, a cut. */
  cutAt: number;
  /** Fewer successful answers than this (without the worst keys'): no mean, no gradient. */
  meanSamples: number;
  /** The calm latency a window measures is its mean plus this many standard errors: the lowest of many means is low by chance. */
  calmZ: number;
  /** Trouble for at least this long that cuts did not make the origin faster in, while it kept up: its calm latency is measured again… */
  driftAfterMs: number;
  /**
   * …or once the cuts took the limit to `driftQuietDepth` of where it stood
   * at the first (a queue waits less when its load falls that much), and
   * for this long in a row hardly any answers were late (at most
   * `driftQuietLate` of them, and of the requests found in flight: a slower
   * origin makes every answer slower alike)…
   */
  driftQuietMs: number;
  driftQuietDepth: number;
  driftQuietLate: number;
  /** …after at least this many cuts (at the floor too), no more of them until then… */
  driftCuts: number;
  /** …the mean still at least this share of what it was at the first (noise aside, not faster)… */
  driftKept: number;
  /** …and the origin answering successfully what it was sent over them all, within this share. */
  driftKeptUp: number;
};

/** A mean at least this share of the cap isolates count answers to is at the cap. */
const CAPPED = 0.95;

/** The parameters the product runs with (docs/adaptive.md, "Choosing the parameters"). */
export const CONTROLLER_PARAMS: ControllerParams = {
  steadyReportMs: 1_000,
  activeReportMs: 250,
  earliestReportMs: 250,
  urgentSamples: 10,
  intervalMs: 500,
  minSamples: 20,
  staleMs: 10_000,
  thinStaleMs: 2_000,
  drainingAt: 1.05,
  drainMs: 2_000,
  cutDeepest: 0.5,
  cutShallowest: 0.9,
  cutQueueShallowest: 0.95,
  raiseBinding: 1.1,
  raiseMost: 1.15,
  raiseNear: 1.02,
  nearTrouble: 0.95,
  nearCalm: 1.05,
  raiseIdle: 2,
  resumeAt: 0.9,
  keptUpZ: 1,
  resumeQuietUnder: 2.5,
  calmMovedAt: 1.8,
  leaveOut: 5,
  fewClients: 0.5,
  z: 2,
  calmPeriodMs: 60_000,
  calmFloorMs: 25,
  lateOver: 3,
  lateCut: 0.2,
  holdAt: 1.2,
  cutAt: 1.4,
  meanSamples: 10,
  calmZ: 2,
  driftAfterMs: 10_000,
  driftQuietMs: 1_000,
  driftQuietDepth: 0.7,
  driftQuietLate: 0.02,
  driftCuts: 2,
  driftKept: 0.7,
  driftKeptUp: 0.05,
};

/**
 * What the controller is doing, for the log line each change gets:
 * the configured limit applies (`full`), the last change was a cut
 * (`reducing`), or a raise that has not reached the configured limit yet
 * (`recovering`).
 */
export type ControllerMode = "full" | "reducing" | "recovering";

/**
 * The origin's calm latency: the lowest mean latency of a judged window
 * without a queue, over the current period and the one before (an old low
 * is forgotten within two periods), or as measured again when cuts did not
 * make the origin faster.
 */
export type Calm = {
  /** The calm latency, ms; null before a window without a queue was judged. */
  ms: number | null;
  /** When the current period began; null before any. */
  periodStartMs: number | null;
  /** The lowest of the period before, and of the current one. */
  previousMs: number | null;
  currentMs: number | null;
};

/**
 * Windows in a row with trouble that cuts did not make the origin faster in:
 * since when, how many windows, how many cuts, the mean at the first, and
 * what the origin was sent and answered successfully over them all.
 */
export type Trying = {
  sinceMs: number;
  windows: number;
  cuts: number;
  meanMs: number;
  sent: number;
  kept: number;
  /**
   * Since when every window in a row had at most `driftQuietLate` of its
   * answers and requests in flight late (quiet); null: the last one did not.
   */
  quietSinceMs: number | null;
  /** The factor when the first of them was judged. */
  factor: number;
};

export type ControllerState = {
  /** The limit is the configured limit × this, in [minFactor, 1]. */
  factor: number;
  /** Counts every change of `factor`; isolates name the version they applied. */
  version: number;
  mode: ControllerMode;
  /** Counts gathered under `version` since the last decision. */
  window: HealthCounts;
  /** When the first of them arrived; null when none has. */
  windowStartMs: number | null;
  /** When the factor last changed; null: never. */
  changedAtMs: number | null;
  calm: Calm;
  /** The factor at which a queue last formed (the mean over `holdAt` × calm) while the reduction bound, below 1: raises slow near it. */
  troubleAt: number | null;
  /** Cuts in a row on slow answers or a queue that did not make the origin faster; null: none. */
  trying: Trying | null;
  /** The origin is slower than the target without a queue: lowering the limit does not help, slow answers cut nothing. */
  drift: boolean;
  /**
   * The highest factor at which the origin kept up with what it was sent
   * while a queue stood and the reduction bound (since it last fell behind
   * beyond chance): once the queue has drained, the limit goes back to
   * `resumeAt` of it at once. Null: none known (absent in a state stored
   * before it was kept).
   */
  keptUpAt?: number | null;
};

export const initialState = (): ControllerState => ({
  factor: 1,
  version: 0,
  mode: "full",
  window: noCounts(),
  windowStartMs: null,
  changedAtMs: null,
  calm: { ms: null, periodStartMs: null, previousMs: null, currentMs: null },
  troubleAt: null,
  trying: null,
  drift: false,
  keptUpAt: null,
});

/**
 * Answers, and requests still in flight, later than this are late: `lateOver` × the calm latency; while no calm
 * latency is known (a new controller, or one reloaded), the rule's latency target `latencyMs`, so that an origin
 * that answers nothing at all is seen from its first requests; null with neither.
 */
export const lateMsOf = (
  state: ControllerState,
  params: ControllerParams = CONTROLLER_PARAMS,
  latencyMs?: number,
): number | null =>
  state.calm.ms === null ? (latencyMs ?? null) : Math.max(state.calm.ms, params.calmFloorMs) * params.lateOver;

/** How the origin looked over a window: its shares, and whether each is over its target beyond chance. */
export type Health = {
  answered: number;
  slowShare: number;
  errorShare: number;
  /** Slow or failing beyond the target, and beyond chance. */
  breached: boolean;
  /** Failing beyond the target, and beyond chance. */
  failing: boolean;
  /**
   * What the origin answered successfully over what was forwarded to it:
   * below 1 its backlog grows (when it is saturated, this is its capacity
   * over the load); above 1 the backlog drains. 1 when nothing was forwarded.
   */
  keepingUp: number;
  /** The two sides of `keepingUp`: what the origin was sent, and what it answered successfully of it. */
  sent: number;
  kept: number;
  /** Under or at the target: raise. (Over it within chance: neither.) */
  withinTarget: boolean;
  /** Whether the reduction refused requests: a cut then takes effect at once. */
  binding: boolean;
  /** The busiest client's count as a share of the configured limit. */
  peak: number;
  /** How many client keys' answers were left out of the shares and the mean (see {@link withoutWorst}). */
  leftOut: number;
  /** The successful answers' mean latency, ms, without the worst keys'; null with too few. */
  meanMs: number | null;
  /** The standard error of `meanMs`, ms (0 without it). */
  errorMs: number;
  /** `meanMs` over the calm latency; null without either. */
  gradient: number | null;
  /** The share of answers, and of requests found still in flight, later than the late mark, without the worst keys'. */
  lateShare: number;
  /** A queue at the origin: late beyond `lateCut`, or the mean over `cutAt` × calm. */
  queue: boolean;
  /** A queue forming: the mean over `holdAt` × calm, or a queue. */
  forming: boolean;
};

/** What a report led to. */
export type Step =
  /** From an isolate that applied another version: not evidence about the current factor. */
  | { kind: "ignored" }
  /** Added to the window, which is too short or has too few answers to judge yet. */
  | { kind: "gathering" }
  /** The window grew old with too few answers: dropped, the factor stays. */
  | { kind: "dropped"; answered: number }
  /** Judged: the factor was cut, raised, or stays. */
  | { kind: "cut" | "raise" | "hold"; health: Health; from: number; to: number };

/** Whether `count` of `n` is over `share` beyond chance (`z` standard deviations). */
export const breaches = (count: number, n: number, share: number, z: number): boolean =>
  count > n * share + z * Math.sqrt(n * share * (1 - share));

/**
 * The window's health against the target and the origin's calm latency
 * (`calmMs`, null when none is known). Its answers are judged without those
 * of the `leaveOut` client keys with the most slow, failed or late ones,
 * unless those keys are all the answers there are: a few clients that see
 * slow or failed answers while the rest do not are not an unhealthy origin.
 * A client gone before its answer counts as neither success nor failure
 * (it is left out of what the origin was sent), unless the origin had
 * already kept it longer than the target: then it is slow, and one the
 * origin did not keep up with.
 */
export function judge(
  window: HealthCounts,
  target: ControlTarget,
  calmMs: number | null = null,
  params: ControllerParams = CONTROLLER_PARAMS,
  atOnset = false,
): Health {
  const {
    answered: n,
    slow,
    errors,
    late,
    busyMs,
    busySq,
    stuck,
    leftOut,
  } = withoutFew(window, params, calmMs, atOnset);
  const { z } = params;
  // Sent to the origin, as far as the origin's health goes: not the requests whose clients left before the
  // origin could be late (they say nothing of it); the ones that left after it was (goneSlow) it did not keep up with.
  const sent = window.forwarded - (window.gone - window.goneSlow);
  const kept = window.answered - window.errors - window.goneSlow;
  const failing = breaches(errors, n, target.errorShare, z);
  const m = n - errors;
  const meanMs = m < params.meanSamples ? null : busyMs / m;
  // How far the mean may be off by chance: `z` standard errors. The mean less that is what is judged.
  // The mean's standard error: the lowest of many windows' means is lower than the origin's by chance alone.
  const errorMs = meanMs === null ? 0 : Math.sqrt(Math.max(0, busySq / m - meanMs * meanMs) / m);
  const gradient = calmMs === null || meanMs === null ? null : meanMs / Math.max(calmMs, params.calmFloorMs);
  // Requests still in flight past the late mark are late answers that have not come yet: the queue's lead.
  const lateOf = n + stuck;
  const queue = breaches(late + stuck, lateOf, params.lateCut, z) || (gradient ?? 0) > params.cutAt;
  return {
    answered: n,
    slowShare: n === 0 ? 0 : slow / n,
    errorShare: n === 0 ? 0 : errors / n,
    breached: failing || breaches(slow, n, target.slowShare, z),
    failing,
    keepingUp: sent <= 0 ? 1 : kept / sent,
    sent,
    kept,
    withinTarget: slow <= n * target.slowShare && errors <= n * target.errorShare,
    binding: window.shed > 0,
    peak: window.peak,
    leftOut,
    meanMs,
    errorMs,
    gradient,
    lateShare: lateOf === 0 ? 0 : (late + stuck) / lateOf,
    queue,
    forming: queue || (gradient ?? 0) > params.holdAt,
  };
}

/** A window's answers and their slow, failed and late counts, busy time and late requests, as a judgement reads them. */
type Evidence = {
  answered: number;
  slow: number;
  errors: number;
  late: number;
  busyMs: number;
  busySq: number;
  stuck: number;
  /** How many client keys' counts were taken out of it. */
  leftOut: number;
};

/** Each count at least 0: what is taken out may be counted a little apart from the whole (reports of isolates). */
const atLeastZero = (e: Evidence): Evidence => ({
  answered: Math.max(0, e.answered),
  slow: Math.max(0, e.slow),
  errors: Math.max(0, e.errors),
  late: Math.max(0, e.late),
  busyMs: Math.max(0, e.busyMs),
  busySq: Math.max(0, e.busySq),
  stuck: Math.max(0, e.stuck),
  leftOut: e.leftOut,
});

/** What an evidence holds against the origin: its slow, failed and late answers and requests found late. */
const badIn = (e: Evidence): number => e.slow + e.errors + e.late + e.stuck;

/**
 * The window's evidence without the few clients that saw trouble the rest
 * did not: without the `leaveOut` worst keys, or, when the keys whose
 * answers were mostly bad are fewer than `fewClients` of the clients,
 * without all of them, whichever leaves less trouble. A queue at the origin
 * slows every client, so its trouble outlasts both.
 */
export function withoutFew(
  window: HealthCounts,
  params: ControllerParams,
  calmMs: number | null = null,
  atOnset = false,
): Evidence {
  const worst = withoutWorst(window, params.leaveOut);
  // The keys whose trouble has not recurred yet too, at the onset (a few clients' first bad answers look like failures
  // spread over everyone then, and a window later tells them apart), and while most of the window's troubled keys are
  // ones whose trouble recurs (then the others are mostly the same clients' first reports). Failures spread over
  // everyone leave many keys with a first bad answer and few whose trouble recurs: those are judged whole.
  const recurring = window.troubled?.keys ?? 0;
  const fresh = window.fresh?.keys ?? 0;
  const t = atOnset || (fresh > 0 && recurring >= fresh) ? addTroubled(window.troubled, window.fresh) : window.troubled;
  if (t === undefined || t.keys === 0 || t.keys >= (window.clients ?? 0) * params.fewClients) return worst;
  const left = atLeastZero({
    answered: window.answered - t.answered,
    slow: window.slow - t.slow,
    errors: window.errors - t.errors,
    late: window.late - t.late,
    busyMs: window.busyMs - t.busyMs,
    busySq: window.busySq - t.busySq,
    stuck: window.stuck - t.stuck,
    leftOut: t.keys,
  });
  if (left.answered + left.stuck <= 0) return worst;
  // The others slowed too (their mean over `cutAt` × the calm latency, as a queue makes it), or their answers are too
  // few for a mean that could show they did not: not a few clients' trouble, as far as can be told.
  const m = left.answered - left.errors;
  const slowed =
    calmMs !== null &&
    (m < params.meanSamples || left.busyMs / m > params.cutAt * Math.max(calmMs, params.calmFloorMs));
  return !slowed && badIn(left) < badIn(worst) ? left : worst;
}

/**
 * The fewest answers (and requests found late) the clients beyond the worst
 * must have for the window to be judged without the worst: fewer are the
 * few answers of clients left out that were named in no report (their
 * luckier ones, before a bad answer), not other clients': five clients of
 * an origin failing nine requests in ten, each failing on its own and all
 * left out, would leave only those to judge it by, and it would look healthy.
 */
const FEWEST_LEFT = 5;

/**
 * The window's answers, slow, failed and late counts, busy time and
 * requests found late in flight without those of the `k` keys with the most
 * of them; the whole window's when too little is left without them (those
 * clients are all the traffic there is, or nearly).
 */
export function withoutWorst(window: HealthCounts, k: number): Evidence {
  const { answered, slow, errors, late, busyMs, busySq, stuck } = window;
  const whole: Evidence = { answered, slow, errors, late, busyMs, busySq, stuck, leftOut: 0 };
  const worst = window.worst;
  if (k <= 0 || worst === undefined || worst.length === 0) return whole;
  const left = { ...whole };
  // Only keys whose trouble recurs may be left out; the others' counts are anyone's trouble.
  const worstable = new Set(worstableIn(window));
  for (const key of worst) {
    if (left.leftOut >= k || badOf(key) === 0) break;
    if (!worstable.has(key[0])) continue;
    left.answered -= key[1];
    left.slow -= key[2];
    left.errors -= key[3];
    left.late -= key[4];
    left.busyMs -= key[5];
    left.stuck -= key[6];
    left.busySq -= key[7];
    left.leftOut++;
  }
  if (left.answered + left.stuck < FEWEST_LEFT) return whole;
  return atLeastZero(left);
}

const clamp = (factor: number, target: ControlTarget): number =>
  Math.min(1, Math.max(target.stages?.minFactor ?? target.minFactor, factor));

/** Whether a priority had requests forwarded, or shed, in the window. */
const demandOf = (window: HealthCounts, priority: Priority): boolean => {
  const counts = window.byPriority?.[priority];
  return counts !== undefined && counts[0] + counts[1] > 0;
};

/** Whether the reduction refused requests of a priority in the window. */
const shedOf = (window: HealthCounts, priority: Priority): boolean => (window.byPriority?.[priority]?.[1] ?? 0) > 0;

/**
 * Where a cut starts under a rule with priorities: from the stage of the
 * first priority with requests in the window (a cut of a stage whose
 * priority has none would do nothing), and the factor at which that
 * priority's limit is the configured one (the busiest client's level is a
 * share of it). Without priorities: the factor, and 1.
 */
function cutStage(
  factor: number,
  window: HealthCounts,
  stages: Stages | undefined,
): { from: number; top: number; binding: boolean | null; entering: boolean } {
  if (stages === undefined || stages.order.length === 1)
    return { from: factor, top: 1, binding: null, entering: false };
  const at = stageAt(stages, factor);
  let s = at;
  let from = factor;
  while (s < stages.order.length - 1 && !demandOf(window, stages.order[s]!)) from = Math.min(from, stages.tops[++s]!);
  // The last stage is entered when its priority has not been cut yet: every other one has nothing left.
  const entering = s === stages.order.length - 1 && s > 0 && from >= stages.tops[s]! * (1 - 1e-12);
  return { from, top: stages.tops[s]!, binding: shedOf(window, stages.order[s]!), entering };
}

/**
 * Where a raise starts under a rule with priorities: a stage whose priority
 * the reduction refused nothing of is done at once (its priority back to
 * the configured limit), and the raise goes on from the stage before it.
 */
function raiseStage(
  factor: number,
  window: HealthCounts,
  stages: Stages | undefined,
): { from: number; binding: boolean | null } {
  if (stages === undefined || stages.order.length === 1) return { from: factor, binding: null };
  let s = stageAt(stages, factor);
  let from = factor;
  while (s > 0 && !shedOf(window, stages.order[s]!)) from = Math.max(from, stages.tops[s--]!);
  return { from, binding: shedOf(window, stages.order[s]!) };
}

/**
 * The factor after a judged window. A cut starts from where the limit binds:
 * while the reduction refuses no one, a limit above the busiest client's
 * count does nothing, so the cut applies to that count instead.
 */
function next(
  state: ControllerState,
  window: HealthCounts,
  health: Health,
  drift: boolean,
  stages: Stages | undefined,
  nowMs: number,
  params: ControllerParams,
): { kind: "cut" | "raise" | "hold"; to: number } {
  const at = state.factor;
  // Slow answers without a queue cut nothing once the origin is known slower than the target when calm.
  const slowCuts = health.failing || (health.breached && !drift);
  if (troubled(health, drift)) {
    // Cuts that did not make it faster while it kept up: no more until it is clear whether they can.
    const trying = state.trying;
    if (trying !== null && trying.cuts >= params.driftCuts && steadyButSlow(trying, health, params)) {
      return { kind: "hold", to: at };
    }
    const excessMs = health.gradient === null ? 0 : health.meanMs! - Math.max(state.calm.ms!, params.calmFloorMs);
    const drain = Math.max(0, excessMs) / params.drainMs;
    // Its backlog drains on its own about as fast as a cut would drain it: a cut would only deepen it.
    if (health.keepingUp >= Math.max(params.drainingAt, 1 + drain)) return { kind: "hold", to: at };
    const { from, top, binding, entering } = cutStage(at, window, stages);
    // The last priority is cut only for a queue of its own. Not while the queue built before the others had
    // nothing left has had its time to drain (drainMs, and the wait it shows: the answers seen waited that
    // long, and those sent since the last change come at least that long after it); nor while the origin
    // answers more than it is sent (that backlog drains, however slowly): a change is judged by what came after it.
    if (entering) {
      const sinceMs = state.changedAtMs === null ? Number.POSITIVE_INFINITY : nowMs - state.changedAtMs;
      if (sinceMs < params.drainMs + Math.max(0, excessMs) || health.keepingUp >= params.drainingAt) {
        return { kind: "hold", to: at };
      }
    }
    const binds = (binding ?? health.binding) || health.peak <= 0 ? from : Math.min(from, health.peak * top);
    const shallowest = slowCuts ? params.cutShallowest : params.cutQueueShallowest;
    const cut = Math.min(shallowest, Math.max(params.cutDeepest, health.keepingUp * (1 - drain)));
    return { kind: "cut", to: binds * cut };
  }
  if (health.forming || !(health.withinTarget || drift) || at >= 1) return { kind: "hold", to: at };
  const { from, binding } = raiseStage(at, window, stages);
  if (!(binding ?? health.binding)) return { kind: "raise", to: from * params.raiseIdle };
  if (health.gradient === null) return { kind: "raise", to: from * params.raiseBinding };
  // A raise in proportion to the room left before a queue forms; small near where the last one formed.
  const room = Math.min(1, Math.max(0, (params.holdAt - health.gradient) / (params.holdAt - 1)));
  const by = 1 + (params.raiseMost - 1) * room;
  const trouble = state.troubleAt;
  const near =
    trouble !== null &&
    from * by > trouble * params.nearTrouble &&
    from < trouble / params.nearTrouble &&
    health.gradient > params.nearCalm;
  const raised = from * (near ? Math.min(by, params.raiseNear) : by);
  // The queue has drained: back to what the origin kept up with while it stood.
  return { kind: "raise", to: Math.max(raised, resumeOf(state, params)) };
}

/** The factor the limit goes back to once a queue has drained: `resumeAt` of the kept-up level (0: none known). */
const resumeOf = (state: ControllerState, params: ControllerParams): number => (state.keptUpAt ?? 0) * params.resumeAt;

/**
 * Whether the queue the kept-up level was learnt under has drained, though
 * the mean against the calm latency still says one stands: the limit is
 * below `resumeAt` of that level, nothing fails, hardly any answer or
 * request in flight is late (`driftQuietLate`), and the mean is under
 * `resumeQuietUnder` × the calm latency. A queue that big makes some
 * requests wait past three times the calm; what is left is the origin's
 * own latency grown, or a small queue, which the level, where it answered
 * more than it was sent, drains.
 */
function quietResume(state: ControllerState, health: Health, drift: boolean, params: ControllerParams): boolean {
  return (
    troubled(health, drift) &&
    state.factor < resumeOf(state, params) &&
    !health.failing &&
    health.lateShare <= params.driftQuietLate &&
    (health.gradient ?? Number.POSITIVE_INFINITY) <= params.resumeQuietUnder
  );
}

/**
 * A judged window's mean latency as the calm latency is measured from it:
 * without its busiest few clients' answers (`busiest`), where the reports
 * counted them and enough answers are left, so that a few clients flooding
 * the rule with fast requests cannot set it low; else its mean.
 */
function calmMeanOf(window: HealthCounts, health: Health, params: ControllerParams): number {
  const b = window.busiest;
  const left = window.answered - window.errors - (b?.ok ?? 0);
  if (b === undefined || left < params.meanSamples) return health.meanMs!;
  return Math.max(0, window.busyMs - b.busyMs) / left;
}

/**
 * The calm latency after a judged window whose mean was at most `meanMs`
 * (its mean and its margin of chance: the lowest of many windows' means is
 * lower than the origin's by chance alone; null: none, or a queue), at `nowMs`.
 */
function calmAfter(calm: Calm, meanMs: number | null, nowMs: number, periodMs: number): Calm {
  let { periodStartMs, previousMs, currentMs } = calm;
  if (periodStartMs === null || nowMs - periodStartMs >= periodMs) {
    // A new period: the one just over is kept, an older one forgotten.
    previousMs = periodStartMs !== null && nowMs - periodStartMs < 2 * periodMs ? currentMs : null;
    currentMs = null;
    periodStartMs = nowMs;
  }
  if (meanMs !== null) currentMs = currentMs === null ? meanMs : Math.min(currentMs, meanMs);
  const ms = previousMs === null ? currentMs : currentMs === null ? previousMs : Math.min(previousMs, currentMs);
  return { ms, periodStartMs, previousMs, currentMs };
}

/**
 * Whether the cuts made in a row did not make the origin faster, long
 * enough and often enough to say its slowness is its calm, not a queue: the
 * mean still what it was at the first, the origin keeping up with what it
 * was sent (no backlog growing or draining), nothing failing.
 */
function notAQueue(
  trying: Trying | null,
  health: Health,
  factor: number,
  nowMs: number,
  params: ControllerParams,
): boolean {
  if (trying === null || trying.cuts < params.driftCuts) return false;
  const sinceMs = nowMs - trying.sinceMs;
  if (sinceMs >= params.driftAfterMs && steadyButSlow(trying, health, params)) return true;
  return (
    sinceMs >= params.driftQuietMs &&
    factor <= trying.factor * params.driftQuietDepth &&
    trying.quietSinceMs !== null &&
    nowMs - trying.quietSinceMs >= params.driftQuietMs &&
    health.lateShare <= params.driftQuietLate &&
    steadyButSlow(trying, health, params)
  );
}

/**
 * Not faster for the cuts (the mean still at least `driftKept` of what it
 * was at the first), and the origin keeping up with what it was sent over
 * all those windows (within a tenth: no backlog growing or draining),
 * nothing failing.
 */
function steadyButSlow(trying: Trying, health: Health, params: ControllerParams): boolean {
  const sent = trying.sent + health.sent;
  const keepingUp = sent <= 0 ? 1 : (trying.kept + health.kept) / sent;
  return (
    health.meanMs !== null &&
    !health.failing &&
    health.meanMs >= trying.meanMs * params.driftKept &&
    Math.abs(keepingUp - 1) <= params.driftKeptUp
  );
}

/**
 * One isolate's report: its counts since its last report, gathered under
 * the factor of `version`. Returns the state after it, and what it led to.
 */
export function observe(
  state: ControllerState,
  counts: HealthCounts,
  version: number,
  nowMs: number,
  target: ControlTarget,
  params: ControllerParams = CONTROLLER_PARAMS,
  lateMs: number | null = lateMsOf(state, params),
): { state: ControllerState; step: Step } {
  // A floor raised since the factor was set lifts it now (a version of its own).
  const floored = clamp(state.factor, target);
  if (floored !== state.factor) {
    state = {
      ...state,
      factor: floored,
      version: state.version + 1,
      window: noCounts(),
      windowStartMs: null,
      changedAtMs: nowMs,
    };
  }
  if (version !== state.version) return { state, step: { kind: "ignored" } };
  const windowStartMs = state.windowStartMs ?? nowMs;
  const window = addCounts(state.window, againstMark(counts, lateMs, lateMsOf(state, params, target.latencyMs)));
  const long = nowMs - windowStartMs >= params.intervalMs;
  // At the configured limit, settled, a short window is judged at once when it shows trouble clearly: the onset.
  const onset =
    !long && state.factor >= 1 && (state.changedAtMs === null || nowMs - state.changedAtMs >= 2 * params.intervalMs);
  const health =
    (long || onset) && window.answered + window.stuck >= params.minSamples
      ? judge(window, target, state.calm.ms, params, onset && !long)
      : null;
  // Nothing reaches the origin: every client is over the reduced limit. An origin sent nothing cannot show it is
  // healthy, so waiting for its answers would hold the limit down for as long as the clients keep sending.
  if (health === null && long && state.factor < 1 && starved(window, state.drift, params)) {
    // Doubled while the origin is sent nothing at all (idle, it holds no queue to grow); a probe while a few go.
    const by = window.forwarded === 0 && window.answered === 0 ? params.raiseIdle : params.raiseBinding;
    const to = clamp(state.factor * by, target);
    return {
      state: {
        ...state,
        factor: to,
        version: state.version + 1,
        mode: to === 1 ? "full" : "recovering",
        window: noCounts(),
        windowStartMs: null,
        changedAtMs: nowMs,
        troubleAt: to >= 1 ? null : state.troubleAt,
        trying: null,
        // What the origin kept up with is not learnt again here, nor used: a judged window still goes back to it.
        keptUpAt: to >= 1 ? null : (state.keptUpAt ?? null),
      },
      step: { kind: "raise", health: judge(window, target, state.calm.ms, params), from: state.factor, to },
    };
  }
  if (health === null || !(long || troubled(health, state.drift))) {
    // Too few answers while the reduction refuses plenty and nothing has been sent to the origin in the window: the
    // few answers in it are to requests sent before (the cut that refuses the rest), and would keep the window from
    // ever showing the origin starved.
    const thin = health === null && window.forwarded === 0 && window.shed >= params.minSamples;
    if (nowMs - windowStartMs >= (thin ? params.thinStaleMs : params.staleMs)) {
      const dropped = { ...state, window: noCounts(), windowStartMs: null };
      return { state: dropped, step: { kind: "dropped", answered: window.answered } };
    }
    return { state: { ...state, window, windowStartMs }, step: { kind: "gathering" } };
  }
  // Measured again: when cuts did not make the origin faster while it kept up (its slowness is its calm); or when the
  // queue a kept-up level was learnt under has drained and nothing is late, yet the mean is still `calmMovedAt` × the
  // calm latency (it moved: the service time grew). Not while isolates found the origin crowded (their refusals, not
  // the cuts, held its queue where it was), nor from a mean at the cap isolates count answers to (it measures nothing).
  const capped =
    target.latencyMs !== undefined &&
    health.meanMs !== null &&
    health.meanMs >= CAPPED * busyCapOf(target.latencyMs, lateMsOf(state, params, target.latencyMs));
  const measurable = !((window.crowded ?? 0) > 0) && !capped;
  const resuming = quietResume(state, health, state.drift, params);
  const moved = measurable && resuming && (health.gradient ?? 0) >= params.calmMovedAt;
  const again = moved || (measurable && notAQueue(state.trying, health, state.factor, nowMs, params));
  const calm: Calm = again
    ? {
        ms: calmMeanOf(window, health, params) + params.calmZ * health.errorMs,
        periodStartMs: nowMs,
        previousMs: null,
        currentMs: calmMeanOf(window, health, params) + params.calmZ * health.errorMs,
      }
    : calmAfter(
        state.calm,
        health.forming || health.meanMs === null
          ? null
          : calmMeanOf(window, health, params) + params.calmZ * health.errorMs,
        nowMs,
        params.calmPeriodMs,
      );
  // Still slow once measured so: the target is one the origin cannot meet when calm. Until it can again.
  const drift = again ? health.breached && !health.failing : state.drift && !health.withinTarget;
  const from = state.factor;
  // The window that measured the calm latency again was judged against the old one: nothing to decide on it. But a
  // drained queue goes back to the level the origin kept up with, the calm latency moved or not.
  const decided =
    resuming && (moved || !again)
      ? { kind: "raise" as const, to: resumeOf(state, params) }
      : again
        ? { kind: "hold" as const, to: from }
        : next(state, window, health, drift, target.stages, nowMs, params);
  const to = clamp(decided.to, target);
  const changed = to !== from;
  const mode: ControllerMode = !changed ? state.mode : to === 1 ? "full" : to < from ? "reducing" : "recovering";
  return {
    state: {
      factor: to,
      version: changed ? state.version + 1 : state.version,
      mode,
      window: noCounts(),
      windowStartMs: null,
      changedAtMs: changed ? nowMs : state.changedAtMs,
      calm,
      troubleAt: to >= 1 ? null : health.binding && (health.gradient ?? 0) > params.holdAt ? from : state.troubleAt,
      trying: again
        ? null
        : tryingAfter(state.trying, decided.kind, troubled(health, drift), health, from, nowMs, params),
      drift,
      keptUpAt:
        to >= 1 || decided.kind === "raise" ? null : keptUpAfter(state.keptUpAt ?? null, from, health, drift, params),
    },
    step: { kind: changed ? decided.kind : "hold", health, from, to },
  };
}

/**
 * Whether a window too thin to judge is so because the reduction refused
 * nearly everything: at least `minSamples` requests refused by it, fewer
 * answers than that, and nothing in it against the origin (no slow, failed
 * or late answer, no request late in flight, no client that left a slow one;
 * slow ones count for nothing once the origin is known slower than the
 * target when calm: `drift`).
 */
const starved = (window: HealthCounts, drift: boolean, params: ControllerParams): boolean =>
  window.shed >= params.minSamples &&
  window.answered + window.stuck < params.minSamples &&
  (drift ? 0 : window.slow + window.goneSlow) + window.errors + window.late + window.stuck === 0;

/**
 * The highest factor the origin kept up at after a judged window at `from`:
 * a window with a queue while the reduction bound, the origin answering
 * successfully more than it was sent (by `keptUpZ` standard deviations: its
 * backlog draining at that factor), raises it to `from`; one where it
 * answered less beyond chance (`z` standard deviations) forgets it.
 */
function keptUpAfter(
  keptUpAt: number | null,
  from: number,
  health: Health,
  drift: boolean,
  params: ControllerParams,
): number | null {
  if (!health.binding) return keptUpAt;
  if (health.sent > 0 && health.kept < health.sent - params.z * Math.sqrt(health.sent)) return null;
  if (!troubled(health, drift) || health.kept < health.sent + params.keptUpZ * Math.sqrt(health.sent)) return keptUpAt;
  return Math.max(keptUpAt ?? 0, from);
}

/**
 * A report's counts, its late ones only when they were counted against the
 * late mark the controller has now (within a tenth): counted against
 * another, they say nothing about this one (the mark moves when the calm
 * latency is measured again, and isolates learn it with their next answer).
 */
function againstMark(counts: HealthCounts, countedMs: number | null, markMs: number | null): HealthCounts {
  const same = countedMs !== null && markMs !== null && Math.abs(countedMs - markMs) <= markMs / 10;
  if (same || (counts.late === 0 && counts.stuck === 0)) return counts;
  const worst = counts.worst?.map((k): KeyCounts => [k[0], k[1], k[2], k[3], 0, k[5], 0, k[7]]);
  const troubled = counts.troubled && { ...counts.troubled, late: 0, stuck: 0 };
  return { ...counts, late: 0, stuck: 0, ...(worst === undefined ? {} : { worst }), ...(troubled ? { troubled } : {}) };
}

/**
 * Windows of trouble in a row after a judged one: one more window (and cut,
 * on a cut: at the floor too, where it changes nothing), started again when
 * the mean fell (the cuts helped), and none after a raise or a window
 * without trouble.
 */
function tryingAfter(
  trying: Trying | null,
  kind: "cut" | "raise" | "hold",
  trouble: boolean,
  health: Health,
  factor: number,
  nowMs: number,
  params: ControllerParams,
): Trying | null {
  if (kind === "raise" || !trouble || health.meanMs === null) return null;
  const cut = kind === "cut" ? 1 : 0;
  const quiet = health.lateShare <= params.driftQuietLate;
  if (trying === null || health.meanMs < trying.meanMs * params.driftKept) {
    const { meanMs, sent, kept } = health;
    return { sinceMs: nowMs, windows: 1, cuts: cut, meanMs, sent, kept, quietSinceMs: quiet ? nowMs : null, factor };
  }
  return {
    sinceMs: trying.sinceMs,
    windows: trying.windows + 1,
    cuts: trying.cuts + cut,
    meanMs: trying.meanMs,
    sent: trying.sent + health.sent,
    kept: trying.kept + health.kept,
    quietSinceMs: quiet ? (trying.quietSinceMs ?? nowMs) : null,
    factor: trying.factor,
  };
}

/** How soon the controller asks an isolate to report again: sooner while anything is happening. */
export const reportEveryMs = (state: ControllerState, params: ControllerParams = CONTROLLER_PARAMS): number =>
  state.mode === "full" ? params.steadyReportMs : params.activeReportMs;

/**
 * Whether a window shows trouble a cut answers: failures, a queue, or slow
 * answers (unless the origin is known slower than the target when calm).
 */
const troubled = (health: Health, drift: boolean): boolean =>
  health.failing || health.queue || (health.breached && !drift);

/**
 * Whether an isolate's own counts show trouble clearly enough to report at
 * once: failures, a queue, or slow answers beyond the target (unless the
 * controller said the origin is slower than the target when calm: `drift`).
 */
export function urgent(
  counts: HealthCounts,
  target: ControlTarget,
  params: ControllerParams = CONTROLLER_PARAMS,
  drift = false,
): boolean {
  if (counts.answered + counts.stuck < params.urgentSamples) return false;
  return troubled(judge(counts, target, null, params), drift);
}

/**
 * The limit a factor gives a configured `limit` (the rule's, a tier's or an
 * override's): rounded down, never below 1. With the rule's own limit and a
 * factor at least `floor / limit`, never below the floor.
 */
export function scaledLimit(limit: number, factor: number): number {
  const scaled = limit * factor;
  // floor ÷ limit × limit is a hair under floor in binary at times: snap what is within rounding error.
  return Math.max(1, Math.floor(scaled + scaled * 1e-12 + 1e-9));
}
