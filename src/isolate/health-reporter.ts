/**
 * @module
 * One adaptive rule as one isolate sees it: the counts of what it forwarded
 * under the rule and how each ended, sent to the rule's controller object at
 * most once per interval (never once per request, never two at once), and
 * the factor learned from its answers. The one owner of both: decisions are
 * returned as data (a report to send, what an answer changed), and the
 * caller carries them out (adaptive.ts). No I/O, no clock, no timers:
 * test/health-reporter.test.ts drives it on plain numbers.
 */
import { CONTROLLER_PARAMS, type ControlTarget, urgent } from "../core/controller.ts";
import {
  addCounts,
  type HealthCounts,
  type HealthTarget,
  type KeyCounts,
  LATENCY_BUCKETS,
  type LatencyPairs,
  latencyBucketOf,
  mergeWorst,
  noCounts,
  outcomeOf,
  slowShareOf,
  worstFirst,
} from "../core/health.ts";
import type { FactorAnswer, HealthReport } from "../object/controller-protocol.ts";

/** A failed report is logged at most once per this many milliseconds, per rule and isolate. */
export const REPORT_FAILURE_LOG_EVERY_MS = 60_000;

/**
 * The most client keys a reporter keeps counts of between reports: only
 * keys that had a slow or failed answer are kept, so a flood of clients
 * with fast answers takes none of the room.
 */
export const MAX_KEYS_COUNTED = 64;

/** What the reporter needs of its rule: its id, its configured limit (or concurrency), and its target. */
export type ReportedRule = { id: string; limit: number; adaptive: HealthTarget };

/** What an answer changed: nothing, a raise, or a cut (the factor fell). */
export type Learned = { changed: false } | { changed: true; fell: boolean; from: number; to: number };

export class HealthReporter {
  readonly ruleId: string;
  /** The factor the isolate applies, as last learned: 1 until an answer says otherwise. */
  factor = 1;
  /** The controller's version of {@link factor}; 0 before any answer. */
  version = 0;
  private rule: ReportedRule;
  private control: ControlTarget;
  private reportInMs = CONTROLLER_PARAMS.steadyReportMs;
  private counts: HealthCounts = noCounts();
  /** Per client key that had a slow or failed answer since the last report: its answers since then. */
  private keys = new Map<string, KeyCounts>();
  private readonly latency = new Array<number>(LATENCY_BUCKETS).fill(0);
  private latencyCount = 0;
  /** When the last report was sent; none yet: the first counts go at once. */
  private lastSentMs = Number.NEGATIVE_INFINITY;
  /** The report on its way, if one is: its counts come back into the next one if it fails. */
  private sending: { counts: HealthCounts; latency: LatencyPairs; version: number } | null = null;
  private lastFailureLogMs = Number.NEGATIVE_INFINITY;

  constructor(rule: ReportedRule) {
    this.ruleId = rule.id;
    this.rule = rule;
    this.control = controlOf(rule);
  }

  /** The rule as the settings now have it (a new deploy may change its limit or target). */
  update(rule: ReportedRule): void {
    if (rule === this.rule) return;
    this.rule = rule;
    this.control = controlOf(rule);
  }

  /** A request admitted under the rule and forwarded to the origin. */
  forwarded(): void {
    this.counts.forwarded++;
  }

  /**
   * How a forwarded request ended: its status (0 when the origin could not
   * be reached), how long the origin took (from the request's last byte to
   * the response's headers), and, when known, its client's key.
   */
  answered(status: number, durationMs: number, key?: string): void {
    const { slow, error } = outcomeOf(this.rule.adaptive, status, durationMs);
    const c = this.counts;
    c.answered++;
    if (slow) c.slow++;
    if (error) c.errors++;
    this.latency[latencyBucketOf(Math.max(0, durationMs))]!++;
    this.latencyCount++;
    if (key !== undefined) this.countKey(key, slow, error);
  }

  /**
   * A forwarded request whose client hung up (or broke off its upload)
   * before the origin's headers: neither a success nor a failure. When the
   * origin had already kept it `waitedMs` past its last byte, longer than
   * the target, it is known slow, and counts so.
   */
  gone(waitedMs: number | null, key?: string): void {
    const c = this.counts;
    c.gone++;
    if (waitedMs === null || !outcomeOf(this.rule.adaptive, 200, waitedMs).slow) return;
    c.goneSlow++;
    c.answered++;
    c.slow++;
    if (key !== undefined) this.countKey(key, true, false);
  }

