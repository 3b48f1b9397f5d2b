/**
 * @module
 * The calendar quota: `quota` units per calendar `per` (day, week, month or
 * year) in a `timezone`, from an `anchor` (the day and the time a period
 * starts), as API plans sell them: "100,000 a month, reset on the 1st at
 * midnight New York time". Each request counts `cost` (and what the origin
 * reports, with `cost_header`); what the client has left this period can
 * be topped up by an operator (a credit). Its client's object counts it
 * (`count` protocol); the period is worked out from the object's clock at
 * each request (core/calendar.ts), never by an alarm.
 *
 * `reset` says where the periods count from: `"calendar"` (the default),
 * the anchor, the same instant for every client (what a plan or an invoice
 * says, and what a support team can name); or `"first-request"`, each
 * client's own first request, for plans that say "a month from when you
 * start" (core/calendar.ts, `periodFrom`).
 *
 * A quota takes no `max_delay` (its periods end days apart: holding a
 * request up to 60 s would help only in a period's last minute, and would
 * line every held client up on its boundary) and no `adaptive` (an amount
 * per period is not a rate: lowered while the origin is slow, it would
 * refuse a client for the rest of its period for what it used before). A
 * window rule beside the quota does both.
 */
import {
  type Anchor,
  type CalendarPeriod,
  type CalendarSpec,
  currentPeriod,
  describeCalendar,
  formatInstant,
  type Period,
  parseAnchor,
  parseCalendarPeriod,
  parseTimeZone,
} from "../calendar.ts";
import { formatDuration, parseDurationMs } from "../duration.ts";
import { isZero, parseChoice, parseIntegerFrom1 } from "../fields.ts";
import { fail, ok, type Result } from "../result.ts";
import { show } from "../show.ts";
import { COUNTED_FIELDS, type CountedFields, costHeaderWarnings, countedView, parseCounted } from "./counted.ts";
import { type Common, type Fields, grouped, type Quota, type RuleKind, type TakeField } from "./kind.ts";
import { MAX_LIMIT } from "./window.ts";

/** Where a quota's periods count from. */
export const QUOTA_RESETS = ["calendar", "first-request"] as const;
export type QuotaReset = (typeof QUOTA_RESETS)[number];

/** The longest `retry_jitter`: a client told to wait an hour past the boundary has waited long enough. */
const MAX_JITTER_MS = 3_600_000;

/** A quota rule's own fields, compiled: `limit` is its `quota`, the units a client has per period. */
export type QuotaFields = CountedFields & {
  limit: number;
  /** Its periods: their length (`per`), `timezone` and `anchor`. */
  calendar: CalendarSpec;
  reset: QuotaReset;
  /** How much later than the boundary `Retry-After` may say, spread by client (`retry_jitter`); 0: none. */
  retryJitterMs: number;
};

/** What a quota rule's client's object needs of its own fields (a rule check's own part). */
export type QuotaLimit = {
  kind: "quota";
  /** The units a client has per period: the rule's, a tier's or an override's. */
  limit: number;
  cost?: number;
  calendar: CalendarSpec;
  /** The calendar and `reset` as one string, the same in every isolate: a row made under another is carried over. */
  calendarKey: string;
  /** Periods count from each client's first request (`reset = "first-request"`). */
  fromFirst?: true;
  retryJitterMs?: number;
};

/** The calendar and `reset` as one string: `calendar|month|America/New_York|1-1|0`. */
export const calendarKeyOf = (calendar: CalendarSpec, reset: QuotaReset): string =>
  `${reset}|${calendar.period}|${calendar.timeZone}|${calendar.anchor.month}-${calendar.anchor.day}|${calendar.anchor.timeMs}`;

/** A time zone's canonical name, as the runtime's ICU gives it; the name as written if it gives none. */
const canonicalZone = (timeZone: string): string => {
  try {
    return new Intl.DateTimeFormat("en-US", { timeZone }).resolvedOptions().timeZone;
  } catch {
    return timeZone;
  }
};

const FIELDS = ["quota", "per", "timezone", "anchor", "reset", ...COUNTED_FIELDS, "retry_jitter"] as const;

/** A period's usual length: `w` where no instant says which period it is. */
const NOMINAL_MS: Record<CalendarPeriod, number> = {
  day: 86_400_000,
  week: 7 * 86_400_000,
  month: 30 * 86_400_000,
  year: 365 * 86_400_000,
};

