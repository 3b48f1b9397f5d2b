/**
 * @module
 * The Durable Object that holds one client key's counters, one row per rule.
 *
 * Every RPC method is synchronous: the counters are read, decided on and
 * written with no `await` in between, so the object's single thread makes
 * each check atomic, and the output gate holds the answer until the write is
 * durable.
 */
import { DurableObject } from "cloudflare:workers";
import {
  admit,
  bucketStartMs,
  describe,
  type Evaluation,
  emptyState,
  evaluate,
  msToBucketEnd,
  type WindowLimit,
  type WindowState,
} from "./core/sliding-window.ts";
import {
  type CheckOptions,
  type CheckResult,
  LEASE_MAX_MS,
  LEASE_MIN_UNITS,
  LEASE_SHARE,
  type Refund,
  type RuleCheck,
  type RuleVerdict,
} from "./limiter-protocol.ts";

type Stored = { shape: Shape; state: WindowState };
/** What the layout of a rule's buckets depends on. */
type Shape = Pick<WindowLimit, "periodMs" | "precision">;

const SCHEMA = `CREATE TABLE IF NOT EXISTS counters (
  rule TEXT PRIMARY KEY,
  period_ms INTEGER NOT NULL,
  precision INTEGER NOT NULL,
  bucket INTEGER NOT NULL,
  counts TEXT NOT NULL
)`;

/** The instant after which a state is all zeros: its newest bucket and the `precision` before it have rotated out. */
const expiresAtMs = ({ shape, state }: Stored): number =>
  bucketStartMs(state.bucket + shape.precision + 1, { ...shape, limit: 1, strict: false });

