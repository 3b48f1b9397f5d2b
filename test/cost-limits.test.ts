/**
 * Any limit that reaches a rule is at least the rule's `cost`: under it, no
 * request ever fits, and each 429's Retry-After only leads to another 429. A
 * limit reaches a rule four ways: an override's `limit`, an override's `tier`,
 * a tier of `TIERS`, and the tier a verified token's `tier_claim` names. Each
 * is checked where it comes in: the admin API refuses the override, the
 * configuration (and `npm run check-config`) refuses the tier, and the
 * client's object raises to the cost an override stored before the rule's
 * cost was raised, so its client is admitted once a period and told the truth.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { checkConfig } from "../src/config/check.ts";
import { parseSettings } from "../src/config/settings.ts";
import { limitOutOfRange, type Override } from "../src/core/overrides.ts";
import type { RuleCheck } from "../src/object/protocol.ts";
import { env } from "./support/env.ts";
import { from, limiter, uniqueIp } from "./support/limiter.ts";
import { expectErrorLogs } from "./support/logs.ts";
import { keySet, signingKey } from "./support/tokens.ts";

const TOKEN = "test-admin-token-cost-limits-7a2c";
const auth = { authorization: `Bearer ${TOKEN}` };

let rules = 0;
/** A rule of its own, whose requests each cost 10 of its 100 a minute. */
const costly = (cost = 10) => ({ id: `costly-${++rules}`, limit: 100, period: "1m", path: "/api/*", cost });

let jwks: string;
beforeAll(async () => {
  jwks = JSON.stringify(keySet(await signingKey("ES256")));
});

afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

describe("the configuration: a tier that gives a rule a limit below its cost is an error naming the tier, the rule and the field", () => {
  /** The variables for each way a tier of `TIERS` reaches a rule. */
  const ways: [string, (rule: { id: string }, limit: number) => Record<string, unknown>][] = [
    [
      "a tier of TIERS, which an override puts a client in",
      (rule, limit) => ({ TIERS: { cheap: { [rule.id]: limit } } }),
    ],
    [
      "the tier a verified token's tier_claim names",
      (rule, limit) => ({
        TIERS: { cheap: { [rule.id]: limit } },
        JWT: { issuer: "https://auth.example.test/", audience: "api", tier_claim: "plan" },
        JWT_JWKS: jwks,
      }),
    ],
  ];
  const below = (id: string) =>
    `TIERS.cheap.${id}: 9 is below the cost of RULES[0] "${id}" (field "cost": 10), so no request of a client in tier "cheap" could ever be admitted; make it at least 10`;

  it.each(ways)("%s: the Worker's settings refuse it", (_, vars) => {
    const rule = costly();
    const parsed = parseSettings({ RULES: [rule], ...vars(rule, 9) });
    expect(parsed.ok ? [] : parsed.errors).toEqual([below(rule.id)]);
  });

  it.each(ways)("%s: check-config reports it as an error", (_, vars) => {
    const rule = costly();
    const errors = checkConfig({ vars: { RULES: [rule], ...vars(rule, 9) } }).findings.filter(
      (f) => f.level === "error",
    );
    expect(errors).toEqual([{ level: "error", message: below(rule.id) }]);
  });

  it.each(ways)(
    "%s: the Worker leaves that limit out: the rule applies with its own limit, and the log says why",
    async (_, vars) => {
      const rule = costly();
      const send = limiter([rule], vars(rule, 9));
      const res = await send("/api/x", from(uniqueIp()));
      expect(res.status).toBe(200);
      expect(res.headers.get("ratelimit-policy")).toBe(`"${rule.id}";q=100;w=60`);
      expect(expectErrorLogs("invalid_config")).toEqual([
        expect.objectContaining({ level: "error", errors: [below(rule.id)] }),
      ]);
    },
  );

  it.each(ways)("%s: a limit equal to the cost is fine (one request a period)", (_, vars) => {
    const rule = costly();
    expect(parseSettings({ RULES: [rule], ...vars(rule, 10) }).ok).toBe(true);
    expect(
      checkConfig({ vars: { RULES: [rule], ...vars(rule, 10) } }).findings.filter((f) => f.level === "error"),
    ).toEqual([]);
  });

  it("check-config reports it beside another rule's errors, which stop the Worker's settings first", () => {
    const rule = costly();
    const found = checkConfig({
      vars: { RULES: [rule, { id: "broken", limit: 0, period: "1m" }], TIERS: { cheap: { [rule.id]: 9 } } },
    }).findings;
    expect(found).toEqual([
      { level: "error", message: 'RULES[1] "broken": field "limit": must be an integer from 1 to 1000000000; got 0' },
      { level: "error", message: below(rule.id) },
    ]);
  });
});

