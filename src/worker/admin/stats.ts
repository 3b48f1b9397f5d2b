/**
 * @module
 * `GET {prefix}/stats?minutes=<1..1440>` and `GET {prefix}/metrics`: what the
 * statistics object (binding `STATS`) counted, as JSON for the dashboard and
 * as OpenMetrics text for a Prometheus scrape. Both first send this
 * isolate's own counts, so a reader sees the decisions it just made here;
 * both answer within `LIMITER_TIMEOUT_MS`, or 503. Both show each adaptive
 * rule's controller too (its current limit against the configured one, and
 * its history), read from the rule's object in the `RATE_LIMITER` namespace.
 */
import type { Settings } from "../../config/settings.ts";
import { fail, ok, type Result } from "../../core/result.ts";
import { show } from "../../core/show.ts";
import { problemResponse } from "../../http/problem.ts";
import type { Isolate } from "../../isolate/isolate.ts";
import { flushStats, STATS_OBJECT, type StatsNamespace } from "../../isolate/stats.ts";
import { type LimiterNamespace, readController, withDeadline } from "../../object/client.ts";
import type { ControllerView } from "../../object/controller-protocol.ts";
import type { FailureReason } from "../../object/protocol.ts";
import { LATENCY_BOUNDS_MS, OUTCOMES, type StatsView } from "../../object/stats-protocol.ts";
import { logEvent } from "../../observe/log.ts";
import { json } from "./views.ts";

export const STATS_OFF = "urn:edge-rate-limiter:statistics-off";
export const STATS_UNAVAILABLE = "urn:edge-rate-limiter:statistics-unavailable";
export const INVALID_PARAMETER = "urn:edge-rate-limiter:invalid-parameter";

/** The content type OpenMetrics 1.0 requires of its text format. */
export const OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8";

export const DEFAULT_MINUTES = 60;
/** The most minutes a view covers: what the statistics object keeps (24 hours). */
export const MAX_MINUTES = 1440;

/** What a statistics request needs besides its URL. */
export type StatsContext = {
  /** The `STATS` binding; unset, statistics are off. */
  ns: StatsNamespace | undefined;
  settings: Settings;
  /** The isolate whose counts are sent before reading. */
  isolate: Isolate;
  /** Keeps a task running after the response (`waitUntil`): the flush may outlive a deadline. */
  background: (task: Promise<unknown>) => void;
  /** The `RATE_LIMITER` binding, where adaptive rules' controllers are; unset, none is shown. */
  limiters?: LimiterNamespace | undefined;
};

/**
 * A latency quantile as a histogram supports it: the bucket it falls in, and
 * an estimate within that bucket.
 */
export type LatencyQuantile = {
  /**
   * Interpolated linearly within the bucket (as Prometheus'
   * `histogram_quantile` does), to a tenth of a millisecond; null in the
   * last, open bucket, which has no upper bound to interpolate to.
   */
  estimateMs: number | null;
  /** The bucket: above `lowMs` (0 for the first), at most `highMs`; null for the last, open one. */
  lowMs: number;
  highMs: number | null;
};

/**
 * What `/stats` answers: the statistics object's view, with the latency's
 * p50 and p99 as {@link LatencyQuantile}s beside its bucket bounds
 * (`p50Ms`, `p99Ms`), and each adaptive rule's controller with its history
 * over the same minutes (null for a rule that has never reported, or whose
 * controller did not answer in time).
 */
export type StatsAnswer = Omit<StatsView, "latency"> & {
  latency: StatsView["latency"] & { p50: LatencyQuantile | null; p99: LatencyQuantile | null };
  adaptive: { rule: string; controller: ControllerView | null }[];
};

/** Answers `/stats` (JSON) or `/metrics` (OpenMetrics text). */
export async function statistics(route: "/stats" | "/metrics", url: URL, context: StatsContext): Promise<Response> {
  const { ns } = context;
  if (ns === undefined) return statsOff();
  let minutes = 1; // /metrics shows only lifetime counts, which any period carries.
  if (route === "/stats") {
    const parsed = minutesOf(url);
    if (!parsed.ok) return invalidParameter("minutes", parsed.errors.join(" "));
    minutes = parsed.value;
  }
  const [view, adaptive] = await Promise.all([readView(ns, minutes, context), readControllers(minutes, context)]);
  if (!view.ok) return unavailable(view.message);
  const { latency } = view.value;
  const answer: StatsAnswer = {
    ...view.value,
    latency: {
      ...latency,
      p50: latencyQuantile(latency.counts, latency.boundsMs, 0.5),
      p99: latencyQuantile(latency.counts, latency.boundsMs, 0.99),
    },
    adaptive,
  };
  return route === "/stats" ? json(answer) : metricsResponse(answer);
}

