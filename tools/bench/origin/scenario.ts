/**
 * @module
 * What `npm run bench:origin` plays: the origin's capacity, the clients, and
 * the three phases (half of C, then three times C, then half of C again),
 * with their lengths from the environment so a short run is possible; and
 * the arrivals it makes, the same on every run (seeded).
 *
 * The many light clients send the same in every phase, a third of C
 * together, well within a fair share of the origin; the one heavy client
 * sends the rest, and makes the overload. In the priorities scenario there
 * is no heavy client: the light clients' steady requests are critical, and
 * the rest, a spike, is sheddable and sent by the same clients.
 */
import type { Priority } from "../../../src/core/priorities.ts";
import { seededRandom } from "../../accuracy/random.ts";
import { SimulatedOrigin } from "./model.ts";

export type Scenario = {
  /** C, requests per second. */
  capacityPerSecond: number;
  /** When, from the start, C drops to `halvedCapacity` (null: never). */
  halveAtMs: number | null;
  /** When, from the start, the origin's latency drifts up by `driftExtraMs` (null: never), C unchanged. */
  driftAtMs: number | null;
  driftExtraMs: number;
  /** Each answer's extra delay is `driftExtraMs` × a uniform factor in [1 − this, 1 + this]: a busy host is noisy. */
  driftJitter: number;
  /** Phases: how long, and the total demand as a multiple of C. */
  phases: { name: string; durationMs: number; load: number }[];
  lightClients: number;
  /** The light clients' demand together, as a share of C, in every phase. */
  lightShare: number;
  /**
   * The priorities scenario: the light clients' requests are critical, and
   * the rest of each phase's demand is sheddable, spread over the same
   * clients (no heavy client). Absent: false.
   */
  priorities?: boolean;
  /** A client gives up on an answer after this long. */
  clientTimeoutMs: number;
  workers: number;
  queueBound: number;
  jitter: number;
  seed: number;
};

const seconds = (name: string, fallback: number): number => Number(process.env[name] ?? fallback) * 1000;

/**
 * The scenario of the environment: ORIGIN_C (requests/s, default 200),
 * ORIGIN_BEFORE, ORIGIN_OVERLOAD, ORIGIN_AFTER (seconds: 20, 60, 30),
 * ORIGIN_HALVE ("1": C halves halfway through the overload), ORIGIN_WORKERS
 * (the origin's requests served at once, default 10), ORIGIN_CLIENTS (the
 * light clients, default 50).
 */
export function scenarioFromEnv(halve = process.env.ORIGIN_HALVE === "1"): Scenario {
  const capacityPerSecond = Number(process.env.ORIGIN_C ?? 200);
  const before = seconds("ORIGIN_BEFORE", 20);
  const overload = seconds("ORIGIN_OVERLOAD", 60);
  return {
    capacityPerSecond,
    halveAtMs: halve ? before + overload / 2 : null,
    driftAtMs: null,
    driftExtraMs: 0,
    driftJitter: 0,
    phases: [
      { name: "before", durationMs: before, load: 0.5 },
      { name: "overload", durationMs: overload, load: 3 },
      { name: "after", durationMs: seconds("ORIGIN_AFTER", 30), load: 0.5 },
    ],
    lightClients: Number(process.env.ORIGIN_CLIENTS ?? 50),
    lightShare: 1 / 3,
    clientTimeoutMs: 2_000,
    workers: Number(process.env.ORIGIN_WORKERS ?? 10),
    // Two seconds of work: a full queue answers later than clients wait.
    queueBound: Math.round(capacityPerSecond * 2),
    jitter: 0.2,
    seed: Number(process.env.ORIGIN_SEED ?? 1),
  };
}

/**
 * The baseline drift of issue 37: the same clients and origin, but after
 * the phase before, the origin's latency rises by three of its service
 * times (1.7 times the adaptive rule's target, twice its unloaded p99),
 * with its capacity unchanged: a slower day, not an overload. The load
 * stays light for ORIGIN_DRIFT seconds (40), then three times C for
 * ORIGIN_OVERLOAD (20 here), then light again for ORIGIN_AFTER (20 here),
 * the latency drifted throughout.
 */
