import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("../..", import.meta.url));

/**
 * `npm run test:package`: the package as a stock Workers project gets it,
 * `npm pack` installed into test/package/consumer's copy, type-checked and
 * run under `wrangler dev`. A plain Node test, not the workers pool.
 */
export default defineConfig({
  root,
  test: {
    include: ["test/package/**/*.test.ts"],
    environment: "node",
    testTimeout: 60_000,
    hookTimeout: 300_000,
  },
});
