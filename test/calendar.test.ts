/**
 * @module
 * Calendar periods for quotas (src/core/calendar.ts), in the Workers runtime,
 * whose own time zone data they run on: a table of hand-checked periods
 * across daylight-saving changes, odd offsets, leap days and short months;
 * the anchors' validation; and properties over random instants from 1970 to
 * 2100 in random zones of the runtime's list: every instant is in exactly
 * one period, periods tile time, and their numbers count up by one.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type Anchor,
  type CalendarPeriod,
  type CalendarSpec,
  currentPeriod,
  describeCalendar,
  describeReset,
  formatInstant,
  knownTimeZones,
  type Period,
  parseCalendar,
  periodAt,
  periodFrom,
  periodOfIndex,
  periodSeconds,
  secondsToEnd,
} from "../src/core/calendar.ts";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** A calendar from its written form, which must parse. */
function calendar(input: Record<string, unknown>): CalendarSpec {
  const parsed = parseCalendar(input);
  if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
  return parsed.value;
}

const at = (iso: string): number => {
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) throw new Error(`not an instant: ${iso}`);
  return ms;
};

describe("the runtime's time zone data", () => {
  it("lists the IANA zones, and knows the ones these tests need by their current names", () => {
    expect(knownTimeZones().size).toBeGreaterThan(400);
    // Some under older names: the runtime lists "Asia/Katmandu", and takes "Asia/Kathmandu" for it.
    for (const zone of ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu"]) {
      expect(parseCalendar({ period: "day", timeZone: zone }).ok, zone).toBe(true);
    }
  });
});

type Case = {
  case: string;
  timeZone: string;
  period: CalendarPeriod;
  anchor?: Record<string, unknown>;
  at: string;
  start: string;
  end: string;
  hours: number;
};

/**
 * Each period worked out by hand from the zone's rules: the instant's period, as the zone's
 * clock reads its start and end, and its length in hours.
 */