export function driftScenarioFromEnv(): Scenario {
  const base = scenarioFromEnv(false);
  const before = seconds("ORIGIN_BEFORE", 20);
  const serviceMs = (base.workers * 1000) / base.capacityPerSecond;
  return {
    ...base,
    driftAtMs: before,
    driftExtraMs: 3 * serviceMs,
    driftJitter: Number(process.env.ORIGIN_DRIFT_JITTER ?? 0),
    phases: [
      { name: "before", durationMs: before, load: 0.5 },
      { name: "drift", durationMs: seconds("ORIGIN_DRIFT", 40), load: 0.5 },
      { name: "overload", durationMs: seconds("ORIGIN_OVERLOAD", 20), load: 3 },
      { name: "after", durationMs: seconds("ORIGIN_AFTER", 20), load: 0.5 },
    ],
  };
}

/**
 * Priorities (issue 37): a steady half of C of critical requests from the
 * light clients in every phase, and during the overload a spike of
 * sheddable requests at ORIGIN_SPIKE (12) times C from the same clients, so
 * that a limit per client alone cannot keep the critical ones; the phases'
 * lengths as in the scenario (ORIGIN_BEFORE, ORIGIN_OVERLOAD, ORIGIN_AFTER).
 */
export function prioritiesScenarioFromEnv(): Scenario {
  const base = scenarioFromEnv(false);
  const spike = Number(process.env.ORIGIN_SPIKE ?? 12);
  return {
    ...base,
    priorities: true,
    lightShare: 0.5,
    phases: base.phases.map((phase) => ({ ...phase, load: phase.name === "overload" ? 0.5 + spike : 0.5 })),
  };
}

/** One request: when it is sent, and by whom (client 0 is the heavy one); its priority in the priorities scenario. */
export type Arrival = { atMs: number; client: number; priority?: Priority };

export const isLight = (client: number): boolean => client !== 0;

/** Where each phase starts and ends, from the start of the run. */
export function phaseBounds(scenario: Scenario): { name: string; startMs: number; endMs: number }[] {
  let startMs = 0;
  return scenario.phases.map((phase) => {
    const bounds = { name: phase.name, startMs, endMs: startMs + phase.durationMs };
    startMs = bounds.endMs;
    return bounds;
  });
}

/** Every request of the run, in time order: Poisson arrivals per client, at the rates of each phase. */
export function arrivals(scenario: Scenario): Arrival[] {
  const random = seededRandom(scenario.seed);
  const all: Arrival[] = [];
  const c = scenario.capacityPerSecond;
  for (const phase of phaseBounds(scenario)) {
    const load = scenario.phases.find((p) => p.name === phase.name)!.load;
    const lightRate = (scenario.lightShare * c) / scenario.lightClients;
    const heavyRate = Math.max(0, load - scenario.lightShare) * c;
    const stream = (client: number, perSecond: number, priority?: Priority) => {
      if (perSecond <= 0) return;
      for (let t = phase.startMs + random.exponential(perSecond / 1000); t < phase.endMs; ) {
        all.push(priority === undefined ? { atMs: t, client } : { atMs: t, client, priority });
        t += random.exponential(perSecond / 1000);
      }
    };
    if (scenario.priorities) {
      for (let client = 1; client <= scenario.lightClients; client++) {
        stream(client, lightRate, "critical");
        stream(client, heavyRate / scenario.lightClients, "sheddable");
      }
      continue;
    }
    const rates = [heavyRate, ...Array.from({ length: scenario.lightClients }, () => lightRate)];
    rates.forEach((perSecond, client) => {
      stream(client, perSecond);
    });
  }
  return all.sort((a, b) => a.atMs - b.atMs);
}

/** The scenario's origin, the same behind the HTTP server (server.ts) and in virtual time (simulate.ts). */
export const originOf = (scenario: Scenario): SimulatedOrigin =>
  new SimulatedOrigin({
    capacityPerSecond: scenario.capacityPerSecond,
    workers: scenario.workers,
    queueBound: scenario.queueBound,
    jitter: scenario.jitter,
    seed: scenario.seed + 1,
  });