export const quotaKind: RuleKind<QuotaFields> = {
  name: "quota",
  protocol: "count",
  fields: FIELDS,
  marks: ["quota"],
  required: ["quota", "per"],
  maxLimit: MAX_LIMIT,
  limitNoun: "units",
  limitField: "quota",
  foreignField: (field) =>
    field === "limit" || field === "period"
      ? 'a rule has either "limit" and "period" (requests per sliding window) or "quota" and "per" (units per calendar period), not both'
      : "does not apply to a quota rule, which counts units per calendar period; remove it",
  ownField: () => 'only a quota rule (with "quota" and "per") has it; remove it',
  refuses: {
    max_delay:
      "does not apply to a quota rule: a quota renews only at its period's end, so holding a request (60 s at most) could only help in a period's last minute, and would line every held client up on that second; hold requests with a window rule beside the quota",
    adaptive:
      "does not apply to a quota rule: a quota is an amount per period, not a rate, and lowered while the origin is slow it would refuse a client for the rest of its period for what it used before; make a window rule beside the quota adaptive",
  },

  parse(fields: Fields, take: TakeField): QuotaFields {
    const limit = take("quota", parseIntegerFrom1(fields.quota, MAX_LIMIT), 0);
    const period = take("per", parseCalendarPeriod(fields.per), null);
    const timeZone = take("timezone", parseTimeZone(fields.timezone ?? "UTC"), "UTC");
    const anchor = period === null ? null : take("anchor", parseAnchor(fields.anchor, period), null);
    const reset = take("reset", parseReset(fields.reset, fields.anchor), "calendar");
    const counted = parseCounted(fields, take, limit);
    const retryJitterMs = take("retry_jitter", parseJitter(fields.retry_jitter), 0);
    const calendar: CalendarSpec = { period: period ?? "day", timeZone, anchor: anchor ?? NO_ANCHOR };
    return { limit, calendar, reset, ...counted, retryJitterMs };
  },

  quota: (rule: QuotaFields): Quota => calendarQuota(rule.calendar, rule.reset),

  check: (rule: QuotaFields): QuotaLimit => ({
    kind: "quota",
    limit: rule.limit,
    calendar: rule.calendar,
    calendarKey: calendarKeyOf(rule.calendar, rule.reset),
    ...(rule.reset === "first-request" ? { fromFirst: true } : {}),
    ...(rule.retryJitterMs > 0 ? { retryJitterMs: rule.retryJitterMs } : {}),
  }),

  view(rule: QuotaFields) {
    const { calendar } = rule;
    const limit = {
      quota: rule.limit,
      per: calendar.period,
      timezone: calendar.timeZone,
      anchor: anchorAsWritten(calendar.period, calendar.anchor),
      reset: rule.reset,
      // In words, as a support team says it: "monthly on day 1 at 00:00 America/New_York".
      calendar: describeQuotaCalendar(calendar, rule.reset),
    };
    const counting = {
      ...countedView(rule),
      retry_jitter: rule.retryJitterMs > 0 ? formatDuration(rule.retryJitterMs) : null,
      retryJitterMs: rule.retryJitterMs,
    };
    return {
      limit,
      counting,
      summary: `${grouped(rule.limit)} per ${calendar.period} (${limit.calendar})`,
      credits: true as const,
    };
  },

  warnings: (rule: QuotaFields & Common, written: Fields): string[] => [
    ...costWarnings(rule),
    ...costHeaderWarnings(rule),
    ...(rule.retryJitterMs > 0 && rule.action === "log"
      ? [
          `field "retry_jitter": ${show(written.retry_jitter)} has no effect on a shadow rule (action = "log"), which never refuses a request`,
        ]
      : []),
  ],

  // One zone under two names (Etc/UTC and UTC, Europe/Kiev and Europe/Kyiv) is one calendar.
  measure: (rule: QuotaFields) =>
    calendarKeyOf({ ...rule.calendar, timeZone: canonicalZone(rule.calendar.timeZone) }, rule.reset),

  overlap: (a, b, looser, same) =>
    same
      ? `${a} and ${b}: are the same quota on the same requests, key and calendar; remove one`
      : `${a} and ${b}: count the same requests with the same key in the same calendar periods, so ${looser}, the looser, never refuses anything; remove it`,
};

