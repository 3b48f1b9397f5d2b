/**
 * check-config knows the platform: what Cloudflare would refuse or do with
 * a configuration that the Worker's own parser cannot see.
 */
import { describe, expect, it } from "vitest";
import { checkConfig, type Finding } from "../src/config/check.ts";
import {
  environmentFindings,
  loopFindings,
  MAX_VARIABLE_BYTES,
  tableFindings,
  variableBytes,
  variableNameFindings,
  variableSizeFindings,
} from "../src/config/platform.ts";
import { VARIABLES } from "../src/config/variables.ts";

const rule = (i: number) => ({
  id: `rule-${i}`,
  path: `/api/v1/resource-${i}/*`,
  limit: 100,
  period: "1m",
  key: ["ip"],
});
const rules = (from: number, n: number) => Array.from({ length: n }, (_, i) => rule(from + i));
const levels = (findings: Finding[]) => findings.map((f) => f.level);

describe("variable names the Worker does not read", () => {
  it.each([
    ["IPV6_PREFX", "IPV6_PREFIX", "IPV6_PREFIX is unset, so its default applies"],
    ["RULE", "RULES", "its rules are not read"],
    ["rules", "RULES", "its rules are not read"],
    ["RULE_AUTH", "RULES_AUTH", "its rules are not read"],
    ["LIMITER_TIMEOUT", "LIMITER_TIMEOUT_MS", "LIMITER_TIMEOUT_MS is unset"],
    ["ORIGIN_SECRET_HEADR", "ORIGIN_SECRET_HEADER", "ORIGIN_SECRET_HEADER is unset"],
    ["ADMIN_PREFX", "ADMIN_PREFIX", "ADMIN_PREFIX is unset"],
  ])("%s is an error naming %s, what was meant, since that is unset", (name, meant, effect) => {
    const [finding] = variableNameFindings({ [name]: 1 });
    expect(finding?.level).toBe("error");
    expect(finding?.message).toContain(
      `vars.${name}: the limiter reads no variable of this name; did you mean ${meant}?`,
    );
    expect(finding?.message).toContain(effect);
  });

  it("is a warning when what was meant is set too, or nothing is near", () => {
    expect(variableNameFindings({ IPV6_PREFIX: 56, IPV6_PREFX: 48 })).toEqual([
      {
        level: "warning",
        message: expect.stringContaining(
          "vars.IPV6_PREFX: the limiter reads no variable of this name (did you mean IPV6_PREFIX?)",
        ),
      },
    ]);
    expect(variableNameFindings({ SENTRY_DSN: "x" })).toEqual([
      {
        level: "warning",
        message: expect.stringMatching(
          /^vars\.SENTRY_DSN: the limiter reads no variable of this name; variables it reads: RULES, /,
        ),
      },
    ]);
  });

  it.each([
    ["RULES-API", { RULES: [{ id: "x", limit: 1, period: "1m" }] }, "RULES_API"],
    ["AUTH_RULES", {}, "RULES_AUTH"],
    ["RULE", { RULES: [{ id: "x", limit: 1, period: "1m" }] }, null],
    ["LIMITS", {}, "RULES_LIMITS"],
  ])("%s holding rule tables is an error, whatever else is set: its rules are not read", (name, others, group) => {
    const findings = variableNameFindings({ ...others, [name]: [{ id: "login", limit: 5, period: "1m" }] });
    expect(findings).toEqual([
      {
        level: "error",
        message: `vars.${name}: holds rules, but the limiter reads rules only from RULES and RULES_<GROUP> (letters, digits and _ after RULES_): its rules are not read. ${group === null ? "Move them into RULES" : `Name it ${group}, or move them into RULES`}`,
      },
    ]);
    // As JSON text too, as a dashboard or `wrangler secret` would set it; as one table, or a table of them.
    const asText = variableNameFindings({ ...others, [name]: '[{"id":"login","limit":5,"period":"1m"}]' });
    expect(asText.map((f) => f.level)).toEqual(["error"]);
    const single = variableNameFindings({ ...others, [name]: { id: "login", limit: 5, period: "1m" } });
    expect(single.map((f) => f.level)).toEqual(["error"]);
    const nested = variableNameFindings({ ...others, [name]: { RULES: [{ id: "login", limit: 5, period: "1m" }] } });
    expect(nested.map((f) => f.level)).toEqual(["error"]);
  });

  it("knows every variable the Worker reads, and rule groups", () => {
    const every = Object.fromEntries(Object.keys(VARIABLES).map((name) => [name, ""]));
    expect(variableNameFindings({ ...every, RULES_AUTH: [], RULES_api_v2: [] })).toEqual([]);
  });
});

