/**
 * @module
 * The figures of `npm run bench:origin`, from what each request became (as
 * its client saw it) and what the origin served (as the origin saw it):
 * goodput as a share of C during the overload, the origin's p99 then
 * against its unloaded p99, the light clients' success rate, and how long
 * after the overload the origin and the limit were back; in the priorities
 * scenario, each priority's success instead of the clients'.
 */
import type { Factors, Priority } from "../../../src/core/priorities.ts";
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

export type RequestRecord = { client: number; sentMs: number; doneMs: number; outcome: Outcome; priority?: Priority };

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
  /** With C halved mid-run: once the limiter has followed it (see {@link Followed}); null without a halving. */
  followed: Followed | null;
};

/**
 * C halved mid-run, once the limiter has followed it: the backlog the
 * halving built is gone, the first whole second after the halving's backlog
 * formed (after the first second over the bound) whose p99 at the origin is
 * within twice its unloaded p99 at the halved C (its service times doubled:
 * twice the p99 before); the halving itself when no second is over it. The
 * targets are then read from that second to the end of the overload.
 */
export type Followed = {
  /** After the halving, until that second; null: never within the overload. */
  afterMs: number | null;
  /** From then to the end of the overload: successful answers over what the halved C allowed… */
  goodputShare: number;
  /** …the light clients' requests sent that succeeded… */
  lightSuccess: number;
  /** …and the origin's p99 over its unloaded p99 at the halved C. */
  p99Ratio: number;
};

export function percentile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

/** The latencies (arrival to answer) of what the origin answered from `from` to `to`, ms. */
const latenciesIn =
  (served: ServedRecord[]) =>
  (from: number, to: number): number[] =>
    served.filter((s) => s.finishMs >= from && s.finishMs < to).map((s) => s.finishMs - s.arriveMs);

/** The share of these requests that succeeded; NaN for none. */
const okShare = (rs: RequestRecord[]): number =>
  rs.length === 0 ? Number.NaN : rs.filter((r) => r.outcome === "ok").length / rs.length;

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
  const bounds = phaseBounds(scenario);
  const before = bounds.find((p) => p.name === "before");
  const overload = bounds.find((p) => p.name === "overload");
  if (before === undefined || overload === undefined)
    throw new Error("a scenario has a phase before the overload, and the overload");
  const during = (t: number, from = overload.startMs) => t >= from && t < overload.endMs;
  const ok = requests.filter((r) => r.outcome === "ok");
  const good = ok.filter((r) => during(r.doneMs)).length;
  // What C allowed during the overload, in requests (C may halve halfway).
  let allowed = 0;
  for (let t = overload.startMs; t < overload.endMs; t += 100) allowed += capacityAt(scenario, t) / 10;
  const latencies = latenciesIn(served);
  // Unloaded: the phase before, past its first few seconds (connections being opened).
  const unloadedP99Ms = percentile(latencies(before.startMs + (before.endMs - before.startMs) / 4, before.endMs), 0.99);
  const settledFrom = overload.startMs + (overload.endMs - overload.startMs) / 5;
  const sentDuring = (light: boolean) => requests.filter((r) => isLight(r.client) === light && during(r.sentMs));
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
    followed: followedFigures(scenario, requests, latencies, overload.endMs, unloadedP99Ms),
    goodputShare: good / allowed,
    overloadP99Ms: percentile(latencies(overload.startMs, overload.endMs), 0.99),
    settledP99Ms: percentile(latencies(settledFrom, overload.endMs), 0.99),
    unloadedP99Ms,
    lightSuccess: okShare(sentDuring(true)),
    heavySuccess: okShare(sentDuring(false)),
    originRefusals: originRefusedAtMs.filter((t) => during(t)).length,
    originBackMs,
    limitBackMs,
    lowestFactor: factors === null ? null : Math.min(1, ...factors.map((f) => f.factor)),
  };
}

