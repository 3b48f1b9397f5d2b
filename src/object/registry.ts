/**
 * @module
 * The index of overrides: one object for the whole deployment, which the
 * admin API writes through and lists from. The decision path never reads it.
 *
 * Each client's object enforces its own overrides; the registry holds what
 * the operator asked for, and drives every client's object to it. A change
 * is written here first, as pending, then sent to the client's object, then
 * marked applied. A change the object did not confirm stays pending, shown
 * as such, and is sent again by the registry's alarm until it is: each
 * pending change has its own next try, later after each failure (up to
 * every {@link MAX_RETRY_MS}), so a client object that stays down never
 * holds back the changes of the others. Every
 * change carries a version, and an object ignores one older than what it
 * has, so a late or repeated send never undoes a newer change. So the index
 * and the objects cannot disagree silently: they agree, or the entry says
 * `pending`.
 */
import { DurableObject } from "cloudflare:workers";
import { type Override, overrideView } from "../core/overrides.ts";
import { keyHashPrefix, logEvent } from "../observe/log.ts";
import { withDeadline } from "./client.ts";
import type { RateLimiter } from "./rate-limiter.ts";

/** What the registry needs: the namespace of the client objects it drives. */
export type RegistryEnv = { RATE_LIMITER: DurableObjectNamespace<RateLimiter> };

/** One override as the registry holds it. */
export type RegistryEntry = {
  rule: string;
  /** The client's canonical key, as the rules make it. */
  key: string;
  /** The client's object name (SHA-256 of the key). */
  name: string;
  /** The override; null while a deletion is pending. */
  override: Override | null;
  /** Increases with every change, across the registry. */
  version: number;
  /** False until the client's object confirmed this version. */
  applied: boolean;
};

/** One change asked for: set an override, or (null) delete it. */
export type Change = { rule: string; key: string; name: string; override: Override | null };

/** What a change did: the override before and after (null for none), and whether the object has it yet. */
export type ChangeReport = { before: Override | null; after: Override | null; applied: boolean };

export type ListQuery = {
  rule?: string | undefined;
  tier?: string | undefined;
  /** A case-insensitive substring of the note. */
  note?: string | undefined;
  /** Entries after this cursor (from an earlier page). */
  after?: string | undefined;
  limit: number;
};

export type ImportReport = { created: number; updated: number; unchanged: number; deleted: number };

const SCHEMA = `CREATE TABLE IF NOT EXISTS entries (
  rule TEXT NOT NULL,
  key TEXT NOT NULL,
  name TEXT NOT NULL,
  value TEXT,
  version INTEGER NOT NULL,
  applied INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_try INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (rule, key)
)`;

/** How many objects the alarm drives at once. */
export const DRIVE_BATCH = 50;
/** How soon a change the object did not confirm is sent again; twice as long after each failure since … */
const RETRY_MS = 5_000;
/** … up to this. */
const MAX_RETRY_MS = 300_000;
/** How long a call to a client's object may take. */
const CALL_TIMEOUT_MS = 5_000;

type Stored = { rule: string; key: string; name: string; value: string | null; version: number; applied: number };

const entryOf = (row: Stored): RegistryEntry => ({
  rule: row.rule,
  key: row.key,
  name: row.name,
  override: row.value === null ? null : (JSON.parse(row.value) as Override),
  version: row.version,
  applied: row.applied === 1,
});

/** Overrides are the same when everything but who set them and when is the same. */
const sameOverride = (a: Override | null, b: Override | null): boolean => {
  if (a === null || b === null) return a === b;
  const { updatedAtMs: _a, by: _b, ...left } = a;
  const { updatedAtMs: _c, by: _d, ...right } = b;
  return JSON.stringify(left) === JSON.stringify(right);
};

export class OverrideRegistry extends DurableObject<RegistryEnv> {
  private readonly sql: SqlStorage;
  private version: number;

