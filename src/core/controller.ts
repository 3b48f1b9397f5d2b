/**
 * @module
 * The controller of an adaptive rule: the factor its configured limit is
 * multiplied by, moved by the origin's health as isolates report it.
 * Multiplicative both ways (docs/adaptive.md says why, with the
 * measurements behind every parameter):
 *
 * - unhealthy (slow or failing beyond chance): cut at once, to what the
 *   origin kept up with (its successful answers over what it was sent),
 *   by at least a tenth and at most a half; but not while that ratio shows
 *   its backlog draining, which a cut would only deepen;
 * - healthy while the reduction refuses requests: raise by a tenth, a
 *   probe for capacity;
 * - healthy while it refuses none: double (a limit above the demand holds
 *   nothing back, and says nothing about the origin);
 * - never below the floor, never above the configured limit, and no
 *   decision on too few answers: the factor stays.
 *
 * Each decision rests only on counts isolates gathered under the current
 * factor (a report names the version it applied), over at least one
 * interval: a change is judged by what came after it, once, as TCP cuts once
 * per round trip.
 *
 * Pure: `(state, counts, version, nowMs, target)` in, `(state, step)` out.
 * No I/O, no clock.
 */
import { addCounts, badOf, type HealthCounts, noCounts } from "./health.ts";

/** What the controller needs of a rule's target, as shares. */
export type ControlTarget = {
  /** The share of answered requests that may be slow: 0.01 for the 99th percentile. */
  slowShare: number;
  /** The share of answered requests that may fail. */
  errorShare: number;
  /** The floor as a share of the configured limit: the lowest factor, in (0, 1]. */
  minFactor: number;
};

export type ControllerParams = {
  /** How often an isolate reports while the configured limit applies, in ms. */
  steadyReportMs: number;
  /** How often while the limit is reduced: changes reach isolates sooner, and evidence the controller sooner. */
  activeReportMs: number;
  /** An isolate whose own counts breach the target reports early, but no sooner than this after its last report. */
  earliestReportMs: number;
  /** …and only with at least this many answers counted. */
  urgentSamples: number;
  /** A decision rests on counts gathered over at least this long under the current factor. */
  intervalMs: number;
  /** Fewer answers than this: no decision, the counts gather on. */
  minSamples: number;
  /** Counts gathered this long without reaching `minSamples` are dropped: too few, too old to judge by. */
  staleMs: number;
  /**
   * A breach while the origin answers successfully at least this share of
   * what is forwarded to it is its backlog draining: no cut.
   */
  drainingAt: number;
  /** A cut takes the limit to this share of what the origin kept up with (successful answers over forwarded)… */
  cutMargin: number;
  /** …but never below this share of the limit in one step… */
  cutDeepest: number;
  /** …nor above this one. */
  cutShallowest: number;
  /** The raise while healthy and the reduction refuses requests: a probe for capacity. */
  raiseBinding: number;
  /** The raise while healthy and it refuses none: the limit is above the demand and holds nothing back. */
  raiseIdle: number;
  /**
   * The client keys with the most slow or failed answers that a judgement
   * leaves out: the origin is judged by the answers of the clients beyond
   * them, unless they are all the clients there are. No client, and no set
   * of this many, can then move the limit for everyone; an origin slow for
   * every client is still seen.
   */
  leaveOut: number;
  /**
   * How far over its allowed share a count must be to be a breach, in
   * standard deviations of a binomial count at that share: a few slow
   * requests among few answers are chance, not an unhealthy origin.
   */
  z: number;
};

/** The parameters the product runs with (docs/adaptive.md, "Choosing the parameters"). */
export const CONTROLLER_PARAMS: ControllerParams = {
  steadyReportMs: 1_000,
  activeReportMs: 250,
  earliestReportMs: 250,
  urgentSamples: 10,
  intervalMs: 500,
  minSamples: 20,
  staleMs: 10_000,
  drainingAt: 1.05,
  cutMargin: 0.95,
  cutDeepest: 0.5,
  cutShallowest: 0.9,
  raiseBinding: 1.1,
  raiseIdle: 2,
  leaveOut: 5,
  z: 2,
};

/**
 * What the controller is doing, for the log line each change gets:
 * the configured limit applies (`full`), the last change was a cut
 * (`reducing`), or a raise that has not reached the configured limit yet
 * (`recovering`).
 */
export type ControllerMode = "full" | "reducing" | "recovering";

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
};

export const initialState = (): ControllerState => ({
  factor: 1,
  version: 0,
  mode: "full",
  window: noCounts(),
  windowStartMs: null,
});

