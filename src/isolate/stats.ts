/**
 * @module
 * What an isolate counts of its own decisions, for the statistics object:
 * per minute and rule, each outcome; the latency of decisions that called an
 * object; the clients it refused; failures by reason. Counting is a few map
 * updates on the request's path; sending is one call at most every 10 s, in
 * the background. A flush that does not arrive is counted as lost, with the
 * decisions it held, and the next flush says so.
 */
import { SpaceSaving } from "../core/heavy-hitters.ts";
import type { Rule } from "../core/rules.ts";
import { atMostCharacters, firstCharacters } from "../core/text.ts";
import { withDeadline } from "../object/client.ts";
import type { StatsObject } from "../object/stats.ts";
import {
  LATENCY_BOUNDS_MS,
  latencyBucket,
  OUTCOMES,
  type StatsBatch,
  type StatsOutcome,
} from "../object/stats-protocol.ts";
import { logEvent } from "../observe/log.ts";

/** The binding of the statistics object. */
export type StatsNamespace = Pick<DurableObjectNamespace<StatsObject>, "idFromName" | "get">;

/** The one statistics object's name. */
export const STATS_OBJECT = "stats";
export const DEFAULT_FLUSH_EVERY_MS = 10_000;
/** How long a flush may take before it is counted as lost. */
export const FLUSH_DEADLINE_MS = 5_000;
/** Clients kept per rule between flushes; the sketch keeps the most refused. */
const REFUSED_PER_RULE = 128;
/** Refused clients sent per rule with one flush. */
const REFUSED_SENT = 32;
/**
 * The most characters of a refused client's key as written (`STATS_RAW_KEYS`)
 * kept between flushes, "…" included: the isolate keeps up to
 * 8 × {@link REFUSED_PER_RULE} of them, and an attacker's key can be as long
 * as a request's headers. (The statistics object keeps as many.)
 */
export const MAX_CLIENT_CHARS = 512;

const OUTCOME_INDEX = Object.fromEntries(OUTCOMES.map((o, i) => [o, i])) as Record<StatsOutcome, number>;

export class StatsRecorder {
  /** Every rule's count per minute since the last flush, in the order they began. */
  private counts: StatsBatch["counts"] = [];
  /** Per rule id, its latest entry of {@link counts}. */
  private current = new Map<string, StatsBatch["counts"][number]>();
  private latency = new Map<number, number[]>();
  private refused = new Map<string, SpaceSaving>();
  private clients = new Map<string, string>();
  private failures: Record<string, number> = {};
  private decisions = 0;
  private readonly lost = { flushes: 0, decisions: 0 };
  private lastFlushMs: number | null = null;
  private flushing = false;
  private readonly flushEveryMs: number;

  constructor(flushEveryMs = DEFAULT_FLUSH_EVERY_MS) {
    this.flushEveryMs = flushEveryMs;
  }

  /** One rule's outcome for one request. */
  count(rule: Rule, outcome: StatsOutcome, nowMs: number): void {
    const minute = Math.floor(nowMs / 60_000);
    // The rule's entry for this minute: looked up by rule id, a string the rule holds, so no key is built per request.
    let entry = this.current.get(rule.id);
    if (entry === undefined || entry.minute !== minute) {
      entry = { minute, rule: rule.id, counts: new Array<number>(OUTCOMES.length).fill(0) };
      this.current.set(rule.id, entry);
      this.counts.push(entry);
    }
    entry.counts[OUTCOME_INDEX[outcome]]!++;
    this.decisions++;
    this.lastFlushMs ??= nowMs;
  }

  /** A client a rule refused: its key's hash, and the key as written when raw keys are on. */
  refusedClient(rule: Rule, hash: string, client: (() => string) | null): void {
    let sketch = this.refused.get(rule.id);
    if (sketch === undefined) {
      sketch = new SpaceSaving(REFUSED_PER_RULE);
      this.refused.set(rule.id, sketch);
    }
    sketch.add(hash);
    if (client !== null && !this.clients.has(hash) && this.clients.size < REFUSED_PER_RULE * 8) {
      this.clients.set(hash, bounded(client()));
    }
  }