/**
 * The latency at quantile `q` of a histogram: `counts` per bucket, each
 * bucket up to its bound in `boundsMs`, then one open bucket for the rest.
 * The quantile lies in the first bucket where the running count reaches
 * `q` of the total (where the statistics' `p50Ms` puts it); within it, it is
 * estimated as if the bucket's calls were spread evenly. Null with no calls.
 */
export function latencyQuantile(
  counts: readonly number[],
  boundsMs: readonly number[],
  q: number,
): LatencyQuantile | null {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = q * total;
  let before = 0;
  for (let i = 0; i < counts.length; i++) {
    const n = counts[i]!;
    if (n > 0 && before + n >= rank) {
      const lowMs = i === 0 ? 0 : boundsMs[i - 1]!;
      const highMs = boundsMs[i] ?? null;
      if (highMs === null) return { estimateMs: null, lowMs, highMs };
      const estimateMs = Math.round((lowMs + ((highMs - lowMs) * (rank - before)) / n) * 10) / 10;
      return { estimateMs, lowMs, highMs };
    }
    before += n;
  }
  return { estimateMs: null, lowMs: boundsMs.at(-1) ?? 0, highMs: null };
}

/**
 * Each adaptive rule's controller, with its history over the last
 * `minutes`, in parallel within `settings.timeoutMs`; one that fails to
 * answer is shown as null (the statistics still answer).
 */
async function readControllers(
  minutes: number,
  { settings, limiters }: StatsContext,
): Promise<StatsAnswer["adaptive"]> {
  if (limiters === undefined) return [];
  const ids = [...new Set(settings.rules.filter((rule) => rule.adaptive !== undefined).map((rule) => rule.id))];
  const sinceMs = Date.now() - minutes * 60_000;
  return Promise.all(
    ids.map(async (rule) => {
      const read = await readController(limiters, rule, sinceMs, settings.timeoutMs);
      return { rule, controller: read.ok ? read.value : null };
    }),
  );
}

/** `minutes=`: an integer from 1 to {@link MAX_MINUTES}; {@link DEFAULT_MINUTES} when absent. */
export function minutesOf(url: URL): Result<number> {
  const values = url.searchParams.getAll("minutes");
  if (values.length === 0) return ok(DEFAULT_MINUTES);
  if (values.length > 1) return fail(`The "minutes" query parameter is given ${values.length} times; give it once.`);
  const value = values[0]!;
  const n = /^[1-9][0-9]{0,3}$/.test(value) ? Number(value) : Number.NaN;
  if (!(n >= 1 && n <= MAX_MINUTES)) {
    return fail(`The "minutes" query parameter must be an integer from 1 to ${MAX_MINUTES}; got ${show(value)}.`);
  }
  return ok(n);
}

/**
 * Sends this isolate's counts (forced: whether or not a flush is due), then
 * reads the view; both within `settings.timeoutMs`. The flush goes on in the
 * background past the deadline, under its own (it is counted as lost if it
 * never arrives). A flush already under way is not waited for: its decisions
 * may be missing from this view.
 */
async function readView(
  ns: StatsNamespace,
  minutes: number,
  { settings, isolate, background }: StatsContext,
): Promise<{ ok: true; value: StatsView } | { ok: false; message: string }> {
  const flushed = flushStats(isolate.stats, ns, { nowMs: isolate.clock(), force: true });
  background(flushed);
  const read = flushed.then(
    async (): Promise<StatsView> =>
      ns.get(ns.idFromName(STATS_OBJECT)).read({ minutes, rawKeys: settings.statsRawKeys }) as Promise<StatsView>,
  );
  const answer = await withDeadline(read, settings.timeoutMs);
  if (!answer.ok) read.catch(() => {}); // answered 503 already; a late rejection is not an unhandled one
  return answer;
}

/**
 * The view as OpenMetrics 1.0 text. Every series is a lifetime count of the
 * statistics object, with bounded labels: the rule and the outcome, the
 * failure's reason; never a client's key.
 *
 * The latency histogram has buckets only. The isolates count decisions per
 * bucket, not the sum of their latencies, so no true `_sum` is known, and
 * OpenMetrics exposes `_count` "if and only if" `_sum` is: both are left
 * out (a Histogram "SHOULD", not MUST, carry a Sum). The count is the
 * `le="+Inf"` bucket.
 */
