/**
 * @module
 * Calendar periods for quotas ("100,000 a month"): which day, week, month or
 * year an instant falls in, in a time zone, from an anchor (the day and the
 * wall-clock time a period starts), and the instants it starts and ends.
 *
 * Pure: instants are Unix milliseconds passed in; no clock, no I/O. Offsets
 * come from the runtime's own time zone data, through `Intl.DateTimeFormat`
 * (one formatter per zone, kept). Runtimes can hold different releases of
 * that data: where a zone's rules changed lately, a tool run in Node can
 * name a different instant than the Worker does.
 *
 * The rules, in wall-clock terms:
 * - A period starts when the zone's clock reads the anchor: its day (of the
 *   week, the month or the year) at its time. A month anchored on the 29th,
 *   30th or 31st starts on the last day of a shorter month; a year anchored
 *   on 29 February starts on 28 February in other years.
 * - Daylight-saving changes move nothing but the wall clock: a day of 23 or
 *   25 hours is still one day, and a month that holds a change is an hour
 *   shorter or longer.
 * - Precisely, a period starts at the first instant at which the clock reads
 *   the anchor's time or later. So a time the clock skips (a spring-forward
 *   gap: 02:30 in New York on the second Sunday of March) starts the period
 *   when the clock jumps (03:00, the first instant after the gap), and a time
 *   the clock reads twice (a fall-back overlap: 01:30 on the first Sunday of
 *   November) starts it at the first of the two. A day the zone skips whole
 *   (Pacific/Apia, 30 December 2011) is an empty period: no instant is in it,
 *   and the index steps over it.
 *
 * Calendar periods are the default, and what a quota should use unless a
 * plan says otherwise: they are what plans and invoices say ("100,000 a
 * month" is the calendar month, or the customer's billing day), every key
 * under a rule resets at the same instant, a support team can name that
 * instant, and nothing per key has to be stored to find it. Periods anchored
 * on a client's first request ({@link periodFrom}) are for plans that say so
 * ("1,000 requests in your first month"); they need that first instant kept
 * for as long as the key's quota is, and then follow the calendar from it
 * (a month from 31 January 10:17 is 28 February 10:17), never drifting with
 * the client's traffic.
 *
 * Cost: a request in the same period as the last one costs two comparisons
 * (keep the last {@link Period}; {@link currentPeriod} checks it first). A
 * calendar period is the same for every key under a calendar, so one kept
 * per calendar serves them all; only periods from a first request differ
 * by key. A
 * change of period costs a few `formatToParts` calls: three for the next
 * period, seven for one found from scratch, about twenty when a boundary
 * falls in a gap. Only UTC costs none.
 */
import { fail, ok, type Result } from "./result.ts";
import { show } from "./show.ts";

export const CALENDAR_PERIODS = ["day", "week", "month", "year"] as const;
/** The length of a calendar period, as a plan names it. */
export type CalendarPeriod = (typeof CALENDAR_PERIODS)[number];

/** Where in the calendar a period starts; every field is present once parsed (defaults filled in). */
export type Anchor = {
  /** The month a year starts in, 1 (January) to 12; 1 for other periods. */
  readonly month: number;
  /**
   * For a month or a year: the day of the month it starts on, 1 to 31 (clamped to a shorter
   * month's last day). For a week: the day of the week, as ISO 8601 numbers them, 1 (Monday) to
   * 7 (Sunday). 1 for a day.
   */
  readonly day: number;
  /** The wall-clock time of day it starts at, in milliseconds after midnight: 0 to 86,399,999. */
  readonly timeMs: number;
};

/** A validated calendar: periods of a length, in a time zone, from an anchor. */
export type CalendarSpec = {
  readonly period: CalendarPeriod;
  /** An IANA time zone name the runtime knows, as it was written ("UTC" by default). */
  readonly timeZone: string;
  readonly anchor: Anchor;
};