/** How the origin looked over a window: its shares, and whether each is over its target beyond chance. */
export type Health = {
  answered: number;
  slowShare: number;
  errorShare: number;
  /** Over the target beyond chance: cut. */
  breached: boolean;
  /**
   * What the origin answered successfully over what was forwarded to it:
   * below 1 its backlog grows (when it is saturated, this is its capacity
   * over the load); above 1 the backlog drains. 1 when nothing was forwarded.
   */
  keepingUp: number;
  /** Under or at the target: raise. (Over it within chance: neither.) */
  withinTarget: boolean;
  /** Whether the reduction refused requests: a cut then takes effect at once. */
  binding: boolean;
  /** The busiest client's count as a share of the configured limit. */
  peak: number;
  /** How many client keys' answers were left out of `answered`, `slowShare` and `errorShare` (see {@link withoutWorst}). */
  leftOut: number;
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
 * The window's health against the target. Its slow and failed answers are
 * judged without those of the `leaveOut` client keys with the most of them,
 * unless those keys are all the answers there are: a few clients that see
 * slow or failed answers while the rest do not are not an unhealthy origin.
 * A client gone before its answer counts as neither success nor failure
 * (it is left out of what the origin was sent), unless the origin had
 * already kept it longer than the target: then it is slow, and one the
 * origin did not keep up with.
 */
export function judge(window: HealthCounts, target: ControlTarget, z: number, leaveOut = 0): Health {
  const { answered: n, slow, errors, leftOut } = withoutWorst(window, leaveOut);
  const slowShare = n === 0 ? 0 : slow / n;
  const errorShare = n === 0 ? 0 : errors / n;
  // Sent to the origin, as far as the origin's health goes: not the requests whose clients left before the
  // origin could be late (they say nothing of it); the ones that left after it was (goneSlow) it did not keep up with.
  const sent = window.forwarded - (window.gone - window.goneSlow);
  return {
    answered: n,
    slowShare,
    errorShare,
    breached: breaches(slow, n, target.slowShare, z) || breaches(errors, n, target.errorShare, z),
    keepingUp: sent <= 0 ? 1 : (window.answered - window.errors - window.goneSlow) / sent,
    withinTarget: slow <= n * target.slowShare && errors <= n * target.errorShare,
    binding: window.shed > 0,
    peak: window.peak,
    leftOut,
  };
}

/**
 * The window's answers, slow and failed counts without those of the `k` keys
 * with the most slow or failed answers; the whole window's when nothing is
 * left without them (those clients are all the traffic there is).
 */
export function withoutWorst(
  window: HealthCounts,
  k: number,
): { answered: number; slow: number; errors: number; leftOut: number } {
  const whole = { answered: window.answered, slow: window.slow, errors: window.errors, leftOut: 0 };
  const worst = window.worst;
  if (k <= 0 || worst === undefined || worst.length === 0) return whole;
  let { answered, slow, errors } = whole;
  let leftOut = 0;
  for (const key of worst.slice(0, k)) {
    if (badOf(key) === 0) break;
    answered -= key[1];
    slow -= key[2];
    errors -= key[3];
    leftOut++;
  }
  if (answered <= 0) return whole;
  return { answered, slow: Math.max(0, slow), errors: Math.max(0, errors), leftOut };
}

const clamp = (factor: number, target: ControlTarget): number => Math.min(1, Math.max(target.minFactor, factor));

/**
 * The factor after a judged window. A cut starts from where the limit binds:
 * while the reduction refuses no one, a limit above the busiest client's
 * count does nothing, so the cut applies to that count instead.
 */
function next(from: number, health: Health, params: ControllerParams): { kind: "cut" | "raise" | "hold"; to: number } {
  if (health.breached) {
    if (health.keepingUp >= params.drainingAt) return { kind: "hold", to: from };
    const binds = health.binding || health.peak <= 0 ? from : Math.min(from, health.peak);
    const cut = Math.min(params.cutShallowest, Math.max(params.cutDeepest, health.keepingUp * params.cutMargin));
    return { kind: "cut", to: binds * cut };
  }
  if (!health.withinTarget || from >= 1) return { kind: "hold", to: from };
  return { kind: "raise", to: from * (health.binding ? params.raiseBinding : params.raiseIdle) };
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
): { state: ControllerState; step: Step } {
  // A floor raised since the factor was set lifts it now (a version of its own).
  const floored = clamp(state.factor, target);
  if (floored !== state.factor) {
    state = { ...state, factor: floored, version: state.version + 1, window: noCounts(), windowStartMs: null };
  }
  if (version !== state.version) return { state, step: { kind: "ignored" } };
  const windowStartMs = state.windowStartMs ?? nowMs;
  const window = addCounts(state.window, counts);
  if (nowMs - windowStartMs < params.intervalMs || window.answered < params.minSamples) {
    if (nowMs - windowStartMs >= params.staleMs) {
      const dropped = { ...state, window: noCounts(), windowStartMs: null };
      return { state: dropped, step: { kind: "dropped", answered: window.answered } };
    }
    return { state: { ...state, window, windowStartMs }, step: { kind: "gathering" } };
  }
  const health = judge(window, target, params.z, params.leaveOut);
  const from = state.factor;
  const decided = next(from, health, params);
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
    },
    step: { kind: changed ? decided.kind : "hold", health, from, to },
  };
}

/** How soon the controller asks an isolate to report again: sooner while anything is happening. */
export const reportEveryMs = (state: ControllerState, params: ControllerParams = CONTROLLER_PARAMS): number =>
  state.mode === "full" ? params.steadyReportMs : params.activeReportMs;

/** Whether an isolate's own counts breach the target clearly enough to report at once. */
export const urgent = (
  counts: HealthCounts,
  target: ControlTarget,
  params: ControllerParams = CONTROLLER_PARAMS,
): boolean => counts.answered >= params.urgentSamples && judge(counts, target, params.z, params.leaveOut).breached;

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
