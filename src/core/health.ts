/**
 * @module
 * The origin's health as an adaptive rule judges it: the rule's `adaptive`
 * table parsed into a health target, how one forwarded request counts
 * against it (slow, failed), and the counts isolates add up and report.
 */
import { parseDurationMs } from "./duration.ts";
import { type Matcher, type Priorities, type Priority, parseMatchers, parseReserve } from "./priorities.ts";
import { fail, ok, type Result } from "./result.ts";
import { show } from "./show.ts";

/** An adaptive rule's `adaptive` table as written. */
export type AdaptiveInput = {
  /** The origin's latency to stay under at `percentile`, from the request's last byte forwarded to the response's headers: `"250ms"`. */
  latency: number | string;
  /** The percentile `latency` is for, from 50 to 99.9. Default 99. */
  percentile?: number;
  /** The share of forwarded requests that may fail (5xx, unreachable, timed out), `"0.1%"` to `"50%"`. Default `"5%"`. */
  errors?: string;
  /** The lowest the limit goes, from 1 to the rule's limit (or concurrency). Default: a tenth of it, at least 1. */
  floor?: number;
  /** Requests refused last, only when nothing else is left: `["jwt:plan=enterprise", "path:/api/checkout/*"]`. */
  critical?: string | string[];
  /** Requests refused first: `["path:/api/prefetch/*", "header:x-priority=low"]`. */
  sheddable?: string | string[];
  /** The share of the limit in force kept for critical requests while the limit is reduced, `"0%"` to `"90%"`. Default `"0%"`. */
  reserve?: string;
};

/** The fields of an `adaptive` table, in the order they are checked. */
export const ADAPTIVE_FIELDS = [
  "latency",
  "percentile",
  "errors",
  "floor",
  "critical",
  "sheddable",
  "reserve",
] as const;

/** An adaptive rule's target, validated. */
export type HealthTarget = {
  /** Slower than this, in milliseconds, a request counts as slow. */
  latencyMs: number;
  /** The percentile of `latencyMs`: at most `100 − percentile` % of requests may be slow. */
  percentile: number;
  /** The share of forwarded requests that may fail, in [0.001, 0.5]. */
  errorShare: number;
  /** The lowest limit, in the rule's units (requests per period, or places). */
  floor: number;
  /** Which requests are critical and which sheddable, and the reserve: absent, every request is default. */
  priorities?: Priorities;
};

/**
 * What a controller needs of a rule's priorities: which stages the rule
 * has, and the reserve (no matchers: a report carries this, and a matcher
 * is code).
 */
export type PriorityPlan = { critical: boolean; sheddable: boolean; reserve: number };

/** A health target as a report carries it to the controller. */
export type ReportedTarget = Omit<HealthTarget, "priorities"> & { priorities?: PriorityPlan };

/** The target a report carries: its priorities without their matchers. */
export function reportedTarget(target: HealthTarget): ReportedTarget {
  const { priorities, ...rest } = target;
  if (priorities === undefined) return rest;
  return {
    ...rest,
    priorities: {
      critical: priorities.critical.length > 0,
      sheddable: priorities.sheddable.length > 0,
      reserve: priorities.reserve,
    },
  };
}

/** The plan as `stagesOf` takes it: the stages a rule has, and its reserve. */
export const planPriorities = (plan: PriorityPlan | undefined): Priorities | undefined =>
  plan === undefined
    ? undefined
    : {
        critical: plan.critical ? [ALL] : [],
        sheddable: plan.sheddable ? [ALL] : [],
        reserve: plan.reserve,
      };
const ALL: Matcher = { kind: "all", source: "*" };

export const DEFAULT_PERCENTILE = 99;
export const DEFAULT_ERROR_SHARE = 0.05;
/** The longest latency target: a request held that long is not a health signal a minute can act on. */
export const MAX_LATENCY_MS = 60_000;
const MIN_ERROR_SHARE = 0.001;
const MAX_ERROR_SHARE = 0.5;
const PERCENT = /^(\d+(?:\.\d+)?)\s*%$/;

/**
 * The `adaptive` table of a rule whose limit (or concurrency) is `limit`
 * and whose requests each count `cost`. Every problem names its field, as
 * `adaptive.latency`.
 */
