import {
  abortAllDurableObjects,
  evictDurableObject,
  listDurableObjectIds,
  runDurableObjectAlarm,
  runInDurableObject,
} from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { RuleOf } from "../src/core/rules.ts";
import { type WindowCheck as RuleCheck, type RuleVerdict, toRuleCheck } from "../src/object/protocol.ts";
import type { RateLimiter } from "../src/object/rate-limiter.ts";
import { env } from "./support/env.ts";
import { settingsFor } from "./support/isolate.ts";

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
    await stub.refund([{ receipt: verdicts[0]!.counted!, count: 1 }]);
    expect((await stub.peek([rule("r", 5)])).verdicts[0]!.weighted).toBe(1);
  });

  it("ignores a refund for counts an admin reset already wiped", async () => {
    const stub = freshObject();
    const first = await stub.check([rule("epoch", 5)]);
    await stub.reset(["epoch"]);
    await stub.check([rule("epoch", 5)]);
    await stub.refund([{ receipt: first.verdicts[0]!.counted!, count: 1 }]);
    expect((await stub.peek([rule("epoch", 5)])).verdicts[0]!.weighted).toBe(1);
  });

  it.each([
    ["read (peek)", (stub: DurableObjectStub<RateLimiter>) => stub.peek([rule("again", 1)])],
    [
      "its places read",
      (stub: DurableObjectStub<RateLimiter>) => stub.peekPlaces("again", { concurrency: 1, placeTimeoutMs: 30_000 }),
    ],
  ])(
    "resets again a client it emptied itself and has since %s: the storage it deleted is not asked for",
    async (_name, touch) => {
      const stub = freshObject();
      await stub.check([rule("again", 1)]);
      expect((await stub.check([rule("again", 1)])).allowed).toBe(false);
      await stub.reset(["again"]); // nothing left: the object deletes its storage
      await touch(stub);
      await expect(stub.reset(["again"])).resolves.toEqual({ freed: 0 });
      await expect(stub.reset()).resolves.toEqual({ freed: 0 });
      expect((await stub.check([rule("again", 1)])).allowed).toBe(true);
    },
  );

  it("keeps apart two rules that share an id but not a period (two rateLimit()s), after one carry-over", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.UTC(2031, 0, 1, 0, 0, 0, 100));
    try {
      const stub = freshObject();
      const [perSecond, perHour] = [rule("shared-id", 10, 1_000), rule("shared-id", 10, 3_600_000)];
      await stub.check([perSecond]);
      await stub.check([perSecond]);
      await stub.check([perHour]); // a new row: it carries the other's 2 over, once, as a changed period would
      for (let i = 0; i < 3; i++) {
        await stub.check([perSecond]);
        await stub.check([perHour]);
      }
      expect((await stub.peek([perSecond])).verdicts[0]!.weighted).toBe(2 + 3);
      expect((await stub.peek([perHour])).verdicts[0]!.weighted).toBe(2 + 1 + 3);
    } finally {
      vi.useRealTimers();
    }
  });

  it("does not let a refusal be remembered while a count it rests on may still be refunded", async () => {
    const start = Date.UTC(2031, 0, 1, 0, 0, 0, 100);
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(start);
    try {
      const stub = freshObject();
      const r = rule("due", 1, 3_600_000);
      await stub.check([r], { refundableForMs: 2_000 }); // the caller checks another key too
      expect((await stub.check([r])).verdicts[0]).toMatchObject({ ruleAllows: false, holdsForMs: 0 });
      vi.setSystemTime(start + 2_000); // no refund came in time: the count stands, and so may the refusal
      const later = (await stub.check([r])).verdicts[0]!;
      expect(later.ruleAllows).toBe(false);
      expect(later.holdsForMs).toBe(later.retryAfterMs);
    } finally {
      vi.useRealTimers();
    }
  });

  // A count that may be refunded until t is not made final by a later call that may refund its own count sooner.
  it.each([
    ["a longer window, then a shorter one", 100_000, 2_000, 50_000, "not held"],
    ["a shorter window, then a longer one", 2_000, 100_000, 50_000, "not held"],
    ["a longer window, then none", 100_000, undefined, 50_000, "not held"],
    ["two windows, both past", 2_000, 3_000, 3_000, "held"],
  ] as const)("keeps the refunds-due window at its latest end: %s", async (_, firstMs, secondMs, atMs, expected) => {
    const start = Date.UTC(2031, 0, 1, 0, 0, 0, 100);
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(start);
    try {
      const stub = freshObject();
      const r = rule("due-latest", 2, 3_600_000);
      await stub.check([r], { refundableForMs: firstMs }); // e.g. a `count` rule's, settled by the response
      await stub.check([r], secondMs === undefined ? {} : { refundableForMs: secondMs });
      vi.setSystemTime(start + atMs);
      const refused = (await stub.check([r])).verdicts[0]!;
      expect(refused.ruleAllows).toBe(false);
      expect(refused.holdsForMs).toBe(expected === "held" ? refused.retryAfterMs : 0);
    } finally {
      vi.useRealTimers();
    }
  });

  it("holds each row's refusals by its own rule's refund window, when the caller gives one per rule", async () => {
    const start = Date.UTC(2031, 0, 1, 0, 0, 0, 100);
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(start);
    try {
      const stub = freshObject();
      const [plain, byAnswer] = [rule("plain", 1, 3_600_000), rule("by-answer", 1, 3_600_000)];
      await stub.check([plain, byAnswer], { refundableForMs: 100_000, refundableByRuleMs: [2_000, 100_000] });
      vi.setSystemTime(start + 2_000);
      const [alone, beside] = await Promise.all([stub.check([plain]), stub.check([byAnswer])]);
      expect(alone.verdicts[0]!.holdsForMs).toBe(alone.verdicts[0]!.retryAfterMs); // its count can no longer go
      expect(beside.verdicts[0]).toMatchObject({ ruleAllows: false, holdsForMs: 0 }); // its count may still go
    } finally {
      vi.useRealTimers();
    }
  });

  it("carries the count over when a rule's period changes", async () => {
    const stub = freshObject();
    for (let i = 0; i < 4; i++) await stub.check([rule("changing", 10, 3_600_000)]);
    const after = await stub.peek([rule("changing", 10, 60_000)]);
    expect(after.verdicts[0]!.weighted).toBe(4);
  });
});

