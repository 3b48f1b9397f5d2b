import { workersTestConfig } from "../vitest.config.ts";

/**
 * `npm run test:slow`: tests too slow for `npm test`, in the same workers pool, with the same
 * isolated wrangler.toml and origin: test/slow/cardinality.test.ts creates 10,000 Durable Objects.
 */
export default workersTestConfig(["test/slow/**/*.test.ts"]);
