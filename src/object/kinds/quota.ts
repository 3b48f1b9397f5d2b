/**
 * @module
 * The calendar quota in its client's object (core/kinds/quota.ts): a row is
 * the period it counts in (its number and the instants it starts and
 * ends), the units used in it, what operators credited (a top-up, or units
 * taken), and the periods before it in which anything was used, newest
 * first, at most {@link HISTORY}. The period is worked out from the
 * object's clock at each request (core/calendar.ts): no alarm resets it. A
 * request in the row's period costs two comparisons; a new period, one
 * boundary found, the same for every client of a calendar (kept here, one
 * per calendar).
 *
 * A request fits while `used + cost ≤ limit + credit`. What is left,
 * `limit + credit − used`, is shown at least 0, and a credit acts on what
 * is shown: a period overdrawn (charged past its limit by the origin's
 * cost, or under a lower limit) has nothing left, and a credit's `credit`
 * forgives the overdraft before it adds. A refusal is
 * admissible again at the period's end, when `used` and `credit` start
 * from 0 (`Retry-After` that instant, plus the rule's `retry_jitter`
 * spread by client; `RateLimit`'s `t` the instant itself, and
 * `X-RateLimit-Reset` the boundary exactly, whatever the caller's clock). Refusals are
 * never answered by an isolate alone (`refusalsHold: false`) and nothing is
 * leased (`leaseEndsInMs` 0): a credit admits the next request at once
 * wherever it lands, and no unit counted ahead for an isolate that then
 * vanishes is charged to the client for the rest of its period.
 *
 * Counts taken back (a `count` rule's refunds) or charged (`cost_header`)
 * after the period ended go to that period in the history, where it still
 * is: each period's `used` is what its admitted requests cost.
 */
import { type CalendarSpec, currentPeriod, type Period, periodFrom } from "../../core/calendar.ts";
import type { QuotaLimit } from "../../core/kinds/quota.ts";
import { costOf, type RuleCheck } from "../protocol.ts";
import type { Counter, Credit, PeriodUsage, Seen, Stored, Usage } from "./counter.ts";

/** How many earlier periods a row keeps: a year of months, 12 weeks, 12 days. */
export const HISTORY = 12;

/** A quota's row. */
export type QuotaData = {
  /** The calendar (and `reset`) the period was worked out under: another one, and the period is worked out again. */
  cal: string;
  index: number;
  startMs: number;
  endMs: number;
  /** Units admitted requests cost in the period. */
  used: number;
  /** Units operators added (or, negative, took) for the period. */
  credit: number;
  /** With periods from a client's first request: the instant its periods count from; null until something is counted. */
  firstMs: number | null;
  /** Spreads the client's `Retry-After` within the rule's `retry_jitter`: fixed when the row is made. */
  seed: number;
  /** Earlier periods with something in them, newest first. */
  past: (PeriodUsage & { index: number })[];
};

/** A quota check (the registry hands this counter only those). */
const quotaOf = (check: RuleCheck): QuotaLimit & { limit: number } => check as QuotaLimit;

/** The last period each calendar gave, by its key: every client of a rule shares it. */
const lastPeriods = new Map<string, Period>();

/** The calendar period that holds `nowMs`. */
function calendarPeriod(nowMs: number, calendar: CalendarSpec, key: string): Period {
  const period = currentPeriod(nowMs, calendar, lastPeriods.get(key));
  if (lastPeriods.size > 256) lastPeriods.clear();
  lastPeriods.set(key, period);
  return period;
}

/** A client's first request anchors its periods on its whole second: every boundary falls on a second. */
const floorSecond = (ms: number): number => Math.floor(ms / 1_000) * 1_000;

/** The period of the row's client that holds `nowMs`. */
function periodOf(data: Pick<QuotaData, "firstMs">, nowMs: number, quota: QuotaLimit): Period {
  if (quota.fromFirst === undefined) return calendarPeriod(nowMs, quota.calendar, quota.calendarKey);
  return periodFrom(data.firstMs ?? floorSecond(nowMs), quota.calendar, nowMs);
}

/** The earlier periods with the row's own first, if anything is in it, at most {@link HISTORY}. */
function pastWith(data: QuotaData): QuotaData["past"] {
  if (data.used === 0 && data.credit === 0) return data.past;
  const { index, startMs, endMs, used, credit } = data;
  return [{ index, startMs, endMs, used, credit }, ...data.past].slice(0, HISTORY);
}

