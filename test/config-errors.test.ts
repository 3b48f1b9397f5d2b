/**
 * One list of configuration errors: what `npm run check-config` reports is
 * what the Worker logs (`invalid_config`) and what its admin API answers
 * `500` with, error for error, in the same order, because both come from
 * one function. Each row is a configuration broken in more than one place,
 * where a partial list used to leave some out: a tier's error beside an
 * invalid rule, the origin's settings beside the rules', a secret's header
 * that a valid rule counts clients by beside an invalid one.
 */
import { describe, expect, it } from "vitest";
import { checkConfig } from "../src/config/check.ts";
import { isVariable } from "../src/config/variables.ts";
import { env } from "./support/env.ts";
import { from, limiter, originUrl, uniqueIp } from "./support/limiter.ts";
import { expectErrorLogs } from "./support/logs.ts";

const TOKEN = "test-admin-token-config-errors-4d1e";
const SECRET = "s3cret-value-that-is-long-enough";
const valid = (id: string, fields: Record<string, unknown> = {}) => ({ id, limit: 10, period: "1m", ...fields });
const broken = (id: string) => ({ id, limit: 0, period: "1m" });

/** Each broken configuration: its rules (`RULES`), its other variables, and how many errors it has. */
const CONFIGS: [string, unknown[], Record<string, unknown>, number][] = [
  [
    "an invalid rule, and a tier below a valid rule's cost (the issue's)",
    [broken("bad"), valid("api", { cost: 5 })],
    { TIERS: { small: { api: 2 } } },
    2,
  ],
  [
    "an invalid rule, and a tier above a concurrency rule's most places",
    [broken("bad"), { id: "streams", concurrency: 5 }],
    { TIERS: { big: { streams: 20_000 } } },
    2,
  ],
  ["an invalid rule, and TIERS that is not JSON", [broken("bad"), valid("api")], { TIERS: "{" }, 2],
  [
    "an invalid rule, and the origin's URL, timeout and IPv6 prefix",
    [broken("bad")],
    { ORIGIN_URL: "https://origin.example.com/api", LIMITER_TIMEOUT_MS: 0, IPV6_PREFIX: 200 },
    4,
  ],
  [
    "an invalid rule, and a secret's header that a valid rule counts clients by",
    [broken("bad"), valid("per-key", { key: ["header:x-tenant"] })],
    { ORIGIN_SECRET: SECRET, ORIGIN_SECRET_HEADER: "X-Tenant" },
    2,
  ],
  [
    "an invalid rule, and a secret too short in a standard header",
    [broken("bad")],
    { ORIGIN_SECRET: "short", ORIGIN_SECRET_HEADER: "Origin" },
    3,
  ],
  [
    "duplicate ids across RULES and RULES_AUTH, and a tier below the cost of a rule in a group",
    [valid("login")],
    { RULES_AUTH: [valid("login"), valid("signup", { cost: 3 })], TIERS: { tiny: { signup: 1 } } },
    2,
  ],
  [
    "RULES that is not JSON, and a tier below the cost of a rule in a group",
    "[{" as unknown as unknown[],
    { RULES_API: [valid("api", { cost: 4 })], TIERS: { tiny: { api: 3 } } },
    2,
  ],
  [
    "an invalid rule, and an invalid JWT table, with its key set given",
    [broken("bad"), valid("per-user", { key: ["jwt:sub|ip"] })],
    { JWT: { audience: "api", colour: "blue" }, JWT_JWKS: JSON.stringify({ keys: [] }) },
    3,
  ],
  [
    "every other variable invalid at once",
    [valid("api")],
    { TRUSTED_IP_HEADER: "Not A Header", STATS_RAW_KEYS: "yes", LEGACY_HEADERS: 1, ADMIN_PREFIX: "/ops/" },
    4,
  ],
];

/** The variables a Worker under `limiter(rules, vars)` runs with, as check-config is given them. */
const variablesOf = (rules: unknown, vars: Record<string, unknown>): Record<string, unknown> => ({
  ...Object.fromEntries(Object.entries(env).filter(([name]) => isVariable(name))),
  ORIGIN_URL: originUrl(),
  ...vars,
  RULES: rules,
});

const checkerErrors = (vars: Record<string, unknown>): string[] =>
  checkConfig({ vars })
    .findings.filter((f) => f.level === "error")
    .map((f) => f.message);

describe("the Worker reports every error check-config reports, in the same order", () => {
  it.each(CONFIGS)("%s: check-config reports each of its $3 errors", (_, rules, vars, count) => {
    expect(checkerErrors(variablesOf(rules, vars))).toHaveLength(count);
  });

  it.each(CONFIGS)("%s: in its invalid_config log line", async (_, rules, vars) => {
    const expected = checkerErrors(variablesOf(rules, vars));
    const res = await limiter(rules, vars as never)("/api/x", from(uniqueIp()));
    await res.arrayBuffer();
    const logged = expectErrorLogs("invalid_config");
    expect(logged.length).toBeGreaterThan(0);
    for (const line of logged) expect(line.errors).toEqual(expected);
  });

  it.each(CONFIGS)("%s: in its admin API's 500", async (_, rules, vars) => {
    const expected = checkerErrors(variablesOf(rules, vars));
    const res = await limiter(rules, { ...vars, ADMIN_TOKEN: TOKEN } as never)("/__ratelimit/rules", {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(res.status).toBe(500);
    expect(await res.json()).toMatchObject({ type: "urn:edge-rate-limiter:invalid-config", errors: expected });
    expectErrorLogs("invalid_config");
  });
});
