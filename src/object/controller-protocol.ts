/**
 * @module
 * What isolates and an adaptive rule's controller object say to each other:
 * a report of the rule's health counts (never one per request), the factor
 * in the answer, and the controller's view with its history for the
 * statistics and the dashboard. Types and pure helpers only.
 */
import type { ControllerMode } from "../core/controller.ts";
import type { HealthCounts, LatencyPairs, ReportedTarget } from "../core/health.ts";
import type { Factors, Priority } from "../core/priorities.ts";

/**
 * The controller's object in the `RATE_LIMITER` namespace: one per adaptive
 * rule, named for it. Per-client objects are named by 64-digit hashes, so
 * this name is never one of theirs.
 */
export const controllerName = (ruleId: string): string => `adaptive:${ruleId}`;

/** One isolate's report on one adaptive rule: what it saw since its last report. */
export type HealthReport = {
  /** The rule's id. */
  rule: string;
  /** The rule's configured limit (or concurrency), as this isolate's settings have it. */
  limit: number;
  /** The rule's health target, as this isolate's settings have it (its priorities without their matchers): the latest report's is the one applied. */
  target: ReportedTarget;
  /** The factor version this isolate applied while it gathered `counts` (0 before it learned any). */
  version: number;
  counts: HealthCounts;
  /** The forwarded requests' durations, by bucket (`latencyBucketOf`), for the history's percentile. */
  latency?: LatencyPairs;
  /** The late mark its `late` and `stuck` counts were counted against (the last answer's `lateMs`); null before any. */
  lateMs?: number | null;
};

/** What the controller answers every report: the factor, and when to report next. */
export type FactorAnswer = {
  /** The controller's clock, in Unix milliseconds. */
  nowMs: number;
  /** Multiply the configured limit by this, with `scaledLimit`: in [floor ÷ limit, 1]. Under priorities, the default priority's. */
  factor: number;
  /** Under a rule with priorities: each priority's factor (docs/adaptive.md#priorities). */
  factors?: Factors;
  /** Counts every change of `factor`: apply an answer only if its version is newer than the one applied. */
  version: number;
  mode: ControllerMode;
  /** The reported limit × `factor`, as `scaledLimit` gives it: the current quota. */
  limit: number;
  /** Report again this soon (with traffic under the rule): sooner while the limit is reduced. */
  reportInMs: number;
  /**
   * The late mark, ms: an answer later than this, or a request still in
   * flight that long, is late (`late`, `stuck` in a report). The origin's
   * calm latency as the controller measured it, times 3; null before it has.
   */
  lateMs: number | null;
  /** The origin is slower than the target when calm (see {@link ControllerView.drift}): slow answers alone are no reason to report early. */
  drift: boolean;
};

/** One point of the history: the limit at that instant, and the origin's latency since the point before. */
export type ControllerPoint = {
  atMs: number;
  factor: number;
  /** The configured limit × the factor. */
  limit: number;
  /** The configured limit then. */
  configured: number;
  /** The forwarded requests' latency at the rule's percentile since the point before, in ms; null with none. */
  latencyMs: number | null;
  /** Whether the origin was then slower than the target without a queue (see {@link ControllerView.drift}). */
  drift: boolean;
  /** Under a rule with priorities: each priority's `[factor, forwarded, shed]`, the counts since the point before. */
  priorities?: Partial<Record<Priority, [factor: number, forwarded: number, shed: number]>>;
};

/** One priority of a rule with priorities, as the statistics show it. */
export type PriorityView = {
  priority: Priority;
  factor: number;
  /** The configured limit × its factor. */
  limit: number;
  /** Its requests forwarded, and refused only because of the reduction, over the history asked for. */
  forwarded: number;
  shed: number;
};

/** The controller as the statistics and the dashboard read it. */
export type ControllerView = {
  rule: string;
  nowMs: number;
  factor: number;
  version: number;
  mode: ControllerMode;
  /** The configured limit, as the latest report had it; null before any report. */
  configured: number | null;
  /** The current limit; null before any report. */
  limit: number | null;
  /**
   * The origin's calm latency as the controller measured it: the lowest
   * mean latency of a window without a queue, over the last minute or two,
   * ms; null before one was judged.
   */
  calmMs: number | null;
  /**
   * The origin is slower than the rule's `latency` target while nothing
   * queues (a baseline drift: a slower day, a heavier endpoint, a busy
   * host): lowering the limit would not make it faster, so its slow answers
   * lower nothing, and the operator should raise the target or look at the
   * origin. Errors, and a queue against its calm latency, still cut.
   */
  drift: boolean;
  /** Under a rule with priorities: each priority, refused last first (critical, default, sheddable). */
  priorities?: PriorityView[];
  /** Oldest first: a point at every change, and every {@link HISTORY_EVERY_MS} while reports arrive. */
  history: ControllerPoint[];
};

/** A point of the history at least this often while reports arrive, besides one at every change. */
export const HISTORY_EVERY_MS = 10_000;
/** Points older than this are dropped… */
export const HISTORY_KEPT_MS = 24 * 3_600_000;
/** …and never more than this many are kept. */
export const HISTORY_MAX_POINTS = 20_000;
