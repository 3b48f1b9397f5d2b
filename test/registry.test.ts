/**
 * The override registry's alarm: it drives every pending change to its
 * client's object, a batch at a time, and a client object that stays down
 * holds back no other change. Its own changes stay pending, shown as such,
 * and are tried again, less and less often, until the object takes them.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env as workerEnv } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Override } from "../src/core/overrides.ts";
import { type Change, DRIVE_BATCH, type OverrideRegistry } from "../src/object/registry.ts";
import { env } from "./support/env.ts";
import { expectRuntimeReports } from "./support/logs.ts";

const registries = (workerEnv as unknown as { OVERRIDES: DurableObjectNamespace<OverrideRegistry> }).OVERRIDES;
let names = 0;
/** A registry of its own per test: storage is shared by the tests of a file. */
const freshRegistry = () => registries.get(registries.idFromName(`registry-test-${++names}-${Date.now()}`));
const clientNamed = (name: string) => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(name));

const OVERRIDE: Override = { kind: "limit", limit: 5, expiresAtMs: null, note: "", updatedAtMs: 0, by: "test" };
const change = (rule: string, name: string): Change => ({ rule, key: `key-of-${name}`, name, override: OVERRIDE });

/** What the runtime reports of each override sent to an object taken down. */
const BROKEN = "table overrides has no column named rule";

/**
 * Takes a client's object down for writes: a table of its storage is in a shape it cannot write, so every
 * override sent to it throws. `up()` mends it.
 */
async function takeDown(name: string) {
  await runInDurableObject(clientNamed(name), (_instance, state) => {
    state.storage.sql.exec("CREATE TABLE overrides (broken INTEGER)");
  });
  return {
    up: () =>
      runInDurableObject(clientNamed(name), (_instance, state) => {
        state.storage.sql.exec("DROP TABLE overrides");
      }),
  };
}

/** Which of these changes the client objects have confirmed, by their registry entries. */
async function appliedOf(registry: ReturnType<typeof freshRegistry>, changes: Change[]) {
  const entries = await Promise.all(changes.map((c) => registry.get(c.rule, c.key)));
  return entries.map((entry) => entry?.applied ?? false);
}

afterEach(() => vi.useRealTimers());

describe("the registry's alarm", () => {
  it.each([
    ["one client's object (its changes under DRIVE_BATCH rules)", (i: number) => change(`rule-${i}`, "down-0")],
    ["DRIVE_BATCH clients' objects (one change each)", (i: number) => change("rule", `down-${i}`)],
  ])("applies every other change while %s stay down, and keeps trying theirs", async (_, downChange) => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.UTC(2031, 0, 1);
    vi.setSystemTime(start);
    const registry = freshRegistry();
    const tag = `${names}`;
    const down = Array.from({ length: DRIVE_BATCH }, (_, i) => downChange(i));
    const downNames = [...new Set(down.map((c) => `${c.name}-${tag}`))];
    const failing = down.map((c) => ({ ...c, name: `${c.name}-${tag}` }));
    const outages = await Promise.all(downNames.map(takeDown));
    const others = Array.from({ length: 2 * DRIVE_BATCH + 10 }, (_, i) => change("rule", `up-${i}-${tag}`));
    // The failing changes come first: the lowest versions.
    await registry.importMany(failing, "test");
    await registry.importMany(others, "test");

    for (let run = 0; run < 4; run++) await runDurableObjectAlarm(registry);
    expect(await appliedOf(registry, others)).toEqual(others.map(() => true));
    expect(await appliedOf(registry, failing)).toEqual(failing.map(() => false));
    expect(await registry.counts()).toEqual({ overrides: failing.length + others.length, pending: failing.length });

    // Still pending, and tried again once the object is back.
    await Promise.all(outages.map((outage) => outage.up()));
    vi.setSystemTime(start + 3_600_000);
    for (let run = 0; run < 2 && (await registry.counts()).pending > 0; run++) await runDurableObjectAlarm(registry);
    expect(await appliedOf(registry, failing)).toEqual(failing.map(() => true));
    expect(await registry.counts()).toMatchObject({ pending: 0 });
    // Each send to an object that was down threw there, and the runtime reported it.
    expect(await expectRuntimeReports(BROKEN, "all")).toBeGreaterThanOrEqual(failing.length);
  });

  it("tries a failing change again less and less often, at most every 5 minutes, and always keeps an alarm for it", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.UTC(2031, 0, 1);
    vi.setSystemTime(start);
    const registry = freshRegistry();
    const failing = change("rule", `down-alone-${names}`);
    await takeDown(failing.name);
    expect((await registry.change(failing)).applied).toBe(false);
    const retries: number[] = [];
    for (let run = 0; run < 9; run++) {
      const at = await runInDurableObject(registry, (_instance, state) => state.storage.getAlarm());
      expect(at).not.toBeNull();
      retries.push(at! - Date.now());
      vi.setSystemTime(at!);
      await runDurableObjectAlarm(registry);
    }
    expect(retries).toEqual([5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000]);
    expect((await registry.get(failing.rule, failing.key))?.applied).toBe(false);
    // One send at the change and one at each of the 9 alarms, each of which threw in the object.
    expect(await expectRuntimeReports(BROKEN, 10)).toBe(10);
  });

  it("sends a change stored before each had its own next try, after a restart", async () => {
    const registry = freshRegistry();
    const pending = change("rule", `stored-before-${names}`);
    await runInDurableObject(registry, (_instance, state) => {
      state.storage.sql.exec("DROP TABLE entries");
      state.storage.sql.exec(`CREATE TABLE entries (rule TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL,
        value TEXT, version INTEGER NOT NULL, applied INTEGER NOT NULL, PRIMARY KEY (rule, key))`);
      state.storage.sql.exec(
        "INSERT INTO entries VALUES (?, ?, ?, ?, 1, 0)",
        pending.rule,
        pending.key,
        pending.name,
        JSON.stringify(pending.override),
      );
      return state.storage.setAlarm(Date.now()); // as the registry set it then, to send the change
    });
    await evictDurableObject(registry);
    expect(await registry.counts()).toEqual({ overrides: 1, pending: 1 });
    await runDurableObjectAlarm(registry);
    expect(await registry.counts()).toEqual({ overrides: 1, pending: 0 });
    expect(await clientNamed(pending.name).listOverrides()).toEqual({ [pending.rule]: pending.override });
  });
});