/** A calendar quota as wrangler.toml writes it, as the Worker sends it to the object. */
const quotaCheck = (id: string, quota: number) =>
  toRuleCheck(settingsFor([{ id, quota, per: "month" }]).rules[0] as RuleOf<"quota">);

describe("a decision's refusals are remembered together, or not at all", () => {
  const start = Date.UTC(2031, 0, 1, 0, 0, 0, 100);
  const holds = (verdicts: RuleVerdict[]) => verdicts.map((v) => [v.ruleAllows, v.holdsForMs]);
  afterEach(() => {
    vi.useRealTimers();
  });
  const fromStart = () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(start);
  };

  it("keeps each rule's own hold when every refusal holds until its wait is over", async () => {
    fromStart();
    const stub = freshObject();
    const rules = [rule("hour", 1, 3_600_000), rule("minute", 1, 60_000)];
    await stub.check(rules);
    const { verdicts } = await stub.check(rules);
    expect(verdicts.map((v) => v.ruleAllows)).toEqual([false, false]);
    expect(verdicts.map((v) => v.holdsForMs)).toEqual(verdicts.map((v) => v.retryAfterMs));
    expect(verdicts[0]!.holdsForMs).toBeGreaterThan(verdicts[1]!.holdsForMs);
  });

  it("remembers none when a quota refuses beside a rate rule", async () => {
    fromStart();
    const stub = freshObject();
    const rules = [quotaCheck("month", 1), rule("hour", 1, 3_600_000)];
    await stub.check(rules);
    expect(holds((await stub.check(rules)).verdicts)).toEqual([
      [false, 0],
      [false, 0],
    ]);
  });

  it("remembers none of a key with a quota, when only its rate rule refuses", async () => {
    fromStart();
    const stub = freshObject();
    const rules = [quotaCheck("month", 100), rule("hour", 1, 3_600_000)];
    await stub.check(rules);
    expect(holds((await stub.check(rules)).verdicts)).toEqual([
      [true, 0],
      [false, 0],
    ]);
    expect(holds((await stub.peek(rules)).verdicts)).toEqual([
      [true, 0],
      [false, 0],
    ]);
  });

  it("remembers none when one refusal rests on a count that may be handed back", async () => {
    fromStart();
    const stub = freshObject();
    const rules = [rule("by-answer", 1, 3_600_000), rule("plain", 1, 3_600_000)];
    await stub.check(rules, { refundableForMs: 100_000, refundableByRuleMs: [100_000, 2_000] });
    vi.setSystemTime(start + 2_000);
    expect(holds((await stub.check(rules)).verdicts)).toEqual([
      [false, 0],
      [false, 0],
    ]);
    expect(holds((await stub.peek(rules)).verdicts)).toEqual([
      [false, 0],
      [false, 0],
    ]);
  });

  it("remembers none in a batch's refusal when one of its rules refuses on a count the batch may hand back", async () => {
    fromStart();
    const stub = freshObject();
    const rules = [rule("by-answer", 2, 3_600_000), rule("plain", 2, 3_600_000)];
    const result = await stub.check(rules, { batch: 3, refundableForMs: 100_000, refundableByRuleMs: [100_000, 0] });
    expect(result.admitted).toBe(2);
    expect(holds(result.refused!)).toEqual([
      [false, 0],
      [false, 0],
    ]);
  });

  it("remembers every refusal only until a rule with a delay may hold the request instead", async () => {
    fromStart();
    const stub = freshObject();
    const rules = [rule("hour", 1, 3_600_000), rule("delayed", 1, 10_000, { maxDelayMs: 4_000 })];
    await stub.check(rules, { hold: true });
    const { verdicts, held } = await stub.check(rules, { hold: true });
    expect(held).toBeUndefined();
    // The delayed rule's wait is within its delay (4 s) 4 s before it ends: then only the object can decide.
    const delayedFor = verdicts[1]!.retryAfterMs - 4_000;
    expect(delayedFor).toBeGreaterThan(0);
    expect(holds(verdicts)).toEqual([
      [false, delayedFor],
      [false, delayedFor],
    ]);
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
  /**
   * The object reads the test's clock (it shares the test's isolate), so instants are exact. They lie years
   * ahead, so an alarm set from them never fires on its own mid-test: `runDurableObjectAlarm` runs it when the
   * test says, at the instant the test set.
   */
  const FUTURE_MS = Date.UTC(2031, 0, 1, 0, 0, 0);
  const fakeClock = (ms: number) => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(ms);
  };
  afterEach(() => {
    vi.useRealTimers();
  });

  it("deletes the key's storage once both windows have expired, and only then", async () => {
    const periodMs = 60_000;
    const stub = freshObject();
    fakeClock(FUTURE_MS + 20_000);
    const { nowMs } = await stub.check([rule("short", 5, periodMs)]);
    expect(nowMs).toBe(FUTURE_MS + 20_000);
    const before = await storedState(stub);
    expect(before.rows).toBe(1);
    // The window after the one counted in must end too: the count still weighs until then.
    const expiresAt = FUTURE_MS + 2 * periodMs;
    expect(before.alarm).toBe(expiresAt);

    vi.setSystemTime(expiresAt - 1);
    expect(await runDurableObjectAlarm(stub)).toBe(true); // early, by 1 ms: keeps the row, sets the alarm again
    expect(await storedState(stub)).toMatchObject({ rows: 1, alarm: expiresAt });

    vi.setSystemTime(expiresAt);
    expect(await runDurableObjectAlarm(stub)).toBe(true); // on time: both windows are over
    expect(await storedState(stub)).toEqual({ tables: [], rows: 0, alarm: null });

    // Idempotent: nothing is scheduled, and running it again changes nothing.
    expect(await runDurableObjectAlarm(stub)).toBe(false);
    await runInDurableObject(stub, (instance: RateLimiter) => instance.alarm());
    expect(await storedState(stub)).toEqual({ tables: [], rows: 0, alarm: null });

    // The key starts afresh and works as before.
    expect((await stub.check([rule("short", 5, periodMs)])).verdicts[0]!.remaining).toBe(4);
  });

  it("keeps a rule whose window is still running when another rule's has expired", async () => {
    const stub = freshObject();
    fakeClock(FUTURE_MS);
    await stub.check([rule("brief", 5, 100), rule("long", 5, 3_600_000)]);
    vi.setSystemTime(FUTURE_MS + 200); // both of brief's windows are over; long's first is still running
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    await runInDurableObject(stub, (instance: RateLimiter) => instance.alarm());
    const rows = await runInDurableObject(stub, (_i, state) =>
      state.storage.sql
        .exec<{ rule: string }>("SELECT rule FROM counters")
        .toArray()
        .map((r) => r.rule),
    );
    expect(rows).toEqual(["long|3600000|1"]);
    expect((await storedState(stub)).alarm).toBe(FUTURE_MS + 2 * 3_600_000);
  });

  it("creates objects only for keys that were checked", async () => {
    const before = (await listDurableObjectIds(env.RATE_LIMITER)).length;
    await freshObject().check([rule("one", 1)]);
    expect((await listDurableObjectIds(env.RATE_LIMITER)).length).toBe(before + 1);
  });
});