const CASES: Case[] = [
  // America/New_York: EST (-05:00) to EDT (-04:00) at 02:00 on Sunday 8 March 2026, back at 02:00 on Sunday 1 November.
  {
    case: "New York's spring-forward day is 23 hours",
    timeZone: "America/New_York",
    period: "day",
    at: "2026-03-08T12:00:00-04:00",
    start: "2026-03-08T00:00:00-05:00",
    end: "2026-03-09T00:00:00-04:00",
    hours: 23,
  },
  {
    case: "New York's fall-back day is 25 hours",
    timeZone: "America/New_York",
    period: "day",
    at: "2026-11-01T12:00:00-05:00",
    start: "2026-11-01T00:00:00-04:00",
    end: "2026-11-02T00:00:00-05:00",
    hours: 25,
  },
  {
    case: "New York's March is an hour short of 31 days",
    timeZone: "America/New_York",
    period: "month",
    at: "2026-03-20T00:00:00-04:00",
    start: "2026-03-01T00:00:00-05:00",
    end: "2026-04-01T00:00:00-04:00",
    hours: 31 * 24 - 1,
  },
  {
    case: "New York's November is an hour over 30 days, and resets on 1 December at midnight EST",
    timeZone: "America/New_York",
    period: "month",
    at: "2026-11-15T00:00:00-05:00",
    start: "2026-11-01T00:00:00-04:00",
    end: "2026-12-01T00:00:00-05:00",
    hours: 30 * 24 + 1,
  },
  {
    case: "a week from Monday holding New York's spring-forward Sunday is 167 hours",
    timeZone: "America/New_York",
    period: "week",
    anchor: { day: 1 },
    at: "2026-03-08T12:00:00-04:00",
    start: "2026-03-02T00:00:00-05:00",
    end: "2026-03-09T00:00:00-04:00",
    hours: 167,
  },
  {
    case: "a reset at 02:30 New York, a time the clock skips, comes when it jumps to 03:00",
    timeZone: "America/New_York",
    period: "day",
    anchor: { time: "02:30" },
    at: "2026-03-08T12:00:00-04:00",
    start: "2026-03-08T03:00:00-04:00",
    end: "2026-03-09T02:30:00-04:00",
    hours: 23.5,
  },
  {
    case: "the day before it ends at that jump",
    timeZone: "America/New_York",
    period: "day",
    anchor: { time: "02:30" },
    at: "2026-03-08T01:59:59-05:00",
    start: "2026-03-07T02:30:00-05:00",
    end: "2026-03-08T03:00:00-04:00",
    hours: 23.5,
  },
  {
    case: "a reset at 01:30 New York, a time the clock reads twice, comes at the first",
    timeZone: "America/New_York",
    period: "day",
    anchor: { time: "01:30" },
    at: "2026-11-01T01:45:00-04:00",
    start: "2026-11-01T01:30:00-04:00",
    end: "2026-11-02T01:30:00-05:00",
    hours: 25,
  },
  {
    case: "01:15 the second time round is after that reset",
    timeZone: "America/New_York",
    period: "day",
    anchor: { time: "01:30" },
    at: "2026-11-01T01:15:00-05:00",
    start: "2026-11-01T01:30:00-04:00",
    end: "2026-11-02T01:30:00-05:00",
    hours: 25,
  },
  {
    case: "01:15 the first time round is before it",
    timeZone: "America/New_York",
    period: "day",
    anchor: { time: "01:30" },
    at: "2026-11-01T01:15:00-04:00",
    start: "2026-10-31T01:30:00-04:00",
    end: "2026-11-01T01:30:00-04:00",
    hours: 24,
  },
  // Europe/Berlin: CET (+01:00) to CEST (+02:00) at 02:00 on Sunday 29 March 2026, back at 03:00 on Sunday 25 October.
  {
    case: "Berlin's spring-forward day is 23 hours",
    timeZone: "Europe/Berlin",
    period: "day",
    at: "2026-03-29T12:00:00+02:00",
    start: "2026-03-29T00:00:00+01:00",
    end: "2026-03-30T00:00:00+02:00",
    hours: 23,
  },
  {
    case: "Berlin's fall-back day is 25 hours",
    timeZone: "Europe/Berlin",
    period: "day",
    at: "2026-10-25T12:00:00+01:00",
    start: "2026-10-25T00:00:00+02:00",
    end: "2026-10-26T00:00:00+01:00",
    hours: 25,
  },
  {
    case: "Berlin's March is an hour short",
    timeZone: "Europe/Berlin",
    period: "month",
    at: "2026-03-29T12:00:00+02:00",
    start: "2026-03-01T00:00:00+01:00",
    end: "2026-04-01T00:00:00+02:00",
    hours: 31 * 24 - 1,
  },
  {
    case: "Berlin's October is an hour long",
    timeZone: "Europe/Berlin",
    period: "month",
    at: "2026-10-01T00:00:00+02:00",
    start: "2026-10-01T00:00:00+02:00",
    end: "2026-11-01T00:00:00+01:00",
    hours: 31 * 24 + 1,
  },
  {
    case: "a reset at 02:30 Berlin on the spring-forward day comes at 03:00",
    timeZone: "Europe/Berlin",
    period: "day",
    anchor: { time: "02:30" },
    at: "2026-03-29T12:00:00+02:00",
    start: "2026-03-29T03:00:00+02:00",
    end: "2026-03-30T02:30:00+02:00",
    hours: 23.5,
  },
  {
    case: "a reset at 02:30 Berlin on the fall-back day comes at the first 02:30",
    timeZone: "Europe/Berlin",
    period: "day",
    anchor: { time: "02:30" },
    at: "2026-10-25T02:15:00+01:00",
    start: "2026-10-25T02:30:00+02:00",
    end: "2026-10-26T02:30:00+01:00",
    hours: 25,
  },
  // Australia/Lord_Howe: +10:30, and +11:00 in summer; the clock moves 30 minutes, at 02:00.
  // Back from 02:00 to 01:30 on Sunday 5 April 2026; on from 02:00 to 02:30 on Sunday 4 October.
  {
    case: "Lord Howe's fall-back day is 24½ hours",
    timeZone: "Australia/Lord_Howe",
    period: "day",
    at: "2026-04-05T12:00:00+10:30",
    start: "2026-04-05T00:00:00+11:00",
    end: "2026-04-06T00:00:00+10:30",
    hours: 24.5,
  },
  {
    case: "Lord Howe's spring-forward day is 23½ hours",
    timeZone: "Australia/Lord_Howe",
    period: "day",
    at: "2026-10-04T12:00:00+11:00",
    start: "2026-10-04T00:00:00+10:30",
    end: "2026-10-05T00:00:00+11:00",
    hours: 23.5,
  },
  {
    case: "a reset at 02:15 Lord Howe, skipped, comes at 02:30",
    timeZone: "Australia/Lord_Howe",
    period: "day",
    anchor: { time: "02:15" },
    at: "2026-10-04T12:00:00+11:00",
    start: "2026-10-04T02:30:00+11:00",
    end: "2026-10-05T02:15:00+11:00",
    hours: 23.75,
  },
  {
    case: "a reset at 01:45 Lord Howe, read twice, comes at the first",
    timeZone: "Australia/Lord_Howe",
    period: "day",
    anchor: { time: "01:45" },
    at: "2026-04-05T01:35:00+10:30",
    start: "2026-04-05T01:45:00+11:00",
    end: "2026-04-06T01:45:00+10:30",
    hours: 24.5,
  },
  // Asia/Kathmandu: +05:45 since 1986, when it moved on from +05:30 at midnight.
  {
    case: "a day in Kathmandu starts at its midnight, 18:15 UTC",
    timeZone: "Asia/Kathmandu",
    period: "day",
    at: "2026-06-15T12:00:00+05:45",
    start: "2026-06-15T00:00:00+05:45",
    end: "2026-06-16T00:00:00+05:45",
    hours: 24,
  },
  {
    case: "a month in Kathmandu from the 1st at 09:00",
    timeZone: "Asia/Kathmandu",
    period: "month",
    anchor: { day: 1, time: "09:00" },
    at: "2026-06-01T08:59:59+05:45",
    start: "2026-05-01T09:00:00+05:45",
    end: "2026-06-01T09:00:00+05:45",
    hours: 31 * 24,
  },
  {
    case: "1 January 1986 in Kathmandu starts at 00:15: the clock skipped its first quarter hour",
    timeZone: "Asia/Kathmandu",
    period: "day",
    at: "1986-01-01T12:00:00+05:45",
    start: "1986-01-01T00:15:00+05:45",
    end: "1986-01-02T00:00:00+05:45",
    hours: 23.75,
  },
  {
    case: "31 December 1985 in Kathmandu runs to that jump",
    timeZone: "Asia/Kathmandu",
    period: "day",
    at: "1985-12-31T23:59:59+05:30",
    start: "1985-12-31T00:00:00+05:30",
    end: "1986-01-01T00:15:00+05:45",
    hours: 24,
  },
  // Short months and leap days, in UTC.
  {
    case: "a month anchored on the 29th starts on 28 February in 2027",
    timeZone: "UTC",
    period: "month",
    anchor: { day: 29 },
    at: "2027-02-28T00:00:00Z",
    start: "2027-02-28T00:00:00+00:00",
    end: "2027-03-29T00:00:00+00:00",
    hours: 29 * 24,
  },
  {
    case: "and the one before it ends there",
    timeZone: "UTC",
    period: "month",
    anchor: { day: 29 },
    at: "2027-02-27T23:59:59.999Z",
    start: "2027-01-29T00:00:00+00:00",
    end: "2027-02-28T00:00:00+00:00",
    hours: 30 * 24,
  },
  {
    case: "a month anchored on the 29th starts on 29 February in 2028",
    timeZone: "UTC",
    period: "month",
    anchor: { day: 29 },
    at: "2028-02-28T12:00:00Z",
    start: "2028-01-29T00:00:00+00:00",
    end: "2028-02-29T00:00:00+00:00",
    hours: 31 * 24,
  },
  {
    case: "a month anchored on the 30th starts on 28 February in 2027",
    timeZone: "UTC",
    period: "month",
    anchor: { day: 30 },
    at: "2027-03-01T00:00:00Z",
    start: "2027-02-28T00:00:00+00:00",
    end: "2027-03-30T00:00:00+00:00",
    hours: 30 * 24,
  },
  {
    case: "a month anchored on the 31st: 31 January to 28 February",
    timeZone: "UTC",
    period: "month",
    anchor: { day: 31 },
    at: "2026-02-15T00:00:00Z",
    start: "2026-01-31T00:00:00+00:00",
    end: "2026-02-28T00:00:00+00:00",
    hours: 28 * 24,
  },
  {
    case: "a month anchored on the 31st: 28 February to 31 March",
    timeZone: "UTC",
    period: "month",
    anchor: { day: 31 },
    at: "2026-03-30T00:00:00Z",
    start: "2026-02-28T00:00:00+00:00",
    end: "2026-03-31T00:00:00+00:00",
    hours: 31 * 24,
  },
  {
    case: "a month anchored on the 31st: 31 March to 30 April",
    timeZone: "UTC",
    period: "month",
    anchor: { day: 31 },
    at: "2026-04-29T23:59:59.999Z",
    start: "2026-03-31T00:00:00+00:00",
    end: "2026-04-30T00:00:00+00:00",
    hours: 30 * 24,
  },
  {
    case: "a month anchored on the 31st: 30 April to 31 May",
    timeZone: "UTC",
    period: "month",
    anchor: { day: 31 },
    at: "2026-04-30T00:00:00Z",
    start: "2026-04-30T00:00:00+00:00",
    end: "2026-05-31T00:00:00+00:00",
    hours: 31 * 24,
  },
  {
    case: "a year anchored on 29 February starts on 28 February in 2027",
    timeZone: "UTC",
    period: "year",
    anchor: { month: 2, day: 29 },
    at: "2028-02-28T23:59:59Z",
    start: "2027-02-28T00:00:00+00:00",
    end: "2028-02-29T00:00:00+00:00",
    hours: 366 * 24,
  },
  {
    case: "and on 29 February in 2028",
    timeZone: "UTC",
    period: "year",
    anchor: { month: 2, day: 29 },
    at: "2028-02-29T00:00:00Z",
    start: "2028-02-29T00:00:00+00:00",
    end: "2029-02-28T00:00:00+00:00",
    hours: 365 * 24,
  },
  // Weeks, and the ends of years.
  {
    case: "a week from Monday across a year's end",
    timeZone: "UTC",
    period: "week",
    anchor: { day: 1 },
    at: "2026-01-01T12:00:00Z",
    start: "2025-12-29T00:00:00+00:00",
    end: "2026-01-05T00:00:00+00:00",
    hours: 168,
  },
  {
    case: "a week from Sunday across a year's end",
    timeZone: "UTC",
    period: "week",
    anchor: { day: 7 },
    at: "2026-01-01T12:00:00Z",
    start: "2025-12-28T00:00:00+00:00",
    end: "2026-01-04T00:00:00+00:00",
    hours: 168,
  },
  {
    case: "a week from Monday midnight in Los Angeles is not Monday in UTC",
    timeZone: "America/Los_Angeles",
    period: "week",
    at: "2026-06-15T00:00:00Z",
    start: "2026-06-08T00:00:00-07:00",
    end: "2026-06-15T00:00:00-07:00",
    hours: 168,
  },
  {
    case: "the last millisecond of 2026 is in 2026",
    timeZone: "UTC",
    period: "year",
    at: "2026-12-31T23:59:59.999Z",
    start: "2026-01-01T00:00:00+00:00",
    end: "2027-01-01T00:00:00+00:00",
    hours: 365 * 24,
  },
  {
    case: "the first of 2028, a leap year, is in 2028",
    timeZone: "UTC",
    period: "year",
    at: "2028-01-01T00:00:00Z",
    start: "2028-01-01T00:00:00+00:00",
    end: "2029-01-01T00:00:00+00:00",
    hours: 366 * 24,
  },
  {
    case: "New York's 2026 ends at its own midnight, 05:00 UTC",
    timeZone: "America/New_York",
    period: "year",
    at: "2027-01-01T04:59:59Z",
    start: "2026-01-01T00:00:00-05:00",
    end: "2027-01-01T00:00:00-05:00",
    hours: 365 * 24,
  },
  {
    case: "a fiscal year from 1 April at 09:00 in Tokyo",
    timeZone: "Asia/Tokyo",
    period: "year",
    anchor: { month: 4, day: 1, time: "09:00" },
    at: "2027-04-01T08:59:59+09:00",
    start: "2026-04-01T09:00:00+09:00",
    end: "2027-04-01T09:00:00+09:00",
    hours: 365 * 24,
  },
  // Pacific/Apia crossed the date line: 29 December 2011 at 24:00 (-10:00) was 31 December at 00:00 (+14:00).
  {
    case: "29 December 2011 in Apia ends where 31 December starts: the 30th never came",
    timeZone: "Pacific/Apia",
    period: "day",
    at: "2011-12-29T23:59:59-10:00",
    start: "2011-12-29T00:00:00-10:00",
    end: "2011-12-31T00:00:00+14:00",
    hours: 24,
  },
];

