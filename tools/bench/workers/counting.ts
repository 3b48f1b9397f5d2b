/**
 * @module
 * Counts Durable Object calls for the benchmark: a namespace whose stubs
 * count every method call, read back at `/__bench/calls`.
 */

let calls = 0;

/** Wraps `ns` so that every RPC made through its stubs is counted. */
export function countingNamespace<O extends Rpc.DurableObjectBranded | undefined>(
  ns: DurableObjectNamespace<O>,
): DurableObjectNamespace<O> {
  return new Proxy(ns, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (prop !== "get" || typeof value !== "function")
        return typeof value === "function" ? value.bind(target) : value;
      return (id: DurableObjectId) => {
        const stub = target.get(id);
        return new Proxy(stub, {
          get(stubTarget, method) {
            const member = Reflect.get(stubTarget, method);
            if (typeof member !== "function") return member;
            return (...args: unknown[]) => {
              calls++;
              return Reflect.apply(member, stubTarget, args);
            };
          },
        });
      };
    },
  });
}

/** The `/__bench/calls` answer, or null for any other path. */
export const callsResponse = (request: Request): Response | null =>
  // A suffix test, not a URL parse: this runs on every measured request and must cost next to nothing.
  request.url.endsWith("/__bench/calls") ? Response.json({ calls }) : null;