/** The figures once the limiter has followed C halved ({@link Followed}); null when C is not halved. */
function followedFigures(
  scenario: Scenario,
  requests: RequestRecord[],
  latencies: (from: number, to: number) => number[],
  endMs: number,
  unloadedP99Ms: number,
): Followed | null {
  const halveAtMs = scenario.halveAtMs;
  if (halveAtMs === null) return null;
  const halvedUnloadedMs = 2 * unloadedP99Ms;
  // The whole seconds from the halving to the end of the overload, and whether each is within the bound.
  const within: { t: number; ok: boolean }[] = [];
  for (let t = halveAtMs; t + 1000 <= endMs; t += 1000) {
    const second = latencies(t, t + 1000);
    within.push({ t, ok: second.length === 0 ? false : percentile(second, 0.99) <= 2 * halvedUnloadedMs });
  }
  // A second within the bound before the halving's backlog formed is not following it: from the first second over
  // the bound (none: no backlog, followed at once), the first one within it.
  const over = within.findIndex((s) => !s.ok);
  const fromMs = over === -1 ? halveAtMs : (within.slice(over).find((s) => s.ok)?.t ?? null);
  if (fromMs === null)
    return { afterMs: null, goodputShare: Number.NaN, lightSuccess: Number.NaN, p99Ratio: Number.NaN };
  const from = fromMs;
  const good = requests.filter((r) => r.outcome === "ok" && r.doneMs >= from && r.doneMs < endMs).length;
  const light = requests.filter((r) => isLight(r.client) && r.sentMs >= from && r.sentMs < endMs);
  return {
    afterMs: from - halveAtMs,
    goodputShare: good / (((scenario.capacityPerSecond / 2) * (endMs - from)) / 1000),
    lightSuccess: okShare(light),
    p99Ratio: percentile(latencies(from, endMs), 0.99) / halvedUnloadedMs,
  };
}

/** What the baseline drift scenario shows (driftScenarioFromEnv): the adaptive rule while the origin is slower when calm. */
export type DriftFigures = {
  /** The origin's p99 in the phase before the drift, and in the light phase of the drift (its second half). */
  unloadedP99Ms: number;
  driftedP99Ms: number;
  /** After the drift began, until the controller said so (its `drift`); null: never. */
  reportedMs: number | null;
  /** The lowest limit while the load was light after the drift, as a share of the configured one. */
  lowestFactor: number;
  /** After the drift began, until the limit was the configured one again for the rest of the light phase; null: never. */
  limitBackMs: number | null;
  /** The light and the heavy clients' requests sent in the light phase of the drift that succeeded. */
  lightSuccess: number;
  heavySuccess: number;
  /** The overload while drifted: goodput over C, the origin's p99 after its onset, the light clients' success. */
  overload: { goodputShare: number; settledP99Ms: number; lightSuccess: number; originRefusals: number };
  /** After the overload, until the limit is the configured one again; null: never. */
  afterBackMs: number | null;
};

export function driftFigures(
  scenario: Scenario,
  requests: RequestRecord[],
  served: ServedRecord[],
  originRefusedAtMs: number[],
  factors: FactorPoint[],
  drift: { atMs: number; drift: boolean }[],
): DriftFigures {
  const phase = (name: string) => {
    const found = phaseBounds(scenario).find((p) => p.name === name);
    if (found === undefined) throw new Error(`the drift scenario has a phase "${name}"`);
    return found;
  };
  const [before, light, overload] = [phase("before"), phase("drift"), phase("overload")];
  const latencies = latenciesIn(served);
  const sent = (from: number, to: number, light: boolean) =>
    requests.filter((r) => r.sentMs >= from && r.sentMs < to && isLight(r.client) === light);
  const factorAt = (atMs: number) => factors.filter((f) => f.atMs <= atMs).at(-1)?.factor ?? 1;
  const inLight = factors.filter((f) => f.atMs >= light.startMs && f.atMs < light.endMs);
  const lastBelow = inLight.filter((f) => f.factor < 1).at(-1);
  const backAt = lastBelow === undefined ? light.startMs : inLight.find((f) => f.atMs > lastBelow.atMs)?.atMs;
  const reported = drift.find((d) => d.drift && d.atMs >= light.startMs);
  const settledFrom = overload.startMs + (overload.endMs - overload.startMs) / 5;
  const good = requests.filter((r) => r.outcome === "ok" && r.doneMs >= overload.startMs && r.doneMs < overload.endMs);
  const afterDown = factors.filter((f) => f.atMs < overload.endMs).at(-1)?.factor !== 1;
  const afterBack = factors.find((f) => f.atMs >= overload.endMs && f.factor === 1);
  return {
    unloadedP99Ms: percentile(latencies(before.startMs + (before.endMs - before.startMs) / 4, before.endMs), 0.99),
    driftedP99Ms: percentile(latencies((light.startMs + light.endMs) / 2, light.endMs), 0.99),
    reportedMs: reported === undefined ? null : reported.atMs - light.startMs,
    lowestFactor: Math.min(factorAt(light.startMs), ...inLight.map((f) => f.factor)),
    limitBackMs: backAt === undefined ? null : backAt - light.startMs,
    lightSuccess: okShare(sent(light.startMs, light.endMs, true)),
    heavySuccess: okShare(sent(light.startMs, light.endMs, false)),
    overload: {
      goodputShare: good.length / ((scenario.capacityPerSecond * (overload.endMs - overload.startMs)) / 1000),
      settledP99Ms: percentile(latencies(settledFrom, overload.endMs), 0.99),
      lightSuccess: okShare(sent(overload.startMs, overload.endMs, true)),
      originRefusals: originRefusedAtMs.filter((t) => t >= overload.startMs && t < overload.endMs).length,
    },
    afterBackMs: afterDown ? (afterBack ? afterBack.atMs - overload.endMs : null) : 0,
  };
}