export class RateLimiter extends DurableObject<unknown> {
  private readonly sql: SqlStorage;
  private readonly rows = new Map<string, Stored>();
  private schemaReady = false;
  /** When the cleanup alarm is set for, or null when none is needed. */
  private alarmAtMs: number | null;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    // A fresh or cleaned-up object has no table: reading it must not create one.
    const table = this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'counters'").toArray();
    if (table.length === 0) {
      this.alarmAtMs = null;
      return;
    }
    this.schemaReady = true;
    for (const row of this.sql.exec<Record<string, string | number>>("SELECT * FROM counters")) {
      this.rows.set(String(row.rule), {
        shape: { periodMs: Number(row.period_ms), precision: Number(row.precision) },
        state: { bucket: Number(row.bucket), counts: JSON.parse(String(row.counts)) as number[] },
      });
    }
    // Every write that moved a row's expiry later also moved the alarm there (scheduleCleanup, alarm),
    // so the alarm is known without reading it: an object woken for one request sets none.
    this.alarmAtMs = this.rows.size > 0 ? Math.max(...[...this.rows.values()].map(expiresAtMs)) : null;
  }

  /**
   * Checks one request against every rule of this key, all or nothing: if an
   * enforcing rule refuses it, no rule counts it.
   */
  check(rules: RuleCheck[], options: CheckOptions = {}): CheckResult {
    if (options.returns?.length) this.refund(options.returns);
    const nowMs = Date.now();
    const evaluations = rules.map((rule) => evaluate(this.current(rule, nowMs), nowMs, rule));
    const allowed = rules.every((rule, i) => !rule.enforce || evaluations[i]!.allowed);
    const states: WindowState[] = [];
    const verdicts = rules.map((rule, i) => {
      const ev = evaluations[i]!;
      const counted = allowed && ev.allowed;
      states.push(counted ? admit(ev.state) : ev.state);
      return verdict(ev, nowMs, rule, counted);
    });
    if (!allowed) return { nowMs, allowed, verdicts };
    const lease = this.grant(rules, verdicts, states, nowMs, options.leaseUnits ?? 0);
    rules.forEach((rule, i) => {
      if (verdicts[i]!.ruleAllows) this.save(rule.id, rule, states[i]!);
    });
    this.scheduleCleanup();
    return lease ? { nowMs, allowed, verdicts, lease } : { nowMs, allowed, verdicts };
  }

  /**
   * Counts `wanted` more admissions into `states` when every rule has
   * plenty left: at most {@link LEASE_SHARE} of the least any rule has left.
   * Each unit is admissible now: `remaining` already counts this request.
   */
  private grant(rules: RuleCheck[], verdicts: RuleVerdict[], states: WindowState[], nowMs: number, wanted: number) {
    if (wanted < LEASE_MIN_UNITS || !verdicts.every((v) => v.ruleAllows)) return undefined;
    const units = Math.min(wanted, ...verdicts.map((v) => Math.floor(v.remaining * LEASE_SHARE)));
    if (units < LEASE_MIN_UNITS) return undefined;
    for (const state of states) state.counts[state.counts.length - 1]! += units;
    const expiresInMs = Math.min(LEASE_MAX_MS, ...rules.map((rule) => msToBucketEnd(nowMs, rule)));
    return { units, buckets: states.map((state) => state.bucket), expiresInMs };
  }

  /** What a request now would see, without counting it. */
  peek(rules: RuleCheck[]): CheckResult {
    const nowMs = Date.now();
    const verdicts = rules.map((rule) => verdict(evaluate(this.current(rule, nowMs), nowMs, rule), nowMs, rule, false));
    return { nowMs, allowed: verdicts.every((v, i) => !rules[i]!.enforce || v.ruleAllows), verdicts };
  }

  /** Takes back counts: requests another object refused, and leased units never spent. Counts that have rotated out are gone already. */
  refund(refunds: Refund[]): void {
    for (const { id, bucket, count: taken = 1 } of refunds) {
      const row = this.rows.get(id);
      if (!row) continue;
      const index = bucket - (row.state.bucket - row.shape.precision);
      const count = row.state.counts[index];
      if (count === undefined || count <= 0) continue;
      const counts = row.state.counts.slice();
      counts[index] = count - Math.min(count, taken);
      this.save(id, row.shape, { bucket: row.state.bucket, counts });
    }
  }

  /** Forgets the given rules' counters for this key, or all of them. */
  async reset(ruleIds?: string[]): Promise<void> {
    for (const id of ruleIds ?? [...this.rows.keys()]) {
      if (!this.rows.delete(id)) continue;
      this.sql.exec("DELETE FROM counters WHERE rule = ?", id);
    }
    if (this.rows.size === 0) await this.clear();
  }

  /** Deletes the counters whose windows have all expired; once none are left, deletes everything. Safe to run again. */
  override async alarm(): Promise<void> {
    const nowMs = Date.now();
    for (const [id, row] of this.rows) {
      if (nowMs < expiresAtMs(row)) continue;
      this.rows.delete(id);
      this.sql.exec("DELETE FROM counters WHERE rule = ?", id);
    }
    if (this.rows.size === 0) return this.clear();
    this.alarmAtMs = Math.max(...[...this.rows.values()].map(expiresAtMs));
    await this.ctx.storage.setAlarm(this.alarmAtMs);
  }

  /** The rule's state; a rule whose period or precision changed carries its weighted count over. */
  private current(rule: RuleCheck, nowMs: number): WindowState {
    const row = this.rows.get(rule.id);
    if (!row) return emptyState(nowMs, rule);
    if (row.shape.periodMs === rule.periodMs && row.shape.precision === rule.precision) return row.state;
    const carried = Math.ceil(
      evaluate(row.state, nowMs, { ...row.shape, limit: rule.limit, strict: rule.strict }).weighted,
    );
    const fresh = emptyState(nowMs, rule);
    fresh.counts[rule.precision] = carried;
    return fresh;
  }

  private save(id: string, shape: Shape, state: WindowState): void {
    if (!this.schemaReady) {
      this.sql.exec(SCHEMA);
      this.schemaReady = true;
    }
    this.rows.set(id, { shape: { periodMs: shape.periodMs, precision: shape.precision }, state });
    this.sql.exec(
      `INSERT INTO counters (rule, period_ms, precision, bucket, counts) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (rule) DO UPDATE SET period_ms = excluded.period_ms, precision = excluded.precision,
         bucket = excluded.bucket, counts = excluded.counts`,
      id,
      shape.periodMs,
      shape.precision,
      state.bucket,
      JSON.stringify(state.counts),
    );
  }

  /** Makes sure an alarm will clean up once every counter has expired. Sets it only when it must move later. */
  private scheduleCleanup(): void {
    let latest = 0;
    for (const row of this.rows.values()) latest = Math.max(latest, expiresAtMs(row));
    if (this.alarmAtMs != null && this.alarmAtMs >= latest) return;
    this.alarmAtMs = latest;
    void this.ctx.storage.setAlarm(latest);
  }

  private async clear(): Promise<void> {
    this.rows.clear();
    this.schemaReady = false;
    this.alarmAtMs = null;
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
  }
}

function verdict(ev: Evaluation, nowMs: number, rule: RuleCheck, counted: boolean): RuleVerdict {
  return {
    ...describe(ev, nowMs, rule, counted),
    ruleAllows: ev.allowed,
    bucket: counted ? ev.state.bucket : -1,
  };
}