describe("Cloudflare's 5 KB per variable", () => {
  it("measures a table as its JSON, in bytes", () => {
    expect(variableBytes([{ id: "é" }])).toBe(JSON.stringify([{ id: "é" }]).length + 1);
    expect(variableBytes("ab")).toBe(2);
  });

  it("refuses a 9 KB RULES, with the bytes over and the way out", () => {
    const big = rules(0, 110);
    const bytes = variableBytes(big);
    expect(bytes).toBeGreaterThan(9 * 1024);
    expect(variableSizeFindings({ RULES: big })).toEqual([
      {
        level: "error",
        message: `vars.RULES: ${bytes} bytes as deployed, ${bytes - MAX_VARIABLE_BYTES} over Cloudflare's limit of 5120 bytes (5 KB) per variable; wrangler deploy would be refused. Split the rules across variables named RULES_<GROUP> ([[vars.RULES_AUTH]], [[vars.RULES_API]], …), at least ${Math.ceil(bytes / MAX_VARIABLE_BYTES)}; the Worker reads them all as one list`,
      },
    ]);
  });

  it("accepts a variable of exactly 5120 bytes and refuses one of 5121, of any name", () => {
    expect(variableSizeFindings({ TIERS: "x".repeat(5120) })).toEqual([]);
    expect(levels(variableSizeFindings({ TIERS: "x".repeat(5121) }))).toEqual(["error"]);
  });

  it("accepts 300 rules split across groups of under 5 KB each, and reads them all", () => {
    const vars: Record<string, unknown> = {};
    for (let g = 0; g < 10; g++) vars[`RULES_GROUP_${g}`] = rules(g * 30, 30);
    for (const value of Object.values(vars)) expect(variableBytes(value)).toBeLessThanOrEqual(MAX_VARIABLE_BYTES);
    const report = checkConfig({ vars: { ...vars, ORIGIN_URL: "https://origin.example.com" } });
    expect(report.rules).toBe(300);
    expect(report.findings.filter((f) => f.level === "error")).toEqual([]);
  });

  it("warns past the Free plan's 64 variables", () => {
    const vars = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`RULES_G${i}`, []]));
    expect(variableSizeFindings(vars)).toEqual([
      { level: "warning", message: expect.stringContaining("vars: 65 variables; the Free plan allows 64") },
    ]);
  });
});

describe("a deployment that would forward to itself", () => {
  const route = { routes: [{ pattern: "api.example.com/*", zone_name: "example.com" }] };
  it.each([
    [
      "no ORIGIN_URL, no route, workers_dev unset",
      {},
      {},
      ["ORIGIN_URL: unset, and no route", "workers_dev: on (the default without routes)"],
    ],
    ["no ORIGIN_URL, no route, workers_dev off", {}, { workers_dev: false }, ["ORIGIN_URL: unset, and no route"]],
    ["no ORIGIN_URL, a route, workers_dev unset (off with routes)", {}, route, []],
    [
      "no ORIGIN_URL, a route, workers_dev on",
      {},
      { ...route, workers_dev: true },
      ["workers_dev: true, and ORIGIN_URL unset"],
    ],
    ["an empty ORIGIN_URL", { ORIGIN_URL: "" }, route, []],
    ["ORIGIN_URL set, workers_dev on", { ORIGIN_URL: "https://o.example.com" }, { workers_dev: true }, []],
  ])("%s", (_, vars, reach, expected) => {
    const found = loopFindings(vars, reach);
    expect(found.map((f) => f.level)).toEqual(expected.map(() => "danger"));
    for (const [i, text] of expected.entries()) expect(found[i]?.message).toContain(text);
  });
});

describe("the file itself", () => {
  const known = ["name", "main", "vars", "routes", "durable_objects", "migrations", "env"];
  it("names a table wrangler does not know, with the one meant", () => {
    expect(tableFindings(["name", "var", "durable_object", "zzz_custom"], known)).toEqual([
      {
        level: "error",
        message: '"var": not a field wrangler knows; did you mean "vars"? It is ignored, with everything in it',
      },
      {
        level: "error",
        message:
          '"durable_object": not a field wrangler knows; did you mean "durable_objects"? It is ignored, with everything in it',
      },
      { level: "error", message: '"zzz_custom": not a field wrangler knows It is ignored, with everything in it' },
    ]);
  });

  it("refuses an --env the file does not define, naming those it does", () => {
    expect(environmentFindings("production", [])).toEqual([
      { level: "error", message: "--env production: the file has no [env.production] (environments: none)" },
    ]);
    expect(environmentFindings("prod", ["production", "staging"])[0]?.message).toBe(
      "--env prod: the file has no [env.prod] (environments: production, staging)",
    );
    expect(environmentFindings("stagin", ["production", "staging"])[0]?.message).toContain("did you mean staging?");
    expect(environmentFindings("staging", ["production", "staging"])).toEqual([]);
    expect(environmentFindings(undefined, [])).toEqual([]);
  });
});