  /** One answer of a client key: kept once the key has had a slow or failed answer. */
  private countKey(key: string, slow: boolean, error: boolean): void {
    let counts = this.keys.get(key);
    if (counts === undefined) {
      if ((!slow && !error) || this.keys.size >= MAX_KEYS_COUNTED) return;
      counts = [key, 0, 0, 0];
      this.keys.set(key, counts);
    }
    counts[1]++;
    if (slow) counts[2]++;
    if (error) counts[3]++;
  }

  /** A request refused only because of the reduction. */
  shed(): void {
    this.counts.shed++;
  }

  /** A client's count as a share of its configured limit, as a verdict showed it. */
  peak(share: number): void {
    if (share > this.counts.peak) this.counts.peak = share;
  }

  /**
   * The report to send now, or null: none is on its way, there is something
   * to say, and its interval has passed (the controller's `reportInMs`), or
   * a quarter of a second has and these counts alone breach the target.
   * A report returned is on its way until {@link landed} or {@link failed}.
   */
  due(nowMs: number): HealthReport | null {
    if (this.sending !== null) return null;
    const c = this.counts;
    if (c.forwarded === 0 && c.answered === 0 && c.shed === 0) return null;
    const sinceMs = nowMs - this.lastSentMs;
    const early = sinceMs >= CONTROLLER_PARAMS.earliestReportMs && urgent(c, this.control);
    if (sinceMs < this.reportInMs && !early) return null;
    const latency = this.takeLatency();
    const counts = this.counts;
    // A failed report's worst keys came back into the counts: merged with those counted since.
    const worst = mergeWorst(counts.worst, worstFirst([...this.keys.values()]));
    if (worst.length > 0) counts.worst = worst;
    this.counts = noCounts();
    this.keys = new Map();
    this.lastSentMs = nowMs;
    this.sending = { counts, latency, version: this.version };
    const { id, limit, adaptive } = this.rule;
    return {
      rule: id,
      limit,
      target: adaptive,
      version: this.version,
      counts,
      ...(latency.length > 0 ? { latency } : {}),
    };
  }

  /** Whether a report is on its way. */
  get inFlight(): boolean {
    return this.sending !== null;
  }

  /** The controller's answer to the report on its way: its factor is applied when its version is another. */
  landed(answer: FactorAnswer): Learned {
    this.sending = null;
    this.reportInMs = answer.reportInMs > 0 ? answer.reportInMs : CONTROLLER_PARAMS.steadyReportMs;
    if (answer.version === this.version) return { changed: false };
    const from = this.factor;
    this.factor = answer.factor;
    this.version = answer.version;
    // Counts gathered under the old factor are no evidence about the new one: the controller would ignore them.
    this.counts = noCounts();
    this.keys = new Map();
    this.latency.fill(0);
    this.latencyCount = 0;
    return { changed: true, fell: answer.factor < from, from, to: answer.factor };
  }

  /**
   * The report on its way failed: its counts go back into the next one
   * (nothing is lost), which goes at the next interval. Whether to log it:
   * at most once per {@link REPORT_FAILURE_LOG_EVERY_MS}.
   */
  failed(nowMs: number): { log: boolean } {
    const lost = this.sending;
    this.sending = null;
    if (lost !== null && lost.version === this.version) {
      this.counts = addCounts(lost.counts, this.counts);
      for (const [k, n] of lost.latency) this.latency[k]! += n;
      this.latencyCount += lost.latency.reduce((sum, [, n]) => sum + n, 0);
    }
    if (nowMs - this.lastFailureLogMs < REPORT_FAILURE_LOG_EVERY_MS) return { log: false };
    this.lastFailureLogMs = nowMs;
    return { log: true };
  }

  private takeLatency(): LatencyPairs {
    if (this.latencyCount === 0) return [];
    const pairs: LatencyPairs = [];
    for (let k = 0; k < LATENCY_BUCKETS; k++) {
      const n = this.latency[k]!;
      if (n > 0) pairs.push([k, n]);
    }
    this.latency.fill(0);
    this.latencyCount = 0;
    return pairs;
  }
}

/** The target as shares, for the early report. */
const controlOf = (rule: ReportedRule): ControlTarget => ({
  slowShare: slowShareOf(rule.adaptive),
  errorShare: rule.adaptive.errorShare,
  minFactor: Math.min(1, rule.adaptive.floor / Math.max(1, rule.limit)),
});
