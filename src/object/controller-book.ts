/**
 * @module
 * An adaptive rule's controller, as its object keeps it: the pure controller
 * (core/controller.ts) run on the object's clock over the reports isolates
 * send, its state stored in SQLite so eviction and restarts keep the factor,
 * each change of its mode logged once, and a short history of the limit and
 * the origin's latency for the statistics and the dashboard.
 */
import {
  CONTROLLER_PARAMS,
  type ControllerMode,
  type ControllerState,
  type ControlTarget,
  initialState,
  lateMsOf,
  observe,
  reportEveryMs,
  type Step,
  scaledLimit,
} from "../core/controller.ts";
import {
  addLatency,
  addPriorityCounts,
  type HealthCounts,
  type KeyCounts,
  type LatencyPairs,
  latencyAt,
  MAX_WORST_KEYS,
  noKeyCounts,
  type PriorityCounts,
  planPriorities,
  type ReportedTarget,
  slowShareOf,
  type Troubled,
  worstFirst,
} from "../core/health.ts";
import { type Factors, factorsAt, PRIORITIES, type Priority, stagesOf } from "../core/priorities.ts";
import { logEvent } from "../observe/log.ts";
import {
  type ControllerPoint,
  type ControllerView,
  type FactorAnswer,
  type HealthReport,
  HISTORY_EVERY_MS,
  HISTORY_KEPT_MS,
  HISTORY_MAX_POINTS,
  type PriorityView,
} from "./controller-protocol.ts";

const SCHEMA = [
  `CREATE TABLE IF NOT EXISTS controller (
    rule TEXT PRIMARY KEY, factor REAL NOT NULL, version INTEGER NOT NULL, mode TEXT NOT NULL, configured INTEGER NOT NULL
  )`,
  `CREATE TABLE IF NOT EXISTS controller_history (
    at_ms INTEGER NOT NULL, factor REAL NOT NULL, configured INTEGER NOT NULL, latency_ms REAL,
    drift INTEGER NOT NULL DEFAULT 0, priorities TEXT
  )`,
];

/** Columns added since the tables were first made: an object made before has its table altered. */
const ADDED_COLUMNS = [
  ["controller", "target", "TEXT"],
  ["controller_history", "drift", "INTEGER NOT NULL DEFAULT 0"],
  ["controller_history", "priorities", "TEXT"],
] as const;

const MODES: readonly ControllerMode[] = ["full", "reducing", "recovering"];

/** A non-negative whole count, or 0: isolates are trusted, but a bug must not poison the controller. */
const count = (n: unknown): number => (typeof n === "number" && Number.isSafeInteger(n) && n > 0 ? n : 0);

/** A non-negative finite amount (a busy time in ms), or 0. */
const amount = (n: unknown): number => (typeof n === "number" && Number.isFinite(n) && n > 0 ? n : 0);

/** The counts of a report, each a non-negative whole number (`peak` a finite share), its worst keys well formed. */
function cleanCounts(counts: Partial<HealthCounts> | undefined): HealthCounts {
  const c = counts ?? {};
  const peak = typeof c.peak === "number" && Number.isFinite(c.peak) && c.peak > 0 ? c.peak : 0;
  const answered = count(c.answered);
  const gone = count(c.gone);
  const clean: HealthCounts = {
    forwarded: count(c.forwarded),
    answered,
    slow: Math.min(answered, count(c.slow)),
    errors: Math.min(answered, count(c.errors)),
    gone,
    goneSlow: Math.min(gone, answered, count(c.goneSlow)),
    late: Math.min(answered, count(c.late)),
    stuck: count(c.stuck),
    busyMs: amount(c.busyMs),
    busySq: amount(c.busySq),
    shed: count(c.shed),
    peak,
  };
  const crowded = count(c.crowded);
  if (crowded > 0) clean.crowded = crowded;
  const worst = cleanWorst(c.worst);
  if (worst.length > 0) clean.worst = worst;
  // Which of them may be left out: only keys named among them (absent: all, as an older isolate sends).
  if (Array.isArray(c.worstable) && worst.length > 0) {
    const named = new Set(worst.map((k) => k[0]));
    clean.worstable = c.worstable.filter((key): key is string => typeof key === "string" && named.has(key));
  }
  const byPriority = cleanPriorityCounts(c.byPriority);
  if (byPriority !== undefined) clean.byPriority = byPriority;
  if (c.clients !== undefined) clean.clients = count(c.clients);
  if (typeof c.busiest === "object" && c.busiest !== null) {
    const b = c.busiest as { ok?: unknown; busyMs?: unknown };
    clean.busiest = {
      ok: Math.min(clean.answered - clean.errors, count(b.ok)),
      busyMs: Math.min(clean.busyMs, amount(b.busyMs)),
    };
  }
  const troubled = cleanTroubled(c.troubled, clean);
  if (troubled !== undefined) clean.troubled = troubled;
  const fresh = cleanTroubled(c.fresh, clean);
  if (fresh !== undefined) clean.fresh = fresh;
  return clean;
}

