/** The real Durable Object namespace, counting the calls made to its objects. */
import type { LimiterNamespace } from "../../src/object/client.ts";
import { env } from "./env.ts";

export function countedNamespace() {
  const counter = { calls: 0 };
  const ns: LimiterNamespace = {
    idFromName: (name) => env.RATE_LIMITER.idFromName(name),
    get: (id) => {
      const stub = env.RATE_LIMITER.get(id);
      return {
        check: (...args: Parameters<typeof stub.check>) => {
          counter.calls++;
          return stub.check(...args);
        },
        refund: (refunds: Parameters<typeof stub.refund>[0]) => stub.refund(refunds),
      } as unknown as ReturnType<LimiterNamespace["get"]>;
    },
  };
  return { ns, counter };
}