describe("the period an instant is in (hand-checked)", () => {
  it.each(CASES)("$case", (c) => {
    const spec = calendar({ period: c.period, timeZone: c.timeZone, anchor: c.anchor });
    const period = periodAt(at(c.at), spec);
    expect({
      start: formatInstant(period.startMs, c.timeZone),
      end: formatInstant(period.endMs, c.timeZone),
      hours: (period.endMs - period.startMs) / HOUR,
    }).toEqual({ start: c.start, end: c.end, hours: c.hours });
    expect([period.startMs, period.endMs]).toEqual([at(c.start), at(c.end)]);
    expect(periodOfIndex(period.index, spec)).toEqual(period);
  });

  it("numbers periods from 1970 on the zone's clock: days, weeks from the anchor's weekday, months, years", () => {
    const index = (input: Record<string, unknown>, iso: string) => periodAt(at(iso), calendar(input)).index;
    expect(index({ period: "day" }, "1970-01-01T00:00:00Z")).toBe(0);
    expect(index({ period: "day" }, "1969-12-31T23:59:59Z")).toBe(-1);
    expect(index({ period: "day", timeZone: "Asia/Tokyo" }, "1969-12-31T15:00:00Z")).toBe(0);
    expect(index({ period: "day" }, "2026-03-08T12:00:00Z")).toBe(Date.UTC(2026, 2, 8) / DAY);
    // 1970-01-01 was a Thursday: the first Monday was the 5th, the first Sunday the 4th.
    expect(index({ period: "week", anchor: { day: 1 } }, "1970-01-05T00:00:00Z")).toBe(0);
    expect(index({ period: "week", anchor: { day: 1 } }, "1970-01-04T23:59:59Z")).toBe(-1);
    expect(index({ period: "week", anchor: { day: 7 } }, "1970-01-04T00:00:00Z")).toBe(0);
    expect(index({ period: "month" }, "2026-11-15T00:00:00Z")).toBe(56 * 12 + 10);
    expect(index({ period: "month", anchor: { day: 15 } }, "2026-11-14T00:00:00Z")).toBe(56 * 12 + 9);
    expect(index({ period: "year" }, "2026-06-01T00:00:00Z")).toBe(56);
    expect(index({ period: "year", anchor: { month: 4 } }, "2026-03-31T00:00:00Z")).toBe(55);
  });

  it("steps over the day Apia skipped: 29 December 2011 is followed by the 31st, two numbers on", () => {
    const spec = calendar({ period: "day", timeZone: "Pacific/Apia" });
    const before = periodAt(at("2011-12-29T12:00:00-10:00"), spec);
    const after = periodAt(before.endMs, spec);
    expect(formatInstant(after.startMs, "Pacific/Apia")).toBe("2011-12-31T00:00:00+14:00");
    expect(after.index).toBe(before.index + 2);
    expect(periodOfIndex(before.index + 1, spec)).toEqual({
      startMs: before.endMs,
      endMs: before.endMs,
      index: before.index + 1,
    });
  });
});

