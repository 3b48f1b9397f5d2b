/**
 * The package as an adopter installs it on a fresh machine: `npm pack`, then,
 * in a new Workers project (test/package/consumer: a bare package.json, a
 * stock tsconfig with no special flags, a wrangler.toml), the install
 * commands the README and docs/library.md show, run as they are written.
 * npm picks the peers (hono, wrangler, workers-types, TypeScript) from the
 * registry, within the ranges the package states and for this Node (22, the
 * `node` devDependency): nothing comes from this repository's node_modules.
 * A second project installs the oldest versions those ranges allow. Each
 * type-checks with its own tsc, docs/library.md's example, the README's and
 * docs/client-limits.md's, and runs the complete example under its own
 * `wrangler dev`: a stated
 * requirement that stops holding, at either end of its range, fails here.
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
/** The peers an adopter installs beside the package: hono, which it imports, and the tools of a Workers project. */
const PEERS = ["hono", "wrangler", "@cloudflare/workers-types", "typescript"] as const;
/** Where the docs put the tarball `npm pack` writes, in their install commands. */
const TARBALL_IN_DOCS = /\/path\/to\/(edge-rate-limiter-\S+\.tgz)/;

/** The `ts` block after a `<!-- example: <name> … -->` comment of a page. */
function example(page: string, name: string): string {
  const block = blocksOf(readFileSync(join(root, page), "utf8")).find(
    (b) => b.lang === "ts" && b.marker?.split(" ")[1] === name,
  );
  if (!block) throw new Error(`${page}: no \`\`\`ts block after <!-- example: ${name} … -->`);
  return block.text;
}