export function parseAdaptive(value: unknown, limit: number, cost = 1, caseSensitive = false): Result<HealthTarget> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return fail(`must be a table such as { latency = "250ms", errors = "5%", floor = 10 }; got ${show(value)}`);
  }
  const fields = value as Record<string, unknown>;
  const errors: string[] = [];
  const take = <T>(field: string, parsed: Result<T>, fallback: T): T => {
    if (parsed.ok) return parsed.value;
    for (const message of parsed.errors) errors.push(`"adaptive.${field}": ${message}`);
    return fallback;
  };
  for (const name of Object.keys(fields)) {
    if (!(ADAPTIVE_FIELDS as readonly string[]).includes(name)) {
      take(name, fail(`is not a field of "adaptive"; its fields are ${ADAPTIVE_FIELDS.join(", ")}`), null);
    }
  }
  const latencyMs = take("latency", parseLatency(fields.latency), 0);
  const percentile = take("percentile", parsePercentile(fields.percentile), DEFAULT_PERCENTILE);
  const errorShare = take("errors", parseErrorShare(fields.errors), DEFAULT_ERROR_SHARE);
  const floor = take("floor", parseFloor(fields.floor, limit, cost), 1);
  const critical = take("critical", parseMatchers(fields.critical, caseSensitive), []);
  const sheddable = take("sheddable", parseMatchers(fields.sheddable, caseSensitive), []);
  const reserve = take("reserve", parseReserve(fields.reserve), 0);
  if (reserve > 0 && critical.length === 0) {
    take("reserve", fail("keeps a share for critical requests: it needs a `critical` list"), null);
  }
  const marked = critical.length > 0 || sheddable.length > 0;
  const target: HealthTarget = { latencyMs, percentile, errorShare, floor };
  if (marked) target.priorities = { critical, sheddable, reserve };
  return errors.length > 0 ? fail(...errors) : ok(target);
}

function parseLatency(value: unknown): Result<number> {
  if (value === undefined) return fail('is required: the latency the origin should stay under, such as "250ms"');
  const parsed = parseDurationMs(value);
  if (!parsed.ok) return parsed;
  return parsed.value > MAX_LATENCY_MS ? fail(`must be at most 60s; got ${show(value)}`) : parsed;
}

function parsePercentile(value: unknown): Result<number> {
  if (value === undefined) return ok(DEFAULT_PERCENTILE);
  return typeof value === "number" &&
    value >= 50 &&
    value <= 99.9 &&
    Math.abs(value * 10 - Math.round(value * 10)) < 1e-9
    ? ok(value)
    : fail(`must be a number from 50 to 99.9, with at most one decimal, such as 99; got ${show(value)}`);
}

function parseErrorShare(value: unknown): Result<number> {
  if (value === undefined) return ok(DEFAULT_ERROR_SHARE);
  const match = typeof value === "string" ? PERCENT.exec(value.trim()) : null;
  const share = match ? Number(match[1]) / 100 : Number.NaN;
  return share >= MIN_ERROR_SHARE && share <= MAX_ERROR_SHARE
    ? ok(share)
    : fail(`must be a share written with "%", from "0.1%" to "50%", such as "5%"; got ${show(value)}`);
}

/**
 * The floor: from 1 to the limit, and not below one request's cost, which
 * is the lowest the limit is ever taken (a limit below it would admit
 * nothing); a floor under it would be reported while never applied.
 */
function parseFloor(value: unknown, limit: number, cost: number): Result<number> {
  if (value === undefined) return ok(Math.max(defaultFloor(limit), cost));
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > limit) {
    return fail(`must be an integer from 1 to the rule's limit (${limit}); got ${show(value)}`);
  }
  return value < cost
    ? fail(`must be at least the rule's cost (${cost}): its limit never goes below one request's cost; got ${value}`)
    : ok(value);
}

/** A tenth of the limit, at least 1. */
export const defaultFloor = (limit: number): number => Math.max(1, Math.floor(limit / 10));

/** The share of requests a target lets be slow: 1 % for the 99th percentile. */
export const slowShareOf = (target: Pick<HealthTarget, "percentile">): number =>
  Math.round((100 - target.percentile) * 10) / 1000;

/**
 * Counts of forwarded requests under one adaptive rule, over some time, as
 * isolates add them up. `answered` is every forwarded request whose outcome
 * is known; `slow` and `errors` are among them; `shed` were never forwarded.
 * What a client does is not the origin's health: a request whose client
 * hung up before the origin's headers is `gone`, neither a success nor a
 * failure, unless the origin had already taken longer than the target
 * since the request's last byte reached it (`goneSlow`: then it is known
 * slow, and counted as answered and slow too).
 */