describe("a period in words and in seconds", () => {
  const nyMonth = calendar({ period: "month", timeZone: "America/New_York" });
  const november = periodAt(at("2026-11-15T00:00:00-05:00"), nyMonth);

  it("describes its end with the zone's offset at that instant", () => {
    expect(describeReset(november, nyMonth)).toBe("resets 2026-12-01T00:00:00-05:00");
    expect(describeReset(periodAt(at("2026-06-15T00:00:00Z"), nyMonth), nyMonth)).toBe(
      "resets 2026-07-01T00:00:00-04:00",
    );
    expect(formatInstant(at("2026-06-15T00:00:00Z"), "Asia/Kathmandu")).toBe("2026-06-15T05:45:00+05:45");
    expect(formatInstant(at("2026-06-15T00:00:00.250Z"), "UTC")).toBe("2026-06-15T00:00:00.250+00:00");
  });

  it("gives its length for w and the seconds to its end for t, rounded up", () => {
    expect(periodSeconds(november)).toBe((30 * 24 + 1) * 3600);
    const now = november.endMs - 1_500;
    expect(secondsToEnd(november, now)).toBe(2);
    expect(secondsToEnd(november, november.endMs - 1_000)).toBe(1);
    expect(secondsToEnd(november, november.endMs)).toBe(0);
  });

  it.each([
    [{ period: "day", anchor: { time: "09:00" } }, "daily at 09:00 UTC"],
    [{ period: "week", anchor: { day: 7, time: "23:59:59" } }, "weekly on Sunday at 23:59:59 UTC"],
    [{ period: "month", timeZone: "America/New_York" }, "monthly on day 1 at 00:00 America/New_York"],
    [{ period: "month", anchor: { day: 31 } }, "monthly on day 31 (a shorter month's last day) at 00:00 UTC"],
    [{ period: "year", anchor: { month: 4 } }, "yearly on 1 April at 00:00 UTC"],
    [
      { period: "year", anchor: { month: 2, day: 29 } },
      "yearly on 29 February (28 February in other years) at 00:00 UTC",
    ],
  ])("describes %j as %s", (input, words) => {
    expect(describeCalendar(calendar(input))).toBe(words);
  });
});

