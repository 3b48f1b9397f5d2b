/** A seeded pseudo-random generator (mulberry32), so property tests replay exactly. */
export function randomGenerator(seed: number) {
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
    /** An integer in [0, n). */
    int: (n: number): number => Math.floor(next() * n),
  };
}