/** Each priority's factor from `atMs` on (under a rule without priorities, the one factor for all). */
export type PriorityFactorPoint = { atMs: number; factors: Factors };

/** What the priorities scenario shows (prioritiesScenarioFromEnv). */
export type PriorityFigures = {
  /** The critical and the sheddable requests sent during the overload that succeeded. */
  criticalSuccess: number;
  sheddableSuccess: number;
  /** The critical requests sent during the whole run that succeeded. */
  criticalSuccessRun: number;
  /** Successful answers during the overload over what C allowed then, and the critical ones' share of those. */
  goodputShare: number;
  criticalGoodputShare: number;
  /** The same over the overload's last 80 % (after the onset). */
  settledGoodputShare: number;
  /** The origin's p99 during the overload, over its last 80 % (after the onset), and unloaded (the phase before), ms. */
  overloadP99Ms: number;
  settledP99Ms: number;
  unloadedP99Ms: number;
  /** The origin's own 503s during the overload. */
  originRefusals: number;
  /** After the overload, until every priority's limit is the configured one again; null: never (or no factors read). */
  limitBackMs: number | null;
  /** The lowest factor of the critical and of the sheddable requests during the run; null: no factors read. */
  lowestCritical: number | null;
  lowestSheddable: number | null;
};

export function priorityFigures(
  scenario: Scenario,
  requests: RequestRecord[],
  served: ServedRecord[],
  originRefusedAtMs: number[],
  factors: PriorityFactorPoint[] | null,
): PriorityFigures {
  const bounds = phaseBounds(scenario);
  const before = bounds.find((p) => p.name === "before");
  const overload = bounds.find((p) => p.name === "overload");
  if (before === undefined || overload === undefined)
    throw new Error("a scenario has a phase before the overload, and the overload");
  const during = (t: number, from = overload.startMs) => t >= from && t < overload.endMs;
  const settledFrom = overload.startMs + (overload.endMs - overload.startMs) / 5;
  const latencies = latenciesIn(served);
  const of = (priority: Priority) => requests.filter((r) => r.priority === priority);
  const allowed = (from: number) => (scenario.capacityPerSecond * (overload.endMs - from)) / 1000;
  const good = requests.filter((r) => r.outcome === "ok" && during(r.doneMs));
  const all = (f: Factors) => f.critical === 1 && f.default === 1 && f.sheddable === 1;
  let limitBackMs: number | null = null;
  if (factors !== null && factors.length > 0) {
    const stillDown = !all(factors.filter((f) => f.atMs < overload.endMs).at(-1)?.factors ?? factors[0]!.factors);
    const backAt = factors.find((f) => f.atMs >= overload.endMs && all(f.factors));
    limitBackMs = stillDown ? (backAt ? backAt.atMs - overload.endMs : null) : 0;
  }
  const lowest = (priority: Priority) =>
    factors === null || factors.length === 0 ? null : Math.min(1, ...factors.map((f) => f.factors[priority]));
  return {
    criticalSuccess: okShare(of("critical").filter((r) => during(r.sentMs))),
    sheddableSuccess: okShare(of("sheddable").filter((r) => during(r.sentMs))),
    criticalSuccessRun: okShare(of("critical")),
    goodputShare: good.length / allowed(overload.startMs),
    criticalGoodputShare: good.filter((r) => r.priority === "critical").length / allowed(overload.startMs),
    settledGoodputShare: good.filter((r) => r.doneMs >= settledFrom).length / allowed(settledFrom),
    overloadP99Ms: percentile(latencies(overload.startMs, overload.endMs), 0.99),
    settledP99Ms: percentile(latencies(settledFrom, overload.endMs), 0.99),
    unloadedP99Ms: percentile(latencies(before.startMs + (before.endMs - before.startMs) / 4, before.endMs), 0.99),
    originRefusals: originRefusedAtMs.filter((t) => during(t)).length,
    limitBackMs,
    lowestCritical: lowest("critical"),
    lowestSheddable: lowest("sheddable"),
  };
}