/** A report's troubled keys: whole counts, none more than the report's own (they are part of it). */
function cleanTroubled(t: unknown, whole: HealthCounts): Troubled | undefined {
  if (typeof t !== "object" || t === null) return undefined;
  const c = t as Partial<Record<keyof Troubled, unknown>>;
  const answered = Math.min(whole.answered, count(c.answered));
  return {
    keys: Math.min(whole.clients ?? 0, count(c.keys)),
    answered,
    slow: Math.min(answered, whole.slow, count(c.slow)),
    errors: Math.min(answered, whole.errors, count(c.errors)),
    late: Math.min(answered, whole.late, count(c.late)),
    busyMs: Math.min(whole.busyMs, amount(c.busyMs)),
    stuck: Math.min(whole.stuck, count(c.stuck)),
    busySq: Math.min(whole.busySq, amount(c.busySq)),
  };
}

/** A report's counts per priority: whole counts of the three priorities only. */
function cleanPriorityCounts(counts: unknown): PriorityCounts | undefined {
  if (typeof counts !== "object" || counts === null) return undefined;
  const clean: PriorityCounts = {};
  for (const p of PRIORITIES) {
    const entry = (counts as Record<string, unknown>)[p];
    if (Array.isArray(entry)) clean[p] = [count(entry[0]), count(entry[1])];
  }
  return Object.keys(clean).length > 0 ? clean : undefined;
}

/**
 * A report's worst keys: each a short key and whole counts, slow, failed
 * and late among its answers (an isolate of an older version sends no late
 * counts, busy time or requests found late: 0); at most as many as kept.
 */
function cleanWorst(worst: unknown): KeyCounts[] {
  if (!Array.isArray(worst)) return [];
  const keys: KeyCounts[] = [];
  for (const entry of worst.slice(0, MAX_WORST_KEYS)) {
    if (!Array.isArray(entry) || typeof entry[0] !== "string" || entry[0].length === 0 || entry[0].length > 64)
      continue;
    const answered = count(entry[1]);
    const key = noKeyCounts(entry[0]);
    key[1] = answered;
    key[2] = Math.min(answered, count(entry[2]));
    key[3] = Math.min(answered, count(entry[3]));
    key[4] = Math.min(answered, count(entry[4]));
    key[5] = amount(entry[5]);
    key[6] = count(entry[6]);
    key[7] = amount(entry[7]);
    keys.push(key);
  }
  return worstFirst(keys);
}

/** Whether a reported target and limit are ones the rule parser could have given. */
function validTarget(limit: unknown, target: ReportedTarget | undefined): target is ReportedTarget {
  return (
    typeof limit === "number" &&
    Number.isSafeInteger(limit) &&
    limit >= 1 &&
    target !== undefined &&
    typeof target.latencyMs === "number" &&
    target.latencyMs > 0 &&
    typeof target.percentile === "number" &&
    target.percentile >= 50 &&
    target.percentile <= 99.9 &&
    typeof target.errorShare === "number" &&
    target.errorShare >= 0.001 &&
    target.errorShare <= 0.5 &&
    Number.isSafeInteger(target.floor) &&
    target.floor >= 1 &&
    target.floor <= limit &&
    (target.priorities === undefined ||
      (typeof target.priorities.critical === "boolean" &&
        typeof target.priorities.sheddable === "boolean" &&
        typeof target.priorities.reserve === "number" &&
        target.priorities.reserve >= 0 &&
        target.priorities.reserve <= 0.9))
  );
}