  constructor(ctx: DurableObjectState, env: RegistryEnv) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(SCHEMA);
    // Entries stored before each had its own next try are all due now.
    const columns = this.sql.exec("SELECT * FROM entries LIMIT 0").columnNames;
    if (!columns.includes("attempts"))
      this.sql.exec("ALTER TABLE entries ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0");
    if (!columns.includes("next_try"))
      this.sql.exec("ALTER TABLE entries ADD COLUMN next_try INTEGER NOT NULL DEFAULT 0");
    const top = this.sql.exec<{ v: number | null }>("SELECT max(version) AS v FROM entries").one();
    this.version = top.v ?? 0;
  }

  /** Sets or deletes one override, and sends it to the client's object at once. */
  async change(change: Change): Promise<ChangeReport> {
    const before = this.get(change.rule, change.key)?.override ?? null;
    const entry = this.record(change);
    const applied = await this.drive(entry);
    if (!applied) await this.scheduleNext();
    return { before, after: change.override, applied };
  }

  /**
   * Sets many overrides at once (idempotent: an unchanged one is left alone),
   * and deletes those given as null. The first {@link DRIVE_BATCH} changes are
   * sent to their client objects before it answers, as {@link change} sends
   * one, so a small import is in force when it returns; the rest are sent by
   * the alarm, in batches. Until sent, the entries are pending.
   */
  async importMany(changes: Change[], by: string): Promise<ImportReport> {
    const report: ImportReport = { created: 0, updated: 0, unchanged: 0, deleted: 0 };
    const recorded: RegistryEntry[] = [];
    this.ctx.storage.transactionSync(() => {
      for (const change of changes) {
        const before = this.get(change.rule, change.key);
        const current = before?.override ?? null;
        if (sameOverride(current, change.override)) {
          report.unchanged++;
          continue;
        }
        if (change.override === null) report.deleted++;
        else if (current === null) report.created++;
        else report.updated++;
        recorded.push(this.record(change));
        logChange(by, change, current);
      }
    });
    if (recorded.length === 0) return report;
    // Should this object restart while sending, the alarm sends them; sooner, below, if some are left.
    await this.retrySoon(CALL_TIMEOUT_MS);
    await Promise.all(recorded.slice(0, DRIVE_BATCH).map((entry) => this.drive(entry)));
    if (this.counts().pending > 0) await this.retrySoon(0);
    return report;
  }

  get(rule: string, key: string): RegistryEntry | undefined {
    const rows = this.sql.exec<Stored>("SELECT * FROM entries WHERE rule = ? AND key = ?", rule, key).toArray();
    return rows[0] ? entryOf(rows[0]) : undefined;
  }

  /** One page of overrides, ordered by rule and key; `next` is the cursor of the page after, or null. */
  list(query: ListQuery): { entries: RegistryEntry[]; next: string | null; total: number } {
    const where = ["value IS NOT NULL"];
    const params: (string | number)[] = [];
    const filter = (clause: string, ...values: string[]) => {
      where.push(clause);
      params.push(...values);
    };
    if (query.rule !== undefined) filter("rule = ?", query.rule);
    if (query.tier !== undefined) filter("json_extract(value, '$.tier') = ?", query.tier);
    if (query.note !== undefined) filter("instr(lower(json_extract(value, '$.note')), lower(?)) > 0", query.note);
    // What the filter matches, on every page alike (the cursor only says where the page starts).
    const total = this.sql
      .exec<{ n: number }>(`SELECT count(*) AS n FROM entries WHERE ${where.join(" AND ")}`, ...params)
      .one().n;
    if (query.after !== undefined) {
      const [rule, key] = JSON.parse(query.after) as [string, string];
      filter("(rule, key) > (?, ?)", rule, key);
    }
    const rows = this.sql
      .exec<Stored>(
        `SELECT * FROM entries WHERE ${where.join(" AND ")} ORDER BY rule, key LIMIT ?`,
        ...params,
        query.limit + 1,
      )
      .toArray();
    const page = rows.slice(0, query.limit).map(entryOf);
    const last = page[page.length - 1];
    return {
      entries: page,
      next: rows.length > query.limit && last ? JSON.stringify([last.rule, last.key]) : null,
      total,
    };
  }

  /** How many overrides there are, and how many changes the client objects have not confirmed yet. */
  counts(): { overrides: number; pending: number } {
    const row = this.sql
      .exec<{ overrides: number; pending: number }>(
        "SELECT count(value) AS overrides, coalesce(sum(1 - applied), 0) AS pending FROM entries",
      )
      .one();
    return { overrides: row.overrides, pending: row.pending };
  }

  /**
   * Sends the pending changes that are due to their client objects, a batch
   * at a time: first those never tried, then those whose next try is the
   * oldest. A change that fails waits longer each time, so the changes
   * behind it go first. Runs again while any change is pending.
   */
  override async alarm(): Promise<void> {
    const due = this.sql
      .exec<Stored>(
        "SELECT * FROM entries WHERE applied = 0 AND next_try <= ? ORDER BY next_try, version LIMIT ?",
        Date.now(),
        DRIVE_BATCH,
      )
      .toArray()
      .map(entryOf);
    await Promise.all(due.map((entry) => this.drive(entry)));
    await this.scheduleNext();
  }

  /** Records a change as pending, with the next version. */
  private record(change: Change): RegistryEntry {
    const entry: RegistryEntry = { ...change, version: ++this.version, applied: false };
    this.sql.exec(
      `INSERT INTO entries (rule, key, name, value, version, applied, attempts, next_try) VALUES (?, ?, ?, ?, ?, 0, 0, 0)
       ON CONFLICT (rule, key) DO UPDATE SET name = excluded.name, value = excluded.value,
         version = excluded.version, applied = 0, attempts = 0, next_try = 0`,
      entry.rule,
      entry.key,
      entry.name,
      entry.override === null ? null : JSON.stringify(entry.override),
      entry.version,
    );
    return entry;
  }

  /**
   * Sends one change to its client's object; on confirmation marks it
   * applied, and otherwise sets when it is sent next.
   */
  private async drive(entry: RegistryEntry): Promise<boolean> {
    const stub = this.env.RATE_LIMITER.get(this.env.RATE_LIMITER.idFromName(entry.name));
    const call =
      entry.override === null
        ? stub.deleteOverride(entry.rule, entry.version)
        : stub.setOverride(entry.rule, entry.override, entry.version);
    if (!(await withDeadline(Promise.resolve(call), CALL_TIMEOUT_MS)).ok) {
      // RETRY_MS, then twice as long after each failure, up to MAX_RETRY_MS (a newer change starts over).
      this.sql.exec(
        `UPDATE entries SET attempts = attempts + 1, next_try = ? + min(?, ? * (1 << min(attempts, 16)))
         WHERE rule = ? AND key = ? AND version = ?`,
        Date.now(),
        MAX_RETRY_MS,
        RETRY_MS,
        entry.rule,
        entry.key,
        entry.version,
      );
      return false;
    }
    // Only this version is confirmed: a newer change made meanwhile stays pending. A confirmed deletion
    // stays as a row with no override, so the highest version ever sent survives a restart (see constructor).
    this.sql.exec(
      "UPDATE entries SET applied = 1 WHERE rule = ? AND key = ? AND version = ?",
      entry.rule,
      entry.key,
      entry.version,
    );
    return true;
  }

  /** Sets the alarm for the soonest next try of a pending change, if any is pending. */
  private async scheduleNext(): Promise<void> {
    const next = this.sql
      .exec<{ at: number | null }>("SELECT min(next_try) AS at FROM entries WHERE applied = 0")
      .one().at;
    if (next !== null) await this.retrySoon(Math.max(0, next - Date.now()));
  }

  private async retrySoon(inMs: number): Promise<void> {
    const at = Date.now() + inMs;
    const current = await this.ctx.storage.getAlarm();
    if (current == null || current > at) await this.ctx.storage.setAlarm(at);
  }
}

/** One JSON line per change: who, which client under which rule, before and after. */
export function logChange(by: string, change: Change, before: Override | null): void {
  logEvent(
    {
      event: change.override === null ? "override_deleted" : "override_set",
      by,
      rule: change.rule,
      key: keyHashPrefix(change.name),
      before: before === null ? null : overrideView(before),
      after: change.override === null ? null : overrideView(change.override),
    },
    "info",
  );
}