/**
 * The row brought to `nowMs`: the same while its period holds it; a later
 * period starts from nothing, the row's own kept in the history. A row
 * made under another calendar (the rule changed) is worked out again, its
 * counts carried over while its period still holds `nowMs`. A clock behind
 * the row's period counts in that period (a count is never moved back).
 */
function bring(data: QuotaData, nowMs: number, quota: QuotaLimit): QuotaData {
  const same = data.cal === quota.calendarKey;
  // Periods from a first request: until something is counted, the first period starts with the next request.
  if (same && nowMs < data.endMs && (quota.fromFirst === undefined || data.firstMs !== null)) return data;
  const period = periodOf(same ? data : { firstMs: null }, nowMs, quota);
  const bounds = { index: period.index, startMs: period.startMs, endMs: period.endMs };
  if (!same) {
    const carried = data.startMs <= nowMs && nowMs < data.endMs;
    return carried
      ? { ...data, ...bounds, cal: quota.calendarKey, firstMs: null }
      : { ...data, ...bounds, cal: quota.calendarKey, firstMs: null, used: 0, credit: 0, past: pastWith(data) };
  }
  // Nothing counted yet from a first request: its first period is the one starting now, with any credit given.
  if (quota.fromFirst !== undefined && data.firstMs === null) return { ...data, ...bounds };
  return { ...data, ...bounds, used: 0, credit: 0, past: pastWith(data) };
}

/** The row with `units` counted in its period; the first count fixes where periods from a first request start. */
const counted = (data: QuotaData, units: number, quota: QuotaLimit): QuotaData => ({
  ...data,
  used: data.used + units,
  ...(quota.fromFirst !== undefined && data.firstMs === null ? { firstMs: data.startMs } : {}),
});

const fits = (data: QuotaData, units: number, limit: number): boolean => data.used + units <= limit + data.credit;

