import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, statfsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("..", import.meta.url));

// Durable Object storage lives under the OS temp dir. On disk every new SQLite object costs fsyncs
// (test/slow/cardinality.test.ts creates 10,000: about 100 s); on tmpfs about 26 s. Only when /dev/shm
// has room for them (Docker's default is 64 MB).
if (process.env.TMPDIR === undefined) {
  try {
    const shm = statfsSync("/dev/shm");
    if (shm.bavail * shm.bsize >= 1024 ** 3) process.env.TMPDIR = "/dev/shm";
  } catch {
    // No /dev/shm (macOS, Windows): the default temp directory.
  }
}

/**
 * wrangler.toml as the tests read it: a copy in a directory of its own, with its `main` made absolute.
 * The pool reads `.dev.vars` (and `.env`) beside the config it is given, and a developer's own, such as
 * the ADMIN_TOKEN the README puts there, must not change what the tests see.
 */
function isolatedWranglerConfig(): string {
  const shipped = readFileSync(join(root, "wrangler.toml"), "utf8");
  const main = /^main = "([^"]+)"$/m;
  const entry = main.exec(shipped)?.[1];
  if (entry === undefined) throw new Error('wrangler.toml: no `main = "…"` line to point the tests at');
  // One directory per checkout: two worktrees sharing node_modules must not point each other's tests at their code.
  const checkout = createHash("sha256").update(root).digest("hex").slice(0, 12);
  const dir = join(root, `node_modules/.cache/edge-rate-limiter/vitest-${checkout}`);
  mkdirSync(dir, { recursive: true });
  const copy = join(dir, "wrangler.toml");
  writeFileSync(copy, shipped.replace(main, `main = ${JSON.stringify(join(root, entry))}`));
  return copy;
}

/**
 * Tests in the workers pool: real workerd, real Durable Objects, and the real origin of the global setup.
 * `include` and `exclude` are globs relative to the repository root.
 */
export function workersTestConfig(include: string[], exclude: string[] = []) {
  return defineConfig({
    root,
    plugins: [
      cloudflareTest(({ inject }) => ({
        wrangler: { configPath: isolatedWranglerConfig() },
        miniflare: {
          bindings: { ORIGIN_URL: `http://127.0.0.1:${inject<number>("originPort")}` },
        },
      })),
    ],
    test: {
      include,
      exclude: [...exclude, "node_modules/**"],
      globalSetup: ["test/support/global-setup.ts"],
      setupFiles: ["test/support/logs.ts", "test/support/window-edge.ts"],
      // The default 5 s is a wall-clock limit: on two busy cores a long deterministic trace can take longer.
      testTimeout: 30_000,
      // Two test files at once on two cores: each spends most of its time starting its worker or waiting on I/O.
      maxWorkers: 2,
      // Listed by name only past 1 s: the summary stays short.
      slowTestThreshold: 1_000,
      // What a test printed is shown only when it fails; test/support/logs.ts fails a test on an error it did not expect.
      silent: "passed-only",
    },
  });
}

/**
 * `npm test`: every test but the slow ones, which `npm run test:slow` runs (test/slow/vitest.config.ts),
 * and the package's, a Node test that `npm run test:package` runs (test/package/vitest.config.ts).
 */
export default workersTestConfig(["test/**/*.test.ts"], ["test/e2e/**", "test/slow/**", "test/package/**"]);