describe("the admin API: an override whose limit is below the rule's cost is a 400 naming the rule, the limit and the cost", () => {
  /** The Worker with one costly rule and a tier that gives it 20, whose overrides API is called with `call`. */
  function api() {
    const rule = costly();
    const send = limiter([rule], { ADMIN_TOKEN: TOKEN, TIERS: { fair: { [rule.id]: 20 } } });
    const call = async ([method, query, body, type]: Call) => {
      const res = await send(`/__ratelimit/overrides${query}`, {
        method,
        headers: { ...auth, "content-type": type ?? "application/json" },
        ...(body === undefined ? {} : { body }),
      });
      return { status: res.status, type: res.headers.get("content-type"), body: (await res.json()) as never };
    };
    return { rule, call };
  }
  type Call = [method: string, query: string, body?: string, type?: string];
  type Setting = { limit: number } | { tier: string };

  /** Each way the API takes an override, and how its errors name the override. */
  const routes: [string, (id: string, ip: string, setting: Setting) => Call, string][] = [
    ["PUT", (id, ip, setting) => ["PUT", `?rule=${id}&key=${ip}`, JSON.stringify(setting)], ""],
    [
      "an import in JSON",
      (id, ip, setting) => ["POST", "/import", JSON.stringify([{ rule: id, key: ip, ...setting }])],
      "item 1: ",
    ],
    [
      "an import in CSV",
      (id, ip, setting) => {
        const [[column, value]] = Object.entries(setting) as [[string, unknown]];
        return ["POST", "/import", `rule,key,${column}\n${id},${ip},${value}\n`, "text/csv"];
      },
      "item 1: ",
    ],
  ];
  const below = (id: string) =>
    `field "limit": 9 is below the cost of rule "${id}" (10), so no request of this client could ever be admitted; must be at least 10`;

  it.each(routes)("%s: refuses it, and nothing changes", async (_, request, item) => {
    const { rule, call } = api();
    const ip = uniqueIp();
    const res = await call(request(rule.id, ip, { limit: 9 }));
    expect(res.status).toBe(400);
    expect(res.type).toBe("application/problem+json");
    expect(res.body).toMatchObject({ type: "urn:edge-rate-limiter:invalid-override", errors: [item + below(rule.id)] });
    expect(await call(["GET", `?rule=${rule.id}&key=${ip}`])).toMatchObject({ body: { override: null } });
  });

  it.each(routes)(
    "%s: takes a limit equal to the cost, and a tier that gives at least the cost",
    async (_, request) => {
      const { rule, call } = api();
      expect((await call(request(rule.id, uniqueIp(), { limit: 10 }))).status).toBe(200);
      expect((await call(request(rule.id, uniqueIp(), { tier: "fair" }))).status).toBe(200);
    },
  );

  it("an override's tier: no tier can give a limit below the cost, so the Worker with one answers the 500 of an invalid configuration", async () => {
    const rule = costly();
    vi.spyOn(console, "error").mockImplementation(() => {});
    const send = limiter([rule], { ADMIN_TOKEN: TOKEN, TIERS: { cheap: { [rule.id]: 9 } } });
    const res = await send(`/__ratelimit/overrides?rule=${rule.id}&key=${uniqueIp()}`, {
      method: "PUT",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ tier: "cheap" }),
    });
    expect(res.status).toBe(500);
  });

  it.each([
    ["an override's limit", { kind: "limit", limit: 9 } as const, below("api")],
    [
      "an override's tier",
      { kind: "tier", tier: "cheap" } as const,
      'field "tier": "cheap" gives rule "api" a limit of 9, below its cost (10), so no request of this client could ever be admitted; must be at least 10',
    ],
  ])("the check the API makes names %s, whichever gives the limit", (_, setting, message) => {
    const rule = { id: "api", kind: "window", limit: 100, cost: 10, tiers: { cheap: 9, fair: 20 } } as const;
    expect(limitOutOfRange(setting, rule)).toBe(message);
    expect(limitOutOfRange({ kind: "limit", limit: 10 }, rule)).toBeNull();
    expect(limitOutOfRange({ kind: "tier", tier: "fair" }, rule)).toBeNull();
    expect(limitOutOfRange({ kind: "tier", tier: "unknown" }, rule)).toBeNull(); // the rule's own 100
  });
});

/**
 * A tier never brings such a limit to the object: the configuration that would is refused (above), whether
 * an override or a token's tier_claim puts the client in the tier. An override's own limit was checked
 * against the cost when it was set, but the cost may be raised later.
 */