export type HealthCounts = {
  /** Requests admitted and forwarded to the origin. */
  forwarded: number;
  /** Forwarded requests with a known outcome: answered (any status), unreachable, or known slow when their client left. */
  answered: number;
  /** Of those, slower than the target latency (from the request's last byte to the response's headers), whatever their status. */
  slow: number;
  /** Of those, failed: a 5xx, or the origin unreachable. A fast failure is a failure, not a fast answer. */
  errors: number;
  /** Forwarded requests whose client hung up (or broke off its upload) before the origin's headers: not the origin's doing. */
  gone: number;
  /** Of `gone`, those the origin had already kept longer than the target: counted in `answered` and `slow` too. */
  goneSlow: number;
  /**
   * Of `answered`, those later than the late mark the controller last gave
   * (`lateMs`: the origin's calm latency as it measured it, times 3),
   * whatever their status. 0 while no mark is known.
   */
  late: number;
  /**
   * Requests found still in flight past the late mark, counted once each
   * when found (their answers count again when they come): a queue forming
   * at the origin, seen before its answers are. A request is in flight from
   * its last byte passed on to the origin to its response's headers, so a
   * client's upload is never in it, nor a client that hung up.
   */
  stuck: number;
  /**
   * The successful answers' durations added up, ms (each at most
   * {@link busyCapOf}): their mean, against the origin's calm latency, shows
   * a queue forming before the answers breach the target.
   */
  busyMs: number;
  /** The squares of the same durations added up, ms²: how far the mean may be off by chance. */
  busySq: number;
  /** Requests refused only because of the reduction: admitted under the configured limit, refused under the current one. */
  shed: number;
  /** Sheddable requests an isolate found crowded: its requests in flight under the rule past what the origin answered in time (isolate/crowd.ts). */
  crowded?: number;
  /**
   * The busiest client's count as a share of its configured limit, the
   * highest any decision showed (0 to 1, or more for a client over it): the
   * factor below which the reduction starts to refuse that client.
   */
  peak: number;
  /**
   * The client keys with the most slow, failed or late answers (and requests
   * found late in flight), each with its own counts, worst first (at most {@link MAX_WORST_KEYS}); left out when none
   * had any. The controller judges the origin without the few worst (see
   * `core/controller.ts`), so that no client, and no small set of them, moves
   * the limit for everyone.
   */
  worst?: KeyCounts[];
  /**
   * Which of the {@link worst} keys may be left out as such: those whose
   * bad answers recur over a longer memory (the reporter's `WORST_BAD`).
   * A key is named among the worst from its first bad answer, so that a
   * window that spans reports has all of its counts when it becomes one
   * that may be left out; until then its trouble counts as anyone's.
   * Absent: every key named may be (a report of an older isolate named
   * only those).
   */
  worstable?: string[];
  /**
   * The client keys that had an answer (or a request found late in flight),
   * counted in each report (a key in two reports, or two isolates, counts
   * twice, as its trouble does in {@link troubled}); absent from an isolate
   * that does not count them.
   */
  clients?: number;
  /**
   * In each report with more than twice {@link BUSIEST_KEYS} clients, its
   * busiest keys' (the {@link BUSIEST_KEYS} with the most answers)
   * successful answers and their busy time, added up. The calm latency is
   * measured without them: a few clients flooding the rule with fast
   * requests would set it low, and the origin's own latency would read as a
   * queue once they stop. Absent: none counted.
   */
  busiest?: { ok: number; busyMs: number };
  /**
   * The keys among them whose answers were mostly slow, failed or late, and
   * their counts added up, counted the same way. A few clients with mostly
   * bad answers beside many with good ones are not an unhealthy origin (a
   * queue slows every client); the controller can judge without them.
   */
  troubled?: Troubled;
  /**
   * Keys whose answers were mostly bad in a report but whose trouble had not
   * recurred yet, counted the same way: at the onset, a few clients' first
   * bad answers and an origin's first failures spread over everyone look
   * alike, so the onset's judgement leaves these out too (when few); a
   * window later, only keys whose trouble recurs are left out.
   */
  fresh?: Troubled;
  /**
   * Under a rule with priorities: per priority, the requests forwarded and
   * the requests shed (refused only because of the reduction). The
   * controller moves the stage of a priority with neither at once, and
   * the statistics show each.
   */
  byPriority?: PriorityCounts;
};

/** Per priority: `[forwarded, shed]`. */
export type PriorityCounts = Partial<Record<Priority, [forwarded: number, shed: number]>>;

/** Two priorities' counts added up; undefined when both are. */
export function addPriorityCounts(a?: PriorityCounts, b?: PriorityCounts): PriorityCounts | undefined {
  if (a === undefined) return b === undefined ? undefined : { ...b };
  if (b === undefined) return { ...a };
  const sum: PriorityCounts = { ...a };
  for (const [p, [forwarded, shed]] of Object.entries(b) as [Priority, [number, number]][]) {
    const had = sum[p];
    sum[p] = had === undefined ? [forwarded, shed] : [had[0] + forwarded, had[1] + shed];
  }
  return sum;
}