/** The `npm install` lines of a page's install block (the one this test runs), without their comments. */
function installLines(page: string): string[] {
  const block = blocksOf(readFileSync(join(root, page), "utf8")).find((b) =>
    b.marker?.includes("test/package/consumer.test.ts runs the npm install lines"),
  );
  if (!block) throw new Error(`${page}: no install block marked as run by test/package/consumer.test.ts`);
  return block.text
    .split("\n")
    .map((line) => line.replace(/#.*$/, "").trim())
    .filter((line) => line.startsWith("npm install "));
}

/** A section of docs/library.md: from its `## heading` to the next. */
function section(page: string, heading: string): string {
  const text = readFileSync(join(root, page), "utf8");
  const start = text.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`${page}: no "## ${heading}" section`);
  const end = text.indexOf("\n## ", start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

/** The oldest version a stated range allows: the ranges here are `^x.y.z` or `>=x.y.z`, and nothing else. */
function oldestOf(range: string): string {
  const match = /^(?:\^|>=)(\d+\.\d+\.\d+)$/.exec(range);
  if (!match) throw new Error(`${range}: not a ^x.y.z or >=x.y.z range; say here how to find its oldest version`);
  return match[1]!;
}

/** Runs a command and answers what it printed; when it fails, the error says what it printed too. */
function run(command: string, args: string[], cwd: string): string {
  try {
    return execFileSync(command, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (error) {
    const { status, stdout, stderr } = error as { status: number | null; stdout?: string; stderr?: string };
    throw new Error(`${[command, ...args].join(" ")} (in ${cwd}) exited ${status}:\n${stdout ?? ""}${stderr ?? ""}`);
  }
}

/**
 * npm, as `npm run` gave it to this process, run with this Node (22, from
 * the `node` devDependency), as an adopter's Node that meets `engines`.
 */
function npm(args: string[], cwd: string): string {
  const cli = process.env.npm_execpath;
  return cli ? run(process.execPath, [cli, ...args], cwd) : run("npm", args, cwd);
}

/**
 * Asks the registry, as a fresh machine would (no `--prefer-offline`: npm
 * looks up what versions there are now), and refuses, rather than warns of,
 * a package whose `engines` this Node does not meet.
 */
const install = (args: string[], cwd: string): string =>
  npm([...args, "--engine-strict", "--no-audit", "--no-fund"], cwd);

/** The version of a package a project installed in its own node_modules. */
const installed = (project: string, name: string): string =>
  (JSON.parse(readFileSync(join(project, "node_modules", name, "package.json"), "utf8")) as { version: string })
    .version;

let dir: string;
let tarball: string;
let packed: string[];
let manifest: {
  license?: string;
  engines?: Record<string, string>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  [field: string]: unknown;
};
let licence: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-package-"));
  // `prepack` builds dist/ and writes the manifest a user installs; its output comes before `--json`'s report.
  const printed = npm(["pack", "--json", "--pack-destination", dir], root);
  const report = JSON.parse(printed.slice(printed.lastIndexOf("\n[\n") + 1)) as {
    filename: string;
    files: { path: string }[];
  }[];
  tarball = join(dir, report[0]!.filename);
  packed = report[0]!.files.map((file) => file.path);
  const fromTarball = (path: string) =>
    execFileSync("tar", ["-xOzf", tarball, `package/${path}`], { encoding: "utf8" });
  manifest = JSON.parse(fromTarball("package.json")) as typeof manifest;
  licence = packed.includes("LICENSE") ? fromTarball("LICENSE") : "";
});

afterAll(() => {
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
    expect(manifest).toMatchObject({ dependencies: { jose: expect.any(String) } });
    const own = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts?: Record<string, string> };
    expect(own.scripts?.prepare).toBeDefined();
  });

  it("states its requirements: Node in engines, hono as a peer, and wrangler, workers-types and TypeScript as optional peers", () => {
    expect(oldestOf(manifest.engines?.node ?? "")).toMatch(/^\d+\.\d+\.\d+$/);
    expect(Object.keys(manifest.peerDependencies ?? {}).sort()).toEqual([...PEERS].sort());
    for (const name of PEERS) expect(oldestOf(manifest.peerDependencies![name]!)).toMatch(/^\d+\.\d+\.\d+$/);
    // hono is imported by the package; the others are the tools of the adopter's own project, if it uses them.
    expect(manifest.peerDependenciesMeta).toEqual({
      wrangler: { optional: true },
      "@cloudflare/workers-types": { optional: true },
      typescript: { optional: true },
    });
  });

  it("is listed in docs/library.md's Requirements as the manifest states it, with the consumer's compatibility date and flag", () => {
    const requirements = section("docs/library.md", "Requirements");
    const oldest = [
      oldestOf(manifest.engines!.node!),
      ...PEERS.map((name) => oldestOf(manifest.peerDependencies![name]!)),
    ];
    for (const version of oldest) expect(requirements).toContain(` ${version} or later`);
    const consumer = readFileSync(join(root, "test/package/consumer/wrangler.toml"), "utf8");
    const date = /^compatibility_date = "([\d-]+)"$/m.exec(consumer)?.[1];
    expect(requirements).toContain(`compatibility_date = "${date}"`);
    expect(requirements).toContain('compatibility_flags = ["enable_request_signal"]');
  });

  it("is installed by the same commands in the README and docs/library.md, from the tarball npm pack writes", () => {
    const lines = installLines("docs/library.md");
    expect(lines.length).toBeGreaterThan(0);
    expect(installLines("README.md")).toEqual(lines);
    expect(lines.join("\n").match(TARBALL_IN_DOCS)?.[1]).toBe(tarball.split("/").pop());
  });
});

/**
 * One adopter's project: the newest versions npm picks for the docs'
 * commands, or the oldest the stated ranges allow.
 */
const projects = [
  {
    versions: "newest",
    /** The docs' install commands, as written, with the tarball where they say /path/to/. */
    install: (app: string) => {
      for (const line of installLines("docs/library.md")) {
        const args = line.replace(TARBALL_IN_DOCS, tarball).split(/\s+/).slice(1);
        install(args, app);
      }
    },
  },
  {
    versions: "oldest",
    /** The same commands with each peer at the oldest version its stated range allows. */
    install: (app: string) => {
      const oldest = (name: string) => `${name}@${oldestOf(manifest.peerDependencies![name]!)}`;
      install(["install", tarball, oldest("hono")], app);
      install(["install", "--save-dev", ...["wrangler", "@cloudflare/workers-types", "typescript"].map(oldest)], app);
    },
  },
] as const;