export function openMetrics(view: StatsView & Partial<Pick<StatsAnswer, "adaptive">>): string {
  const lines: string[] = [];
  const family = (name: string, type: string, help: string, unit?: string) => {
    lines.push(`# TYPE ${name} ${type}`);
    if (unit !== undefined) lines.push(`# UNIT ${name} ${unit}`);
    lines.push(`# HELP ${name} ${escapeHelp(help)}`);
  };
  const sample = (name: string, labels: Record<string, string>, value: number) => {
    const set = Object.entries(labels).map(([label, v]) => `${label}="${escapeLabelValue(v)}"`);
    lines.push(`${name}${set.length > 0 ? `{${set.join(",")}}` : ""} ${integer(value)}`);
  };

  family(
    "ratelimit_decisions",
    "counter",
    "Requests decided, per rule and outcome, since the statistics object started counting.",
  );
  for (const rule of view.rules) {
    for (const outcome of OUTCOMES)
      sample("ratelimit_decisions_total", { rule: rule.id, outcome }, rule.lifetime[outcome]);
  }

  const latency = "ratelimit_decision_latency_seconds";
  family(latency, "histogram", "How long decisions that called a Durable Object took.", "seconds");
  let cumulative = 0;
  LATENCY_BOUNDS_MS.forEach((boundMs, i) => {
    cumulative += view.latency.lifetime[i] ?? 0;
    sample(`${latency}_bucket`, { le: canonicalNumber(boundMs / 1000) }, cumulative);
  });
  cumulative += view.latency.lifetime.slice(LATENCY_BOUNDS_MS.length).reduce((a, b) => a + b, 0);
  sample(`${latency}_bucket`, { le: "+Inf" }, cumulative);

  family("ratelimit_object_failures", "counter", "Calls to Durable Objects that failed, by reason.");
  const reasons = new Set<string>([...KNOWN_REASONS, ...Object.keys(view.health.failuresLifetime)]);
  for (const reason of [...reasons].sort()) {
    sample("ratelimit_object_failures_total", { reason }, view.health.failuresLifetime[reason] ?? 0);
  }

  family("ratelimit_stats_flushes", "counter", "Isolates' flushes the statistics object received.");
  sample("ratelimit_stats_flushes_total", {}, view.health.flushes);
  family("ratelimit_stats_lost_flushes", "counter", "Isolates' flushes that never reached the statistics object.");
  sample("ratelimit_stats_lost_flushes_total", {}, view.health.lostFlushes);
  family(
    "ratelimit_stats_lost_decisions",
    "counter",
    "Decisions in flushes that never reached the statistics object: missing from every other count.",
  );
  sample("ratelimit_stats_lost_decisions_total", {}, view.health.lostDecisions);

  const adaptive = (view.adaptive ?? []).flatMap(({ rule, controller }) =>
    controller === null || controller.limit === null || controller.configured === null ? [] : [{ rule, controller }],
  );
  if (adaptive.length > 0) {
    const gauge = (name: string, help: string, value: (c: ControllerView) => number, asShare = false) => {
      family(name, "gauge", help);
      for (const { rule, controller } of adaptive) {
        const v = value(controller);
        lines.push(`${name}{rule="${escapeLabelValue(rule)}"} ${asShare ? share(v) : integer(v)}`);
      }
    };
    gauge(
      "ratelimit_adaptive_limit",
      "An adaptive rule's current limit: the configured one times its factor.",
      (c) => c.limit!,
    );
    gauge("ratelimit_adaptive_configured_limit", "An adaptive rule's configured limit.", (c) => c.configured!);
    gauge(
      "ratelimit_adaptive_factor",
      "An adaptive rule's factor, from its floor over its limit up to 1.",
      (c) => c.factor,
      true,
    );
    const prioritized = adaptive.flatMap(({ rule, controller }) =>
      (controller.priorities ?? []).map((p) => ({ rule, p })),
    );
    if (prioritized.length > 0) {
      const label = (rule: string, priority: string) =>
        `{rule="${escapeLabelValue(rule)}",priority="${escapeLabelValue(priority)}"}`;
      family(
        "ratelimit_adaptive_priority_limit",
        "gauge",
        "An adaptive rule's current limit for requests of a priority (critical, default, sheddable).",
      );
      for (const { rule, p } of prioritized)
        lines.push(`ratelimit_adaptive_priority_limit${label(rule, p.priority)} ${integer(p.limit)}`);
      family("ratelimit_adaptive_priority_factor", "gauge", "An adaptive rule's factor for requests of a priority.");
      for (const { rule, p } of prioritized)
        lines.push(`ratelimit_adaptive_priority_factor${label(rule, p.priority)} ${share(p.factor)}`);
      family(
        "ratelimit_adaptive_priority_forwarded",
        "gauge",
        "Requests of a priority forwarded under an adaptive rule over the last minute (its controller's history points).",
      );
      for (const { rule, p } of prioritized)
        lines.push(`ratelimit_adaptive_priority_forwarded${label(rule, p.priority)} ${integer(p.forwarded)}`);
      family(
        "ratelimit_adaptive_priority_shed",
        "gauge",
        "Requests of a priority refused only because of the reduction (503) over the last minute.",
      );
      for (const { rule, p } of prioritized)
        lines.push(`ratelimit_adaptive_priority_shed${label(rule, p.priority)} ${integer(p.shed)}`);
    }
  }

  lines.push("# EOF");
  return `${lines.join("\n")}\n`;
}

