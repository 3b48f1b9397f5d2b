/**
 * No deploy goes out with a configuration error: wrangler runs the shipped
 * wrangler.toml's `[build] command` (tools/build-check.mjs) before every
 * deploy, and it stops one whose file has an error in any environment,
 * printing check-config's report. Each way of deploying is run as a user
 * runs it, in a copy of the project, with `--dry-run` (which builds as a
 * deploy does, and stops before uploading). `wrangler dev` runs the same
 * command, which lets it start: a configuration broken anyway runs what of
 * it is valid (test/invalid-config.test.ts has the rest).
 */
import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, inject, it } from "vitest";
import { startWrangler } from "./support/wrangler.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const SHIPPED = readFileSync(join(ROOT, "wrangler.toml"), "utf8");
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** A copy of the project as a user has it, with `wrangler.toml` as given. */
function project(wranglerToml: string): string {
  const dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-deploy-"));
  dirs.push(dir);
  for (const linked of ["src", "tools", "node_modules"]) symlinkSync(join(ROOT, linked), join(dir, linked));
  for (const copied of ["package.json", "tsconfig.json"]) copyFileSync(join(ROOT, copied), join(dir, copied));
  writeFileSync(join(dir, "wrangler.toml"), wranglerToml);
  return dir;
}

/** A command run in `dir` as a user's shell runs it; its exit status and everything it printed. */
function run(dir: string, command: string, args: string[]): { status: number | null; output: string } {
  const env: NodeJS.ProcessEnv = { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", FORCE_COLOR: "0" };
  delete env.WRANGLER_COMMAND;
  const result: SpawnSyncReturns<string> = spawnSync(command, args, { cwd: dir, env, encoding: "utf8" });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

/** Every way of deploying, each with --dry-run and its own output directory. */
const WAYS: [string, string, (out: string) => string[]][] = [
  ["npx wrangler deploy", "npx", (out) => ["wrangler", "deploy", "--dry-run", "--outdir", out]],
  ["npm run deploy", "npm", (out) => ["run", "deploy", "--", "--dry-run", "--outdir", out]],
  ["npx wrangler versions upload", "npx", (out) => ["wrangler", "versions", "upload", "--dry-run", "--outdir", out]],
];

const LOGIN_LIMIT = /^limit = 5$/m;
const LOGIN_ERROR = 'error: RULES[1] "login": field "limit": must be an integer from 1 to 1000000000; got 0';

describe("a deploy refuses a configuration with an error, printing check-config's errors", () => {
  const broken = SHIPPED.replace(LOGIN_LIMIT, "limit = 0");

  it("breaks the shipped file's login rule", () => {
    expect(broken).not.toBe(SHIPPED);
  });

  it.each(WAYS)("%s", (_, command, args) => {
    const dir = project(broken);
    const out = join(dir, "out");
    const { status, output } = run(dir, command, args(out));
    expect(status, output).not.toBe(0);
    expect(output).toContain(LOGIN_ERROR);
    expect(output).toContain("check-config: not deploying: wrangler.toml has errors (the top level)");
    expect(output).not.toContain("--dry-run: exiting now.");
    expect(existsSync(out)).toBe(false);
  });

  it.each([
    ["wrangler deploy -c production.toml", ["wrangler", "deploy", "-c", "production.toml"]],
    ["wrangler deploy --config=production.toml", ["wrangler", "deploy", "--config=production.toml"]],
    ["wrangler deploy --c production.toml", ["wrangler", "deploy", "--c", "production.toml"]],
    [
      "wrangler versions upload --config production.toml",
      ["wrangler", "versions", "upload", "--config", "production.toml"],
    ],
  ])("checks the file wrangler is given, not wrangler.toml: a broken copy under another name, %s", (_, args) => {
    // A copy keeps the shipped `[build] command`, which names no file: the check reads wrangler's own command line.
    const dir = project(SHIPPED);
    writeFileSync(join(dir, "production.toml"), broken);
    const out = join(dir, "out");
    const { status, output } = run(dir, "npx", [...args, "--dry-run", "--outdir", out]);
    expect(status, output).not.toBe(0);
    expect(output).toContain(LOGIN_ERROR);
    expect(output).toContain("check-config: not deploying: production.toml has errors (the top level)");
    expect(existsSync(out)).toBe(false);
  });

  it.each([
    ["--cwd <project> -c production.toml", (dir: string) => ["--cwd", dir, "-c", "production.toml"], "production.toml"],
    ["--cwd=<project> and wrangler.toml", (dir: string) => [`--cwd=${dir}`], "wrangler.toml"],
  ])(
    "checks the project's file when wrangler runs from elsewhere, %s, not a valid decoy where the shell is",
    (_, flags, name) => {
      const dir = project(SHIPPED);
      writeFileSync(join(dir, name), broken);
      // Where the shell is: valid files of both names, which wrangler does not read.
      const elsewhere = mkdtempSync(join(tmpdir(), "edge-rate-limiter-elsewhere-"));
      dirs.push(elsewhere);
      for (const decoy of ["wrangler.toml", "production.toml"]) writeFileSync(join(elsewhere, decoy), SHIPPED);
      const out = join(dir, "out");
      const wrangler = join(ROOT, "node_modules", ".bin", "wrangler");
      const { status, output } = run(elsewhere, wrangler, ["deploy", ...flags(dir), "--dry-run", "--outdir", out]);
      expect(status, output).not.toBe(0);
      expect(output).toContain(LOGIN_ERROR);
      expect(existsSync(out)).toBe(false);
    },
  );

  it.each([
    ["a wrangler.json beside wrangler.toml, which wrangler prefers", "wrangler.json"],
    ["a wrangler.jsonc beside wrangler.toml, which wrangler prefers", "wrangler.jsonc"],
  ])("checks the file wrangler reads when it is given none: %s", (_, name) => {
    const dir = project(SHIPPED);
    const json = {
      name: "edge-rate-limiter",
      main: "src/index.ts",
      compatibility_date: "2026-11-01",
      build: { command: "node tools/build-check.mjs" },
      vars: { ORIGIN_URL: "https://origin.example.com", RULES: [{ id: "login", limit: 0, period: "1m" }] },
    };
    // A .jsonc may have comments.
    const comment = name.endsWith(".jsonc") ? `// ${name}\n` : "";
    writeFileSync(join(dir, name), `${comment}${JSON.stringify(json, null, 2)}`);
    const out = join(dir, "out");
    const { status, output } = run(dir, "npx", ["wrangler", "deploy", "--dry-run", "--outdir", out]);
    expect(status, output).not.toBe(0);
    expect(output).toContain('error: RULES[0] "login": field "limit"');
    expect(output).toContain(`check-config: not deploying: ${name} has errors`);
    expect(existsSync(out)).toBe(false);
  });

  it("checks the file a redirect names (.wrangler/deploy/config.json, as the Cloudflare Vite plugin writes it)", () => {
    const dir = project(SHIPPED);
    writeFileSync(join(dir, "production.toml"), broken);
    mkdirSync(join(dir, ".wrangler", "deploy"), { recursive: true });
    writeFileSync(
      join(dir, ".wrangler", "deploy", "config.json"),
      JSON.stringify({ configPath: "../../production.toml" }),
    );
    const out = join(dir, "out");
    const { status, output } = run(dir, "npx", ["wrangler", "deploy", "--dry-run", "--outdir", out]);
    expect(status, output).not.toBe(0);
    expect(output).toContain("check-config: not deploying: production.toml has errors (the top level)");
    expect(existsSync(out)).toBe(false);
  });

  it("checks a file the build command names as well as the one wrangler is given", () => {
    const named = SHIPPED.replace(
      'command = "node tools/build-check.mjs"',
      'command = "node tools/build-check.mjs wrangler.toml"',
    );
    expect(named).not.toBe(SHIPPED);
    const dir = project(named);
    writeFileSync(join(dir, "production.toml"), named.replace(LOGIN_LIMIT, "limit = 0"));
    const { status, output } = run(dir, "npx", [
      "wrangler",
      "deploy",
      "-c",
      "production.toml",
      "--dry-run",
      "--outdir",
      join(dir, "out"),
    ]);
    expect(status, output).not.toBe(0);
    expect(output).toContain("wrangler.toml: 3 rules, 0 errors");
    expect(output).toContain("check-config: not deploying: production.toml has errors (the top level)");
  });

  it("names an error in an environment other than the top level, whichever is deployed", () => {
    const bindings = ["RATE_LIMITER RateLimiter", "OVERRIDES OverrideRegistry", "STATS StatsObject"].map((pair) => {
      const [name, className] = pair.split(" ");
      return `[[env.staging.durable_objects.bindings]]\nname = "${name}"\nclass_name = "${className}"\n`;
    });
    const staging = `${SHIPPED}\n${bindings.join("\n")}\n[env.staging.vars]\nRULES = [{ id = "typo", limit = 10, period = "1 minute" }]\n`;
    for (const env of [[], ["--env", "staging"]]) {
      const dir = project(staging);
      const { status, output } = run(dir, "npx", [
        "wrangler",
        "deploy",
        "--dry-run",
        "--outdir",
        join(dir, "out"),
        ...env,
      ]);
      expect(status, output).not.toBe(0);
      expect(output).toContain('error: RULES[0] "typo": field "period"');
      expect(output).toContain("wrangler.toml [env.staging]: 1 rule, 1 error");
      expect(output).toContain("check-config: not deploying: wrangler.toml has errors ([env.staging])");
    }
  });
});

describe("warnings do not stop a deploy", () => {
  it("builds the shipped file, whose DANGER and a rule's warning are printed", () => {
    const warned = SHIPPED.replace(/^period = "1h"$/m, "period = 0.5");
    expect(warned).not.toBe(SHIPPED);
    const dir = project(warned);
    const { status, output } = run(dir, "npx", ["wrangler", "deploy", "--dry-run", "--outdir", join(dir, "out")]);
    expect(status, output).toBe(0);
    expect(output).toContain("DANGER: ORIGIN_URL: unset, and no route");
    expect(output).toContain('warning: RULES[2] "api-per-key": field "period": 0.5 is under 1 second');
    expect(output).toContain("wrangler.toml: 3 rules, 0 errors, 2 warnings (1 DANGER) - OK");
    expect(output).toContain("--dry-run: exiting now.");
  });
});

describe("wrangler dev runs the same [build] command, which does not stop it", () => {
  it("starts on a file with an error: the broken rule is left out, the valid ones apply, and the error is logged", async () => {
    const dir = project(SHIPPED.replace(LOGIN_LIMIT, "limit = 0"));
    const logFile = join(dir, "wrangler-dev.log");
    const worker = await startWrangler({
      configPath: join(dir, "wrangler.toml"),
      entryPath: join(ROOT, "src/index.ts"),
      vars: { ORIGIN_URL: inject("e2eOriginUrl") },
      persistTo: join(dir, "state"),
      logFile,
    });
    try {
      const hits = async (tag: string) =>
        ((await (await fetch(`${inject("e2eOriginUrl")}/__e2e/hits/${tag}`)).json()) as { hits: number }).hits;
      const login: number[] = [];
      for (let i = 0; i < 7; i++) {
        const res = await fetch(`${worker.url}/login`, { method: "POST", headers: { "x-test-tag": "dev-login" } });
        await res.arrayBuffer();
        login.push(res.status);
      }
      expect(login).toEqual([200, 200, 200, 200, 200, 200, 200]);
      expect(await hits("dev-login")).toBe(7);
      const api = await fetch(`${worker.url}/api/hello`);
      await api.arrayBuffer();
      expect(api.status).toBe(200);
      expect(api.headers.get("ratelimit-policy")).toBe('"api-per-ip";q=100;w=60, "api-per-key";q=1000;w=3600');
    } finally {
      await worker.stop();
    }
    const log = readFileSync(logFile, "utf8");
    expect(log).toContain("[custom build] Running: node tools/build-check.mjs");
    expect(log).not.toContain("not deploying");
    const lines = log.split("\n").filter((line) => line.includes('"event":"invalid_config"'));
    // At once, then at most once per 10 s: far fewer lines than the 8 requests.
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.length).toBeLessThan(8);
    expect(lines[0]).toContain(JSON.stringify(LOGIN_ERROR.slice("error: ".length)).slice(1, -1));
  });
});
