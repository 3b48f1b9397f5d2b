/**
 * @module
 * Seeded random numbers for the synthetic traces (mulberry32), so every run
 * of the harness replays the very same requests.
 */

export type Random = {
  /** Uniform in [0, 1). */
  next(): number;
  /** Uniform in [low, high). */
  uniform(low: number, high: number): number;
  /** Exponentially distributed with mean `1 / rate`: the gap between Poisson arrivals. */
  exponential(rate: number): number;
  /** Pareto with minimum `minimum` and tail index `alpha`: heavy-tailed, as per-client request rates are. */
  pareto(minimum: number, alpha: number): number;
};

export function seededRandom(seed: number): Random {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    uniform: (low, high) => low + (high - low) * next(),
    // 1 − next() is in (0, 1], so the logarithm is finite.
    exponential: (rate) => -Math.log(1 - next()) / rate,
    pareto: (minimum, alpha) => minimum * (1 - next()) ** (-1 / alpha),
  };
}
