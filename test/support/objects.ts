/**
 * Reading and steering the real Durable Objects behind a test: the counts an
 * object stored, and a namespace whose calls can be held until the test
 * releases them, to build the interleavings concurrency produces.
 */
import { runInDurableObject } from "cloudflare:test";
import { canonicalKey, hashKey } from "../../src/core/keys.ts";
import type { LimiterNamespace } from "../../src/object/client.ts";
import { env } from "./env.ts";

/** The canonical key of a client counted by IP alone. */
export const ipCanonical = (ip: string): string => canonicalKey([[{ kind: "ip" }]], { ip: () => ip } as never);

/** The object that holds the counters of a client counted by IP alone. */
export async function objectForIp(ip: string) {
  const name = await hashKey(ipCanonical(ip));
  return env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(name));
}

export type StoredRow = { rule: string; bucket: number; counts: number[]; epoch: number };

/** The rows an IP-keyed client's object has stored, by row name (`<id>|<periodMs>|<precision>`). */
export async function storedRows(ip: string): Promise<Record<string, StoredRow>> {
  return runInDurableObject(await objectForIp(ip), (_instance, state) => {
    const table = state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'counters'").toArray();
    if (table.length === 0) return {};
    const rows = state.storage.sql
      .exec<{ rule: string; bucket: number; counts: string; epoch: number }>("SELECT * FROM counters")
      .toArray();
    return Object.fromEntries(rows.map((r) => [r.rule, { ...r, counts: JSON.parse(r.counts) as number[] }]));
  });
}

/** Every count an IP-keyed client's object holds, over all rows and buckets. */
export async function storedTotal(ip: string): Promise<number> {
  const rows = Object.values(await storedRows(ip));
  return rows.reduce((sum, row) => sum + row.counts.reduce((a, b) => a + b, 0), 0);
}

type Method = "check" | "refund";

/**
 * The real namespace, but the next call of a given method can be held:
 * `hold("check")` returns a function that lets it through. Calls are counted.
 */
export function gatedNamespace() {
  const gates: Record<Method, Promise<void> | null> = { check: null, refund: null };
  const arrived: Record<Method, number> = { check: 0, refund: 0 };
  const hold = (method: Method): (() => void) => {
    let open!: () => void;
    gates[method] = new Promise<void>((resolve) => {
      open = resolve;
    });
    return open;
  };
  const pass = async (method: Method) => {
    arrived[method]++;
    const gate = gates[method];
    gates[method] = null;
    if (gate) await gate;
  };
  const ns: LimiterNamespace = {
    idFromName: (name) => env.RATE_LIMITER.idFromName(name),
    get: (id) => {
      const stub = env.RATE_LIMITER.get(id);
      return {
        check: async (...args: Parameters<typeof stub.check>) => {
          await pass("check");
          return stub.check(...args);
        },
        refund: async (...args: Parameters<typeof stub.refund>) => {
          await pass("refund");
          return stub.refund(...args);
        },
      } as unknown as ReturnType<LimiterNamespace["get"]>;
    },
  };
  return { ns, hold, arrived, isHeld: (method: Method) => gates[method] !== null };
}