function controlTarget(limit: number, target: ReportedTarget): ControlTarget {
  const minFactor = target.floor / limit;
  const priorities = planPriorities(target.priorities);
  return {
    slowShare: slowShareOf(target),
    errorShare: target.errorShare,
    minFactor,
    latencyMs: target.latencyMs,
    ...(priorities === undefined ? {} : { stages: stagesOf(priorities, limit, 1, minFactor) }),
  };
}

/** Each priority's factor and what it forwarded and shed since the point before, as a history point keeps them. */
export type PriorityPoint = Partial<Record<Priority, [factor: number, forwarded: number, shed: number]>>;

export class ControllerBook {
  private readonly sql: SqlStorage;
  private readonly rule: string;
  private state: ControllerState = initialState();
  /** The configured limit and target of the latest valid report; null before one. */
  private configured: number | null = null;
  private target: ReportedTarget | null = null;
  /** The limit and target last stored, as JSON: a report that brings others stores them. */
  private stored: string | null = null;
  /** Under a rule with priorities: what each forwarded and shed since the last history point. */
  private byPriority: PriorityCounts | undefined;
  /** Since the last history point: when it was, and the latencies reported since. */
  private lastPointMs = 0;
  private latency: LatencyPairs = [];

  /** Loads the rule's controller from `sql` (a fresh one, at the configured limit, if none is stored). */
  constructor(sql: SqlStorage, rule: string) {
    this.sql = sql;
    this.rule = rule;
    for (const statement of SCHEMA) sql.exec(statement);
    for (const [table, column, type] of ADDED_COLUMNS) {
      const columns = sql.exec<{ name: string }>(`PRAGMA table_info(${table})`).toArray();
      if (!columns.some((c) => c.name === column)) sql.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${type}`);
    }
    const row = sql
      .exec<{ factor: number; version: number; mode: string; configured: number; target: string | null }>(
        "SELECT factor, version, mode, configured, target FROM controller WHERE rule = ?",
        rule,
      )
      .toArray()[0];
    if (row !== undefined) {
      const mode = MODES.includes(row.mode as ControllerMode) ? (row.mode as ControllerMode) : "reducing";
      this.state = { ...initialState(), factor: row.factor, version: row.version, mode };
      this.configured = row.configured;
      // The target it was stored under (a rule's priorities say what its factor means), until a report brings one.
      const stored = parsed<ReportedTarget>(row.target) ?? undefined;
      if (validTarget(row.configured, stored)) {
        this.target = stored;
        this.stored = JSON.stringify([row.configured, stored]);
      }
    }
    const last = sql.exec<{ at: number | null }>("SELECT MAX(at_ms) AS at FROM controller_history").toArray()[0];
    this.lastPointMs = last?.at ?? 0;
  }

  /** One isolate's report: runs the controller on it at `nowMs`, and answers the factor. */
  report(report: HealthReport, nowMs: number): FactorAnswer {
    if (validTarget(report.limit, report.target)) {
      this.configured = report.limit;
      this.target = report.target;
      const before = this.state;
      const version = Number.isSafeInteger(report.version) ? report.version : -1;
      const counts = cleanCounts(report.counts);
      if (report.target.priorities !== undefined) {
        this.byPriority = addPriorityCounts(this.byPriority, counts.byPriority) ?? {};
      }
      const { state, step } = observe(
        before,
        counts,
        version,
        nowMs,
        controlTarget(report.limit, report.target),
        CONTROLLER_PARAMS,
        typeof report.lateMs === "number" && Number.isFinite(report.lateMs) ? report.lateMs : null,
      );
      this.state = state;
      this.latency = addLatency(this.latency, Array.isArray(report.latency) ? report.latency : []);
      // Stored at a change of the factor, and whenever the rule's limit or target is new to the stored row: a
      // controller reloaded after it was idle says what it was told, though its factor never moved.
      const told = JSON.stringify([report.limit, report.target]);
      if (state.factor !== before.factor || state.mode !== before.mode || told !== this.stored) {
        this.store();
        this.stored = told;
      }
      if (state.mode !== before.mode) this.logChange(before, step);
      if (state.drift !== before.drift) this.logDrift(report.target);
      const changed = state.factor !== before.factor || state.drift !== before.drift;
      if (changed || nowMs - this.lastPointMs >= HISTORY_EVERY_MS) this.addPoint(nowMs);
    }
    return this.answer(nowMs);
  }

  /**
   * Each priority's factor, under a rule with priorities; null under one
   * without (its factor is the controller's).
   */
  private factors(): Factors | null {
    const target = this.target;
    if (target?.priorities === undefined || this.configured === null) return null;
    return factorsAt(controlTarget(this.configured, target).stages!, this.state.factor);
  }

  /** The factor a rule's own requests get: the controller's, or under priorities the default priority's. */
  private shownFactor(factors = this.factors()): number {
    return factors === null ? this.state.factor : factors.default;
  }

  /** The factor now (each priority's, under priorities), and when to report next. */
  answer(nowMs: number): FactorAnswer {
    const { version, mode } = this.state;
    const configured = this.configured ?? 1;
    const factors = this.factors();
    const factor = this.shownFactor(factors);
    return {
      nowMs,
      factor,
      ...(factors === null ? {} : { factors }),
      version,
      mode,
      limit: scaledLimit(configured, factor),
      reportInMs: reportEveryMs(this.state),
      lateMs: lateMsOf(this.state, CONTROLLER_PARAMS, this.target?.latencyMs),
      drift: this.state.drift,
    };
  }

  /** The controller and its history since `sinceMs`, for the statistics and the dashboard. */
  view(nowMs: number, sinceMs = 0): ControllerView {
    const history = this.sql
      .exec<{
        at_ms: number;
        factor: number;
        configured: number;
        latency_ms: number | null;
        drift: number;
        priorities: string | null;
      }>(
        "SELECT at_ms, factor, configured, latency_ms, drift, priorities FROM controller_history WHERE at_ms >= ? ORDER BY at_ms, rowid",
        sinceMs,
      )
      .toArray()
      .map((p): ControllerPoint => {
        const point: ControllerPoint = {
          atMs: p.at_ms,
          factor: p.factor,
          limit: scaledLimit(p.configured, p.factor),
          configured: p.configured,
          latencyMs: p.latency_ms,
          drift: p.drift === 1,
        };
        const priorities = parsed<PriorityPoint>(p.priorities);
        if (priorities !== null) point.priorities = priorities;
        return point;
      });
    const { version, mode, calm, drift } = this.state;
    const configured = this.configured;
    const factors = this.factors();
    const factor = this.shownFactor(factors);
    return {
      rule: this.rule,
      nowMs,
      factor,
      version,
      mode,
      configured,
      limit: configured === null ? null : scaledLimit(configured, factor),
      calmMs: calm.ms === null ? null : round(calm.ms),
      drift,
      ...(factors === null || configured === null
        ? {}
        : { priorities: priorityViews(factors, configured, history, this.byPriority) }),
      history,
    };
  }

  private store(): void {
    const { factor, version, mode } = this.state;
    // The controller's own factor: under priorities, below each priority's (core/priorities.ts).
    this.sql.exec(
      `INSERT INTO controller (rule, factor, version, mode, configured, target) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (rule) DO UPDATE SET factor = excluded.factor, version = excluded.version, mode = excluded.mode,
       configured = excluded.configured, target = excluded.target`,
      this.rule,
      factor,
      version,
      mode,
      this.configured ?? 1,
      this.target === null ? null : JSON.stringify(this.target),
    );
  }

  /** A point of the history now, with the latency reported since the last one; old points dropped. */
  private addPoint(nowMs: number): void {
    const latencyMs = this.target === null ? null : latencyAt(this.latency, this.target.percentile);
    const factors = this.factors();
    this.sql.exec(
      "INSERT INTO controller_history (at_ms, factor, configured, latency_ms, drift, priorities) VALUES (?, ?, ?, ?, ?, ?)",
      nowMs,
      this.shownFactor(factors),
      this.configured ?? 1,
      latencyMs,
      this.state.drift ? 1 : 0,
      factors === null ? null : JSON.stringify(pointOf(factors, this.byPriority)),
    );
    this.latency = [];
    this.byPriority = undefined;
    this.lastPointMs = nowMs;
    this.sql.exec("DELETE FROM controller_history WHERE at_ms < ?", nowMs - HISTORY_KEPT_MS);
    this.sql.exec(
      `DELETE FROM controller_history WHERE rowid IN (
         SELECT rowid FROM controller_history ORDER BY at_ms DESC, rowid DESC LIMIT -1 OFFSET ?)`,
      HISTORY_MAX_POINTS,
    );
  }

  /**
   * One log line when the origin turns out slower than the target while
   * nothing queues (a baseline drift: `warn`, the target wants a look), and
   * one when it no longer is (`info`).
   */
  private logDrift(target: ReportedTarget): void {
    const { drift, calm } = this.state;
    const factor = this.shownFactor();
    const configured = this.configured ?? 1;
    logEvent(
      {
        event: "adaptive_drift",
        rule: this.rule,
        drift,
        calmMs: calm.ms === null ? null : Math.round(calm.ms),
        latencyMs: target.latencyMs,
        percentile: target.percentile,
        factor: round(factor),
        limit: scaledLimit(configured, factor),
        configured,
      },
      drift ? "warn" : "info",
    );
  }

  /** One log line per change of mode: what the controller now does, and what made it. */
  private logChange(before: ControllerState, step: Step): void {
    const { mode } = this.state;
    // Under priorities, the default priority's, as every other view of the rule says it.
    const factor = this.shownFactor();
    const configured = this.configured ?? 1;
    const health =
      step.kind === "cut" || step.kind === "raise" || step.kind === "hold"
        ? {
            answered: step.health.answered,
            slowShare: round(step.health.slowShare),
            errorShare: round(step.health.errorShare),
            keepingUp: round(step.health.keepingUp),
            ...(step.health.gradient === null ? {} : { gradient: round(step.health.gradient) }),
            lateShare: round(step.health.lateShare),
            binding: step.health.binding,
            leftOut: step.health.leftOut,
          }
        : {};
    logEvent(
      {
        event: "adaptive_changed",
        rule: this.rule,
        from: before.mode,
        to: mode,
        factor: round(factor),
        limit: scaledLimit(configured, factor),
        configured,
        ...health,
      },
      mode === "reducing" ? "warn" : "info",
    );
  }
}

const round = (x: number): number => Math.round(x * 10_000) / 10_000;

/** A history point's priorities: each one's factor, and what it forwarded and shed since the point before. */
function pointOf(factors: Factors, counts: PriorityCounts | undefined): PriorityPoint {
  const point: PriorityPoint = {};
  for (const p of PRIORITIES) point[p] = [round(factors[p]), counts?.[p]?.[0] ?? 0, counts?.[p]?.[1] ?? 0];
  return point;
}

/** A column stored as JSON, parsed; null when it is empty or does not parse (checked by the caller where it must be). */
function parsed<T>(text: string | null): T | null {
  if (text === null) return null;
  try {
    return JSON.parse(text) as T;
  } catch {
    return null;
  }
}

/**
 * Each priority now: its factor and limit, and what it forwarded and shed
 * over the history's points and since the last of them (`since`).
 */
function priorityViews(
  factors: Factors,
  configured: number,
  history: ControllerPoint[],
  since: PriorityCounts | undefined,
): PriorityView[] {
  return PRIORITIES.map((priority) => {
    let forwarded = since?.[priority]?.[0] ?? 0;
    let shed = since?.[priority]?.[1] ?? 0;
    for (const point of history) {
      const entry = point.priorities?.[priority];
      if (entry === undefined) continue;
      forwarded += entry[1];
      shed += entry[2];
    }
    return {
      priority,
      factor: round(factors[priority]),
      // Nothing left (factor 0): every request of it refused, at the edge.
      limit: factors[priority] === 0 ? 0 : scaledLimit(configured, factors[priority]),
      forwarded,
      shed,
    };
  });
}
