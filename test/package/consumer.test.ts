/**
 * The package as a user installs it: `npm pack`, the tarball installed into
 * a stock Workers project (test/package/consumer: its own package.json, a
 * stock tsconfig with no special flags, a wrangler.toml), whose Worker is
 * the library example of docs/library.md, taken from the page itself; the
 * README's minimal example is beside it. The project type-checks with `tsc`,
 * and runs the complete example under `wrangler dev`.
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningWorker, startWrangler } from "../e2e/support/wrangler.ts";
import { blocksOf } from "../support/markdown.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const ADMIN_TOKEN = "consumer-test-token";

/** The `ts` block after a `<!-- example: <name> … -->` comment of a page. */
function example(page: string, name: string): string {
  const block = blocksOf(readFileSync(join(root, page), "utf8")).find(
    (b) => b.lang === "ts" && b.marker?.split(" ")[1] === name,
  );
  if (!block) throw new Error(`${page}: no \`\`\`ts block after <!-- example: ${name} … -->`);
  return block.text;
}

/** npm, as `npm run` gave it to this process, run with this Node (22, from the `node` devDependency). */
function npm(args: string[], cwd: string): string {
  const cli = process.env.npm_execpath;
  const [command, prefix] = cli ? [process.execPath, [cli]] : ["npm", []];
  return execFileSync(command, [...prefix, ...args], { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

let dir: string;
let app: string;
let packed: string[];
let manifest: Record<string, unknown>;
let licence: string;
let worker: RunningWorker;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-package-"));
  // `prepack` builds dist/ and writes the manifest a user installs; its output comes before `--json`'s report.
  const printed = npm(["pack", "--json", "--pack-destination", dir], root);
  const report = JSON.parse(printed.slice(printed.lastIndexOf("\n[\n") + 1)) as {
    filename: string;
    files: { path: string }[];
  }[];
  packed = report[0]!.files.map((file) => file.path);
  manifest = JSON.parse(
    execFileSync("tar", ["-xOzf", join(dir, report[0]!.filename), "package/package.json"], { encoding: "utf8" }),
  ) as Record<string, unknown>;
  licence = packed.includes("LICENSE")
    ? execFileSync("tar", ["-xOzf", join(dir, report[0]!.filename), "package/LICENSE"], { encoding: "utf8" })
    : "";
  app = join(dir, "consumer");
  cpSync(join(root, "test/package/consumer"), app, { recursive: true });
  mkdirSync(join(app, "src"));
  writeFileSync(join(app, "src/index.ts"), example("docs/library.md", "library"));
  // Type-checked with the rest (tsc), never run: the README's few lines must compile as they are.
  writeFileSync(join(app, "src/minimal.ts"), example("README.md", "library-minimal"));
  npm(["install", "--prefer-offline", "--no-audit", "--no-fund", join(dir, report[0]!.filename)], app);
  worker = await startWrangler({
    configPath: join(app, "wrangler.toml"),
    entryPath: join(app, "src/index.ts"),
    vars: { ADMIN_TOKEN },
    persistTo: join(dir, "state"),
    logFile: join(dir, "wrangler-dev.log"),
  });
});

afterAll(async () => {
  await worker?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("the packed package", () => {
  it("ships the compiled library and its types, and no tests, tools, benchmarks or docs", () => {
    expect(packed).toContain("dist/lib.js");
    expect(packed).toContain("dist/lib.d.ts");
    expect(packed).toContain("dist/index.js");
    const stray = packed.filter((path) => !/^(dist\/.+\.(js|d\.ts)|package\.json|README\.md|LICENSE)$/.test(path));
    expect(stray).toEqual([]);
    expect(packed.filter((path) => /(^|\/)(test|tools|bench|docs)\//.test(path) || path.endsWith(".png"))).toEqual([]);
  });

  it("ships the MIT licence: the LICENSE file, and the license field npm and licence checkers read", () => {
    expect(packed).toContain("LICENSE");
    expect(licence).toMatch(/^MIT License\n\nCopyright \(c\) 2026 The edge-rate-limiter authors\n/);
    expect(licence).toContain('THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND');
    expect(manifest.license).toBe("MIT");
  });

  it("ships a manifest without the repository's own scripts and dev dependencies, and leaves the repository's as it was", () => {
    expect(Object.keys(manifest)).not.toContain("scripts");
    expect(Object.keys(manifest)).not.toContain("devDependencies");
    expect(manifest).toMatchObject({
      peerDependencies: { hono: expect.any(String) },
      dependencies: { jose: expect.any(String) },
    });
    const own = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts?: Record<string, string> };
    expect(own.scripts?.prepare).toBeDefined();
  });

  it("type-checks in a stock Workers project with tsc, with docs/library.md's example and the README's", () => {
    const tsc = join(app, "node_modules/typescript/bin/tsc");
    // execFileSync throws with tsc's output on any error.
    expect(execFileSync(process.execPath, [tsc, "-p", app], { encoding: "utf8" })).toBe("");
  });
});

describe("docs/library.md's example, installed from the tarball and run by wrangler dev", () => {
  const post = (path: string, ip: string) =>
    fetch(`${worker.url}${path}`, { method: "POST", headers: { "cf-connecting-ip": ip } });
  const get = (path: string, headers: Record<string, string>) => fetch(`${worker.url}${path}`, { headers });

  it("admits 5 logins a minute per client, then answers 429 problem+json with Retry-After and the headers", async () => {
    for (let i = 1; i <= 5; i++) {
      const admitted = await post("/login", "198.51.100.1");
      expect(admitted.status).toBe(200);
      expect(await admitted.text()).toBe("welcome");
      expect(admitted.headers.get("ratelimit-policy")).toBe('"login";q=5;w=60');
      expect(admitted.headers.get("ratelimit")).toMatch(new RegExp(`^"login";r=${5 - i};t=\\d+$`));
    }
    const refused = await post("/login", "198.51.100.1");
    expect(refused.status).toBe(429);
    expect(refused.headers.get("content-type")).toBe("application/problem+json");
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(await refused.json()).toMatchObject({ status: 429, "violated-policies": ["login"] });
    // Another client is counted apart.
    expect((await post("/login", "198.51.100.2")).status).toBe(200);
  });

  it("counts by the user the app's own middleware found, skips health checks, and answers refusals in the app's format", async () => {
    const ips = (i: number) => `203.0.113.${(i % 200) + 1}`;
    for (let i = 0; i < 100; i++) {
      const res = await get("/api/orders", { "x-user": "ann", "cf-connecting-ip": ips(i) });
      expect(res.status).toBe(200);
    }
    const refused = await get("/api/orders", { "x-user": "ann", "cf-connecting-ip": ips(100) });
    expect(refused.status).toBe(429);
    const body = (await refused.json()) as { error: string; retryAfterSeconds: number };
    expect(body.error).toBe("slow down");
    expect(refused.headers.get("retry-after")).toBe(String(body.retryAfterSeconds));
    // Another user from the same addresses is not refused; health checks are never counted or marked.
    expect((await get("/api/orders", { "x-user": "bob", "cf-connecting-ip": ips(0) })).status).toBe(200);
    const health = await get("/api/health", { "x-user": "ann", "cf-connecting-ip": ips(0) });
    expect(health.status).toBe(200);
    expect(health.headers.has("ratelimit")).toBe(false);
  });

  it("serves the admin API with the middlewares' rules: an override raises one client's limit", async () => {
    const auth = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const rules = (await (await get("/__ratelimit/rules", auth)).json()) as { rules: { id: string }[] };
    expect(rules.rules.map((rule) => rule.id)).toEqual(["login", "api-per-user"]);
    const ip = "192.0.2.77";
    for (let i = 0; i < 5; i++) expect((await post("/login", ip)).status).toBe(200);
    expect((await post("/login", ip)).status).toBe(429);
    const put = await fetch(`${worker.url}/__ratelimit/overrides?rule=login&key=${ip}`, {
      method: "PUT",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ limit: 7 }),
    });
    expect(put.status).toBe(200);
    expect(await put.json()).toMatchObject({ rule: "login", after: { limit: 7 }, applied: true });
    expect((await post("/login", ip)).status).toBe(200);
    expect((await post("/login", ip)).status).toBe(200);
    expect((await post("/login", ip)).status).toBe(429);
  });
});
