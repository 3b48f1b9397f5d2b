/**
 * The tier a client's token last claimed, per rule, as its object keeps it
 * (src/object/claimed-tiers.ts), on a real object's SQLite storage: what an
 * admin read (which has no token) is answered under, written only when it
 * changes, kept across a restart, forgotten when a request claims none.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ClaimedTiers } from "../src/object/claimed-tiers.ts";
import { env } from "./support/env.ts";

const check = { id: "api", limit: 2, tiers: { pro: 4, free: 1 } };
const stub = () => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`claimed-${crypto.randomUUID()}`));
const tables = (sql: SqlStorage) =>
  sql
    .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table'")
    .toArray()
    .map((t) => t.name);

describe("the tier a client's token last claimed", () => {
  it("answers a check without a tier under it, with its limit; a check with a tier as it is", async () => {
    await runInDurableObject(stub(), (_instance, state) => {
      const tiers = new ClaimedTiers(state.storage.sql);
      expect(tiers.applied(check)).toBe(check);
      tiers.saw("api", "pro");
      expect(tiers.applied(check)).toEqual({ ...check, limit: 4, tier: "pro" });
      expect(tiers.applied({ ...check, limit: 1, tier: "free" })).toEqual({ ...check, limit: 1, tier: "free" });
      // A tier the rule no longer gives a limit in: the rule's own.
      expect(tiers.applied({ id: "api", limit: 2, tiers: { free: 1 } })).toEqual({
        id: "api",
        limit: 2,
        tiers: { free: 1 },
      });
      // Another rule: its own.
      expect(tiers.applied({ ...check, id: "other" })).toEqual({ ...check, id: "other" });
    });
  });

  it("forgets it when a request claims none", async () => {
    await runInDurableObject(stub(), (_instance, state) => {
      const tiers = new ClaimedTiers(state.storage.sql);
      tiers.saw("api", "pro");
      tiers.saw("api", undefined);
      expect(tiers.applied(check)).toBe(check);
    });
  });

  it("creates no table until a tier is claimed, and keeps what was claimed across a restart", async () => {
    const object = stub();
    await runInDurableObject(object, (_instance, state) => {
      const tiers = new ClaimedTiers(state.storage.sql);
      tiers.saw("api", undefined);
      expect(tables(state.storage.sql)).not.toContain("claimed_tiers");
      tiers.saw("api", "pro");
      expect(tables(state.storage.sql)).toContain("claimed_tiers");
    });
    await evictDurableObject(object);
    await runInDurableObject(object, (_instance, state) => {
      const tiers = new ClaimedTiers(state.storage.sql);
      tiers.load();
      expect(tiers.applied(check)).toEqual({ ...check, limit: 4, tier: "pro" });
    });
  });
});