/**
 * One client key's answers: a short prefix of its object's name (the same
 * in every isolate, and no client data), its answers, how many of them
 * were slow, failed and late, their busy time, its requests found late in
 * flight, and the squares of its busy time. Kept for keys with any slow,
 * failed or late one.
 */
export type KeyCounts = [
  key: string,
  answered: number,
  slow: number,
  errors: number,
  late: number,
  busyMs: number,
  stuck: number,
  busySq: number,
];

/**
 * Keys whose answers were mostly slow, failed or late: how many, and their
 * answers, slow, failed and late ones, busy time, requests found late in
 * flight and the squares of their busy time, added up.
 */
export type Troubled = {
  keys: number;
  answered: number;
  slow: number;
  errors: number;
  late: number;
  busyMs: number;
  stuck: number;
  busySq: number;
};

/** Two sets of troubled keys' counts added up; undefined when both are. */
export function addTroubled(a?: Troubled, b?: Troubled): Troubled | undefined {
  if (a === undefined) return b === undefined ? undefined : { ...b };
  if (b === undefined) return { ...a };
  const sum = { ...a };
  for (const field of Object.keys(sum) as (keyof Troubled)[]) sum[field] += b[field];
  return sum;
}

/**
 * Whether a key's answers were mostly slow, failed or late: more than half
 * of its answers (`answered`, all it had, not only those since its first
 * bad one) and of its requests found late in flight.
 */
export const mostlyBad = (k: KeyCounts, answered: number): boolean =>
  2 * (Math.max(k[2], k[3], k[4]) + k[6]) > answered + k[6];

/** How many of a report's busiest client keys the calm latency is measured without: as many as a judgement leaves out. */
export const BUSIEST_KEYS = 5;

/** The most client keys a report, or a controller's window, keeps counts of. */
export const MAX_WORST_KEYS = 16;

/** A key's slow, failed and late answers and requests together: how it ranks among the worst. */
export const badOf = (k: KeyCounts): number => k[2] + k[3] + k[4] + k[6];

/** A key's counts before any answer. */
export const noKeyCounts = (key: string): KeyCounts => [key, 0, 0, 0, 0, 0, 0, 0];

/**
 * The most one answer adds to `busyMs`: four times the target, or twice
 * the late mark when that is more (an origin slower than the target when
 * calm). One very slow answer moves the mean only so far.
 */
export const busyCapOf = (latencyMs: number, lateMs: number | null): number =>
  Math.max(4 * latencyMs, lateMs === null ? 0 : 2 * lateMs);

export const noCounts = (): HealthCounts => ({
  forwarded: 0,
  answered: 0,
  slow: 0,
  errors: 0,
  gone: 0,
  goneSlow: 0,
  late: 0,
  stuck: 0,
  busyMs: 0,
  busySq: 0,
  shed: 0,
  peak: 0,
});

/** The two added; their worst keys merged by key, the worst {@link MAX_WORST_KEYS} kept. */
export function addCounts(a: HealthCounts, b: HealthCounts): HealthCounts {
  const sum: HealthCounts = {
    forwarded: a.forwarded + b.forwarded,
    answered: a.answered + b.answered,
    slow: a.slow + b.slow,
    errors: a.errors + b.errors,
    gone: a.gone + b.gone,
    goneSlow: a.goneSlow + b.goneSlow,
    late: a.late + b.late,
    stuck: a.stuck + b.stuck,
    busyMs: a.busyMs + b.busyMs,
    busySq: a.busySq + b.busySq,
    shed: a.shed + b.shed,
    peak: Math.max(a.peak, b.peak),
  };
  if (a.crowded !== undefined || b.crowded !== undefined) sum.crowded = (a.crowded ?? 0) + (b.crowded ?? 0);
  const worst = mergeWorst(a.worst, b.worst);
  if (worst.length > 0) sum.worst = worst;
  if (a.worstable !== undefined || b.worstable !== undefined) {
    const either = new Set([...worstableIn(a), ...worstableIn(b)]);
    sum.worstable = worst.map((k) => k[0]).filter((key) => either.has(key));
  }
  if (a.clients !== undefined || b.clients !== undefined) sum.clients = (a.clients ?? 0) + (b.clients ?? 0);
  if (a.busiest !== undefined || b.busiest !== undefined) {
    sum.busiest = {
      ok: (a.busiest?.ok ?? 0) + (b.busiest?.ok ?? 0),
      busyMs: (a.busiest?.busyMs ?? 0) + (b.busiest?.busyMs ?? 0),
    };
  }
  const troubled = addTroubled(a.troubled, b.troubled);
  if (troubled !== undefined) sum.troubled = troubled;
  const fresh = addTroubled(a.fresh, b.fresh);
  if (fresh !== undefined) sum.fresh = fresh;
  const byPriority = addPriorityCounts(a.byPriority, b.byPriority);
  if (byPriority !== undefined) sum.byPriority = byPriority;
  return sum;
}

