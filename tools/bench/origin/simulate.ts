/**
 * @module
 * The scenario in virtual time, in Node, against the simulated origin: no
 * limiter, a fixed limit at C, and an adaptive rule run by the product's own
 * controller (src/core/controller.ts) through isolates that report every
 * interval and learn the factor in the answer, and clients' keys counted by
 * the product's own sliding window; and the published controllers that
 * limit the requests in flight at one proxy in front of the origin (Envoy's
 * gradient controller, Netflix's Gradient2: concurrency-limiter.ts). A minute
 * of overload takes well under a second to simulate, which is how the controller's parameters were chosen
 * (docs/adaptive.md): the same runs with other parameters, side by side.
 * Under a rule with priorities, each request's priority is found by the
 * product's matchers, the controller's factor goes through the product's
 * stages, and each request is checked with its priority's factor against
 * its client's one window.
 */
import {
  CONTROLLER_PARAMS,
  type ControllerParams,
  type ControllerState,
  initialState,
  lateMsOf,
  observe,
  reportEveryMs,
  type Step,
  scaledLimit,
} from "../../../src/core/controller.ts";
import { slowShareOf } from "../../../src/core/health.ts";
import { requestPath } from "../../../src/core/paths.ts";
import {
  type Factors,
  factorsAt,
  type Priorities,
  type Priority,
  type PriorityFacts,
  priorityOf,
  stagesOf,
} from "../../../src/core/priorities.ts";
import { admit, emptyState, evaluate, type WindowLimit, type WindowState } from "../../../src/core/sliding-window.ts";
import { HealthReporter, newFlight } from "../../../src/isolate/health-reporter.ts";
import type { FactorAnswer } from "../../../src/object/controller-protocol.ts";
import { type Random, seededRandom } from "../../accuracy/random.ts";
import type { ConcurrencyLimiter, Flight, Schedule } from "./concurrency-limiter.ts";
import type { FactorPoint, Outcome, PriorityFactorPoint, RequestRecord, ServedRecord } from "./metrics.ts";
import { arrivals, originOf, phaseBounds, type Scenario } from "./scenario.ts";

/** How the requests are limited. */
export type Limiter =
  | { kind: "none" }
  /** One count for all clients: C requests per second. */
  | { kind: "fixed"; limit: number; periodMs: number }
  /** One count per client, at `limit` per period times the controller's factor. */
  | {
      kind: "adaptive";
      limit: number;
      periodMs: number;
      floor: number;
      latencyMs: number;
      percentile: number;
      errorShare: number;
      params?: Partial<ControllerParams>;
      /** The rule's priorities (its `critical`, `sheddable` and `reserve`); absent, every request is default. */
      priorities?: Priorities;
      /** Isolates the traffic is spread over, each reporting on its own. */
      isolates?: number;
      /** One way, isolate to controller, in ms. */
      delayMs?: number;
      /** Called with each report's step and the controller's state after it, for tracing. */
      onStep?: (atMs: number, step: Step, state: ControllerState) => void;
    }
  /**
   * No limiter can do better at a rate: one that knows the origin's
   * capacity at every instant (the halving included) and each phase's
   * demand, admits every light client's request, and thins the heavy
   * client's at random so that the origin is sent `share` of its capacity
   * on average. What reaches the origin is then as random as what was
   * sent (Poisson), and its queue is the one such arrivals make.
   */
  | { kind: "oracle"; share: number }
  /** One limit on the requests in flight, for all clients, at a proxy that sees every request and answer. */
  | {
      kind: "concurrency";
      /** Builds the limiter, with the simulation's clock for its timers and a seeded random. */
      create: (schedule: Schedule, random: Random) => ConcurrencyLimiter;
    };

export type SimulationResult = {
  requests: RequestRecord[];
  served: ServedRecord[];
  originRefusedAtMs: number[];
  /**
   * The limit over time as a share of the configured one (adaptive); for a
   * concurrency limit, as a share of its value at the overload's onset (at
   * most 1), from the onset on.
   */
  factors: FactorPoint[] | null;
  /** The adaptive rule's factor of each priority at every change (under a rule without priorities, the one factor for all). */
  priorityFactors: PriorityFactorPoint[] | null;
  /** A concurrency limit's value at every change. */
  limits: { atMs: number; limit: number }[] | null;
  /** When the adaptive rule's controller said the origin is slower than its target while calm (a drift), and when it stopped. */
  drift: { atMs: number; drift: boolean }[];
};

