import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("../..", import.meta.url));

/**
 * `npm run test:package`: the package as a stock Workers project gets it,
 * `npm pack` installed with its peers from the registry into fresh copies of
 * test/package/consumer, type-checked and run under their own `wrangler dev`.
 * A plain Node test, not the workers pool. The hooks install from the
 * registry: minutes on a machine whose npm cache is empty.
 */
export default defineConfig({
  root,
  test: {
    include: ["test/package/**/*.test.ts"],
    environment: "node",
    testTimeout: 60_000,
    hookTimeout: 600_000,
  },
});
