/**
 * @module
 * `npm run accuracy`: replays every trace through every algorithm, prints the
 * tables, and writes docs/accuracy.md and docs/accuracy-boundary.svg.
 * Exits 1 if strict mode or the exact log ever admits more than the limit,
 * or the token bucket decides a request otherwise than an exact one or
 * admits more than `burst + rate × t`.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { runAll } from "./harness.ts";
import { type Series, slidingWindowChart } from "./plot.ts";
import { bucketTable, checkLines, checks, markdown, traceTable } from "./report.ts";
import { SETUP } from "./traces.ts";

const PLOT_FILE = "accuracy-boundary.svg";
const docs = (name: string) => fileURLToPath(new URL(`../../docs/${name}`, import.meta.url));

/** How each algorithm is drawn: the reference as a wide grey band underneath, strict variants dashed in blues. */
const STYLE: Record<string, Pick<Series, "color" | "dashed" | "widthPx">> = {
  "exact-log": { color: "#c8c8c8", dashed: false, widthPx: 6 },
  "fixed-window": { color: "#555555", dashed: false, widthPx: 1.5 },
  "sliding-k1": { color: "#d62728", dashed: false, widthPx: 1.5 },
  "sliding-k10": { color: "#ff7f0e", dashed: false, widthPx: 1.5 },
  "sliding-k60": { color: "#2ca02c", dashed: false, widthPx: 1.5 },
  "strict-k1": { color: "#9ecae1", dashed: true, widthPx: 1.5 },
  "strict-k10": { color: "#4292c6", dashed: true, widthPx: 1.5 },
  "strict-k60": { color: "#08306b", dashed: true, widthPx: 1.5 },
};

const startedMs = performance.now();
const results = runAll(true);
const elapsedMs = performance.now() - startedMs;

for (const result of results) {
  console.log(`\n${result.trace.id}: ${result.trace.description} (${result.trace.timesMs.length} requests)\n`);
  console.log(traceTable(result));
  console.log(`\n${bucketTable(result)}`);
}
const c = checks(results);
console.log(`\n${checkLines(c).join("\n")}`);

const boundary = results.find((r) => r.trace.id === "boundary");
if (!boundary) throw new Error("accuracy: the boundary trace is missing");
const series: Series[] = boundary.rows.map((row) => ({
  label: row.label,
  ...(STYLE[row.algorithm] ?? { color: "#000", dashed: false, widthPx: 1.5 }),
  admittedMs: row.admittedMs ?? [],
}));
const svg = slidingWindowChart(series, {
  title: `Boundary attack: admitted in the trailing ${SETUP.periodMs / 1000} s, ÷ limit (${SETUP.limit})`,
  limit: SETUP.limit,
  periodMs: SETUP.periodMs,
  traceStartMs: SETUP.startMs,
  fromMs: SETUP.startMs + 2 * SETUP.periodMs,
  toMs: SETUP.startMs + 10 * SETUP.periodMs,
});
writeFileSync(docs(PLOT_FILE), svg);
writeFileSync(docs("accuracy.md"), markdown(results, PLOT_FILE));
console.log(`\nWrote docs/accuracy.md and docs/${PLOT_FILE}. Replay took ${(elapsedMs / 1000).toFixed(2)} s.`);
if (!c.strictHolds || !c.bucketsHold) process.exitCode = 1;
