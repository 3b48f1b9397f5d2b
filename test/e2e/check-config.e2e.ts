/**
 * `npm run check-config` as a user runs it, on files with the mistakes a
 * deploy would trip on, and on a 300-rule configuration that must deploy:
 * check-config accepts it, `wrangler deploy --dry-run` builds it, and every
 * variable stays under Cloudflare's 5 KB.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-check-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The shipped file's head: bindings and migrations, with the Worker's entry made absolute. */
const HEAD = `name = "checked"
main = ${JSON.stringify(join(root, "src/index.ts"))}
compatibility_date = "2026-11-01"
compatibility_flags = ["enable_request_signal"]
workers_dev = false
routes = [{ pattern = "api.example.com/*", zone_name = "example.com" }]

[[durable_objects.bindings]]
name = "RATE_LIMITER"
class_name = "RateLimiter"

[[durable_objects.bindings]]
name = "OVERRIDES"
class_name = "OverrideRegistry"

[[durable_objects.bindings]]
name = "STATS"
class_name = "StatsObject"

[[migrations]]
tag = "v1"
new_sqlite_classes = ["RateLimiter", "OverrideRegistry", "StatsObject"]
`;

const ruleLine = (i: number) =>
  `  { id = "rule-${i}", path = "/api/v1/resource-${i}/*", limit = ${100 + i}, period = "1m", key = ["ip"] },`;

function write(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `${HEAD}\n${body}`);
  return path;
}

function checkConfig(...args: string[]): { status: number | null; lines: string[] } {
  const run = spawnSync(process.execPath, [join(root, "tools/check-config.ts"), ...args], { encoding: "utf8" });
  return { status: run.status, lines: `${run.stdout}${run.stderr}`.trim().split("\n") };
}

describe("check-config on what a deploy would trip on", () => {
  it("names a misspelled variable, with the one meant", () => {
    const { status, lines } = checkConfig(
      write("typo.toml", `[vars]\nIPV6_PREFX = 48\nRULES = [\n${ruleLine(0)}\n]\n`),
    );
    expect(status).toBe(1);
    expect(lines).toContain(
      "error: vars.IPV6_PREFX: the limiter reads no variable of this name; did you mean IPV6_PREFIX? As it is, IPV6_PREFIX is unset, so its default applies",
    );
  });

  it("names a singular [[vars.RULE]], whose rules would all vanish", () => {
    const { status, lines } = checkConfig(
      write("singular.toml", `[[vars.RULE]]\nid = "login"\npath = "/login"\nlimit = 5\nperiod = "1m"\n`),
    );
    expect(status).toBe(1);
    expect(lines).toContain(
      "error: vars.RULE: the limiter reads no variable of this name; did you mean RULES? As it is, its rules are not read",
    );
    expect(lines.at(-1)).toMatch(/: 0 rules, 1 error/);
  });

  it("names an --env the file does not have", () => {
    const { status, lines } = checkConfig(
      write("no-env.toml", `[vars]\nRULES = [\n${ruleLine(0)}\n]\n`),
      "--env",
      "production",
    );
    expect(status).toBe(1);
    expect(lines[0]).toBe("error: --env production: the file has no [env.production] (environments: none)");
  });

  it("names a table wrangler does not know", () => {
    const { status, lines } = checkConfig(write("table.toml", `[var]\nORIGIN_URL = "https://o.example.com"\n`));
    expect(status).toBe(1);
    expect(lines).toContain(
      'error: "var": not a field wrangler knows; did you mean "vars"? It is ignored, with everything in it',
    );
  });

  it("refuses a 9 KB RULES, with the bytes over and the way out", () => {
    const rules = Array.from({ length: 110 }, (_, i) => ruleLine(i)).join("\n");
    const { status, lines } = checkConfig(write("big.toml", `[vars]\nRULES = [\n${rules}\n]\n`));
    expect(status).toBe(1);
    const finding = lines.find((line) => line.startsWith("error: vars.RULES: "));
    expect(finding).toMatch(
      /^error: vars\.RULES: (9\d{3}|1\d{4}) bytes as deployed, \d+ over Cloudflare's limit of 5120 bytes \(5 KB\) per variable; wrangler deploy would be refused\. Split the rules across variables named RULES_<GROUP>/,
    );
  });
});

describe("300 rules, split across RULES_<GROUP> variables", () => {
  const groups = Array.from({ length: 10 }, (_, g) => {
    const rules = Array.from({ length: 30 }, (_, i) => ruleLine(g * 30 + i)).join("\n");
    return `RULES_GROUP_${g} = [\n${rules}\n]`;
  });
  const path = write("300-rules.toml", `[vars]\n${groups.join("\n")}\n`);

  it("pass check-config with no error", () => {
    const { status, lines } = checkConfig(path);
    expect(lines.filter((line) => line.startsWith("error"))).toEqual([]);
    expect(lines.filter((line) => line.includes("bytes as deployed"))).toEqual([]);
    expect(status).toBe(0);
    expect(lines.at(-1)).toMatch(/: 300 rules, 0 errors/);
  });

  it("build with wrangler deploy --dry-run, every variable under 5 KB", () => {
    const out = join(dir, "dist");
    const printed = execFileSync(
      process.execPath,
      [join(root, "node_modules/wrangler/bin/wrangler.js"), "deploy", "--dry-run", "--outdir", out, "--config", path],
      { encoding: "utf8", env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1" } },
    );
    expect(printed).toContain("--dry-run: exiting now.");
    const sizes = [...printed.matchAll(/env\.(RULES_GROUP_\d+) \(/g)].map((m) => m[1]);
    expect(sizes).toHaveLength(10);
  });
});
