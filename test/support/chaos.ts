/**
 * Induced Durable Object failures. `hangObject` makes a real object busy, so
 * calls to it really time out; `flakyNamespace` wraps the real namespace so
 * that its stubs fail the way the runtime's do (thrown, retryable, overloaded).
 */
import { runInDurableObject } from "cloudflare:test";
import { canonicalKey, hashKey } from "../../src/core/keys.ts";
import type { LimiterNamespace } from "../../src/limiter-client.ts";
import type { RuleCheck } from "../../src/limiter-object.ts";
import { env } from "./env.ts";

/** The object that holds the counters of a client counted by IP. */
export async function objectForIp(ip: string) {
  const name = await hashKey(canonicalKey([[{ kind: "ip" }]], { ip: () => ip } as never));
  return env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(name));
}

/**
 * Keeps the real object of this client busy for `ms`: every call to it waits.
 * Resolves once the object is busy; `over` resolves when it is free again.
 */
export async function hangObject(ip: string, ms: number): Promise<{ over: Promise<void> }> {
  const stub = await objectForIp(ip);
  let busy!: () => void;
  const started = new Promise<void>((resolve) => {
    busy = resolve;
  });
  const over = runInDurableObject(stub, async (_instance, state) => {
    await state.blockConcurrencyWhile(async () => {
      busy();
      await new Promise((resolve) => setTimeout(resolve, ms));
    });
  });
  await started;
  return { over };
}

export type Failure = "throw" | "retryable" | "overloaded" | "hang";

/** A namespace whose first `failures` calls fail as `kind`; later calls reach the real object. */
export function flakyNamespace(kind: Failure, failures = Number.POSITIVE_INFINITY) {
  const calls = { attempts: 0 };
  const ns: LimiterNamespace = {
    idFromName: (name) => env.RATE_LIMITER.idFromName(name),
    get: (id) => {
      const real = env.RATE_LIMITER.get(id);
      return {
        check: async (rules: RuleCheck[]) => {
          calls.attempts++;
          if (calls.attempts > failures) return real.check(rules);
          if (kind === "hang") return new Promise(() => {});
          const error = Object.assign(new Error(`induced ${kind} failure`), {
            retryable: kind === "retryable",
            overloaded: kind === "overloaded",
          });
          throw error;
        },
        refund: (refunds: Parameters<typeof real.refund>[0]) => real.refund(refunds),
      } as unknown as ReturnType<LimiterNamespace["get"]>;
    },
  };
  return { ns, calls };
}
