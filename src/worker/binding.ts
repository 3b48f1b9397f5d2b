/**
 * @module
 * The Durable Object namespace a middleware counts with, found by its
 * binding's name, or why it cannot be: no binding by that name, or one that
 * is no Durable Object namespace (a variable, a KV namespace).
 */
import type { LimiterNamespace } from "../object/client.ts";

/** The namespace bound to `binding` in `env`, or the configuration error that names what is wrong with it. */
export function limiterNamespace(
  env: Readonly<Record<string, unknown>>,
  binding: string,
): { ns: LimiterNamespace } | { error: string } {
  const found = env[binding];
  if (found === undefined || found === null) {
    return { error: `${binding}: no Durable Object binding by this name; bind the RateLimiter class to it` };
  }
  const ns = found as Partial<LimiterNamespace>;
  if (typeof ns.idFromName !== "function" || typeof ns.get !== "function") {
    const kind = typeof found === "object" ? "an object without idFromName and get" : `a ${typeof found}`;
    return { error: `${binding}: not a Durable Object binding (${kind}); bind the RateLimiter class to it` };
  }
  return { ns: ns as LimiterNamespace };
}