/** Every reason a call can fail for, shown even at 0: a series should not appear only once it moves. */
const KNOWN_REASONS: readonly FailureReason[] = ["error", "overloaded", "timeout"];

const metricsResponse = (view: StatsAnswer): Response =>
  new Response(openMetrics(view), {
    headers: { "Content-Type": OPENMETRICS_CONTENT_TYPE, "Cache-Control": "no-store" },
  });

/** A label value as OpenMetrics escapes it: backslash, double quote and line feed. */
export const escapeLabelValue = (value: string): string =>
  value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");

/** A HELP text as OpenMetrics escapes it. */
const escapeHelp = escapeLabelValue;

/** A share from 0 to 1 as an OpenMetrics number, to 4 decimals; anything else is shown as 0. */
const share = (n: number): string =>
  Number.isFinite(n) && n >= 0 ? canonicalNumber(Math.round(n * 10_000) / 10_000) : "0.0";

/** A count as an OpenMetrics integer (no decimal point); a value that is not a count is shown as 0. */
const integer = (n: number): string => (Number.isSafeInteger(n) && n >= 0 ? String(n) : "0");

/**
 * A number as OpenMetrics' "canonical numbers" for `le` spell it: Go's `%g`
 * (shortest form; an exponent below -4 or from 6 up, at least two digits),
 * with `.0` added when there is neither a point nor an exponent: `0.001`,
 * `1.0`, `100000.0`, `1e+06`, `1e-05`.
 */
export function canonicalNumber(n: number): string {
  if (n === Number.POSITIVE_INFINITY) return "+Inf";
  if (n === Number.NEGATIVE_INFINITY) return "-Inf";
  if (Number.isNaN(n)) return "NaN";
  if (n === 0) return "0.0";
  const [mantissa, exponentText] = n.toExponential().split("e") as [string, string];
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 6) {
    const digits = String(Math.abs(exponent)).padStart(2, "0");
    return `${mantissa}e${exponent < 0 ? "-" : "+"}${digits}`;
  }
  const fixed = n.toFixed(Math.max(0, (mantissa.split(".")[1]?.length ?? 0) - exponent));
  return fixed.includes(".") ? fixed : `${fixed}.0`;
}

const statsOff = (): Response =>
  problemResponse({
    type: STATS_OFF,
    title: "Not Found",
    status: 404,
    detail:
      "Statistics are off: the Worker has no STATS binding. To turn them on, bind the StatsObject class to STATS " +
      'in wrangler.toml ([[durable_objects.bindings]] name = "STATS", class_name = "StatsObject", and a ' +
      '[[migrations]] entry with new_sqlite_classes = ["StatsObject"]), then deploy.',
  });

function unavailable(message: string): Response {
  logEvent({ event: "admin_stats_unavailable", message }, "error");
  return problemResponse({
    type: STATS_UNAVAILABLE,
    title: "Service Unavailable",
    status: 503,
    detail: `The statistics object did not answer: ${message}`,
  });
}

const invalidParameter = (parameter: string, detail: string): Response =>
  problemResponse({ type: INVALID_PARAMETER, title: "Invalid parameter", status: 400, detail, parameter });