describe("a calendar as written", () => {
  it("fills in the defaults: UTC, and the period's own start at midnight", () => {
    const anchor = (input: Record<string, unknown>): Anchor => calendar(input).anchor;
    expect(calendar({ period: "month" })).toEqual({
      period: "month",
      timeZone: "UTC",
      anchor: { month: 1, day: 1, timeMs: 0 },
    });
    expect(anchor({ period: "week" })).toEqual({ month: 1, day: 1, timeMs: 0 });
    expect(anchor({ period: "day", anchor: { time: "23:59:59" } })).toEqual({ month: 1, day: 1, timeMs: DAY - 1_000 });
    expect(anchor({ period: "year", anchor: { month: 2, day: 29, time: "09:30" } })).toEqual({
      month: 2,
      day: 29,
      timeMs: 9.5 * HOUR,
    });
  });

  it.each(["America/New_York", "UTC", "Etc/UTC", "Asia/Kolkata", "Asia/Calcutta", "Europe/Kyiv", "US/Eastern"])(
    "takes %s, a name the runtime knows, as written",
    (timeZone) => {
      expect(calendar({ period: "day", timeZone }).timeZone).toBe(timeZone);
    },
  );

  const ZONE = 'an IANA time zone name such as "America/New_York" or "UTC"';
  it.each([
    [null, [`must be a table such as { period = "month", timeZone = "America/New_York" }; got null`]],
    [{}, ['"period": is required: "day", "week", "month", "year"']],
    [{ period: "30d" }, ['"period": must be "day", "week", "month", "year"; got "30d"']],
    [
      { period: "month", zone: "UTC" },
      ['"zone": is not a field of a calendar; its fields are period, timeZone, anchor'],
    ],
    [
      { period: "day", timeZone: "Mars/Olympus_Mons" },
      [`"timeZone": "Mars/Olympus_Mons" is not a time zone this runtime knows; use ${ZONE}`],
    ],
    [{ period: "day", timeZone: "" }, [`"timeZone": must be ${ZONE}; got ""`]],
    [{ period: "day", timeZone: -5 }, [`"timeZone": must be ${ZONE}; got -5`]],
    [{ period: "day", timeZone: "+05:00" }, [`"timeZone": must be ${ZONE}, not an offset; got "+05:00"`]],
    [{ period: "month", anchor: "1st" }, ['"anchor": must be a table such as { day = 1, time = "00:00" }; got "1st"']],
    [
      { period: "month", anchor: { hour: 9 } },
      ['"anchor.hour": is not a field of "anchor"; its fields are month, day, time'],
    ],
    [{ period: "month", anchor: { day: 0 } }, ['"anchor.day": must be a day of the month from 1 to 31; got 0']],
    [{ period: "month", anchor: { day: 32 } }, ['"anchor.day": must be a day of the month from 1 to 31; got 32']],
    [{ period: "month", anchor: { day: 1.5 } }, ['"anchor.day": must be a day of the month from 1 to 31; got 1.5']],
    [{ period: "month", anchor: { day: "1" } }, ['"anchor.day": must be a day of the month from 1 to 31; got "1"']],
    [
      { period: "month", anchor: { month: 1 } },
      ['"anchor.month": only a year starts in a month; a month has none, so leave it out'],
    ],
    [
      { period: "week", anchor: { day: 0 } },
      [
        '"anchor.day": must be a day of the week from 1 (Monday) to 7 (Sunday), as ISO 8601 numbers them (Sunday is 7); got 0',
      ],
    ],
    [
      { period: "week", anchor: { day: 8 } },
      ['"anchor.day": must be a day of the week from 1 (Monday) to 7 (Sunday), as ISO 8601 numbers them; got 8'],
    ],
    [
      { period: "day", anchor: { day: 1 } },
      ['"anchor.day": a day has no day to start on; leave it out, and set "time"'],
    ],
    [
      { period: "year", anchor: { month: 13 } },
      ['"anchor.month": must be a month from 1 (January) to 12 (December); got 13'],
    ],
    [{ period: "year", anchor: { month: 4, day: 31 } }, ['"anchor.day": April has at most 30 days; got 31']],
    [{ period: "year", anchor: { month: 2, day: 30 } }, ['"anchor.day": February has at most 29 days; got 30']],
    ...["24:00", "9:00", "09:60", "09:00:60", "0900", "09:00:00.5", 900].map((time): [unknown, string[]] => [
      { period: "day", anchor: { time } },
      [
        `"anchor.time": must be a time of day "HH:MM" or "HH:MM:SS", from "00:00" to "23:59:59"; got ${JSON.stringify(time)}`,
      ],
    ]),
    [
      { period: "week", timeZone: "Nowhere", anchor: { day: 9, time: "noon" } },
      [
        `"timeZone": "Nowhere" is not a time zone this runtime knows; use ${ZONE}`,
        '"anchor.day": must be a day of the week from 1 (Monday) to 7 (Sunday), as ISO 8601 numbers them; got 9',
        '"anchor.time": must be a time of day "HH:MM" or "HH:MM:SS", from "00:00" to "23:59:59"; got "noon"',
      ],
    ],
  ])("refuses %j, naming the field", (input, errors) => {
    expect(parseCalendar(input)).toEqual({ ok: false, errors });
  });
});