/** Left out: where a period of its length starts (a field with problems has it too, never used). */
const NO_ANCHOR: Anchor = { month: 1, day: 1, timeMs: 0 };

/** `reset`: `"calendar"` when absent. An anchor means nothing to periods from a first request. */
function parseReset(value: unknown, anchor: unknown): Result<QuotaReset> {
  const reset = parseChoice(value ?? "calendar", QUOTA_RESETS);
  if (reset.ok && reset.value === "first-request" && anchor !== undefined) {
    return fail(
      'takes no "anchor" when it is "first-request": each client\'s periods start at its first request; remove one of them',
    );
  }
  return reset;
}

/** `retry_jitter`: absent or zero is none; otherwise from 1 s to 1 h. */
function parseJitter(value: unknown): Result<number> {
  if (value === undefined || isZero(value)) return ok(0);
  const outOfRange = fail(`must be from 1s to 1h, or 0 for none; got ${show(value)}`);
  if (typeof value === "number" && value < 0) return outOfRange;
  const parsed = parseDurationMs(value);
  return parsed.ok && (parsed.value < 1_000 || parsed.value > MAX_JITTER_MS) ? outOfRange : parsed;
}

const pad = (n: number): string => String(n).padStart(2, "0");

/** An anchor as wrangler.toml writes it: `{ day = 1, time = "00:00" }`, with `month` for a year, no `day` for a day. */
function anchorAsWritten(period: CalendarPeriod, anchor: Anchor): Record<string, unknown> {
  const seconds = Math.floor(anchor.timeMs / 1_000);
  const time = `${pad(Math.floor(seconds / 3_600))}:${pad(Math.floor(seconds / 60) % 60)}${seconds % 60 === 0 ? "" : `:${pad(seconds % 60)}`}`;
  return {
    ...(period === "year" ? { month: anchor.month } : {}),
    ...(period === "day" ? {} : { day: anchor.day }),
    time,
  };
}

/**
 * A quota's terms for the headers and the problem details: `w` the period
 * it is in (a month of 28 to 31 days, a day of 23 to 25 hours), and in
 * words "100000 per month, resets 2026-12-01T00:00:00-05:00" when the
 * instant it resets is known. The period is kept, so the next instant in
 * it costs two comparisons.
 */
export function calendarQuota(calendar: CalendarSpec, reset: QuotaReset): Quota {
  let last: Period | undefined;
  return {
    windowMs: NOMINAL_MS[calendar.period],
    // A period from a client's first request is its own: only its object's verdict says how long it is.
    ...(reset === "calendar"
      ? {
          windowAt(nowMs: number): number {
            last = currentPeriod(nowMs, calendar, last);
            return last.endMs - last.startMs;
          },
        }
      : {}),
    words: (limit, resetAtMs) =>
      `${limit} per ${calendar.period}${resetAtMs === undefined ? "" : `, resets ${formatInstant(resetAtMs, calendar.timeZone)}`}`,
  };
}

/**
 * A quota whose limit is not a whole number of costs: what is left below
 * the cost at the end of each period can never be spent (a client at 900
 * of 1000 with a cost of 300 is refused), which a plan rarely means.
 */
function costWarnings(rule: QuotaFields): string[] {
  const cost = rule.cost ?? 1;
  const unspendable = rule.limit % cost;
  if (cost === 1 || unspendable === 0 || rule.costHeader !== undefined) return [];
  return [
    `field "cost": ${cost} does not divide the quota (${rule.limit}), so the last ${unspendable} units of every period are below the cost and can never be spent; make the quota a multiple of the cost (${rule.limit - unspendable} or ${rule.limit - unspendable + cost})`,
  ];
}

const ADVERBS: Record<CalendarPeriod, string> = { day: "daily", week: "weekly", month: "monthly", year: "yearly" };

/** A quota's periods in words: "monthly on day 1 at 00:00 America/New_York", "monthly from each client's first request, America/New_York". */
export const describeQuotaCalendar = (calendar: CalendarSpec, reset: QuotaReset): string =>
  reset === "calendar"
    ? describeCalendar(calendar)
    : `${ADVERBS[calendar.period]} from each client's first request, ${calendar.timeZone}`;
