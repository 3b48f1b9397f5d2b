/**
 * @module
 * Load for the multi-isolate tests: a planned list of requests, each to a
 * chosen isolate for a chosen client key, sent with a bounded number in
 * flight, some of them hung up on mid-flight. A hook runs before each send
 * and may pause the load, so a test can kill and restart workerd at a
 * chosen point while requests are in flight.
 */
import type { Driver, RequestRecord } from "./driver.ts";

/** One request of a plan. */
export type Planned = {
  isolate: number;
  /** The client key (`cf-connecting-ip`). */
  key: string;
  path?: string;
  /** Hang up (TCP reset) this long after sending, unless the answer came first. */
  abortAfterMs?: number;
};

export type LoadOptions = {
  /** Requests in flight at once. */
  concurrency: number;
  /** Awaited before request `index` is sent: a test pauses the load here. */
  before?: (index: number) => Promise<void> | void;
};

/** Sends every planned request and waits for all of them; their records, in plan order. */
export async function runLoad(driver: Driver, plan: Planned[], options: LoadOptions): Promise<RequestRecord[]> {
  const records: RequestRecord[] = new Array(plan.length);
  let next = 0;
  const worker = async () => {
    for (let index = next++; index < plan.length; index = next++) {
      await options.before?.(index);
      const { isolate, key, path, abortAfterMs } = plan[index]!;
      records[index] = await driver.send(isolate, key, { path, abortAfterMs }).done;
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  return records;
}

/** Per client key: requests answered 200, and any status of 500 or more. */
export function tally(records: RequestRecord[]) {
  const admitted = new Map<string, number>();
  const statuses = new Map<string, number>();
  for (const r of records) {
    const outcome = r.aborted ? "aborted" : r.gaveUp ? "no answer" : r.status !== null ? String(r.status) : "error";
    statuses.set(outcome, (statuses.get(outcome) ?? 0) + 1);
    if (r.status === 200 && !r.aborted) admitted.set(r.key, (admitted.get(r.key) ?? 0) + 1);
  }
  const serverErrors = records.filter((r) => r.status !== null && r.status >= 500);
  return { admitted, statuses: Object.fromEntries(statuses), serverErrors };
}
