/**
 * The index of overrides at scale: after a bulk import of 10,000 overrides,
 * and after deleting 2,000 of them, the registry lists exactly what the
 * clients' own objects enforce, read from each object.
 */
import { evictDurableObject } from "cloudflare:test";
import { env as workerEnv } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { canonicalKey, hashKey } from "../../src/core/keys.ts";
import type { OverrideRegistry } from "../../src/object/registry.ts";
import { env } from "../support/env.ts";
import { limiter } from "../support/limiter.ts";

const CLIENTS = 10_000;
const DELETED = 2_000;
const TOKEN = "test-admin-token-index-7a2c";
const RULE = "index-at-scale";
const send = limiter([{ id: RULE, limit: 5, period: "1h", key: ["header:x-api-key"] }], { ADMIN_TOKEN: TOKEN });
const apiKey = (i: number) => `tenant-${i}`;
const limitOf = (i: number) => 10 + (i % 1000);

const registry = () => {
  const ns = (workerEnv as unknown as { OVERRIDES: DurableObjectNamespace<OverrideRegistry> }).OVERRIDES;
  return ns.get(ns.idFromName("registry"));
};

async function importItems(items: unknown[]): Promise<Record<string, number>> {
  const res = await send("/__ratelimit/overrides/import", {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(items),
  });
  expect(res.status).toBe(200);
  return res.json();
}

/** Closes an object if it is open (the runtime may have closed it already). */
const close = (stub: DurableObjectStub) =>
  evictDurableObject(stub).catch((error: Error) => {
    if (!/not currently running/.test(error.message)) throw error;
  });

/**
 * Waits until the registry has no pending change. Meanwhile it closes the
 * objects of the entries already applied: each open object holds SQLite
 * files, and 10,000 open at once would pass the 20,000-descriptor limit.
 */
async function settled(): Promise<void> {
  const deadline = Date.now() + 240_000;
  const closed = new Set<string>();
  while ((await registry().counts()).pending > 0) {
    if (Date.now() > deadline) throw new Error("the registry still has pending changes");
    let after: string | undefined;
    do {
      const page = await registry().list({ rule: RULE, limit: 1_000, after });
      const done = page.entries.filter((entry) => entry.applied && !closed.has(entry.name));
      for (const entry of done) closed.add(entry.name);
      await Promise.all(done.map((entry) => close(env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(entry.name)))));
      after = page.next ?? undefined;
    } while (after !== undefined);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** Every override the registry lists for the rule, page by page. */
async function listed(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  let cursor: string | null = null;
  do {
    const query = `rule=${RULE}&limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
    const res = await send(`/__ratelimit/overrides?${query}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const page = (await res.json()) as {
      overrides: { key: [string, string][]; limit: number; state: string }[];
      next: string | null;
    };
    for (const entry of page.overrides) {
      expect(entry.state).toBe("applied");
      out.set(entry.key[0]![1], entry.limit);
    }
    cursor = page.next;
  } while (cursor !== null);
  return out;
}

/** What client i's own object enforces under the rule: its override's limit, or null for none. */
async function enforced(i: number): Promise<number | null> {
  const canonical = canonicalKey([[{ kind: "header", name: "x-api-key" }]], { header: () => apiKey(i) } as never);
  const stub = env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(await hashKey(canonical)));
  const override = (await stub.listOverrides())[RULE];
  // Closed after reading: each open object holds SQLite files, and 10,000 would pass the 20,000-descriptor limit.
  await close(stub);
  return override?.kind === "limit" ? override.limit : null;
}

async function everyClient(check: (i: number) => Promise<void>): Promise<void> {
  for (let i = 0; i < CLIENTS; i += 50) {
    await Promise.all(Array.from({ length: Math.min(50, CLIENTS - i) }, (_, j) => check(i + j)));
  }
}

describe("the index at 10,000 overrides", () => {
  it("lists exactly what the objects enforce, after the import and after deletes", { timeout: 600_000 }, async () => {
    const items = Array.from({ length: CLIENTS }, (_, i) => ({ rule: RULE, key: apiKey(i), limit: limitOf(i) }));
    expect(await importItems(items)).toEqual({ created: CLIENTS, updated: 0, unchanged: 0, deleted: 0 });
    await settled();
    const afterImport = await listed();
    expect(afterImport.size).toBe(CLIENTS);
    await everyClient(async (i) => {
      expect(afterImport.get(apiKey(i))).toBe(limitOf(i));
      expect(await enforced(i)).toBe(limitOf(i));
    });

    const removals = Array.from({ length: DELETED }, (_, i) => ({ rule: RULE, key: apiKey(i * 5), delete: true }));
    expect(await importItems(removals)).toEqual({ created: 0, updated: 0, unchanged: 0, deleted: DELETED });
    await settled();
    const afterDeletes = await listed();
    expect(afterDeletes.size).toBe(CLIENTS - DELETED);
    await everyClient(async (i) => {
      const expected = i % 5 === 0 ? null : limitOf(i);
      expect(afterDeletes.get(apiKey(i)) ?? null).toBe(expected);
      expect(await enforced(i)).toBe(expected);
    });
  });
});