/** One period: the instants it starts and ends at, and its number. */
export type Period = {
  /** The first instant in the period, Unix milliseconds. */
  readonly startMs: number;
  /** The first instant after it (the next period's start), Unix milliseconds. */
  readonly endMs: number;
  /**
   * The period's number, stable for a calendar (the same instant always gives the same number),
   * one more for each following period, for counts kept per period. For a calendar period it
   * counts from the period holding the start of 1970 in wall-clock terms (days since 1970-01-01,
   * months since January 1970, years since 1970, weeks since the anchor's first weekday in
   * January 1970); for a period from a first request ({@link periodFrom}), from that request's
   * period, 0.
   */
  readonly index: number;
};

const SECOND = 1_000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

// ---------------------------------------------------------------------------------------------
// Validation

const CALENDAR_FIELDS = ["period", "timeZone", "anchor"] as const;
const ANCHOR_FIELDS = ["month", "day", "time"] as const;
const ZONE_EXAMPLE = 'an IANA time zone name such as "America/New_York" or "UTC"';
const WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const MONTHS = [
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
];
/** The longest each month can be: February's 29th is a day a year may start on. */
const MONTH_MAX_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const TIME = /^(\d{2}):(\d{2})(?::(\d{2}))?$/;

const isTable = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * A calendar as written: `{ period, timeZone?, anchor?: { month?, day?, time? } }`. Every
 * problem names its field (`"timeZone"`, `"anchor.day"`), all of them at once.
 */
export function parseCalendar(value: unknown): Result<CalendarSpec> {
  if (!isTable(value)) {
    return fail(`must be a table such as { period = "month", timeZone = "America/New_York" }; got ${show(value)}`);
  }
  const errors: string[] = [];
  const take = <T>(field: string, parsed: Result<T>, fallback: T): T => {
    if (parsed.ok) return parsed.value;
    // A table's problems name its own field (`"anchor.day": …`).
    for (const message of parsed.errors)
      errors.push(message.startsWith(`"${field}.`) ? message : `"${field}": ${message}`);
    return fallback;
  };
  for (const name of Object.keys(value)) {
    if (!(CALENDAR_FIELDS as readonly string[]).includes(name)) {
      take(name, fail(`is not a field of a calendar; its fields are ${CALENDAR_FIELDS.join(", ")}`), null);
    }
  }
  const period = take("period", parseCalendarPeriod(value.period), null);
  const timeZone = take("timeZone", parseTimeZone(value.timeZone ?? "UTC"), "UTC");
  const anchor = period === null ? null : take("anchor", parseAnchor(value.anchor, period), null);
  if (errors.length > 0 || period === null || anchor === null) return fail(...errors);
  return ok({ period, timeZone, anchor });
}

/** `"day"`, `"week"`, `"month"` or `"year"`. */
export function parseCalendarPeriod(value: unknown): Result<CalendarPeriod> {
  if (value === undefined) return fail(`is required: ${CALENDAR_PERIODS.map((p) => `"${p}"`).join(", ")}`);
  return (CALENDAR_PERIODS as readonly unknown[]).includes(value)
    ? ok(value as CalendarPeriod)
    : fail(`must be ${CALENDAR_PERIODS.map((p) => `"${p}"`).join(", ")}; got ${show(value)}`);
}

let runtimeZones: ReadonlySet<string> | undefined;

/**
 * The zones this runtime lists (`Intl.supportedValuesOf("timeZone")`), and "UTC", which it
 * accepts but does not list.
 */
export const knownTimeZones = (): ReadonlySet<string> => {
  runtimeZones ??= new Set([...Intl.supportedValuesOf("timeZone"), "UTC"]);
  return runtimeZones;
};

/**
 * A time zone the runtime knows: a name it lists, or another name it takes for one of them
 * ("Asia/Kolkata" where it lists "Asia/Calcutta", "US/Eastern", "Etc/UTC"). Kept as written.
 * A fixed offset is refused: its clock has no daylight-saving changes, so it is not a place's time.
 */
export function parseTimeZone(value: unknown): Result<string> {
  if (typeof value !== "string" || value.trim() === "") return fail(`must be ${ZONE_EXAMPLE}; got ${show(value)}`);
  if (/^[+\u2212-]?\d/.test(value)) return fail(`must be ${ZONE_EXAMPLE}, not an offset; got ${show(value)}`);
  let resolved: string | undefined;
  try {
    resolved = new Intl.DateTimeFormat("en-US", { timeZone: value }).resolvedOptions().timeZone;
  } catch {
    resolved = undefined;
  }
  if (resolved === undefined || !knownTimeZones().has(resolved)) {
    return fail(`${show(value)} is not a time zone this runtime knows; use ${ZONE_EXAMPLE}`);
  }
  return ok(value);
}

