/**
 * @module
 * What isolates tell the statistics object, and what it answers: per-minute
 * decision counts per rule, the latency of decisions that called an object,
 * the clients refused most, and the limiter's own health. Types and pure
 * helpers only.
 */

/**
 * What became of one request under one rule. Each decided request lands in
 * exactly one outcome per rule that matched it, except under a rule that
 * admitted a request another rule refused: that rule counts nothing.
 */
export const OUTCOMES = [
  /** The request went on to the origin. */
  "admitted",
  /** This rule refused it: its object said so. */
  "refused",
  /** This rule refused it: the isolate knew of the refusal (or penalty) and asked no object. */
  "refused_cached",
  /** A shadow rule (`action = "log"`) would have refused it; it went on. */
  "shadow_refused",
  /** The rule's object could not decide, and the rule fails open: it went on. */
  "failed_open",
  /** The rule's object could not decide, and the rule fails closed: 503. */
  "failed_closed",
  /**
   * The request was held until its turn (`max_delay`), or waited in line for
   * a concurrency rule's place, and then went on: admitted, after a wait.
   */
  "held",
  /**
   * An adaptive rule refused it only because its limit is reduced while the
   * origin recovers (503, temporary reduced capacity): the limit as
   * configured would have admitted it.
   */
  "shed",
] as const;
export type StatsOutcome = (typeof OUTCOMES)[number];

/** Upper bounds of the latency histogram's buckets, in milliseconds; one more bucket holds the rest. */
export const LATENCY_BOUNDS_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] as const;

/** The bucket a latency falls in: the first bound it does not exceed, or the last bucket. */
export function latencyBucket(ms: number): number {
  for (let i = 0; i < LATENCY_BOUNDS_MS.length; i++) if (ms <= LATENCY_BOUNDS_MS[i]!) return i;
  return LATENCY_BOUNDS_MS.length;
}

/** One isolate's flush: what it decided since its last flush that reached the object. */
export type StatsBatch = {
  /** Per minute (Unix minutes) and rule id: counts in {@link OUTCOMES} order. */
  counts: { minute: number; rule: string; counts: number[] }[];
  /** Per minute: decisions that called an object, by latency bucket ({@link LATENCY_BOUNDS_MS}, then the rest). */
  latency: { minute: number; buckets: number[] }[];
  /**
   * Clients this isolate refused, per rule, as its heavy-hitters sketch
   * estimates them, the most refused first: the key's hash (its object's
   * name, 64 hex digits), and the key as written (`ip=203.0.113.7`) only
   * when the operator opted in (`STATS_RAW_KEYS`). `floor` is the most a
   * client not listed can have been refused here.
   */
  refused: {
    rule: string;
    floor: number;
    clients: { hash: string; client?: string; count: number; error: number }[];
  }[];
  /** Calls to objects that failed, by reason (see `FailureReason`). */
  failures: Record<string, number>;
  /** Earlier flushes of this isolate that never reached the object, and the decisions they held. */
  lost: { flushes: number; decisions: number };
};

/** A client among the most refused under a rule, as a heavy-hitters sketch estimates it. */
export type TopClient = {
  /** The key's hash: its object's name, which `hash=` names in the admin API. */
  hash: string;
  /** What the dashboard shows: the hash's first 12 digits, or the key as written when raw keys are on. */
  key: string;
  /** At least the true count, and at most `count - error` more than it. */
  count: number;
  error: number;
};

/** What the statistics object answers: the last `minutes` minutes. */
export type StatsView = {
  /** The first and last minute covered (Unix minutes), inclusive. */
  fromMinute: number;
  toMinute: number;
  rules: {
    id: string;
    /** One entry per minute that saw a decision, oldest first. */
    series: { minute: number; counts: Record<StatsOutcome, number> }[];
    totals: Record<StatsOutcome, number>;
    /** Since the statistics object started: counts that only grow (the `/metrics` counters). */
    lifetime: Record<StatsOutcome, number>;
    /** The most refused clients since the object started counting (at most 10). */
    topRefused: TopClient[];
  }[];
  /** Decisions that called an object over the period, by latency bucket. */
  latency: {
    boundsMs: readonly number[];
    counts: number[];
    /** Since the statistics object started, by bucket. */
    lifetime: number[];
    p50Ms: number | null;
    p99Ms: number | null;
  };
  health: {
    /** Calls to objects that failed, by reason, over the period. */
    failures: Record<string, number>;
    /** The same, since the statistics object started. */
    failuresLifetime: Record<string, number>;
    /** Flushes from isolates that never arrived, and the decisions they held, since the object started. */
    lostFlushes: number;
    lostDecisions: number;
    /** Flushes received since the object started. */
    flushes: number;
  };
  /** Whether `topRefused` keys are raw (the operator opted in) rather than hash prefixes. */
  rawKeys: boolean;
};
