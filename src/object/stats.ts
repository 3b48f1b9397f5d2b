/**
 * @module
 * The statistics object: one for the whole deployment. Each isolate sends it
 * what it decided at most every 10 s, in one call, never on a request's
 * path. It keeps per-minute counts per rule and outcome for 24 hours, the
 * latency of decisions that called an object, failures by reason, and the
 * most refused clients per rule in a bounded heavy-hitters sketch, so a
 * flood of distinct keys cannot grow it.
 */
import { DurableObject } from "cloudflare:workers";
import { SpaceSaving } from "../core/heavy-hitters.ts";
import { LATENCY_BOUNDS_MS, OUTCOMES, type StatsBatch, type StatsOutcome, type StatsView } from "./stats-protocol.ts";

/** Minutes of series kept: 24 hours. */
export const KEPT_MINUTES = 24 * 60;
/**
 * Rules with a sketch at most, and a batch's entries at most per rule: only
 * isolates call this object, with the rule ids of their settings, but a bug
 * must not grow it without bound.
 */
const MAX_RULES = 256;
/** Clients each rule's sketch keeps. */
export const SKETCH_CAPACITY = 64;
/** The most refused clients a view lists per rule. */
const TOP_SHOWN = 10;
/** The latency row that holds every decision since the object started (never forgotten: it is below 0, not old). */
const LIFETIME_MINUTE = -1;
/** A minute more than this far ahead of the object's clock is not stored (an isolate's clock gone wrong). */
const MAX_AHEAD_MINUTES = 5;

const COLUMNS = OUTCOMES.join(", ");
const SCHEMA = [
  `CREATE TABLE IF NOT EXISTS series (minute INTEGER NOT NULL, rule TEXT NOT NULL, ${OUTCOMES.map((o) => `${o} INTEGER NOT NULL DEFAULT 0`).join(", ")}, PRIMARY KEY (minute, rule))`,
  "CREATE TABLE IF NOT EXISTS latency (minute INTEGER PRIMARY KEY, buckets TEXT NOT NULL)",
  "CREATE TABLE IF NOT EXISTS failures (minute INTEGER NOT NULL, reason TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (minute, reason))",
  "CREATE TABLE IF NOT EXISTS top (rule TEXT NOT NULL, hash TEXT NOT NULL, client TEXT, count INTEGER NOT NULL, error INTEGER NOT NULL, PRIMARY KEY (rule, hash))",
  "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
  // Since the object started: counters that only grow, for /metrics.
  `CREATE TABLE IF NOT EXISTS lifetime (rule TEXT PRIMARY KEY, ${OUTCOMES.map((o) => `${o} INTEGER NOT NULL DEFAULT 0`).join(", ")})`,
];

type Meta = { flushes: number; lostFlushes: number; lostDecisions: number };

