import "vitest";

/** Values the global setup provides to the tests. */
declare module "vitest" {
  interface ProvidedContext {
    /** Port of the real test origin. */
    originPort: number;
    /** A port where nothing listens: an origin that is down. */
    downPort: number;
  }
}
