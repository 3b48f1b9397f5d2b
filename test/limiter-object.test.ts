import {
  abortAllDurableObjects,
  evictDurableObject,
  listDurableObjectIds,
  runDurableObjectAlarm,
  runInDurableObject,
} from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { RateLimiter } from "../src/limiter-object.ts";
import type { RuleCheck } from "../src/limiter-protocol.ts";
import { env } from "./support/env.ts";

const rule = (id: string, limit: number, periodMs = 60_000, over: Partial<RuleCheck> = {}): RuleCheck => ({
  id,
  limit,
  periodMs,
  precision: 1,
  strict: false,
  enforce: true,
  ...over,
});

let objects = 0;
/** A fresh object per test: storage is shared by the tests of a file. */
const freshObject = () => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`object-test-${++objects}-${Date.now()}`));

/** The tables and alarm an object has stored. */
const storedState = (stub: DurableObjectStub<RateLimiter>) =>
  runInDurableObject(stub, async (_instance, state) => ({
    tables: state.storage.sql
      .exec<{ name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'",
      )
      .toArray()
      .map((row) => row.name),
    rows: state.storage.sql.exec("SELECT name FROM sqlite_master WHERE name = 'counters'").toArray().length
      ? state.storage.sql.exec("SELECT rule FROM counters").toArray().length
      : 0,
    alarm: await state.storage.getAlarm(),
  }));

describe("one object per client key", () => {
  it("admits exactly the limit under 300 concurrent checks", async () => {
    const stub = freshObject();
    const results = await Promise.all(Array.from({ length: 300 }, () => stub.check([rule("burst", 100)])));
    expect(results.filter((r) => r.allowed)).toHaveLength(100);
    expect((await stub.peek([rule("burst", 100)])).verdicts[0]!.weighted).toBe(100);
  });

  it("checks two rules all-or-nothing: when one refuses, the other does not count the request", async () => {
    const stub = freshObject();
    const rules = [rule("tight", 2), rule("loose", 10)];
    const first = await stub.check(rules);
    const second = await stub.check(rules);
    const third = await stub.check(rules);
    expect([first.allowed, second.allowed, third.allowed]).toEqual([true, true, false]);
    expect(third.verdicts.map((v) => v.ruleAllows)).toEqual([false, true]);
    const counts = (await stub.peek(rules)).verdicts.map((v) => v.weighted);
    expect(counts).toEqual([2, 2]);
  });

  it("never lets a shadow (log) rule refuse, and does not count a request it would refuse", async () => {
    const stub = freshObject();
    const rules = [rule("enforced", 10), rule("shadow", 1, 60_000, { enforce: false })];
    const results = [await stub.check(rules), await stub.check(rules), await stub.check(rules)];
    expect(results.map((r) => r.allowed)).toEqual([true, true, true]);
    expect(results.map((r) => r.verdicts[1]!.ruleAllows)).toEqual([true, false, false]);
    expect((await stub.peek(rules)).verdicts.map((v) => v.weighted)).toEqual([3, 1]);
  });

  it("takes back a refunded count, once", async () => {
    const stub = freshObject();
    const { verdicts } = await stub.check([rule("r", 5)]);
    await stub.check([rule("r", 5)]);
    await stub.refund([{ id: "r", bucket: verdicts[0]!.bucket }]);
    expect((await stub.peek([rule("r", 5)])).verdicts[0]!.weighted).toBe(1);
  });

  it("carries the count over when a rule's period changes", async () => {
    const stub = freshObject();
    for (let i = 0; i < 4; i++) await stub.check([rule("changing", 10, 3_600_000)]);
    const after = await stub.peek([rule("changing", 10, 60_000)]);
    expect(after.verdicts[0]!.weighted).toBe(4);
  });
});

describe("persistence", () => {
  it("keeps the count across eviction", async () => {
    const stub = freshObject();
    for (let i = 0; i < 7; i++) await stub.check([rule("kept", 10)]);
    await evictDurableObject(stub);
    expect((await stub.peek([rule("kept", 10)])).verdicts[0]!.weighted).toBe(7);
    expect((await stub.check([rule("kept", 10)])).verdicts[0]!.remaining).toBe(2);
  });

  it("keeps the count when every object is aborted (a crash or a deploy)", async () => {
    const stub = freshObject();
    for (let i = 0; i < 3; i++) await stub.check([rule("crash", 3)]);
    await abortAllDurableObjects();
    const after = await env.RATE_LIMITER.get(stub.id).check([rule("crash", 3)]);
    expect(after.allowed).toBe(false);
  });
});

describe("cleanup", () => {
  it("deletes the key's storage once both windows have expired, and only then", async () => {
    const periodMs = 300;
    const stub = freshObject();
    const { nowMs } = await stub.check([rule("short", 5, periodMs)]);
    const before = await storedState(stub);
    expect(before.rows).toBe(1);
    // The window after the one counted in must end too: the count still weighs until then.
    const expiresAt = (Math.floor(nowMs / periodMs) + 2) * periodMs;
    expect(before.alarm).toBe(expiresAt);

    expect(await runDurableObjectAlarm(stub)).toBe(true); // early: keeps the row, sets the alarm again
    expect((await storedState(stub)).rows).toBe(1);

    // The runtime fires the alarm itself once both windows are over.
    await new Promise((resolve) => setTimeout(resolve, expiresAt - Date.now() + 50));
    await expect.poll(() => storedState(stub), { timeout: 2_000 }).toEqual({ tables: [], rows: 0, alarm: null });

    // Idempotent: nothing is scheduled, and running it again changes nothing.
    expect(await runDurableObjectAlarm(stub)).toBe(false);
    await runInDurableObject(stub, (instance: RateLimiter) => instance.alarm());
    expect(await storedState(stub)).toEqual({ tables: [], rows: 0, alarm: null });

    // The key starts afresh and works as before.
    expect((await stub.check([rule("short", 5, periodMs)])).verdicts[0]!.remaining).toBe(4);
  });

  it("keeps a rule whose window is still running when another rule's has expired", async () => {
    const stub = freshObject();
    await stub.check([rule("brief", 5, 100), rule("long", 5, 3_600_000)]);
    await new Promise((resolve) => setTimeout(resolve, 250));
    await runDurableObjectAlarm(stub);
    await runInDurableObject(stub, (instance: RateLimiter) => instance.alarm());
    const rows = await runInDurableObject(stub, (_i, state) =>
      state.storage.sql
        .exec<{ rule: string }>("SELECT rule FROM counters")
        .toArray()
        .map((r) => r.rule),
    );
    expect(rows).toEqual(["long"]);
  });

  it("creates objects only for keys that were checked", async () => {
    const before = (await listDurableObjectIds(env.RATE_LIMITER)).length;
    await freshObject().check([rule("one", 1)]);
    expect((await listDurableObjectIds(env.RATE_LIMITER)).length).toBe(before + 1);
  });
});
