/**
 * A sliding window's decision from first principles, for replays: from the
 * admissions before a request as a plain list (instants and costs), in
 * BigInt, knowing nothing of states, rotation or bookings.
 */
import type { WindowLimit } from "../../src/core/sliding-window.ts";

export type Admission = { atMs: number; cost: number };

/**
 * Whether a request of `cost` at `atMs` fits under `window` after
 * `history`: oldest × kept + (newer + cost − 1) × P < limit × P, where the
 * buckets of k = precision split each period, `oldest` is the bucket k
 * before the request's, `newer` the k buckets up to its own, and `kept` the
 * share of the oldest still inside (all of it in strict mode).
 */
export function oracleAdmits(history: readonly Admission[], atMs: number, cost: number, window: WindowLimit): boolean {
  const k = window.precision;
  const P = BigInt(window.periodMs);
  const bucket = (t: number) => Math.floor((t * k) / window.periodMs);
  const now = bucket(atMs);
  let oldest = 0n;
  let newer = 0n;
  for (const admission of history) {
    const b = bucket(admission.atMs);
    if (b === now - k) oldest += BigInt(admission.cost);
    else if (b > now - k && b <= now) newer += BigInt(admission.cost);
  }
  const kept = window.strict ? P : P - ((BigInt(atMs) * BigInt(k)) % P);
  return oldest * kept + (newer + BigInt(cost) - 1n) * P < BigInt(window.limit) * P;
}

/**
 * Replays admissions in time order and returns the first instant at which
 * they do not fit: the admissions of one instant together (the last of them,
 * in any order, saw the rest: the count before plus their costs, less one,
 * under the limit), and in strict mode no window (t − P, t] over the limit.
 * Null when none.
 */
export function firstOverLimit(admissions: readonly Admission[], window: WindowLimit): number | null {
  const sorted = [...admissions].sort((a, b) => a.atMs - b.atMs);
  for (let i = 0; i < sorted.length; ) {
    const atMs = sorted[i]!.atMs;
    let j = i;
    let together = 0;
    while (j < sorted.length && sorted[j]!.atMs === atMs) together += sorted[j++]!.cost;
    if (!oracleAdmits(sorted.slice(0, i), atMs, together, window)) return atMs;
    if (window.strict) {
      const inWindow = sorted.slice(0, j).filter((a) => a.atMs > atMs - window.periodMs);
      if (inWindow.reduce((n, a) => n + a.cost, 0) > window.limit) return atMs;
    }
    i = j;
  }
  return null;
}
