/**
 * @module
 * What the edge suite's global setup hands to the test files.
 */
import "vitest";

declare module "vitest" {
  interface ProvidedContext {
    /** The product's src/index.ts, bundled once by wrangler for every edge isolate. */
    edgeBundle: string;
    /** test/edge/workers/objects.ts, bundled: the `objects` service. */
    objectsBundle: string;
  }
}
