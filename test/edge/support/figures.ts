/**
 * @module
 * What the edge files print for the README: per scenario, what one key's or
 * keys' load admitted against what one object alone admits, and the Durable
 * Object calls it took. The targets themselves are asserted by each test.
 */
import { afterAll } from "vitest";
import type { Edge } from "./harness.ts";
import { type Planned, runLoad, tally } from "./load.ts";

type Figures = {
  scenario: string;
  requests: number;
  admitted: number;
  exact: number;
  ratio: string;
  callsPerRequest: string;
};

/** A file's figures, printed as one table under `title` once its tests are done. */
export function figuresTable(title: string, edge: () => Edge | undefined): Figures[] {
  const figures: Figures[] = [];
  afterAll(() => {
    console.log(`\n${title} (${edge()?.isolates} isolates):`);
    console.table(figures);
  });
  return figures;
}

/**
 * Sends `plan` with `concurrency` requests in flight, and adds its row to
 * `figures`: the requests, what was admitted against `exact` (none to
 * compare with when 0), and the checks `rule`'s objects received per
 * request. Returns every record, tallied, and the calls.
 */
export async function measureLoad(
  edge: Edge,
  figures: Figures[],
  run: { scenario: string; rule: string; plan: Planned[]; exact: number; concurrency: number },
) {
  const { scenario, rule, plan, exact, concurrency } = run;
  const before = (await edge.objectChecks())[rule] ?? 0;
  const records = await runLoad(edge.driver(30_000), plan, { concurrency });
  const calls = ((await edge.objectChecks())[rule] ?? 0) - before;
  const { admitted, statuses, serverErrors } = tally(records);
  const total = [...admitted.values()].reduce((a, b) => a + b, 0);
  figures.push({
    scenario,
    requests: plan.length,
    admitted: total,
    exact,
    ratio: exact > 0 ? `${((100 * total) / exact).toFixed(1)}%` : "–",
    callsPerRequest: (calls / plan.length).toFixed(4),
  });
  return { records, admitted, total, calls, statuses, serverErrors };
}
