/**
 * @module
 * The benchmarks' rules: a limit of a billion, which every allowed variant
 * stays far below, and one of 1 an hour, which the blocked client is over.
 */
export const BENCH_RULES = [
  { id: "allowed", path: "/allowed/*", limit: 1_000_000_000, period: "1h", key: ["ip"] },
  { id: "blocked", path: "/blocked/*", limit: 1, period: "1h", key: ["ip"] },
];