describe("an object stored before rows had epochs", () => {
  it("reads its counts after an upgrade, named by layout, and takes refunds made against them", async () => {
    const stub = freshObject();
    await runInDurableObject(stub, (_instance, state) => {
      state.storage.sql.exec(
        "CREATE TABLE counters (rule TEXT PRIMARY KEY, period_ms INTEGER NOT NULL, precision INTEGER NOT NULL, bucket INTEGER NOT NULL, counts TEXT NOT NULL)",
      );
      const bucket = Math.floor(Date.now() / 3_600_000);
      state.storage.sql.exec("INSERT INTO counters VALUES ('legacy', 3600000, 1, ?, '[0,4]')", bucket);
    });
    await evictDurableObject(stub); // the next call constructs the object anew, from storage
    expect((await stub.peek([rule("legacy", 10, 3_600_000)])).verdicts[0]!.weighted).toBe(4);
    const next = await stub.check([rule("legacy", 10, 3_600_000)]);
    expect(next.verdicts[0]!.counted).toMatchObject({ row: "legacy|3600000|1", epoch: 0 });
    await stub.refund([{ receipt: next.verdicts[0]!.counted!, count: 1 }]);
    expect((await stub.peek([rule("legacy", 10, 3_600_000)])).verdicts[0]!.weighted).toBe(4);
  });
});