describe.each(projects)("a fresh Workers project with the $versions versions the requirements allow", (project) => {
  let app: string;
  let worker: RunningWorker;

  beforeAll(async () => {
    app = join(dir, `consumer-${project.versions}`);
    cpSync(join(root, "test/package/consumer"), app, { recursive: true });
    mkdirSync(join(app, "src"));
    writeFileSync(join(app, "src/index.ts"), example("docs/library.md", "library"));
    // Type-checked with the rest (tsc), never run: the README's few lines must compile as they are.
    writeFileSync(join(app, "src/minimal.ts"), example("README.md", "library-minimal"));
    writeFileSync(join(app, "src/client-limits.ts"), example("docs/client-limits.md", "library-client-limits"));
    project.install(app);
    worker = await startWrangler({
      wrangler: join(app, "node_modules/wrangler/bin/wrangler.js"),
      configPath: join(app, "wrangler.toml"),
      entryPath: join(app, "src/index.ts"),
      vars: { ADMIN_TOKEN },
      persistTo: join(app, ".state"),
      logFile: join(dir, `wrangler-dev-${project.versions}.log`),
    });
  });

  afterAll(async () => {
    await worker?.stop();
  });

  it("installs the package and every peer into the project itself, each within its stated range", () => {
    const versions = Object.fromEntries(PEERS.map((name) => [name, installed(app, name)]));
    if (project.versions === "oldest") {
      expect(versions).toEqual(
        Object.fromEntries(PEERS.map((name) => [name, oldestOf(manifest.peerDependencies![name]!)])),
      );
    }
    // npm refuses (ERESOLVE) a peer outside the package's range, optional or not; `npm ls` finds none invalid.
    expect(() => npm(["ls", "--all"], app)).not.toThrow();
    expect(installed(app, "edge-rate-limiter")).toBe(manifest.version);
  });

  it("type-checks with its own tsc, with docs/library.md's example, the README's and docs/client-limits.md's", () => {
    const tsc = join(app, "node_modules/typescript/bin/tsc");
    // A failing tsc throws with the errors it printed.
    expect(run(process.execPath, [tsc, "-p", app], app)).toBe("");
  });

  /** Waits, when less than `needMs` is left of the current clock minute, for the next one to begin. */
  const withinOneMinute = async (needMs: number) => {
    const leftMs = 60_000 - (Date.now() % 60_000);
    if (leftMs < needMs) await new Promise((resolve) => setTimeout(resolve, leftMs + 100));
  };
  const post = (path: string, ip: string) =>
    fetch(`${worker.url}${path}`, { method: "POST", headers: { "cf-connecting-ip": ip } });
  const get = (path: string, headers: Record<string, string>) => fetch(`${worker.url}${path}`, { headers });

  it("runs docs/library.md's example under its own wrangler dev: 5 logins a minute per client, then 429 problem+json with Retry-After and the headers", async () => {
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
    // The rule is a two-counter sliding window of a minute (precision 1): 101 requests that straddle a minute's
    // edge are weighed, not counted, and may all be admitted (docs/accuracy.md). Sent within one minute, they
    // are counted exactly: the 101st is refused.
    await withinOneMinute(20_000);
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

  it('hands the handler the decision, typed (c.get("rateLimit")): what is left, as the response\'s headers say it', async () => {
    for (let i = 1; i <= 3; i++) {
      const res = await get("/api/orders", { "x-user": "cat", "cf-connecting-ip": "203.0.113.250" });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { user: string; remaining: number; resetSeconds: number };
      expect(body.user).toBe("cat");
      expect(body.remaining).toBe(100 - i);
      expect(res.headers.get("ratelimit")).toBe(`"api-per-user";r=${body.remaining};t=${body.resetSeconds}`);
    }
    // A health check the middleware skipped: a decision with no rule.
    const health = await get("/api/health", { "x-user": "cat", "cf-connecting-ip": "203.0.113.250" });
    expect(await health.json()).toEqual({ user: "cat", remaining: null, resetSeconds: null });
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