/** A 32-bit mix (the finaliser of MurmurHash3): close seeds and periods give far-apart jitters. */
function mix(n: number): number {
  let h = n >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** Whole seconds past the boundary this client is told to wait, from 0 to the rule's jitter: the same for a period. */
function jitterMs(data: QuotaData, quota: QuotaLimit): number {
  const spread = quota.retryJitterMs ?? 0;
  if (spread === 0) return 0;
  return (mix(data.seed ^ mix(data.index)) % (Math.floor(spread / 1_000) + 1)) * 1_000;
}

/** `index` in the row: its period, or one it keeps. */
function adjust(data: QuotaData, where: number, units: number): QuotaData | null {
  if (where === data.index) return { ...data, used: Math.max(0, data.used + units) };
  const k = data.past.findIndex((p) => p.index === where);
  if (k < 0) return null;
  const past = data.past.slice();
  past[k] = { ...past[k]!, used: Math.max(0, past[k]!.used + units) };
  return { ...data, past };
}

/** How long a period is kept once it has ended: {@link HISTORY} periods as long as it. */
const keptUntil = (p: { startMs: number; endMs: number }): number => p.endMs + HISTORY * (p.endMs - p.startMs);

const usageOf = (p: PeriodUsage): PeriodUsage => ({
  startMs: p.startMs,
  endMs: p.endMs,
  used: p.used,
  credit: p.credit,
});

/** A 31-bit seed from the instant a row is made: clients seen at different milliseconds get different jitters. */
const seedOf = (nowMs: number): number => mix(nowMs % 0x7fffffff) & 0x7fffffff;

export const quotaCounter: Counter<QuotaData> = {
  rowOf: (check) => `${check.id}|quota`,

  fresh(nowMs, check) {
    const quota = quotaOf(check);
    const empty: QuotaData = {
      cal: quota.calendarKey,
      index: 0,
      startMs: 0,
      endMs: 0,
      used: 0,
      credit: 0,
      firstMs: null,
      seed: seedOf(nowMs),
      past: [],
    };
    const period = periodOf(empty, nowMs, quota);
    return { ...empty, index: period.index, startMs: period.startMs, endMs: period.endMs };
  },

  see(data, nowMs, check): Seen<QuotaData> {
    const quota = quotaOf(check);
    const brought = bring(data, nowMs, quota);
    return {
      allowed: fits(brought, costOf(check), check.limit),
      data: brought,
      weighted: Math.max(0, brought.used - brought.credit),
    };
  },

  admit: (seen, cost, check) => counted(seen, cost, quotaOf(check)),

  describe(seen, nowMs, check, wasCounted) {
    const quota = quotaOf(check);
    const { data } = seen;
    const toEndMs = Math.max(0, data.endMs - nowMs);
    const windowMs = data.endMs - data.startMs;
    if (!seen.allowed) {
      // The next period starts from nothing, and a rule's limit is never below its cost: admitted then.
      // What is left is said in units, though less than the request's cost: `r` is remaining quota units.
      return {
        allowed: false,
        weighted: seen.weighted,
        remaining: Math.max(0, check.limit + data.credit - data.used),
        retryAfterMs: toEndMs + jitterMs(data, quota),
        resetMs: toEndMs,
        resetAtMs: data.endMs,
        windowMs,
      };
    }
    const left = check.limit + data.credit - data.used - (wasCounted ? costOf(check) : 0);
    return {
      allowed: wasCounted,
      weighted: seen.weighted,
      remaining: Math.max(0, left),
      retryAfterMs: 0,
      resetMs: toEndMs,
      resetAtMs: data.endMs,
      windowMs,
    };
  },

  where: (seen) => seen.index,

  // A held request's count goes in the row's period at its turn (admitAt brought the row there).
  whereAt: (_atMs, _check, data) => data.index,

  roomFor: (seen, units, _nowMs, check) => fits(seen, units + costOf(check), check.limit),

  earliestAdmission(data, check, fromMs) {
    const brought = bring(data, fromMs, quotaOf(check));
    return fits(brought, costOf(check), check.limit) ? fromMs : Math.max(fromMs, brought.endMs);
  },

  admitAt(data, check, atMs) {
    const quota = quotaOf(check);
    return counted(bring(data, atMs, quota), costOf(check), quota);
  },

  countAhead: (seen, units) => ({ data: { ...seen, used: seen.used + units }, where: seen.index }),

  // Nothing is leased: units counted ahead for an isolate that vanishes would be charged for the whole period.
  leaseEndsInMs: () => 0,

  refusalsHold: false,

  takeBack(data, { bucket: where }, units) {
    if (where === data.index ? data.used <= 0 : !data.past.some((p) => p.index === where && p.used > 0)) return null;
    return adjust(data, where, -units);
  },

  addAt: (data, { bucket: where }, units) => adjust(data, where, units),

  expiresAtMs(data) {
    if (data.used !== 0 || data.credit !== 0) return keptUntil(data);
    const last = data.past[0];
    return last === undefined ? data.endMs : Math.max(data.endMs, keptUntil(last));
  },

  refundableUntilMs: (data) => data.endMs,

  // A first request, refused (its credit taken before it), starts the periods counted from it, as an admitted one does.
  refuse: (seen, check) =>
    quotaOf(check).fromFirst !== undefined && seen.firstMs === null ? { ...seen, firstMs: seen.startMs } : undefined,

  usage(data, nowMs, check): Usage {
    const brought = bring(data, nowMs, quotaOf(check));
    return {
      ...usageOf(brought),
      index: brought.index,
      limit: check.limit,
      remaining: Math.max(0, check.limit + brought.credit - brought.used),
      past: brought.past.map(usageOf),
      ...(quotaOf(check).fromFirst !== undefined && brought.firstMs === null ? { pending: true as const } : {}),
    };
  },

  // Every change acts on what is left, never below 0: an overdraft (the origin's cost, a lower limit) is forgiven by it.
  credit(data, change: Credit, nowMs, check) {
    const brought = bring(data, nowMs, quotaOf(check));
    const left = Math.max(0, check.limit + brought.credit - brought.used);
    const after = "add" in change ? left + change.add : "take" in change ? Math.max(0, left - change.take) : change.set;
    return { ...brought, credit: after - check.limit + brought.used };
  },

  encode: (data): Stored => ({
    periodMs: data.endMs - data.startMs,
    precision: 0,
    bucket: data.index,
    counts: JSON.stringify({
      cal: data.cal,
      start: data.startMs,
      end: data.endMs,
      used: data.used,
      credit: data.credit,
      first: data.firstMs,
      seed: data.seed,
      past: data.past.map((p) => [p.index, p.startMs, p.endMs, p.used, p.credit]),
    }),
  }),

  decode(stored) {
    const row = JSON.parse(stored.counts) as {
      cal: string;
      start: number;
      end: number;
      used: number;
      credit: number;
      first: number | null;
      seed: number;
      past: [number, number, number, number, number][];
    };
    return {
      cal: row.cal,
      index: stored.bucket,
      startMs: row.start,
      endMs: row.end,
      used: row.used,
      credit: row.credit,
      firstMs: row.first,
      seed: row.seed,
      past: row.past.map(([index, startMs, endMs, used, credit]) => ({ index, startMs, endMs, used, credit })),
    };
  },
};
