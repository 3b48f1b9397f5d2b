/**
 * Rules split across variables: `RULES` and any `RULES_<GROUP>`, since
 * Cloudflare limits each variable to 5 KB. The Worker reads them as one list.
 */
import { describe, expect, it, vi } from "vitest";
import { configurationFromEnv } from "../src/config/memo.ts";
import { parseSettings } from "../src/config/settings.ts";
import { env } from "./support/env.ts";
import { from, limiter, statuses, uniqueIp } from "./support/limiter.ts";

const rule = (id: string, path: string, limit: number) => ({ id, path, limit, period: "1m" });

describe("rules in RULES_<GROUP> variables", () => {
  it("are enforced like those in RULES, each by its own limit", async () => {
    const send = limiter([rule("groups-api", "/api/*", 3)], {
      RULES_AUTH: [rule("groups-login", "/login", 2)],
      RULES_REPORTS: JSON.stringify([rule("groups-reports", "/reports/*", 1)]),
    });
    const ip = uniqueIp();
    expect(await statuses(4, () => send("/api/x", from(ip)))).toEqual([200, 200, 200, 429]);
    expect(await statuses(3, () => send("/login", { ...from(ip), method: "POST" }))).toEqual([200, 200, 429]);
    expect(await statuses(2, () => send("/reports/q1", from(ip)))).toEqual([200, 429]);
  });

  it("are read with no RULES at all, in the order of their names", () => {
    const settings = parseSettings({ RULES_B: [rule("b", "/b", 1)], RULES_A: [rule("a", "/a", 1)] });
    expect(settings.ok && settings.value.rules.map((r) => r.id)).toEqual(["a", "b"]);
  });

  it("name the variable in every error, and refuse an id used in two of them", () => {
    const settings = parseSettings({
      RULES: [rule("same", "/a", 1)],
      RULES_AUTH: [rule("ok", "/b", 1), { ...rule("bad", "/c", 1), limit: 0 }],
      RULES_API: [rule("same", "/d", 1)],
      RULES_JSON: "[{",
    });
    expect(settings.ok ? [] : settings.errors).toEqual([
      'RULES_API[0] "same": field "id": duplicates RULES[0]; ids must be unique across RULES and RULES_*',
      'RULES_AUTH[1] "bad": field "limit": must be an integer from 1 to 1000000000; got 0',
      expect.stringMatching(/^RULES_JSON: is a string but not valid JSON/),
    ]);
  });

  it("are parsed once per isolate: the same variables give the same rule objects, a changed group a new parse", () => {
    const groups = { RULES: [rule("memo-a", "/a", 1)], RULES_X: [rule("memo-x", "/x", 1)] };
    const first = configurationFromEnv({ ...groups });
    expect(configurationFromEnv({ ...groups })).toBe(first);
    const changed = configurationFromEnv({ ...groups, RULES_X: [rule("memo-x", "/x", 2)] });
    expect(changed).not.toBe(first);
    expect(changed.settings.rules[1]?.limit).toBe(2);
    const added = configurationFromEnv({ ...groups, RULES_Y: [rule("memo-y", "/y", 1)] });
    expect(added.settings.rules.map((r) => r.id)).toEqual(["memo-a", "memo-x", "memo-y"]);
    expect(configurationFromEnv({ ...groups })).toBe(first);
  });

  it("costs the Worker's own env one comparison per request: one object, never read again", () => {
    const vars = { ...env, RULES_ONCE: [rule("once", "/once", 1)] };
    configurationFromEnv(vars);
    const keys = vi.spyOn(Object, "keys");
    try {
      for (let i = 0; i < 5; i++) configurationFromEnv(vars);
      expect(keys).not.toHaveBeenCalled();
    } finally {
      keys.mockRestore();
    }
  });
});
