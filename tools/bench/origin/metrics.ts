/**
 * @module
 * The figures of `npm run bench:origin`, from what each request became (as
 * its client saw it) and what the origin served (as the origin saw it):
 * goodput as a share of C during the overload, the origin's p99 then
 * against its unloaded p99, the light clients' success rate, and how long
 * after the overload the origin and the limit were back.
 */
import { isLight, phaseBounds, type Scenario } from "./scenario.ts";

/** What one request became, as its client saw it. */
export type Outcome =
  /** A 2xx from the origin within the client's timeout. */
  | "ok"
  /** 429 from the limiter: over the configured limit. */
  | "refused"
  /** 503 from the limiter: over the reduced limit only. */
  | "shed"
  /** A 5xx from the origin (its queue was full), or the origin unreachable. */
  | "error"
  /** No answer within the client's timeout. */
  | "timeout";

export type RequestRecord = { client: number; sentMs: number; doneMs: number; outcome: Outcome };

/** A request the origin served: when it arrived there and when it was answered. */
export type ServedRecord = { arriveMs: number; finishMs: number };

/** The limit over time, as a share of the configured one (the adaptive rule only). */
export type FactorPoint = { atMs: number; factor: number };

export type Figures = {
  /** Successful answers during the overload over what C allowed then. */
  goodputShare: number;
  /** The origin's p99 latency (arrival to answer) during the overload, in ms, and over its last 80 % (after the onset). */
  overloadP99Ms: number;
  settledP99Ms: number;
  /** The same in the phase before, unloaded. */
  unloadedP99Ms: number;
  /** The light clients' requests sent during the overload that succeeded. */
  lightSuccess: number;
  /** The heavy client's. */
  heavySuccess: number;
  /** The origin's own 503s during the overload (queue full). */
  originRefusals: number;
  /** After the overload, until a whole second's p99 at the origin is within twice the unloaded p99; null: never. */
  originBackMs: number | null;
  /** After the overload, until the limit is the configured one again (adaptive only); null: never, or not adaptive. */
  limitBackMs: number | null;
  /** The lowest limit during the run, as a share of the configured one (adaptive only). */
  lowestFactor: number | null;
};

export function percentile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

/** C at `atMs`. */
const capacityAt = (scenario: Scenario, atMs: number): number =>
  scenario.halveAtMs !== null && atMs >= scenario.halveAtMs
    ? scenario.capacityPerSecond / 2
    : scenario.capacityPerSecond;

export function figures(
  scenario: Scenario,
  requests: RequestRecord[],
  served: ServedRecord[],
  originRefusedAtMs: number[],
  factors: FactorPoint[] | null,
): Figures {
  const [before, overload] = phaseBounds(scenario);
  if (before === undefined || overload === undefined)
    throw new Error("a scenario has a phase before the overload, and the overload");
  const during = (t: number, from = overload.startMs) => t >= from && t < overload.endMs;
  const ok = requests.filter((r) => r.outcome === "ok");
  const good = ok.filter((r) => during(r.doneMs)).length;
  // What C allowed during the overload, in requests (C may halve halfway).
  let allowed = 0;
  for (let t = overload.startMs; t < overload.endMs; t += 100) allowed += capacityAt(scenario, t) / 10;
  const latencies = (from: number, to: number) =>
    served.filter((s) => s.finishMs >= from && s.finishMs < to).map((s) => s.finishMs - s.arriveMs);
  // Unloaded: the phase before, past its first few seconds (connections being opened).
  const unloadedP99Ms = percentile(latencies(before.startMs + (before.endMs - before.startMs) / 4, before.endMs), 0.99);
  const settledFrom = overload.startMs + (overload.endMs - overload.startMs) / 5;
  const sentDuring = (light: boolean) => requests.filter((r) => isLight(r.client) === light && during(r.sentMs));
  const share = (rs: RequestRecord[]) =>
    rs.length === 0 ? Number.NaN : rs.filter((r) => r.outcome === "ok").length / rs.length;
  let originBackMs: number | null = null;
  const lastMs = Math.max(...served.map((s) => s.finishMs), overload.endMs);
  for (let t = overload.endMs; t + 1000 <= lastMs; t += 1000) {
    const second = latencies(t, t + 1000);
    if (second.length > 0 && percentile(second, 0.99) <= 2 * unloadedP99Ms) {
      originBackMs = t - overload.endMs;
      break;
    }
  }
  let limitBackMs: number | null = null;
  if (factors !== null) {
    const backAt = factors.find((f) => f.atMs >= overload.endMs && f.factor === 1);
    const stillDown = factors.filter((f) => f.atMs < overload.endMs).at(-1)?.factor !== 1;
    limitBackMs = stillDown ? (backAt ? backAt.atMs - overload.endMs : null) : 0;
  }
  return {
    goodputShare: good / allowed,
    overloadP99Ms: percentile(latencies(overload.startMs, overload.endMs), 0.99),
    settledP99Ms: percentile(latencies(settledFrom, overload.endMs), 0.99),
    unloadedP99Ms,
    lightSuccess: share(sentDuring(true)),
    heavySuccess: share(sentDuring(false)),
    originRefusals: originRefusedAtMs.filter((t) => during(t)).length,
    originBackMs,
    limitBackMs,
    lowestFactor: factors === null ? null : Math.min(1, ...factors.map((f) => f.factor)),
  };
}

const pct = (x: number) => `${(x * 100).toFixed(1)} %`;
const ms = (x: number | null) => (x === null ? "never" : `${(x / 1000).toFixed(1)} s`);

/** One table row per variant. */
export function figuresTable(rows: { variant: string; figures: Figures }[]): string {
  return [
    "| variant | goodput / C (overload) | origin p99 overload (after onset) | unloaded p99 | light clients ok | heavy client ok | origin 503s | origin back | limit back | lowest limit |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map(({ variant, figures: f }) =>
      [
        variant,
        pct(f.goodputShare),
        `${f.overloadP99Ms.toFixed(0)} ms (${f.settledP99Ms.toFixed(0)} ms)`,
        `${f.unloadedP99Ms.toFixed(0)} ms`,
        pct(f.lightSuccess),
        pct(f.heavySuccess),
        String(f.originRefusals),
        ms(f.originBackMs),
        f.lowestFactor === null ? "–" : ms(f.limitBackMs),
        f.lowestFactor === null ? "–" : pct(f.lowestFactor),
      ]
        .join(" | ")
        .replace(/^/, "| ")
        .replace(/$/, " |"),
    ),
  ].join("\n");
}