  /** How long a decision that called an object took. */
  latencyOf(ms: number, nowMs: number): void {
    const minute = Math.floor(nowMs / 60_000);
    let buckets = this.latency.get(minute);
    if (buckets === undefined) {
      buckets = new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0);
      this.latency.set(minute, buckets);
    }
    buckets[latencyBucket(ms)]!++;
  }

  /** A call to an object that failed, by reason. */
  failure(reason: string): void {
    this.failures[reason] = (this.failures[reason] ?? 0) + 1;
  }

  /** Whether a flush is due: there is something to send, the last went out long enough ago, and none is under way. */
  due(nowMs: number): boolean {
    return (
      !this.flushing && this.lastFlushMs !== null && this.decisions > 0 && nowMs - this.lastFlushMs >= this.flushEveryMs
    );
  }

  /** What to send, taken out of the recorder; {@link settled} must follow. */
  take(nowMs: number): { batch: StatsBatch; decisions: number } {
    const batch: StatsBatch = {
      counts: this.counts,
      latency: [...this.latency].map(([minute, buckets]) => ({ minute, buckets })),
      refused: [...this.refused].map(([rule, sketch]) => {
        const top = sketch.top(REFUSED_SENT);
        // A client left out may have been refused as often as the last one sent.
        const floor = top.length < sketch.size ? Math.max(sketch.floor, top.at(-1)?.count ?? 0) : sketch.floor;
        const clients = top.map(({ key, count, error }) => {
          const client = this.clients.get(key);
          return client === undefined ? { hash: key, count, error } : { hash: key, client, count, error };
        });
        return { rule, floor, clients };
      }),
      failures: this.failures,
      lost: { ...this.lost },
    };
    const decisions = this.decisions;
    this.counts = [];
    this.current = new Map();
    this.latency = new Map();
    this.refused = new Map();
    this.clients = new Map();
    this.failures = {};
    this.decisions = 0;
    this.lastFlushMs = nowMs;
    this.flushing = true;
    return { batch, decisions };
  }

  /** The flush arrived (its lost counts are reported), or it did not (it is lost). */
  settled(sent: { batch: StatsBatch; decisions: number }, arrived: boolean): void {
    this.flushing = false;
    if (arrived) {
      this.lost.flushes -= sent.batch.lost.flushes;
      this.lost.decisions -= sent.batch.lost.decisions;
    } else {
      this.lost.flushes++;
      this.lost.decisions += sent.decisions;
    }
  }

  /** Flushes and decisions lost so far and not yet reported. */
  get unreported(): { flushes: number; decisions: number } {
    return { ...this.lost };
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * A key cut to {@link MAX_CLIENT_CHARS}, marked "…" where it was, as a
 * string of its own: a slice of a string, even one made where the key was
 * written, may keep the whole of the string it came from alive (V8 makes a
 * long slice a view of its parent), and decoding makes a copy. Once per
 * client and flush, with `STATS_RAW_KEYS` only.
 */
function bounded(key: string): string {
  const kept = atMostCharacters(key, MAX_CLIENT_CHARS) ? key : `${firstCharacters(key, MAX_CLIENT_CHARS - 1)}…`;
  return decoder.decode(encoder.encode(kept));
}

/**
 * Sends what the recorder holds to the statistics object, when a flush is
 * due (or `force`): one call, with a deadline. Never throws.
 */
export async function flushStats(
  recorder: StatsRecorder,
  ns: StatsNamespace,
  { nowMs, force = false }: { nowMs: number; force?: boolean },
): Promise<void> {
  if (!(force ? recorder.due(Number.POSITIVE_INFINITY) : recorder.due(nowMs))) return;
  const sent = recorder.take(nowMs);
  let arrived = false;
  try {
    const stub = ns.get(ns.idFromName(STATS_OBJECT));
    const done = await withDeadline(stub.record(sent.batch), FLUSH_DEADLINE_MS);
    arrived = done.ok;
    if (!done.ok) logEvent({ event: "stats_flush_lost", message: done.message, decisions: sent.decisions }, "warn");
  } catch (error) {
    logEvent({ event: "stats_flush_lost", message: (error as Error).message, decisions: sent.decisions }, "warn");
  } finally {
    recorder.settled(sent, arrived);
  }
}