const pct = (x: number) => `${(x * 100).toFixed(1)} %`;
const ms = (x: number | null) => (x === null ? "never" : `${(x / 1000).toFixed(1)} s`);

/** One table row per variant of the drift scenario. */
export function driftTable(rows: { variant: string; figures: DriftFigures }[]): string {
  return [
    "| variant | origin p99: before, drifted | drift reported | lowest limit | limit back | light clients ok | heavy client ok | overload: goodput / C, p99 after onset (÷ drifted), light ok | limit back after the overload |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ...rows.map(({ variant, figures: f }) =>
      [
        variant,
        `${f.unloadedP99Ms.toFixed(0)} ms, ${f.driftedP99Ms.toFixed(0)} ms`,
        ms(f.reportedMs),
        pct(f.lowestFactor),
        ms(f.limitBackMs),
        pct(f.lightSuccess),
        pct(f.heavySuccess),
        `${pct(f.overload.goodputShare)}, ${f.overload.settledP99Ms.toFixed(0)} ms (${(f.overload.settledP99Ms / f.driftedP99Ms).toFixed(1)} ×), ${pct(f.overload.lightSuccess)}`,
        ms(f.afterBackMs),
      ]
        .join(" | ")
        .replace(/^/, "| ")
        .replace(/$/, " |"),
    ),
  ].join("\n");
}

/** One table row per variant. */
export function figuresTable(rows: { variant: string; figures: Figures }[]): string {
  return [
    "| variant | goodput / C (overload) | origin p99 overload (after onset) | unloaded p99 | light clients ok | heavy client ok | origin 503s | origin back | limit back | lowest limit | C halved, followed in: then goodput / C, light ok, p99 ÷ unloaded |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
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
        f.followed === null
          ? "–"
          : f.followed.afterMs === null
            ? "never"
            : `${ms(f.followed.afterMs)}: ${pct(f.followed.goodputShare)}, ${pct(f.followed.lightSuccess)}, ${f.followed.p99Ratio.toFixed(1)} ×`,
      ]
        .join(" | ")
        .replace(/^/, "| ")
        .replace(/$/, " |"),
    ),
  ].join("\n");
}

/** One table row per variant of the priorities scenario. */
export function priorityTable(rows: { variant: string; figures: PriorityFigures }[]): string {
  const factor = (x: number | null) => (x === null ? "–" : x >= 0.001 ? pct(x) : x.toExponential(1));
  return [
    "| variant | critical ok (spike) | sheddable ok (spike) | critical ok (run) | goodput / C (spike; critical's part) | goodput / C after onset | origin p99 spike (after onset) | unloaded p99 | after onset ÷ unloaded | origin 503s | limit back | lowest factor: critical, sheddable |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map(({ variant, figures: f }) =>
      [
        variant,
        pct(f.criticalSuccess),
        pct(f.sheddableSuccess),
        pct(f.criticalSuccessRun),
        `${pct(f.goodputShare)} (${pct(f.criticalGoodputShare)})`,
        pct(f.settledGoodputShare),
        `${f.overloadP99Ms.toFixed(0)} ms (${f.settledP99Ms.toFixed(0)} ms)`,
        `${f.unloadedP99Ms.toFixed(0)} ms`,
        `${(f.settledP99Ms / f.unloadedP99Ms).toFixed(1)} ×`,
        String(f.originRefusals),
        f.lowestCritical === null ? "–" : ms(f.limitBackMs),
        `${factor(f.lowestCritical)}, ${factor(f.lowestSheddable)}`,
      ]
        .join(" | ")
        .replace(/^/, "| ")
        .replace(/$/, " |"),
    ),
  ].join("\n");
}