export class StatsObject extends DurableObject<unknown> {
  private readonly sql: SqlStorage;
  private readonly sketches = new Map<string, SpaceSaving>();
  /** The key as written, for the clients a sketch holds, when isolates send it. */
  private readonly clients = new Map<string, string>();
  private readonly meta: Meta = { flushes: 0, lostFlushes: 0, lostDecisions: 0 };

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    for (const statement of SCHEMA) this.sql.exec(statement);
    this.addMissingOutcomes();
    for (const row of this.sql.exec<{ name: string; value: number }>("SELECT name, value FROM meta")) {
      if (row.name in this.meta) this.meta[row.name as keyof Meta] = row.value;
    }
    this.restoreSketches();
  }

  /** Tables stored before an outcome existed (`held`, `shed`) gain its column, at 0. */
  private addMissingOutcomes(): void {
    for (const table of ["series", "lifetime"]) {
      const columns = this.sql.exec(`SELECT * FROM ${table} LIMIT 0`).columnNames;
      for (const outcome of OUTCOMES) {
        if (!columns.includes(outcome)) {
          this.sql.exec(`ALTER TABLE ${table} ADD COLUMN ${outcome} INTEGER NOT NULL DEFAULT 0`);
        }
      }
    }
  }

  /** Adds one isolate's flush. */
  record(batch: StatsBatch): void {
    const nowMinute = Math.floor(Date.now() / 60_000);
    const inRange = (minute: number) =>
      Number.isSafeInteger(minute) && minute > nowMinute - KEPT_MINUTES && minute <= nowMinute + MAX_AHEAD_MINUTES;
    for (const { minute, rule, counts } of batch.counts.slice(0, MAX_RULES * 10)) {
      if (inRange(minute)) this.addCounts(minute, rule, counts);
    }
    for (const { minute, buckets } of batch.latency) if (inRange(minute)) this.addLatency(minute, buckets);
    for (const [reason, n] of Object.entries(batch.failures)) {
      for (const minute of [nowMinute, LIFETIME_MINUTE]) {
        this.sql.exec(
          "INSERT INTO failures (minute, reason, n) VALUES (?, ?, ?) ON CONFLICT (minute, reason) DO UPDATE SET n = n + excluded.n",
          minute,
          reason.slice(0, 64),
          n,
        );
      }
    }
    this.addRefused(batch.refused);
    this.meta.flushes++;
    this.meta.lostFlushes += batch.lost.flushes;
    this.meta.lostDecisions += batch.lost.decisions;
    for (const [name, value] of Object.entries(this.meta)) {
      this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", name, value);
    }
    this.forgetBefore(nowMinute - KEPT_MINUTES);
  }

  /** The last `minutes` minutes (at most 24 hours). */
  read({ minutes, rawKeys }: { minutes: number; rawKeys: boolean }): StatsView {
    const toMinute = Math.floor(Date.now() / 60_000);
    const fromMinute = toMinute - Math.min(Math.max(1, Math.floor(minutes)), KEPT_MINUTES) + 1;
    return {
      fromMinute,
      toMinute,
      rules: this.rulesView(fromMinute, rawKeys),
      latency: this.latencyView(fromMinute),
      health: {
        failures: this.failuresSince(fromMinute),
        failuresLifetime: this.failuresSince(LIFETIME_MINUTE, LIFETIME_MINUTE),
        lostFlushes: this.meta.lostFlushes,
        lostDecisions: this.meta.lostDecisions,
        flushes: this.meta.flushes,
      },
      rawKeys,
    };
  }

  private addCounts(minute: number, rule: string, counts: number[]): void {
    const values = OUTCOMES.map((_, i) => Math.max(0, Math.floor(counts[i] ?? 0)));
    this.sql.exec(
      `INSERT INTO series (minute, rule, ${COLUMNS}) VALUES (?, ?, ${OUTCOMES.map(() => "?").join(", ")})
       ON CONFLICT (minute, rule) DO UPDATE SET ${OUTCOMES.map((o) => `${o} = ${o} + excluded.${o}`).join(", ")}`,
      minute,
      rule.slice(0, 64),
      ...values,
    );
    this.sql.exec(
      `INSERT INTO lifetime (rule, ${COLUMNS}) VALUES (?, ${OUTCOMES.map(() => "?").join(", ")})
       ON CONFLICT (rule) DO UPDATE SET ${OUTCOMES.map((o) => `${o} = ${o} + excluded.${o}`).join(", ")}`,
      rule.slice(0, 64),
      ...values,
    );
  }

  private addLatency(minute: number, buckets: number[]): void {
    this.addLatencyRow(minute, buckets);
    this.addLatencyRow(LIFETIME_MINUTE, buckets);
  }

  private addLatencyRow(minute: number, buckets: number[]): void {
    const row = this.sql.exec<{ buckets: string }>("SELECT buckets FROM latency WHERE minute = ?", minute).toArray()[0];
    const sum = row ? (JSON.parse(row.buckets) as number[]) : new Array(LATENCY_BOUNDS_MS.length + 1).fill(0);
    buckets.slice(0, sum.length).forEach((n, i) => {
      sum[i] += Math.max(0, Math.floor(n));
    });
    this.sql.exec("INSERT OR REPLACE INTO latency (minute, buckets) VALUES (?, ?)", minute, JSON.stringify(sum));
  }

  /** Merges each rule's sketch from the isolate into the object's, as if its refusals had been added here. */
  private addRefused(refused: StatsBatch["refused"]): void {
    for (const { rule, floor, clients } of refused.slice(0, MAX_RULES)) {
      let sketch = this.sketches.get(rule);
      if (sketch === undefined) {
        if (this.sketches.size >= MAX_RULES) continue;
        sketch = new SpaceSaving(SKETCH_CAPACITY);
        this.sketches.set(rule, sketch);
      }
      const seen = new Set<string>();
      const entries = clients.filter(
        ({ hash, count, error }) =>
          /^[0-9a-f]{64}$/.test(hash) &&
          !seen.has(hash) &&
          seen.add(hash) &&
          Number.isSafeInteger(count) &&
          count >= 1 &&
          Number.isSafeInteger(error) &&
          error >= 0 &&
          error <= count,
      );
      sketch.merge(
        entries.map(({ hash, count, error }) => ({ key: hash, count, error })),
        Number.isSafeInteger(floor) && floor >= 0 ? floor : 0,
      );
      for (const { hash, client } of entries) if (client !== undefined) this.clients.set(hash, client.slice(0, 512));
      this.saveSketch(rule);
    }
  }

  private saveSketch(rule: string): void {
    const sketch = this.sketches.get(rule)!;
    const entries = sketch.entries();
    const kept = new Set(entries.map((e) => e.key));
    for (const hash of this.clients.keys())
      if (!kept.has(hash) && !this.keptElsewhere(hash, rule)) this.clients.delete(hash);
    this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", `floor:${rule}`, sketch.floor);
    this.sql.exec("DELETE FROM top WHERE rule = ?", rule);
    for (const { key, count, error } of entries) {
      this.sql.exec(
        "INSERT INTO top (rule, hash, client, count, error) VALUES (?, ?, ?, ?, ?)",
        rule,
        key,
        this.clients.get(key) ?? null,
        count,
        error,
      );
    }
  }

  private restoreSketches(): void {
    const byRule = new Map<string, { key: string; count: number; error: number }[]>();
    for (const row of this.sql.exec<{
      rule: string;
      hash: string;
      client: string | null;
      count: number;
      error: number;
    }>("SELECT * FROM top")) {
      const list = byRule.get(row.rule) ?? [];
      list.push({ key: row.hash, count: row.count, error: row.error });
      byRule.set(row.rule, list);
      if (row.client !== null) this.clients.set(row.hash, row.client);
    }
    const floors = new Map(
      this.sql
        .exec<{ name: string; value: number }>("SELECT name, value FROM meta WHERE name LIKE 'floor:%'")
        .toArray()
        .map((row) => [row.name.slice("floor:".length), row.value]),
    );
    for (const [rule, entries] of byRule) {
      this.sketches.set(rule, SpaceSaving.from(SKETCH_CAPACITY, entries, floors.get(rule) ?? 0));
    }
  }

  /** Whether another rule's sketch still holds this client. */
  private keptElsewhere(hash: string, rule: string): boolean {
    for (const [other, sketch] of this.sketches) {
      if (other !== rule && sketch.entries().some((e) => e.key === hash)) return true;
    }
    return false;
  }

  private rulesView(fromMinute: number, rawKeys: boolean): StatsView["rules"] {
    const rows = this.sql
      .exec<Record<StatsOutcome, number> & { minute: number; rule: string }>(
        `SELECT minute, rule, ${COLUMNS} FROM series WHERE minute >= ? ORDER BY rule, minute`,
        fromMinute,
      )
      .toArray();
    const lifetime = new Map(
      this.sql
        .exec<Record<StatsOutcome, number> & { rule: string }>(`SELECT rule, ${COLUMNS} FROM lifetime`)
        .toArray()
        .map((r) => [r.rule, countsOf(r)]),
    );
    const ids = [...new Set([...rows.map((r) => r.rule), ...this.sketches.keys(), ...lifetime.keys()])].sort();
    return ids.map((id) => {
      const series = rows.filter((r) => r.rule === id).map((r) => ({ minute: r.minute, counts: countsOf(r) }));
      const totals = countsOf(
        Object.fromEntries(OUTCOMES.map((o) => [o, series.reduce((sum, s) => sum + s.counts[o], 0)])) as Record<
          StatsOutcome,
          number
        >,
      );
      const topRefused = (this.sketches.get(id)?.top(TOP_SHOWN) ?? []).map(({ key, count, error }) => ({
        hash: key,
        key: rawKeys ? (this.clients.get(key) ?? key.slice(0, 12)) : key.slice(0, 12),
        count,
        error,
      }));
      return { id, series, totals, lifetime: lifetime.get(id) ?? countsOf(zeroCounts()), topRefused };
    });
  }

  private latencyView(fromMinute: number): StatsView["latency"] {
    const counts = new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0);
    for (const row of this.sql.exec<{ buckets: string }>("SELECT buckets FROM latency WHERE minute >= ?", fromMinute)) {
      (JSON.parse(row.buckets) as number[]).forEach((n, i) => {
        counts[i]! += n;
      });
    }
    const stored = this.sql
      .exec<{ buckets: string }>("SELECT buckets FROM latency WHERE minute = ?", LIFETIME_MINUTE)
      .toArray()[0];
    const lifetime = stored ? (JSON.parse(stored.buckets) as number[]) : new Array<number>(counts.length).fill(0);
    return {
      boundsMs: LATENCY_BOUNDS_MS,
      counts,
      lifetime,
      p50Ms: quantile(counts, 0.5),
      p99Ms: quantile(counts, 0.99),
    };
  }

  private failuresSince(fromMinute: number, toMinute = Number.MAX_SAFE_INTEGER): Record<string, number> {
    const failures: Record<string, number> = {};
    for (const row of this.sql.exec<{ reason: string; n: number }>(
      "SELECT reason, SUM(n) AS n FROM failures WHERE minute >= ? AND minute <= ? GROUP BY reason",
      fromMinute,
      toMinute,
    )) {
      failures[row.reason] = row.n;
    }
    return failures;
  }

  private forgetBefore(minute: number): void {
    this.sql.exec("DELETE FROM series WHERE minute < ?", minute);
    this.sql.exec("DELETE FROM latency WHERE minute >= 0 AND minute < ?", minute);
    this.sql.exec("DELETE FROM failures WHERE minute >= 0 AND minute < ?", minute);
  }
}

const zeroCounts = (): Record<StatsOutcome, number> =>
  Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<StatsOutcome, number>;

const countsOf = (row: Record<StatsOutcome, number>): Record<StatsOutcome, number> =>
  Object.fromEntries(OUTCOMES.map((o) => [o, row[o]])) as Record<StatsOutcome, number>;

/**
 * The latency at quantile `q`: the upper bound of the bucket it falls in
 * (a histogram says no more); null with no decisions, and the last bound for
 * the open bucket.
 */
export function quantile(counts: number[], q: number): number | null {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen >= q * total) return LATENCY_BOUNDS_MS[Math.min(i, LATENCY_BOUNDS_MS.length - 1)]!;
  }
  return LATENCY_BOUNDS_MS.at(-1)!;
}
