/**
 * @module
 * The benchmarks' rules: a limit of a billion, which every allowed variant
 * stays far below, and one of 1 an hour, which the blocked client is over;
 * and the same two as token buckets (`burst`), for the bucket's variants.
 */
export const BENCH_RULES = [
  { id: "allowed", path: "/allowed/*", limit: 1_000_000_000, period: "1h", key: ["ip"] },
  { id: "blocked", path: "/blocked/*", limit: 1, period: "1h", key: ["ip"] },
];

/** The same rules as token buckets: the same ids, paths and rates, each with a burst of its limit. */
export const BENCH_BUCKET_RULES = BENCH_RULES.map((rule) => ({ ...rule, burst: rule.limit }));
