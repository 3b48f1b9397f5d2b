/** The accuracy harness's seeded generator (mulberry32), so property tests replay exactly. */
import { seededRandom } from "../../tools/accuracy/random.ts";

export function randomGenerator(seed: number) {
  const random = seededRandom(seed);
  return {
    next: random.next,
    /** An integer in [0, n). */
    int: (n: number): number => Math.floor(random.next() * n),
  };
}