describe("at runtime: an override stored before its rule's cost was raised admits one request a period, and Retry-After is true", () => {
  it("through the Worker: an override of 9 under cost 1, then a redeploy with cost 10", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.UTC(2032, 0, 1, 0, 0, 0);
    vi.setSystemTime(start);
    const before = costly(1);
    const after = { ...before, cost: 10 };
    const vars = { ADMIN_TOKEN: TOKEN };
    const client = uniqueIp();
    const set = await limiter([before], vars)(`/__ratelimit/overrides?rule=${before.id}&key=${client}`, {
      method: "PUT",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ limit: 9 }),
    });
    expect(set.status).toBe(200);
    const { keyHash } = (await set.json()) as { keyHash: string };
    const warnings = vi.spyOn(console, "warn").mockImplementation(() => {});
    const send = limiter([after], vars);
    const admitted = await send("/api/x", from(client));
    expect(admitted.status).toBe(200);
    expect(admitted.headers.get("ratelimit-policy")).toBe(`"${after.id}";q=10;w=60`);
    const refused = await send("/api/x", from(client));
    expect(refused.status).toBe(429);
    const retryAfterSeconds = Number(refused.headers.get("retry-after"));
    expect(retryAfterSeconds).toBeGreaterThan(0);
    vi.setSystemTime(start + (retryAfterSeconds - 1) * 1000);
    expect((await send("/api/x", from(client))).status).toBe(429);
    vi.setSystemTime(start + retryAfterSeconds * 1000);
    expect((await send("/api/x", from(client))).status).toBe(200); // what the Retry-After said
    const logged = warnings.mock.calls.map(([line]) => JSON.parse(String(line)));
    expect(logged.filter((l) => l.event === "override_below_cost")).toEqual([
      expect.objectContaining({
        level: "warn",
        rule: after.id,
        key: keyHash,
        override: "limit",
        limit: 9,
        cost: 10,
        applied: 10,
      }),
    ]);
  });

  /** Overrides the client's object may hold, each giving a rule of cost 10 a limit of 9. */
  const stored: [string, Partial<Override>][] = [
    ["an override's limit", { kind: "limit", limit: 9 }],
    ["an override's tier", { kind: "tier", tier: "cheap" }],
  ];
  const check: RuleCheck = {
    id: "below-cost",
    limit: 100,
    cost: 10,
    periodMs: 60_000,
    precision: 1,
    strict: false,
    enforce: true,
    tiers: { cheap: 9 },
  };

  it.each(stored)("in the object: %s of 9 under cost 10 is applied as 10", async (_, setting) => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.UTC(2032, 1, 1, 0, 0, 30);
    vi.setSystemTime(start);
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const stub = env.RATE_LIMITER.get(env.RATE_LIMITER.newUniqueId());
    const override = { expiresAtMs: null, note: "", updatedAtMs: 0, by: "test", ...setting } as Override;
    await stub.setOverride(check.id, override, 1);
    const first = await stub.check([check]);
    expect([first.allowed, first.verdicts[0]!.limit]).toEqual([true, 10]);
    const second = await stub.check([check]);
    expect(second.allowed).toBe(false);
    const retryAfterMs = second.verdicts[0]!.retryAfterMs;
    vi.setSystemTime(start + retryAfterMs - 1);
    expect((await stub.check([check])).allowed).toBe(false);
    vi.setSystemTime(start + retryAfterMs);
    expect((await stub.check([check])).allowed).toBe(true);
  });
});

describe("a concurrency rule's places from a tier or an override are within its range, 1 to 10000", () => {
  const conc = () => ({ id: `conc-${++rules}`, concurrency: 2, path: "/ai/*", key: ["header:x-k"] });
  const above = (id: string) =>
    `TIERS.pro.${id}: 20000 is above the most places RULES[0] "${id}" may give a client (field "concurrency": at most 10000), so it cannot be enforced as written; make it at most 10000`;

  it("a tier giving more: the Worker's settings refuse it", () => {
    const rule = conc();
    const parsed = parseSettings({ RULES: [rule], TIERS: { pro: { [rule.id]: 20_000 } } });
    expect(parsed.ok ? [] : parsed.errors).toEqual([above(rule.id)]);
  });

  it("a tier giving more: check-config reports it as an error", () => {
    const rule = conc();
    const found = checkConfig({ vars: { RULES: [rule], TIERS: { pro: { [rule.id]: 20_000 } } } }).findings;
    expect(found.filter((f) => f.level === "error")).toEqual([{ level: "error", message: above(rule.id) }]);
  });

  it("a tier giving exactly 10000 is fine", () => {
    const rule = conc();
    expect(parseSettings({ RULES: [rule], TIERS: { pro: { [rule.id]: 10_000 } } }).ok).toBe(true);
  });

  it.each([
    ["PUT", (id: string, key: string, limit: number) => ["PUT", `?rule=${id}&key=${key}`, JSON.stringify({ limit })]],
    [
      "an import in JSON",
      (id: string, key: string, limit: number) => ["POST", "/import", JSON.stringify([{ rule: id, key, limit }])],
    ],
  ] as const)("an override's limit above it through %s: a 400 naming the rule and the limit", async (_, call) => {
    const rule = conc();
    const send = limiter([rule], { ADMIN_TOKEN: TOKEN });
    const admin = async (limit: number) => {
      const [method, query, body] = call(rule.id, `header:x-k=${uniqueIp()}`, limit);
      const res = await send(`/__ratelimit/overrides${query}`, {
        method,
        headers: { ...auth, "content-type": "application/json" },
        body,
      });
      return { status: res.status, text: await res.text() };
    };
    const refused = await admin(100_000);
    expect(refused.status).toBe(400);
    expect(refused.text).toContain(
      `field \\"limit\\": 100000 is above the most places rule \\"${rule.id}\\" may give a client (10000); must be at most 10000`,
    );
    expect((await admin(10_000)).status).toBe(200);
  });
});
