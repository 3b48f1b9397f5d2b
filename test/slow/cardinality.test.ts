import { evictDurableObject, listDurableObjectIds, runInDurableObject } from "cloudflare:test";
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { canonicalKey, hashKey } from "../../src/core/keys.ts";
import { type RuleInput, rateLimit } from "../../src/lib.ts";
import { env } from "../support/env.ts";

/**
 * Key cardinality: every distinct client gets an object of its own, named by
 * the hash of its key, and every one of them deletes its storage with its
 * alarm once its windows have passed. Nothing else is ever created.
 *
 * Driven through the real middleware (keys, hashing, the client, the object)
 * with a handler in place of the origin, so that 10,000 requests cost no
 * proxying. The rule's period is 200 ms, so the real alarms fire within
 * 400 ms of a client's request.
 */
const CLIENTS = 10_000;
/** Clients in flight at once. The machine has two cores; more only queues. */
const CONCURRENCY = 8;
/**
 * Clients per wave. A wave's objects are checked and evicted once the next
 * wave has run, so at most two waves of objects are open at once: each open
 * SQLite database holds about two file descriptors, and 10,000 open objects
 * exceed a 20,000 limit (SQLITE_CANTOPEN). Two waves stay near 1,000.
 */
const WAVE = 250;

const RULE: RuleInput = { id: "cardinality", limit: 5, period: "200ms", key: ["header:x-api-key"] };
const app = new Hono<{ Bindings: typeof env }>();
app.use("*", rateLimit({ rules: RULE }));
app.get("*", (c) => c.text("ok"));

const apiKey = (i: number) => `client-${i}`;

/** The object id a client's requests must reach: the hash of its canonical key, as a name. */
async function objectIdOf(key: string): Promise<DurableObjectId> {
  const canonical = canonicalKey([[{ kind: "header", name: "x-api-key" }]], { header: () => key } as never);
  return env.RATE_LIMITER.idFromName(await hashKey(canonical));
}

/** What an object has stored: user tables, key-value entries and a pending alarm. */
const storedIn = (id: DurableObjectId) =>
  runInDurableObject(env.RATE_LIMITER.get(id), async (_instance, state) => ({
    tables: state.storage.sql
      .exec<{ name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\'",
      )
      .toArray().length,
    entries: (await state.storage.list()).size,
    alarm: await state.storage.getAlarm(),
  }));

const EMPTY = { tables: 0, entries: 0, alarm: null };

/** Runs `task` on every item, `CONCURRENCY` at a time. */
async function eachConcurrently<T>(items: T[], task: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await task(items[next++]!);
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
}

/** Sends one request for each client of a wave; returns the ids their objects must have. */
async function sendWave(first: number): Promise<DurableObjectId[]> {
  const clients = Array.from({ length: Math.min(WAVE, CLIENTS - first) }, (_, i) => first + i);
  await eachConcurrently(clients, async (i) => {
    const res = await app.request("/x", { headers: { "x-api-key": apiKey(i) } }, env);
    expect(res.status).toBe(200);
    expect(res.headers.get("ratelimit")).toMatch(/^"cardinality";r=4;t=\d+$/);
  });
  return Promise.all(clients.map((i) => objectIdOf(apiKey(i))));
}

/** Waits until every object of a wave has cleaned up with its own alarm, then evicts them. Returns how many it found empty. */
async function drainWave(ids: DurableObjectId[]): Promise<number> {
  let pending = ids;
  const deadline = Date.now() + 30_000;
  while (pending.length > 0 && Date.now() < deadline) {
    const stillStored: DurableObjectId[] = [];
    await eachConcurrently(pending, async (id) => {
      const stored = await storedIn(id);
      if (stored.tables + stored.entries > 0 || stored.alarm !== null) stillStored.push(id);
    });
    if (stillStored.length > 0) await new Promise((resolve) => setTimeout(resolve, 100));
    pending = stillStored;
  }
  await eachConcurrently(ids, (id) => evictDurableObject(env.RATE_LIMITER.get(id)));
  return ids.length - pending.length;
}

describe(`${CLIENTS.toLocaleString("en")} distinct clients`, () => {
  it("each get an object of their own, every one is emptied by its alarm, and no other object exists", async () => {
    const expected: DurableObjectId[] = [];
    let emptied = 0;
    let previous: DurableObjectId[] = [];
    for (let first = 0; first < CLIENTS; first += WAVE) {
      const wave = await sendWave(first);
      expected.push(...wave);
      emptied += await drainWave(previous);
      previous = wave;
    }
    emptied += await drainWave(previous);

    expect(emptied).toBe(CLIENTS);
    // Every object in the namespace is one client's, and every client has one: no singleton, no shared object.
    const listed = (await listDurableObjectIds(env.RATE_LIMITER)).map((id) => id.toString()).sort();
    const wanted = [...new Set(expected.map((id) => id.toString()))].sort();
    expect(wanted).toHaveLength(CLIENTS);
    expect(listed).toEqual(wanted);
    // A sample, once more after eviction: what was deleted stays deleted.
    for (const id of expected.filter((_, i) => i % 1_000 === 0)) expect(await storedIn(id)).toEqual(EMPTY);
  }, 600_000);
});