/** A binary heap of events by time; ties in the order pushed. */
class Events {
  private items: { atMs: number; seq: number; run: () => void }[] = [];
  private seq = 0;
  push(atMs: number, run: () => void): void {
    const items = this.items;
    items.push({ atMs, seq: this.seq++, run });
    for (let i = items.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (!this.before(items[i]!, items[parent]!)) break;
      [items[i], items[parent]] = [items[parent]!, items[i]!];
      i = parent;
    }
  }
  pop(): { atMs: number; run: () => void } | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last) {
      items[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < items.length && this.before(items[l]!, items[m]!)) m = l;
        if (r < items.length && this.before(items[r]!, items[m]!)) m = r;
        if (m === i) break;
        [items[i], items[m]] = [items[m]!, items[i]!];
        i = m;
      }
    }
    return top;
  }
  private before(a: { atMs: number; seq: number }, b: { atMs: number; seq: number }): boolean {
    return a.atMs < b.atMs || (a.atMs === b.atMs && a.seq < b.seq);
  }
}

/** An isolate of the adaptive rule: the product's own reporter, and its requests in flight. */
type Isolate = { reporter: HealthReporter };

export function simulate(scenario: Scenario, limiter: Limiter): SimulationResult {
  const events = new Events();
  const origin = originOf(scenario);
  const random = seededRandom(scenario.seed + 2);
  const thinned = seededRandom(scenario.seed + 4);
  /** The share of the heavy client's requests at `atMs` that sends the origin `share` of its capacity then. */
  const oracleShare = (share: number, atMs: number): number => {
    const c = scenario.capacityPerSecond;
    const capacity = scenario.halveAtMs !== null && atMs >= scenario.halveAtMs ? c / 2 : c;
    const phase = phaseBounds(scenario).find((p) => atMs >= p.startMs && atMs < p.endMs);
    const load = scenario.phases.find((p) => p.name === phase?.name)?.load ?? 0;
    const heavy = Math.max(0, load - scenario.lightShare) * c;
    return heavy === 0 ? 1 : Math.min(1, Math.max(0, share * capacity - scenario.lightShare * c) / heavy);
  };
  const requests: RequestRecord[] = [];
  const served: ServedRecord[] = [];
  const originRefusedAtMs: number[] = [];
  const windows = new Map<number, WindowState>();
  const factors: FactorPoint[] | null = limiter.kind === "adaptive" ? [{ atMs: 0, factor: 1 }] : null;
  if (scenario.halveAtMs !== null) {
    events.push(scenario.halveAtMs, () => origin.setCapacity(scenario.capacityPerSecond / 2));
  }
  if (scenario.driftAtMs !== null) {
    events.push(scenario.driftAtMs, () => origin.setExtraDelay(scenario.driftExtraMs, scenario.driftJitter));
  }

  // The adaptive rule's controller, and its isolates, each with the product's reporter.
  const adaptive = limiter.kind === "adaptive" ? limiter : null;
  const params: ControllerParams = { ...CONTROLLER_PARAMS, ...adaptive?.params };
  const priorities = adaptive?.priorities;
  // The stages as the rule's controller object makes them (controller-book.ts): each request counts one.
  const stages = adaptive && priorities && stagesOf(priorities, adaptive.limit, 1, adaptive.floor / adaptive.limit);
  const target = adaptive && {
    slowShare: slowShareOf(adaptive),
    errorShare: adaptive.errorShare,
    minFactor: adaptive.floor / adaptive.limit,
    latencyMs: adaptive.latencyMs,
    ...(stages ? { stages } : {}),
  };
  const rule = adaptive && {
    id: "per-client",
    limit: adaptive.limit,
    adaptive: {
      latencyMs: adaptive.latencyMs,
      percentile: adaptive.percentile,
      errorShare: adaptive.errorShare,
      floor: adaptive.floor,
      ...(priorities ? { priorities } : {}),
    },
  };
  const factorsOf = (factor: number): Factors =>
    stages ? factorsAt(stages, factor) : { critical: factor, default: factor, sheddable: factor };
  const priorityFactors: PriorityFactorPoint[] | null = adaptive ? [{ atMs: 0, factors: factorsOf(1) }] : null;
  const path = requestPath("/api/x");
  /** A request's priority under the rule, by the product's matchers on the header it carries (undefined: no priorities). */
  const priorityFor = (marked: Priority | undefined): Priority | undefined => {
    if (!priorities) return undefined;
    const facts: PriorityFacts = {
      method: "GET",
      path,
      header: (name) => (name === "x-priority" ? (marked ?? null) : null),
      claim: () => null,
      tier: null,
    };
    return priorityOf(priorities, facts, false);
  };
  let controller: ControllerState = initialState();
  const drift: SimulationResult["drift"] = [];
  const isolates: Isolate[] = rule
    ? Array.from({ length: adaptive?.isolates ?? 8 }, () => ({ reporter: new HealthReporter(rule) }))
    : [];
  const delayMs = adaptive?.delayMs ?? 10;

  /** Sends the isolate's report if one is due (as the product does on every request and answer), and applies the answer. */
  const sendIfDue = (isolate: Isolate, atMs: number) => {
    if (!adaptive || !target) return;
    const report = isolate.reporter.due(atMs);
    if (report === null) return;
    events.push(atMs + delayMs, () => {
      const before = controller;
      const observed = observe(
        controller,
        report.counts,
        report.version,
        atMs + delayMs,
        target,
        params,
        report.lateMs ?? null,
      );
      controller = observed.state;
      adaptive.onStep?.(atMs + delayMs, observed.step, controller);
      if (controller.factor !== before.factor) {
        factors!.push({ atMs: atMs + delayMs, factor: controller.factor });
        priorityFactors!.push({ atMs: atMs + delayMs, factors: factorsOf(controller.factor) });
      }
      if (controller.drift !== before.drift) drift.push({ atMs: atMs + delayMs, drift: controller.drift });
      const answer: FactorAnswer = {
        nowMs: atMs + delayMs,
        factor: stages ? factorsOf(controller.factor).default : controller.factor,
        ...(stages ? { factors: factorsOf(controller.factor) } : {}),
        version: controller.version,
        mode: controller.mode,
        limit: scaledLimit(adaptive.limit, controller.factor),
        reportInMs: reportEveryMs(controller, params),
        lateMs: lateMsOf(controller, params, adaptive.latencyMs),
        drift: controller.drift,
      };
      events.push(atMs + 2 * delayMs, () => isolate.reporter.landed(answer));
    });
  };

  const record = (client: number, sentMs: number, doneMs: number, outcome: Outcome, marked?: Priority) =>
    requests.push(
      marked === undefined
        ? { client, sentMs, doneMs, outcome }
        : { client, sentMs, doneMs, outcome, priority: marked },
    );

  /**
   * The limiter's decision for a request of `client` at `nowMs` (through
   * `isolate`, for the adaptive rule), checked with its priority's factor
   * against its client's one window.
   */
  const decide = (
    client: number,
    atMs: number,
    isolate: Isolate | undefined,
    priority: Priority | undefined,
  ): "admitted" | "refused" | "shed" => {
    if (limiter.kind === "none" || limiter.kind === "concurrency") return "admitted";
    if (limiter.kind === "oracle")
      return client !== 0 || thinned.next() < oracleShare(limiter.share, atMs) ? "admitted" : "refused";
    const nowMs = Math.floor(atMs);
    const key = limiter.kind === "fixed" ? -1 : client;
    const configured: WindowLimit = { limit: limiter.limit, periodMs: limiter.periodMs, precision: 1, strict: false };
    const factor = limiter.kind === "adaptive" && isolate ? isolate.reporter.factorOf(priority) : 1;
    // A priority with nothing left (factor 0) is refused at the edge, counted nowhere, as the product does.
    if (factor === 0) return "shed";
    // A sheddable request while the isolate's requests in flight crowd the origin: refused at once, as the product does.
    if (isolate?.reporter.crowded(priority, atMs) === true) return "shed";
    const limit = factor < 1 ? scaledLimit(limiter.limit, factor) : limiter.limit;
    const state = windows.get(key) ?? emptyState(nowMs, configured);
    const now = evaluate(state, nowMs, { ...configured, limit });
    if (limiter.kind === "adaptive") isolate?.reporter.peak(now.weighted / limiter.limit);
    if (now.allowed) {
      windows.set(key, admit(now.state));
      return "admitted";
    }
    windows.set(key, now.state);
    return limit < limiter.limit && evaluate(state, nowMs, configured).allowed ? "shed" : "refused";
  };

  // A concurrency limit's controller, and its limit at every change.
  const limits: { atMs: number; limit: number }[] = [];
  const noteLimit = (atMs: number) => {
    if (gate && gate.limit !== limits.at(-1)?.limit) limits.push({ atMs, limit: gate.limit });
  };
  const gate =
    limiter.kind === "concurrency"
      ? limiter.create(
          (atMs, run) =>
            events.push(atMs, () => {
              run();
              noteLimit(atMs);
            }),
          seededRandom(scenario.seed + 3),
        )
      : null;
  noteLimit(0);
  /** A request through the concurrency limit: refused at once, or to the origin until answered or abandoned. */
  const throughGate = (gate: ConcurrencyLimiter, client: number, atMs: number) => {
    const flight: Flight | null = gate.admit(atMs);
    noteLimit(atMs);
    if (flight === null) return record(client, atMs, atMs, "shed");
    const answer = origin.arrive(atMs);
    const timeoutAt = atMs + scenario.clientTimeoutMs;
    if (answer.kind === "refused") originRefusedAtMs.push(atMs);
    else served.push({ arriveMs: atMs, finishMs: answer.finishMs });
    const abandoned = answer.kind === "served" && answer.finishMs > timeoutAt;
    const doneMs = answer.kind === "refused" ? atMs : Math.min(answer.finishMs, timeoutAt);
    events.push(doneMs, () => {
      if (abandoned) gate.abandoned(flight, doneMs);
      else gate.answered(flight, doneMs);
      noteLimit(doneMs);
      record(client, atMs, doneMs, answer.kind === "refused" ? "error" : abandoned ? "timeout" : "ok");
    });
  };

  for (const { atMs, client, priority: marked } of arrivals(scenario)) {
    events.push(atMs, () => {
      if (gate) return throughGate(gate, client, atMs);
      const isolate = isolates.length === 0 ? undefined : isolates[Math.floor(random.next() * isolates.length)]!;
      const reporter = isolate?.reporter;
      const priority = priorityFor(marked);
      const verdict = decide(client, atMs, isolate, priority);
      if (verdict !== "admitted") {
        if (verdict === "shed") reporter?.shed(priority);
        if (isolate) sendIfDue(isolate, atMs);
        return record(client, atMs, atMs, verdict, marked);
      }
      // A request without a body: in flight at the origin from now.
      const flight = newFlight(String(client));
      if (isolate && reporter) {
        reporter.forwarded(priority);
        reporter.started(flight, atMs);
        sendIfDue(isolate, atMs);
      }
      const answer = origin.arrive(atMs);
      const timeoutAt = atMs + scenario.clientTimeoutMs;
      if (answer.kind === "refused") originRefusedAtMs.push(atMs);
      else served.push({ arriveMs: atMs, finishMs: answer.finishMs });
      const doneMs = answer.kind === "refused" ? atMs : Math.min(answer.finishMs, timeoutAt);
      const outcome: Outcome = answer.kind === "refused" ? "error" : answer.finishMs > timeoutAt ? "timeout" : "ok";
      events.push(doneMs, () => {
        record(client, atMs, doneMs, outcome, marked);
        if (!isolate || !reporter) return;
        reporter.ended(flight);
        // A client that gives up is gone (known slow when the origin had kept it past the target).
        if (outcome === "timeout") reporter.gone(doneMs - atMs, flight.key, flight);
        else reporter.answered(outcome === "ok" ? 200 : 503, doneMs - atMs, flight.key, flight);
        sendIfDue(isolate, doneMs);
      });
    });
  }
  for (let event = events.pop(); event; event = events.pop()) event.run();
  return {
    requests,
    served,
    originRefusedAtMs,
    factors: gate ? sharesOfOnset(scenario, limits) : factors,
    priorityFactors,
    limits: gate ? limits : null,
    drift,
  };
}

/**
 * A concurrency limit as the figures' "limit": its share of what it was at
 * the overload's onset, capped at 1, from the onset on. Back at 1 is back
 * where it stood before the overload, as the adaptive rule's factor back at
 * 1 is back at its configured limit.
 */
function sharesOfOnset(scenario: Scenario, limits: { atMs: number; limit: number }[]): FactorPoint[] {
  const onsetMs = phaseBounds(scenario)[1]?.startMs ?? 0;
  const atOnset = limits.filter((l) => l.atMs <= onsetMs).at(-1)?.limit ?? limits[0]!.limit;
  return [
    { atMs: onsetMs, factor: 1 },
    ...limits.filter((l) => l.atMs > onsetMs).map((l) => ({ atMs: l.atMs, factor: Math.min(1, l.limit / atOnset) })),
  ];
}
