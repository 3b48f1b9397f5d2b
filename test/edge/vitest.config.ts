/**
 * @module
 * Multi-isolate tests: plain Node tests against a standalone workerd running
 * many edge isolates of the real Worker and one objects service, over real
 * sockets. Files run one at a time: each starts its own workerd, and on two
 * cores a second one would distort the timing the tests set up.
 */
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("../..", import.meta.url));

export default defineConfig({
  root,
  test: {
    include: ["test/edge/**/*.edge.ts"],
    environment: "node",
    globalSetup: ["test/edge/support/global-setup.ts"],
    // Tests start clear of a minute's edge, where a window's count is weighted (test/support/window-edge.ts).
    setupFiles: ["test/support/window-edge.ts"],
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 180_000,
  },
});