describe("a rule's penalty (block_for)", () => {
  const START = Date.UTC(2031, 0, 1, 0, 0, 0);
  const login = (over: Partial<RuleCheck> = {}) => rule("login", 2, 60_000, { blockForMs: 900_000, ...over });
  afterEach(() => vi.useRealTimers());

  it("is started only by the rule's own refusal: a request another rule refuses starts none", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(START);
    const stub = freshObject();
    const rules = [login(), rule("tight", 1)];
    await stub.check(rules);
    const refused = await stub.check(rules); // tight refuses; login would admit
    expect(refused.verdicts.map((v) => [v.ruleAllows, v.penaltyMs])).toEqual([
      [true, undefined],
      [false, undefined],
    ]);
    expect((await stub.check([login()])).verdicts[0]).toMatchObject({ ruleAllows: true });
  });

  it("is never started by a shadow rule, which never refuses", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(START);
    const stub = freshObject();
    const shadow = login({ enforce: false });
    for (let i = 0; i < 3; i++) await stub.check([shadow]);
    const peeked = (await stub.peek([shadow])).verdicts[0]!;
    expect(peeked.penaltyMs).toBeUndefined();
    expect(peeked.retryAfterMs).toBe(60_001); // the window's own wait: in the next window, the 2 weigh under 2 at once
  });

  it("grants no lease under a rule with a penalty: units leased before it starts would be spent during it", async () => {
    const stub = freshObject();
    const lease = { units: 64, seen: 64, seenInMs: 60_000 };
    const plain = await stub.check([rule("roomy", 100_000)], { lease });
    expect(plain.lease?.units).toBeGreaterThan(0);
    const penalized = await stub.check([rule("roomy-penalized", 100_000, 60_000, { blockForMs: 60_000 })], { lease });
    expect(penalized.lease).toBeUndefined();
  });

  it("is lifted by a refund, in time, of a count the refusal that started it rested on", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(START);
    const stub = freshObject();
    await stub.check([login()]);
    const second = await stub.check([login()], { refundableForMs: 2_000 }); // the caller checks another key too
    const refused = (await stub.check([login()])).verdicts[0]!;
    // Refused, and penalized, but not to be remembered: the count it rests on may come back.
    expect(refused).toMatchObject({ ruleAllows: false, penaltyMs: 900_000, holdsForMs: 0 });
    await stub.refund([{ receipt: second.verdicts[0]!.counted!, count: 1 }]); // the other key refused that request
    expect((await stub.check([login()])).verdicts[0]!.ruleAllows).toBe(true);
  });

  it("stands when the refund comes after its time", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(START);
    const stub = freshObject();
    await stub.check([login()]);
    const second = await stub.check([login()], { refundableForMs: 2_000 });
    await stub.check([login()]);
    vi.setSystemTime(START + 2_000);
    await stub.refund([{ receipt: second.verdicts[0]!.counted!, count: 1 }]);
    expect((await stub.check([login()])).verdicts[0]).toMatchObject({ ruleAllows: false, penaltyMs: 898_000 });
  });

  it("carries over to the new row when the rule's period changes", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(START);
    const stub = freshObject();
    for (let i = 0; i < 3; i++) await stub.check([login()]);
    vi.setSystemTime(START + 5 * 60_000);
    const changed = (await stub.check([login({ periodMs: 3_600_000 })])).verdicts[0]!;
    expect(changed).toMatchObject({ ruleAllows: false, penaltyMs: 600_000, retryAfterMs: 600_000 });
  });

  it("is not honoured once the rule no longer has block_for", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(START);
    const stub = freshObject();
    for (let i = 0; i < 3; i++) await stub.check([login()]);
    vi.setSystemTime(START + 2 * 60_000);
    expect((await stub.check([login({ blockForMs: undefined })])).verdicts[0]!.ruleAllows).toBe(true);
  });
});