/** The `anchor` table for a period of this length; left out, the period's start: midnight, Monday, the 1st, 1 January. */
export function parseAnchor(value: unknown, period: CalendarPeriod): Result<Anchor> {
  if (value === undefined) value = {};
  if (!isTable(value)) return fail(`must be a table such as { day = 1, time = "00:00" }; got ${show(value)}`);
  const errors: string[] = [];
  const take = <T>(field: string, parsed: Result<T>, fallback: T): T => {
    if (parsed.ok) return parsed.value;
    for (const message of parsed.errors) errors.push(`"anchor.${field}": ${message}`);
    return fallback;
  };
  for (const name of Object.keys(value)) {
    if (!(ANCHOR_FIELDS as readonly string[]).includes(name)) {
      take(name, fail(`is not a field of "anchor"; its fields are ${ANCHOR_FIELDS.join(", ")}`), null);
    }
  }
  const month = take("month", parseAnchorMonth(value.month, period), 1);
  const day = take("day", parseAnchorDay(value.day, period, month), 1);
  const timeMs = take("time", parseTimeOfDay(value.time ?? "00:00"), 0);
  return errors.length > 0 ? fail(...errors) : ok({ month, day, timeMs });
}

const isIntegerIn = (value: unknown, min: number, max: number): value is number =>
  typeof value === "number" && Number.isInteger(value) && value >= min && value <= max;

function parseAnchorMonth(value: unknown, period: CalendarPeriod): Result<number> {
  if (value === undefined) return ok(1);
  if (period !== "year") return fail(`only a year starts in a month; a ${period} has none, so leave it out`);
  return isIntegerIn(value, 1, 12)
    ? ok(value)
    : fail(`must be a month from 1 (January) to 12 (December); got ${show(value)}`);
}

function parseAnchorDay(value: unknown, period: CalendarPeriod, month: number): Result<number> {
  if (period === "day") {
    return value === undefined ? ok(1) : fail('a day has no day to start on; leave it out, and set "time"');
  }
  if (period === "week") {
    if (value === undefined) return ok(1);
    if (isIntegerIn(value, 1, 7)) return ok(value);
    const sunday = value === 0 ? " (Sunday is 7)" : "";
    return fail(
      `must be a day of the week from 1 (Monday) to 7 (Sunday), as ISO 8601 numbers them${sunday}; got ${show(value)}`,
    );
  }
  if (value === undefined) return ok(1);
  if (!isIntegerIn(value, 1, 31)) return fail(`must be a day of the month from 1 to 31; got ${show(value)}`);
  const longest = MONTH_MAX_DAYS[month - 1]!;
  if (period === "year" && value > longest) {
    return fail(`${MONTHS[month - 1]} has at most ${longest} days; got ${value}`);
  }
  return ok(value);
}

/** `"HH:MM"` or `"HH:MM:SS"`, 24-hour, to milliseconds after midnight. */
export function parseTimeOfDay(value: unknown): Result<number> {
  const match = typeof value === "string" ? TIME.exec(value) : null;
  const [hours, minutes, seconds] = match === null ? [] : [match[1], match[2], match[3] ?? "0"].map(Number);
  if (
    hours === undefined ||
    minutes === undefined ||
    seconds === undefined ||
    hours > 23 ||
    minutes > 59 ||
    seconds > 59
  ) {
    return fail(`must be a time of day "HH:MM" or "HH:MM:SS", from "00:00" to "23:59:59"; got ${show(value)}`);
  }
  return ok(hours * HOUR + minutes * MINUTE + seconds * SECOND);
}

// ---------------------------------------------------------------------------------------------
// A zone's wall clock

/** A zone's formatter, made once: the costly part of reading its clock. */
type Zone = { readonly utc: boolean; readonly format: Intl.DateTimeFormat };

