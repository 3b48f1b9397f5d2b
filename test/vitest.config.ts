import { statfsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("..", import.meta.url));

// Durable Object storage lives under the OS temp dir. On disk every new SQLite object costs fsyncs
// (test/cardinality.test.ts creates 10,000: about 100 s); on tmpfs about 26 s. Only when /dev/shm
// has room for them (Docker's default is 64 MB).
if (process.env.TMPDIR === undefined) {
  try {
    const shm = statfsSync("/dev/shm");
    if (shm.bavail * shm.bsize >= 1024 ** 3) process.env.TMPDIR = "/dev/shm";
  } catch {
    // No /dev/shm (macOS, Windows): the default temp directory.
  }
}

export default defineConfig({
  root,
  plugins: [
    cloudflareTest(({ inject }) => ({
      wrangler: { configPath: "./wrangler.toml" },
      miniflare: {
        bindings: { ORIGIN_URL: `http://127.0.0.1:${inject<number>("originPort")}` },
      },
    })),
  ],
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/e2e/**", "node_modules/**"],
    globalSetup: ["test/support/global-setup.ts"],
  },
});