/** The keys of a report's (or window's) worst that may be left out: its `worstable`, or, without one, every key named. */
export const worstableIn = (counts: Pick<HealthCounts, "worst" | "worstable">): string[] =>
  counts.worstable ?? (counts.worst ?? []).map((k) => k[0]);

/** Two lists of keys' counts merged by key, worst first, at most {@link MAX_WORST_KEYS}. */
export function mergeWorst(a: readonly KeyCounts[] = [], b: readonly KeyCounts[] = []): KeyCounts[] {
  if (b.length === 0) return a.slice(0, MAX_WORST_KEYS);
  const byKey = new Map<string, KeyCounts>();
  for (const k of [...a, ...b]) {
    const had = byKey.get(k[0]);
    byKey.set(
      k[0],
      had === undefined
        ? [k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]]
        : [
            k[0],
            had[1] + k[1],
            had[2] + k[2],
            had[3] + k[3],
            had[4] + k[4],
            had[5] + k[5],
            had[6] + k[6],
            had[7] + k[7],
          ],
    );
  }
  return worstFirst([...byKey.values()]);
}

/** Keys with any slow, failed or late answer or request, worst first, at most {@link MAX_WORST_KEYS}. */
export const worstFirst = (keys: KeyCounts[]): KeyCounts[] =>
  keys
    .filter((k) => badOf(k) > 0)
    .sort((x, y) => badOf(y) - badOf(x) || (x[0] < y[0] ? -1 : 1))
    .slice(0, MAX_WORST_KEYS);

/**
 * How one forwarded request counts: its status (0 when the origin could not
 * be reached) and how long the origin took, from the request's last byte
 * reaching it to the response's headers.
 */
export function outcomeOf(
  target: Pick<HealthTarget, "latencyMs">,
  status: number,
  durationMs: number,
): { slow: boolean; error: boolean } {
  return { slow: durationMs > target.latencyMs, error: status === 0 || status >= 500 };
}

/**
 * The latency histogram a report carries: bucket `k` holds durations up to
 * 2^(k/4) ms, each bound about 19 % above the last, from 1 ms to 65.5 s
 * (the last bucket holds the rest). Fine enough to read a percentile within
 * a fifth; sent sparse, as `[bucket, count]` pairs.
 */
export const LATENCY_BUCKETS = 65;

/** The bucket a duration falls in. */
export const latencyBucketOf = (ms: number): number =>
  ms <= 1 ? 0 : Math.min(LATENCY_BUCKETS - 1, Math.ceil(4 * Math.log2(ms) - 1e-9));

/** The upper bound of bucket `k`, in ms. */
export const latencyBoundMs = (k: number): number => 2 ** (k / 4);

/** A histogram as `[bucket, count]` pairs, buckets in increasing order, counts above 0. */
export type LatencyPairs = [bucket: number, count: number][];

/** Two histograms added, as pairs. Pairs out of range or with counts that are not positive integers are left out. */
export function addLatency(a: LatencyPairs, b: LatencyPairs): LatencyPairs {
  const sums = new Map<number, number>();
  for (const [k, n] of [...a, ...b]) {
    if (Number.isInteger(k) && k >= 0 && k < LATENCY_BUCKETS && Number.isSafeInteger(n) && n > 0) {
      sums.set(k, (sums.get(k) ?? 0) + n);
    }
  }
  return [...sums].sort(([x], [y]) => x - y);
}

/** The duration at percentile `percentile` (0–100): the upper bound of the bucket it falls in; null when empty. */
export function latencyAt(pairs: LatencyPairs, percentile: number): number | null {
  const total = pairs.reduce((sum, [, n]) => sum + n, 0);
  if (total === 0) return null;
  let seen = 0;
  for (const [k, n] of pairs) {
    seen += n;
    if (seen >= (percentile / 100) * total) return latencyBoundMs(k);
  }
  return latencyBoundMs(pairs.at(-1)![0]);
}