const zones = new Map<string, Zone>();

function zoneOf(timeZone: string): Zone {
  let zone = zones.get(timeZone);
  if (zone === undefined) {
    const format = new Intl.DateTimeFormat("en-US", {
      timeZone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    zone = { utc: format.resolvedOptions().timeZone === "UTC", format };
    zones.set(timeZone, zone);
  }
  return zone;
}

const mod = (n: number, d: number): number => ((n % d) + d) % d;

/** Midnight starting a date, in milliseconds since 1970-01-01 of the same clock (a Gregorian date, any year). */
function dateMs(year: number, month: number, day: number): number {
  const ms = Date.UTC(year, month - 1, day);
  // Date.UTC reads years 0–99 as 1900–1999.
  return year >= 0 && year < 100 ? new Date(ms).setUTCFullYear(year) : ms;
}

/**
 * The zone's wall clock at an instant, as milliseconds since 1970-01-01T00:00 on that clock
 * ("local milliseconds": the instant the same reading would be in UTC).
 */
function wallMs(instantMs: number, zone: Zone): number {
  if (zone.utc) return instantMs;
  // The formatter reads whole seconds; offsets change on whole seconds, so the rest carries over.
  const fraction = mod(instantMs, SECOND);
  let year = 0;
  let month = 0;
  let day = 0;
  let clock = 0;
  for (const part of zone.format.formatToParts(instantMs - fraction)) {
    switch (part.type) {
      case "year":
        year = Number(part.value);
        break;
      case "month":
        month = Number(part.value);
        break;
      case "day":
        day = Number(part.value);
        break;
      case "hour":
        clock += Number(part.value) * HOUR;
        break;
      case "minute":
        clock += Number(part.value) * MINUTE;
        break;
      case "second":
        clock += Number(part.value) * SECOND;
        break;
    }
  }
  return dateMs(year, month, day) + clock + fraction;
}

/**
 * The first instant at which the zone's clock reads `localMs` or later, looking a day either
 * side: the instant it reads `localMs`; the first of two in an overlap; the jump after a gap.
 */
function firstInstantAt(localMs: number, zone: Zone): number {
  if (zone.utc) return localMs;
  const before = wallMs(localMs - DAY, zone) - (localMs - DAY);
  const after = wallMs(localMs + DAY, zone) - (localMs + DAY);
  // The larger offset gives the earlier instant: an overlap's first reading.
  const early = localMs - Math.max(before, after);
  if (wallMs(early, zone) === localMs) return early;
  const late = localMs - Math.min(before, after);
  if (late !== early && wallMs(late, zone) === localMs) return late;
  // A gap: the clock never reads localMs. Find the second it jumps past it (offsets change on whole seconds).
  let lo = Math.floor(Math.min(early, late) / SECOND) - 1;
  let hi = Math.ceil(Math.max(early, late) / SECOND);
  while (wallMs(hi * SECOND, zone) < localMs) hi += 3_600; // two changes within a day: widen until past it
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (wallMs(mid * SECOND, zone) >= localMs) hi = mid;
    else lo = mid;
  }
  // The offset holds through the second before: the clock may reach localMs within it, else at the jump.
  const within = localMs - (wallMs(lo * SECOND, zone) - lo * SECOND);
  return Math.min(within, hi * SECOND);
}

// ---------------------------------------------------------------------------------------------
// Periods

const daysInMonth = (year: number, month: number): number =>
  month === 2 ? (year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28) : MONTH_MAX_DAYS[month - 1]!;

/** Days from 1970-01-01 (a Thursday) to the first day of the anchor's weekday: 4 for Monday, 3 for Sunday. */
const firstWeekday = (isoDay: number): number => mod(isoDay - 4, 7);

/** Where period `index` starts, on the zone's wall clock (local milliseconds). */
function wallStart(index: number, spec: CalendarSpec): number {
  const { anchor } = spec;
  switch (spec.period) {
    case "day":
      return index * DAY + anchor.timeMs;
    case "week":
      return (7 * index + firstWeekday(anchor.day)) * DAY + anchor.timeMs;
    case "month": {
      const year = 1970 + Math.floor(index / 12);
      const month = mod(index, 12) + 1;
      return dateMs(year, month, Math.min(anchor.day, daysInMonth(year, month))) + anchor.timeMs;
    }
    case "year": {
      const year = 1970 + index;
      return dateMs(year, anchor.month, Math.min(anchor.day, daysInMonth(year, anchor.month))) + anchor.timeMs;
    }
  }
}

/** The period whose wall-clock span holds this wall-clock reading. */
function indexAtWall(localMs: number, spec: CalendarSpec): number {
  const days = Math.floor((localMs - spec.anchor.timeMs) / DAY);
  switch (spec.period) {
    case "day":
      return days;
    case "week":
      return Math.floor((days - firstWeekday(spec.anchor.day)) / 7);
    case "month":
    case "year": {
      const date = new Date(localMs);
      const year = date.getUTCFullYear() - 1970;
      const index = spec.period === "month" ? year * 12 + date.getUTCMonth() : year;
      return localMs < wallStart(index, spec) ? index - 1 : index;
    }
  }
}

/** Period `index` of a calendar: from where the clock first reads its start to where it first reads the next one's. */
export function periodOfIndex(index: number, spec: CalendarSpec): Period {
  const zone = zoneOf(spec.timeZone);
  return {
    startMs: firstInstantAt(wallStart(index, spec), zone),
    endMs: firstInstantAt(wallStart(index + 1, spec), zone),
    index,
  };
}

/** The calendar period that holds an instant (Unix milliseconds). */
export function periodAt(instantMs: number, spec: CalendarSpec): Period {
  const zone = zoneOf(spec.timeZone);
  let index = indexAtWall(wallMs(instantMs, zone), spec);
  let startMs = firstInstantAt(wallStart(index, spec), zone);
  let endMs = firstInstantAt(wallStart(index + 1, spec), zone);
  // The wall clock's reading and the boundaries disagree only just after a change of offset
  // (the second pass through an overlap), or across an empty period.
  while (instantMs < startMs) {
    index -= 1;
    endMs = startMs;
    startMs = firstInstantAt(wallStart(index, spec), zone);
  }
  while (instantMs >= endMs) {
    index += 1;
    startMs = endMs;
    endMs = firstInstantAt(wallStart(index + 1, spec), zone);
  }
  return { startMs, endMs, index };
}

/**
 * The calendar period that holds `nowMs`, given the last one this calendar gave (from
 * {@link periodAt} or this): that one again if it still holds it (two comparisons), else
 * the next if that holds it (one boundary found), else found from scratch.
 */
export function currentPeriod(nowMs: number, spec: CalendarSpec, last?: Period): Period {
  if (last !== undefined) {
    if (last.startMs <= nowMs && nowMs < last.endMs) return last;
    if (nowMs >= last.endMs) {
      const endMs = firstInstantAt(wallStart(last.index + 2, spec), zoneOf(spec.timeZone));
      if (nowMs < endMs) return { startMs: last.endMs, endMs, index: last.index + 1 };
    }
  }
  return periodAt(nowMs, spec);
}

/**
 * The calendar a client's first request starts, at `startMs`: periods of the spec's length
 * and zone whose anchor is that request's wall-clock day and time, to the millisecond.
 */
export function anchoredAt(startMs: number, spec: CalendarSpec): CalendarSpec {
  const local = new Date(wallMs(startMs, zoneOf(spec.timeZone)));
  const timeMs = mod(local.getTime(), DAY);
  const isoWeekday = mod(local.getUTCDay() - 1, 7) + 1;
  const day = spec.period === "week" ? isoWeekday : spec.period === "day" ? 1 : local.getUTCDate();
  const month = spec.period === "year" ? local.getUTCMonth() + 1 : 1;
  return { period: spec.period, timeZone: spec.timeZone, anchor: { month, day, timeMs } };
}

/**
 * A period counted from a client's first request at `startMs`, not from the calendar's anchor:
 * the one that holds `instantMs`. Period 0 starts at `startMs` exactly; each next one where the
 * zone's clock next reads that request's day and time ({@link anchoredAt}); an instant before
 * `startMs` is in period -1 or earlier.
 */
export function periodFrom(startMs: number, spec: CalendarSpec, instantMs: number): Period {
  const calendar = anchoredAt(startMs, spec);
  const zone = zoneOf(spec.timeZone);
  const first = indexAtWall(wallMs(startMs, zone), calendar);
  const found = periodAt(instantMs, calendar);
  const index = found.index - first;
  // The first request may come in an overlap's second pass, after the clock first read its time.
  if (index === 0 && instantMs >= startMs) return { startMs, endMs: found.endMs, index: 0 };
  if (index === 0) return { startMs: periodOfIndex(first - 1, calendar).startMs, endMs: startMs, index: -1 };
  if (index === -1) return { startMs: found.startMs, endMs: startMs, index: -1 };
  return { startMs: found.startMs, endMs: found.endMs, index };
}

// ---------------------------------------------------------------------------------------------
// Periods in words and in seconds

/** A period's length in whole seconds, rounded up: `w` in `RateLimit-Policy`. */
export const periodSeconds = (period: Period): number => Math.ceil((period.endMs - period.startMs) / SECOND);

/** Whole seconds from `nowMs` to the period's end, rounded up, 0 once it has ended: `t` in `RateLimit`. */
export const secondsToEnd = (period: Period, nowMs: number): number =>
  Math.max(0, Math.ceil((period.endMs - nowMs) / SECOND));

const pad = (n: number): string => String(n).padStart(2, "0");

/** An offset as ISO 8601 writes it: `+05:45`, `-04:00`, `+00:00`. */
function offsetText(offsetMs: number): string {
  const abs = Math.abs(offsetMs);
  const seconds = Math.floor(abs / SECOND) % 60;
  const text = `${offsetMs < 0 ? "-" : "+"}${pad(Math.floor(abs / HOUR))}:${pad(Math.floor(abs / MINUTE) % 60)}`;
  return seconds === 0 ? text : `${text}:${pad(seconds)}`; // local mean time, before 1900 or so
}

/**
 * An instant as the zone's clock reads it, in ISO 8601 with the zone's offset at that instant:
 * `2026-12-01T00:00:00-05:00`; with milliseconds only when there are some.
 */
export function formatInstant(instantMs: number, timeZone: string): string {
  const local = wallMs(instantMs, zoneOf(timeZone));
  const iso = new Date(local).toISOString(); // local milliseconds, read as UTC: the wall clock
  const clock = mod(local, SECOND) === 0 ? iso.slice(0, -5) : iso.slice(0, -1);
  return `${clock}${offsetText(local - instantMs)}`;
}

/** When a period ends, for a problem's detail: `resets 2026-12-01T00:00:00-05:00`. */
export const describeReset = (period: Period, spec: Pick<CalendarSpec, "timeZone">): string =>
  `resets ${formatInstant(period.endMs, spec.timeZone)}`;

/** `09:00`, or `09:00:30` when the seconds are not 0. */
function timeText(timeMs: number): string {
  const seconds = Math.floor(timeMs / SECOND) % 60;
  const text = `${pad(Math.floor(timeMs / HOUR))}:${pad(Math.floor(timeMs / MINUTE) % 60)}`;
  return seconds === 0 ? text : `${text}:${pad(seconds)}`;
}

/**
 * A calendar in words, for docs and answers: `monthly on day 31 (a shorter month's last day)
 * at 00:00 America/New_York`, `weekly on Monday at 09:00 UTC`.
 */
export function describeCalendar(spec: CalendarSpec): string {
  const { anchor } = spec;
  const at = `at ${timeText(anchor.timeMs)} ${spec.timeZone}`;
  switch (spec.period) {
    case "day":
      return `daily ${at}`;
    case "week":
      return `weekly on ${WEEKDAYS[anchor.day - 1]} ${at}`;
    case "month":
      return `monthly on day ${anchor.day}${anchor.day > 28 ? " (a shorter month's last day)" : ""} ${at}`;
    case "year": {
      const leapDay = anchor.month === 2 && anchor.day === 29 ? " (28 February in other years)" : "";
      return `yearly on ${anchor.day} ${MONTHS[anchor.month - 1]}${leapDay} ${at}`;
    }
  }
}