describe("periods from a client's first request", () => {
  it("starts period 0 at the request and follows the calendar from its day and time", () => {
    const spec = calendar({ period: "month", timeZone: "America/New_York" });
    const first = at("2026-01-31T10:17:23.456-05:00");
    const p0 = periodFrom(first, spec, first);
    expect(p0).toEqual({ startMs: first, endMs: at("2026-02-28T10:17:23.456-05:00"), index: 0 });
    const p2 = periodFrom(first, spec, at("2026-03-31T12:00:00-04:00"));
    expect(p2).toEqual({
      startMs: at("2026-03-31T10:17:23.456-04:00"),
      endMs: at("2026-04-30T10:17:23.456-04:00"),
      index: 2,
    });
    expect(periodFrom(first, spec, first - 1)).toMatchObject({ endMs: first, index: -1 });
  });

  it("starts period 0 at a request made the second time the clock reads 01:30, and the next day at the first", () => {
    const spec = calendar({ period: "day", timeZone: "America/New_York" });
    const first = at("2026-11-01T01:30:00-05:00");
    expect(periodFrom(first, spec, first)).toEqual({
      startMs: first,
      endMs: at("2026-11-02T01:30:00-05:00"),
      index: 0,
    });
    // The first 01:30 that day came an hour before the request: still before period 0.
    expect(periodFrom(first, spec, at("2026-11-01T01:45:00-04:00"))).toEqual({
      startMs: at("2026-10-31T01:30:00-04:00"),
      endMs: first,
      index: -1,
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Properties, over the runtime's own zones

const ZONES = [...knownTimeZones()].sort();
const FROM_MS = Date.UTC(1970, 0, 1);
const TO_MS = Date.UTC(2100, 0, 1);

/** Times of day, with the hours where clocks change weighted up. */
const timeOfDay = fc.oneof(
  fc.constantFrom(0, 1, 1.5, 2, 2.25, 2.5, 3, 23.5).map((hours) => hours * HOUR),
  fc.integer({ min: 0, max: 86_399 }).map((seconds) => seconds * 1_000),
);

const spec: fc.Arbitrary<CalendarSpec> = fc
  .record({
    period: fc.constantFrom<CalendarPeriod>("day", "week", "month", "year"),
    timeZone: fc.constantFrom(...ZONES),
    month: fc.integer({ min: 1, max: 12 }),
    monthDay: fc.oneof(fc.integer({ min: 1, max: 31 }), fc.constantFrom(29, 30, 31)),
    weekday: fc.integer({ min: 1, max: 7 }),
    timeMs: timeOfDay,
  })
  .map(({ period, timeZone, month, monthDay, weekday, timeMs }) => {
    const longest = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]!;
    const day = period === "week" ? weekday : period === "day" ? 1 : Math.min(monthDay, longest);
    return { period, timeZone, anchor: { month: period === "year" ? month : 1, day, timeMs } };
  });

const instant = fc.integer({ min: FROM_MS, max: TO_MS });

/** Every index strictly between two periods' is an empty period at `atMs`: a stretch the zone's clock skipped. */
function expectSkippedEmpty(from: Period, to: Period, spec: CalendarSpec, atMs: number) {
  for (let index = from.index + 1; index < to.index; index++) {
    expect(periodOfIndex(index, spec)).toEqual({ startMs: atMs, endMs: atMs, index });
  }
}

/** The wall-clock reading of an instant, as ISO 8601 without its offset: `2026-03-08T03:00:00`. */
const clock = (ms: number, timeZone: string) => formatInstant(ms, timeZone).slice(0, 19);
const offset = (ms: number, timeZone: string) =>
  formatInstant(ms, timeZone)
    .slice(19)
    .replace(/^\.\d+/, "");

describe("properties over random zones and instants, 1970 to 2100", () => {
  it("puts every instant in exactly one period: its own, found the same from either end", () => {
    fc.assert(
      fc.property(spec, instant, (spec, t) => {
        const p = periodAt(t, spec);
        expect(p.startMs).toBeLessThanOrEqual(t);
        expect(t).toBeLessThan(p.endMs);
        expect(periodAt(p.startMs, spec)).toEqual(p);
        expect(periodAt(p.endMs - 1, spec)).toEqual(p);
        expect(periodOfIndex(p.index, spec)).toEqual(p);
      }),
      { numRuns: 1_000 },
    );
  });

  it("tiles time: each period ends where the next starts, and the number goes up by one (or over an empty one)", () => {
    fc.assert(
      fc.property(spec, instant, (spec, t) => {
        const p = periodAt(t, spec);
        const next = periodAt(p.endMs, spec);
        const previous = periodAt(p.startMs - 1, spec);
        expect(next.startMs).toBe(p.endMs);
        expect(previous.endMs).toBe(p.startMs);
        expect(next.index).toBeGreaterThan(p.index);
        expect(previous.index).toBeLessThan(p.index);
        expectSkippedEmpty(p, next, spec, p.endMs);
        expectSkippedEmpty(previous, p, spec, p.startMs);
      }),
      { numRuns: 1_000 },
    );
  });

  it("starts a period when the zone's clock reads the anchor's time, or where it jumps past it", () => {
    fc.assert(
      fc.property(spec, instant, (spec, t) => {
        const { startMs } = periodAt(t, spec);
        const time = new Date(spec.anchor.timeMs).toISOString().slice(11, 19);
        const reading = clock(startMs, spec.timeZone);
        if (reading.slice(11) !== time) {
          // A gap: the clock was before the anchor's time a millisecond earlier, and the offset changed.
          expect(offset(startMs - 1, spec.timeZone)).not.toBe(offset(startMs, spec.timeZone));
          expect(clock(startMs - 1, spec.timeZone).slice(11)).not.toBe(time);
        }
        const date = new Date(`${reading}Z`);
        if (spec.period === "week") expect(((date.getUTCDay() + 6) % 7) + 1).toBe(spec.anchor.day);
        if (spec.period === "month" || spec.period === "year") {
          // On the anchor's day, or a shorter month's last day; a day later only after a gap at midnight.
          const lastDay = new Date(Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 0)).getUTCDate();
          const expected = Math.min(spec.anchor.day, lastDay);
          if (date.getUTCDate() !== expected) expect(reading.slice(11)).not.toBe(time);
        }
        if (spec.period === "year" && reading.slice(11) === time) {
          expect(date.getUTCMonth() + 1).toBe(spec.anchor.month);
        }
      }),
      { numRuns: 1_000 },
    );
  });

  it("finds the same period from the last one as from scratch", () => {
    fc.assert(
      fc.property(spec, instant, fc.integer({ min: 0, max: 800 * DAY }), (spec, t, laterMs) => {
        const last = periodAt(t, spec);
        expect(currentPeriod(t + laterMs, spec, last)).toEqual(periodAt(t + laterMs, spec));
        expect(currentPeriod(last.endMs, spec, last)).toEqual(periodAt(last.endMs, spec));
      }),
      { numRuns: 500 },
    );
  });

  it("tiles time from a first request too: period 0 starts at it, and each ends where the next starts", () => {
    fc.assert(
      fc.property(spec, instant, fc.integer({ min: -400 * DAY, max: 800 * DAY }), (spec, first, deltaMs) => {
        expect(periodFrom(first, spec, first)).toMatchObject({ startMs: first, index: 0 });
        const t = first + deltaMs;
        const p = periodFrom(first, spec, t);
        expect(p.startMs).toBeLessThanOrEqual(t);
        expect(t).toBeLessThan(p.endMs);
        expect(Math.sign(p.index)).toBe(t < first ? -1 : p.index === 0 ? 0 : 1);
        const next = periodFrom(first, spec, p.endMs);
        const previous = periodFrom(first, spec, p.startMs - 1);
        expect(next.startMs).toBe(p.endMs);
        expect(previous.endMs).toBe(p.startMs);
        expect(next.index).toBeGreaterThan(p.index);
        expect(previous.index).toBeLessThan(p.index);
      }),
      { numRuns: 500 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Near a change of offset, read through a formatter of the test's own

const offsetFormats = new Map<string, Intl.DateTimeFormat>();

/** The zone's offset at an instant, in milliseconds, read from the runtime's offset name ("GMT-04:00", "GMT"). */
function oracleOffsetMs(ms: number, timeZone: string): number {
  let format = offsetFormats.get(timeZone);
  if (format === undefined) {
    format = new Intl.DateTimeFormat("en-US", { timeZone, timeZoneName: "longOffset" });
    offsetFormats.set(timeZone, format);
  }
  const name = format.formatToParts(ms - (((ms % 1000) + 1000) % 1000)).find((part) => part.type === "timeZoneName");
  const match = /^GMT(?:([+-])(\d{2}):(\d{2})(?::(\d{2}))?)?$/.exec(name?.value ?? "");
  if (match === null) throw new Error(`unexpected offset name ${name?.value} in ${timeZone}`);
  const [, sign = "+", h = "0", m = "0", s = "0"] = match;
  return (sign === "-" ? -1 : 1) * (Number(h) * HOUR + Number(m) * 60_000 + Number(s) * 1_000);
}

/** The zone's wall clock at an instant, as milliseconds since 1970-01-01 on that clock. */
const oracleWallMs = (ms: number, timeZone: string): number => ms + oracleOffsetMs(ms, timeZone);

/** The first change of the zone's offset within 400 days after `fromMs`, to the millisecond; null if none. */
function nextChange(fromMs: number, timeZone: string): number | null {
  const offsetAt = oracleOffsetMs(fromMs, timeZone);
  let hi = fromMs;
  do hi += 7 * DAY;
  while (oracleOffsetMs(hi, timeZone) === offsetAt && hi - fromMs < 400 * DAY);
  if (oracleOffsetMs(hi, timeZone) === offsetAt) return null;
  let lo = hi - 7 * DAY;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (oracleOffsetMs(mid, timeZone) === offsetAt) lo = mid;
    else hi = mid;
  }
  return hi;
}

/** A calendar whose boundaries fall on the day of a change of offset, at a time near it; and that change. */
const nearChange = fc
  .record({
    period: fc.constantFrom<CalendarPeriod>("day", "week", "month", "year"),
    timeZone: fc.constantFrom(...ZONES),
    fromMs: instant,
    shiftMinutes: fc.integer({ min: -120, max: 120 }),
  })
  .map(({ period, timeZone, fromMs, shiftMinutes }) => {
    const changeMs = nextChange(fromMs, timeZone);
    if (changeMs === null) return null;
    // The wall clock as the change comes, on the offset it leaves (02:00 in New York, both times a year).
    const before = new Date(oracleWallMs(changeMs - 1, timeZone) + 1);
    const timeMs = (((before.getTime() + shiftMinutes * 60_000) % DAY) + DAY) % DAY;
    const day = period === "week" ? ((before.getUTCDay() + 6) % 7) + 1 : period === "day" ? 1 : before.getUTCDate();
    const anchor = { month: period === "year" ? before.getUTCMonth() + 1 : 1, day, timeMs };
    return { spec: { period, timeZone, anchor } satisfies CalendarSpec, changeMs };
  })
  .filter((found) => found !== null);

/** Checks that a period starts where the zone's clock first reads its wall-clock start or later. */
function expectFirstReading(startMs: number, spec: CalendarSpec) {
  const time = spec.anchor.timeMs;
  const reads = (ms: number) => ((oracleWallMs(ms, spec.timeZone) % DAY) + DAY) % DAY === time;
  if (reads(startMs)) {
    // A time read twice: this is the first reading. The other would be at the other offset nearby.
    for (const other of [oracleOffsetMs(startMs - DAY, spec.timeZone), oracleOffsetMs(startMs + DAY, spec.timeZone)]) {
      const otherMs = oracleWallMs(startMs, spec.timeZone) - other;
      if (reads(otherMs) && oracleWallMs(otherMs, spec.timeZone) === oracleWallMs(startMs, spec.timeZone)) {
        expect(otherMs).toBeGreaterThanOrEqual(startMs);
      }
    }
  } else {
    // A time skipped: the clock jumps at this instant, from before the anchor's time to after it.
    expect(oracleOffsetMs(startMs - 1, spec.timeZone)).toBeLessThan(oracleOffsetMs(startMs, spec.timeZone));
  }
}

describe("properties near changes of offset, in every zone that has them", () => {
  it("tiles time around the change, each period starting at the first reading of its start or the jump past it", () => {
    fc.assert(
      fc.property(nearChange, fc.integer({ min: -3 * DAY, max: 3 * DAY }), ({ spec, changeMs }, deltaMs) => {
        const t = changeMs + deltaMs;
        const p = periodAt(t, spec);
        expect(p.startMs).toBeLessThanOrEqual(t);
        expect(t).toBeLessThan(p.endMs);
        const next = periodAt(p.endMs, spec);
        expect(next.startMs).toBe(p.endMs);
        expectSkippedEmpty(p, next, spec, p.endMs);
        expect(periodOfIndex(p.index, spec)).toEqual(p);
        if (p.endMs > p.startMs) expectFirstReading(p.startMs, spec);
        expectFirstReading(p.endMs, spec);
      }),
      { numRuns: 300 },
    );
  });
});
