/**
 * @module
 * The tier a client's verified token claimed (`tier_claim`), per rule, as
 * its key's object last saw it on a request. The admin API's reads of the
 * client (its status, a quota's usage and credits, a concurrency rule's
 * places) and the dashboard carry no token: they read the client under the
 * tier its last request claimed, as its next request with the same token
 * would be decided. Stored, and written only when it changes; forgotten
 * with the rest of the object's state once nothing else is left of it.
 */

/** What a check says of the limit and the tier it applies: the rule's limit per tier, and the one a token chose. */
type Tiered = { id: string; limit: number; tier?: string; tiers?: Readonly<Record<string, number>> };

const SCHEMA = "CREATE TABLE IF NOT EXISTS claimed_tiers (rule TEXT PRIMARY KEY, tier TEXT NOT NULL)";

export class ClaimedTiers {
  private readonly sql: SqlStorage;
  private readonly tiers = new Map<string, string>();
  private schemaReady = false;

  constructor(sql: SqlStorage) {
    this.sql = sql;
  }

  /** Reads the stored tiers (the object's constructor calls it when the table exists). */
  load(): void {
    this.schemaReady = true;
    for (const row of this.sql.exec<{ rule: string; tier: string }>("SELECT rule, tier FROM claimed_tiers")) {
      this.tiers.set(row.rule, row.tier);
    }
  }

  /** A request's check under a rule: the tier its token claimed, or none (then the one before is forgotten). */
  saw(ruleId: string, tier: string | undefined): void {
    if (this.tiers.get(ruleId) === tier) return;
    if (tier === undefined) {
      this.tiers.delete(ruleId);
      this.sql.exec("DELETE FROM claimed_tiers WHERE rule = ?", ruleId);
      return;
    }
    if (!this.schemaReady) {
      this.sql.exec(SCHEMA);
      this.schemaReady = true;
    }
    this.tiers.set(ruleId, tier);
    this.sql.exec("INSERT OR REPLACE INTO claimed_tiers (rule, tier) VALUES (?, ?)", ruleId, tier);
  }

  /**
   * A check made without a token (an admin read): under the tier the
   * client's last request claimed, with that tier's limit, while the rule
   * still gives the tier one; as it is otherwise.
   */
  applied<C extends Tiered>(check: C): C {
    if (check.tier !== undefined) return check;
    const tier = this.tiers.get(check.id);
    const limit = tier === undefined ? undefined : check.tiers?.[tier];
    return limit === undefined ? check : { ...check, limit, tier };
  }

  /** Forgets every tier (the object's storage is being deleted). */
  clear(): void {
    this.tiers.clear();
    this.schemaReady = false;
  }
}
