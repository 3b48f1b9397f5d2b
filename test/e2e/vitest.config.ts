import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("../..", import.meta.url));

/**
 * End-to-end tests: plain Node tests against `wrangler dev` over real
 * sockets (not the workers pool). Files run one at a time, because they share
 * one Worker and the memory test must not measure other tests' traffic.
 */
export default defineConfig({
  root,
  test: {
    include: ["test/e2e/**/*.e2e.ts"],
    environment: "node",
    globalSetup: ["test/e2e/support/global-setup.ts"],
    // Tests start clear of a minute's edge, where a window's count is weighted (test/support/window-edge.ts).
    setupFiles: ["test/support/window-edge.ts"],
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