describe("an object stored before rows had penalties", () => {
  it("reads its counts after an upgrade, with no penalty running, and starts one when refused", async () => {
    const stub = freshObject();
    await runInDurableObject(stub, (_instance, state) => {
      state.storage.sql.exec(
        "CREATE TABLE counters (rule TEXT PRIMARY KEY, period_ms INTEGER NOT NULL, precision INTEGER NOT NULL, bucket INTEGER NOT NULL, counts TEXT NOT NULL, epoch INTEGER NOT NULL DEFAULT 0)",
      );
      const bucket = Math.floor(Date.now() / 3_600_000);
      state.storage.sql.exec("INSERT INTO counters VALUES ('old|3600000|1', 3600000, 1, ?, '[0,2]', 7)", bucket);
    });
    await evictDurableObject(stub);
    const old = rule("old", 3, 3_600_000, { blockForMs: 60_000 });
    expect((await stub.peek([old])).verdicts[0]).toMatchObject({ weighted: 2, ruleAllows: true });
    await stub.check([old]);
    expect((await stub.check([old])).verdicts[0]).toMatchObject({ ruleAllows: false });
    await evictDurableObject(stub);
    expect((await stub.peek([old])).verdicts[0]!.penaltyMs).toBeGreaterThan(0);
  });
});
