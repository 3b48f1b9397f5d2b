/**
 * @module
 * This client's overrides, and how each rule applies to it now: under its
 * override (another limit, a tier's, lifted, or denied), then under its
 * adaptive rule's factor, the one place in the object where the factor is
 * applied. Stored in the key's object's SQLite (`overrides`), read on
 * every check; a change older than the last one applied is ignored.
 */
import { scaledLimit } from "../core/controller.ts";
import { limitUnder, type Override } from "../core/overrides.ts";
import { keyHashPrefix, logEvent } from "../observe/log.ts";
import { costOf, type RuleCheck } from "./protocol.ts";

/** A rule's override for this client (null once deleted), and the registry's version of that change. */
const SCHEMA = `CREATE TABLE IF NOT EXISTS overrides (rule TEXT PRIMARY KEY, value TEXT, version INTEGER NOT NULL)`;

/**
 * A rule as it applies to this client now: its check with the limit that
 * applies, or lifted, or denied. `configured` is the limit before an
 * adaptive rule's factor, when the factor lowered it.
 */
export type Plan =
  | {
      kind: "count";
      rule: RuleCheck;
      override?: Override;
      configured?: number;
      /** The kind's own fields a tier or an override gave the client beside its limit, merged into `rule` (a bucket's burst). */
      own?: Readonly<Record<string, number>>;
    }
  | { kind: "unlimited"; expiresAtMs: number | null }
  | { kind: "deny"; expiresAtMs: number | null };

/**
 * A rule as a counted check applies it: its plan, or, for an enforcing rule
 * whose priority has nothing left (its adaptive factor is 0) or whose
 * request its isolate found crowded, no count at all: the request refused
 * as a reduction (503), counted nowhere.
 * An override still comes first: a client it lifts the rule off is
 * admitted, and one it denies is denied (403).
 */
export type Checked = Plan | { kind: "shed"; limit: number };

/**
 * The plan of a counted check: `plan`, or shed when the rule's priority has
 * nothing left (its limit 0) or its request was crowded (the limit of its
 * priority, which the crowd leaves as it was).
 */
export const checked = (plan: Plan, rule: RuleCheck): Checked => {
  if (plan.kind !== "count" || !rule.enforce) return plan;
  if (rule.factor !== undefined && rule.factor <= 0) return { kind: "shed", limit: 0 };
  return rule.crowded === true ? { kind: "shed", limit: plan.rule.limit } : plan;
};

export class PlanBook {
  private readonly sql: SqlStorage;
  /** The key's object name, for log lines; undefined for an object made from an id. */
  private readonly name: string | undefined;
  /** This client's overrides, by rule id: stored, and read here on every check. */
  private readonly overrides = new Map<string, Override>();
  /** Per rule id, the version of the last change to its override (a deletion included). */
  private readonly versions = new Map<string, number>();
  /** Overrides found below their rule's cost and logged, by rule id, change time and cost: each is logged once. */
  private readonly warnedBelowCost = new Set<string>();
  /** When each rule's override last changed for this client, as this object saw it (in memory; lost on a restart). */
  private readonly changedAt = new Map<string, number>();
  /** Per rule, the check its last request sent, as sent (in memory only): what a change of its override is planned under. */
  private readonly lastChecks = new Map<string, RuleCheck>();

  constructor(sql: SqlStorage, name: string | undefined) {
    this.sql = sql;
    this.name = name;
  }

  /** Reads the stored overrides (the object's constructor calls it when the table exists). */
  load(): void {
    const stored = this.sql.exec<{ rule: string; value: string | null; version: number }>("SELECT * FROM overrides");
    for (const row of stored) {
      this.versions.set(row.rule, row.version);
      if (row.value !== null) this.overrides.set(row.rule, JSON.parse(row.value) as Override);
    }
  }

  /** How a rule applies to this client now, under its override if it has a live one, and under its factor. */
  plan(rule: RuleCheck, nowMs: number): Plan {
    this.lastChecks.set(rule.id, rule);
    const plan = this.overridden(rule, nowMs);
    const factor = rule.factor;
    if (plan.kind !== "count" || factor === undefined || !(factor < 1)) return plan;
    const configured = plan.rule.limit;
    const limit = Math.max(scaledLimit(configured, Math.max(0, factor)), costOf(rule));
    return limit === configured ? plan : { ...plan, rule: { ...plan.rule, limit }, configured };
  }

  /** How a rule applies to this client now, under its override if it has a live one. */
  private overridden(rule: RuleCheck, nowMs: number): Plan {
    const override = this.overrides.get(rule.id);
    if (override === undefined || (override.expiresAtMs !== null && override.expiresAtMs <= nowMs)) {
      // A tier a token claimed: its own fields, if it gives any (the isolate's variant has them already).
      const own = ownIn(rule, rule.tier === undefined ? undefined : rule.tierOwn?.[rule.tier]);
      return own === undefined ? { kind: "count", rule } : { kind: "count", rule: { ...rule, ...own }, own };
    }
    const given = limitUnder(override, rule, nowMs);
    if (given === "unlimited") return { kind: "unlimited", expiresAtMs: override.expiresAtMs };
    if (given === "deny") return { kind: "deny", expiresAtMs: override.expiresAtMs };
    const limit = Math.max(given, costOf(rule));
    if (limit !== given) this.warnBelowCost(rule, override, given);
    const own = ownIn(
      rule,
      override.kind === "limit" ? override.own : override.kind === "tier" ? rule.tierOwn?.[override.tier] : undefined,
    );
    if (own !== undefined) return { kind: "count", rule: { ...rule, limit, ...own }, override, own };
    return { kind: "count", rule: limit === rule.limit ? rule : { ...rule, limit }, override };
  }

