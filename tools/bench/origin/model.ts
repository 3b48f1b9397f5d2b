/**
 * @module
 * The simulated origin of `npm run bench:origin`: a pool of workers in front
 * of one FIFO queue. Its capacity is C requests per second (`workers` ÷ the
 * mean service time): below C a request is answered in its service time;
 * above C the queue grows, and each request waits for the ones ahead of it;
 * past `queueBound` waiting requests it is refused at once with a 503. Work
 * is never cancelled: a request whose client gave up is still served, as a
 * real origin does, which is how an overload turns into a collapse.
 *
 * Time is a parameter, so the same model runs in virtual time (the
 * simulation) and behind a real HTTP server (server.ts). Arrivals must come
 * in time order.
 *
 * Its latency can also drift (`setExtraDelay`): every answer then comes that
 * much later, though no worker is busy any longer (a slower dependency, a
 * busier network): a slower day, not less capacity.
 */
import { type Random, seededRandom } from "../../accuracy/random.ts";

export type OriginOptions = {
  /** C: requests per second it can serve, on average. */
  capacityPerSecond: number;
  /** Requests served at once; the mean service time is `workers / C`. */
  workers: number;
  /** Waiting requests at most; one more is refused at once. */
  queueBound: number;
  /** Each service time is the mean × a uniform factor in [1 − jitter, 1 + jitter]. */
  jitter: number;
  seed: number;
};

/** What became of one arrival: served from `startMs` to `finishMs`, or refused at once. */
export type OriginAnswer = { kind: "served"; startMs: number; finishMs: number } | { kind: "refused" };

export class SimulatedOrigin {
  /** When each worker is next free. */
  private readonly freeAtMs: Float64Array;
  /** Start times of the requests waiting, in order (FIFO makes them non-decreasing). */
  private waiting: number[] = [];
  private waitingHead = 0;
  private serviceMs: number;
  /** Added to every answer from now on, beyond its service: no worker is busy for it… */
  private extraMs = 0;
  /** …times a uniform factor in [1 − this, 1 + this]. */
  private extraJitter = 0;
  private readonly random: Random;
  private readonly options: OriginOptions;

  constructor(options: OriginOptions) {
    this.options = options;
    this.freeAtMs = new Float64Array(options.workers);
    this.serviceMs = (options.workers * 1000) / options.capacityPerSecond;
    this.random = seededRandom(options.seed);
  }

  /** The capacity from now on (a deploy, a cold cache): requests arriving later get the new service time. */
  setCapacity(capacityPerSecond: number): void {
    this.serviceMs = (this.options.workers * 1000) / capacityPerSecond;
  }

  /** Every answer from now on comes `extraMs` later (± `jitter` of it), the capacity unchanged (a baseline drift). */
  setExtraDelay(extraMs: number, jitter = 0): void {
    this.extraMs = extraMs;
    this.extraJitter = jitter;
  }

  get capacityPerSecond(): number {
    return (this.options.workers * 1000) / this.serviceMs;
  }

  /** How many requests wait for a worker at `nowMs`. */
  queueLength(nowMs: number): number {
    while (this.waitingHead < this.waiting.length && this.waiting[this.waitingHead]! <= nowMs) this.waitingHead++;
    if (this.waitingHead > 4096) {
      this.waiting = this.waiting.slice(this.waitingHead);
      this.waitingHead = 0;
    }
    return this.waiting.length - this.waitingHead;
  }

  /** A request arriving at `nowMs` (no earlier than the last). */
  arrive(nowMs: number): OriginAnswer {
    if (this.queueLength(nowMs) >= this.options.queueBound) return { kind: "refused" };
    let worker = 0;
    for (let i = 1; i < this.freeAtMs.length; i++) if (this.freeAtMs[i]! < this.freeAtMs[worker]!) worker = i;
    const startMs = Math.max(nowMs, this.freeAtMs[worker]!);
    const { jitter } = this.options;
    const doneMs = startMs + this.serviceMs * this.random.uniform(1 - jitter, 1 + jitter);
    this.freeAtMs[worker] = doneMs;
    if (startMs > nowMs) this.waiting.push(startMs);
    const extraMs =
      this.extraMs === 0 ? 0 : this.extraMs * this.random.uniform(1 - this.extraJitter, 1 + this.extraJitter);
    return { kind: "served", startMs, finishMs: doneMs + extraMs };
  }
}