  /**
   * An override stored before its rule's cost was raised past the limit it
   * gives is applied at the cost: one request a period, which keeps the
   * override as strict as it can be (a rule's own limit is never below its
   * cost, so such an override only ever tightened it) while its refusals'
   * Retry-After is true. Logged once per override and cost, as the operator
   * should change it; the admin API no longer takes one.
   */
  private warnBelowCost(rule: RuleCheck, override: Override, limit: number): void {
    const cost = costOf(rule);
    const seen = `${rule.id}|${override.updatedAtMs}|${cost}`;
    if (this.warnedBelowCost.has(seen)) return;
    this.warnedBelowCost.add(seen);
    const key = this.name === undefined ? {} : { key: keyHashPrefix(this.name) };
    logEvent(
      {
        event: "override_below_cost",
        rule: rule.id,
        ...key,
        override: override.kind,
        ...(override.kind === "tier" ? { tier: override.tier } : {}),
        limit,
        cost,
        applied: cost,
        message: `the override gives a limit below the rule's cost, so no request would fit; it is applied as ${cost}, one request a period, until it is changed`,
      },
      "warn",
    );
  }

  /** Sets this client's override of a rule, unless a newer change was applied; whether it was. */
  set(ruleId: string, override: Override, version: number): boolean {
    if (!this.newer(ruleId, version)) return false;
    this.store(ruleId, override, version);
    this.overrides.set(ruleId, override);
    this.changedAt.set(ruleId, Date.now());
    return true;
  }

  /** Removes this client's override of a rule, unless a newer change was applied; whether it did. */
  delete(ruleId: string, version: number): boolean {
    if (!this.newer(ruleId, version)) return false;
    this.store(ruleId, null, version);
    this.overrides.delete(ruleId);
    this.changedAt.set(ruleId, Date.now());
    return true;
  }

  private newer(ruleId: string, version: number): boolean {
    return version > (this.versions.get(ruleId) ?? 0);
  }

  private store(ruleId: string, override: Override | null, version: number): void {
    this.sql.exec(SCHEMA);
    this.sql.exec(
      `INSERT INTO overrides (rule, value, version) VALUES (?, ?, ?)
       ON CONFLICT (rule) DO UPDATE SET value = excluded.value, version = excluded.version`,
      ruleId,
      override === null ? null : JSON.stringify(override),
      version,
    );
    this.versions.set(ruleId, version);
  }

  /** This client's overrides, live or expired and not yet cleaned up, by rule id. */
  list(): Record<string, Override> {
    return Object.fromEntries(this.overrides);
  }

  /** Whether the client has no override, live or expired. */
  get empty(): boolean {
    return this.overrides.size === 0;
  }

  /** Drops the overrides past their expiry (their rows stay, with their versions); the rules they were of. */
  purge(nowMs: number): Set<string> {
    const expired = new Set<string>();
    for (const [rule, override] of this.overrides) {
      if (override.expiresAtMs === null || nowMs < override.expiresAtMs) continue;
      expired.add(rule);
      this.overrides.delete(rule);
      this.changedAt.set(rule, override.expiresAtMs);
      this.sql.exec("UPDATE overrides SET value = NULL WHERE rule = ?", rule);
    }
    return expired;
  }

  /**
   * When the limit a rule gives this client last changed by an override, at
   * or before `nowMs`: set, deleted, or ended by its expiry (at that
   * instant, whenever it is noticed); null when not known (none changed
   * since the object started).
   */
  changedAtMs(ruleId: string, nowMs: number): number | null {
    const override = this.overrides.get(ruleId);
    if (override?.expiresAtMs != null && override.expiresAtMs <= nowMs) return override.expiresAtMs;
    const at = this.changedAt.get(ruleId);
    return at !== undefined && at <= nowMs ? at : null;
  }

  /** The check the rule's last request sent, since the object started; undefined before one. */
  lastCheck(ruleId: string): RuleCheck | undefined {
    return this.lastChecks.get(ruleId);
  }

  /** When the next override expires, after `nowMs`, or null when none will. */
  nextExpiry(nowMs: number): number | null {
    let next: number | null = null;
    for (const override of this.overrides.values()) {
      const at = override.expiresAtMs;
      if (at !== null && at > nowMs) next = Math.min(next ?? at, at);
    }
    return next;
  }

  /** When the last expiring override expires, or null when none will. */
  lastExpiry(): number | null {
    let latest: number | null = null;
    for (const override of this.overrides.values()) {
      if (override.expiresAtMs !== null) latest = Math.max(latest ?? 0, override.expiresAtMs);
    }
    return latest;
  }

  /** Forgets everything: the object's storage was deleted. */
  clear(): void {
    this.overrides.clear();
    this.versions.clear();
  }
}

/**
 * The kind's own fields a tier or an override gives a client, as far as the
 * rule's check has them (a rule that is no longer of the kind they were
 * given for takes none); undefined when none apply.
 */
function ownIn(
  check: RuleCheck,
  own: Readonly<Record<string, number>> | undefined,
): Record<string, number> | undefined {
  if (own === undefined) return undefined;
  const kept = Object.entries(own).filter(([name]) => name in check);
  return kept.length === 0 ? undefined : Object.fromEntries(kept);
}
