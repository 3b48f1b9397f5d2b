import { describe, expect, it, vi } from "vitest";
import { parseSettings } from "../../src/config/settings.ts";
import type { Override } from "../../src/core/overrides.ts";
import type { RuleOf } from "../../src/core/rules.ts";
import { type Receipt, type RuleCheck, toRuleCheck } from "../../src/object/protocol.ts";
import type { RateLimiter } from "../../src/object/rate-limiter.ts";
import { env } from "../support/env.ts";
import { randomGenerator } from "../support/random.ts";

/**
 * A month of simulated traffic, held out from how the quota is built: 1,000
 * API keys, each on one of three plans (tiers of a monthly quota) in one of
 * three time zones, from 20 February to 20 March 2031 (every zone's month
 * boundary, New York's and Berlin's daylight-saving changes), each
 * request's count decided by its key's real Durable Object on a faked clock,
 * with refunds (answers that do not count) and charges (a cost the origin
 * reported) arriving up to 2 s after their requests, across the boundary
 * too, and top-ups. An oracle that knows nothing of core/calendar.ts keeps a
 * ledger per key and period: the period is the local year and month the
 * zone's own clock reads (`Intl.DateTimeFormat`), and a request fits while
 * what the period was charged plus its cost is within the plan and its
 * credits. Each decision must be the oracle's; at the end, every period the
 * object keeps must be charged exactly what its admitted requests cost, net
 * of refunds and charges, and credited what operators gave.
 */
const KEYS = 1_000;
const START = Date.parse("2031-02-20T00:00:00Z");
const END = Date.parse("2031-03-20T00:00:00Z");
const ZONES = ["America/New_York", "Europe/Berlin", "Asia/Kathmandu"] as const;
/** The plans: the rule's own quota (free), and two tiers. */
const PLANS = [
  { tier: null, quota: 40 },
  { tier: "pro", quota: 120 },
  { tier: "team", quota: 400 },
] as const;

const rules = ZONES.map((timezone, z) => ({
  id: `plan-${z}`,
  path: `/z${z}/*`,
  key: ["header:x-api-key"],
  quota: PLANS[0].quota,
  per: "month",
  timezone,
}));
const parsed = parseSettings({
  RULES: rules,
  TIERS: {
    pro: Object.fromEntries(rules.map((r) => [r.id, PLANS[1].quota])),
    team: Object.fromEntries(rules.map((r) => [r.id, PLANS[2].quota])),
  },
});
if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
const checks = parsed.value.rules.map((rule) => toRuleCheck(rule as RuleOf<"quota">));

/** The oracle's period: the year and month the zone's clock reads at an instant. */
const formats = ZONES.map(
  (timeZone) => new Intl.DateTimeFormat("en-CA", { timeZone, year: "numeric", month: "2-digit" }),
);
const periodOf = (zone: number, atMs: number): string => formats[zone]!.format(atMs);

type Ledger = { used: number; credit: number };
type Key = { index: number; zone: number; plan: number; stub: DurableObjectStub<RateLimiter>; check: RuleCheck };
type Event =
  | { atMs: number; kind: "request"; key: Key; cost: number; seq: number }
  | { atMs: number; kind: "refund" | "charge"; key: Key; units: number; of: number; seq: number }
  | { atMs: number; kind: "credit"; key: Key; units: number; seq: number };

describe("a month of traffic for 1,000 keys on three plans in three time zones", () => {
  it("is decided as the oracle decides, and each period is charged exactly what its admitted requests cost", async () => {
    const random = randomGenerator(20310220);
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(START);
    const run = Date.now().toString(36);
    try {
      const keys: Key[] = [];
      for (let index = 0; index < KEYS; index++) {
        const zone = index % ZONES.length;
        const plan = Math.floor(index / ZONES.length) % PLANS.length;
        const stub = env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`quota-month-${run}-${index}`));
        const tier = PLANS[plan]!.tier;
        if (tier !== null) {
          const override: Override = {
            kind: "tier",
            tier,
            expiresAtMs: null,
            note: "",
            updatedAtMs: START,
            by: "test",
          };
          await stub.setOverride(checks[zone]!.id, override, 1);
        }
        keys.push({ index, zone, plan, stub, check: checks[zone]! });
      }

      // Traffic: from a trickle to twice the plan over the four weeks, a fifth of it within an hour of the
      // zone's month boundary; a few keys topped up.
      const events: Event[] = [];
      let seq = 0;
      const boundary = (zone: number) => Date.parse(`2031-03-01T00:00:00${["-05:00", "+01:00", "+05:45"][zone]}`);
      for (const key of keys) {
        const requests = Math.floor((PLANS[key.plan]!.quota * (0.2 + 1.8 * random.next())) / 2);
        for (let i = 0; i < requests; i++) {
          const nearBoundary = random.next() < 0.2;
          const atMs = nearBoundary
            ? boundary(key.zone) + Math.floor((random.next() - 0.5) * 3_600_000)
            : START + Math.floor(random.next() * (END - START));
          events.push({ atMs, kind: "request", key, cost: 1 + random.int(3), seq: seq++ });
        }
        if (random.next() < 0.05) {
          const atMs = START + Math.floor(random.next() * (END - START));
          events.push({ atMs, kind: "credit", key, units: 1 + random.int(50), seq: seq++ });
        }
      }
      events.sort((a, b) => a.atMs - b.atMs || a.seq - b.seq);

      const ledgers = new Map<string, Ledger>();
      const ledger = (key: Key, period: string): Ledger => {
        const name = `${key.index} ${period}`;
        let found = ledgers.get(name);
        if (found === undefined) {
          found = { used: 0, credit: 0 };
          ledgers.set(name, found);
        }
        return found;
      };
      const receipts = new Map<number, { receipt: Receipt; period: string; cost: number }>();
      const wrong: string[] = [];
      let admitted = 0;
      let refused = 0;
      // Events are worked through in time order; a refund or a charge is added to the queue as its request is admitted.
      for (let i = 0; i < events.length; i++) {
        const event = events[i]!;
        vi.setSystemTime(event.atMs);
        const { key } = event;
        const limit = PLANS[key.plan]!.quota;
        if (event.kind === "credit") {
          await key.stub.credit(key.check, { add: event.units });
          // A credit adds to what is left, never below 0: a period the origin's charges overdrew is forgiven first.
          const book = ledger(key, periodOf(key.zone, event.atMs));
          const left = Math.max(0, limit + book.credit - book.used);
          book.credit = left + event.units - limit + book.used;
          continue;
        }
        if (event.kind !== "request") {
          const counted = receipts.get(event.of)!;
          const count = [{ receipt: counted.receipt, count: event.units }];
          if (event.kind === "refund") await key.stub.refund(count);
          else await key.stub.charge(count);
          ledger(key, counted.period).used += event.kind === "refund" ? -event.units : event.units;
          continue;
        }
        const period = periodOf(key.zone, event.atMs);
        const book = ledger(key, period);
        const fits = book.used + event.cost <= limit + book.credit;
        const result = await key.stub.check([{ ...key.check, cost: event.cost }]);
        if (result.allowed !== fits) {
          wrong.push(
            `key ${key.index} at ${new Date(event.atMs).toISOString()}: ${result.allowed} for ${JSON.stringify(book)}`,
          );
        }
        if (!result.allowed) {
          refused++;
          continue;
        }
        admitted++;
        book.used += event.cost;
        receipts.set(event.seq, { receipt: result.verdicts[0]!.counted!, period, cost: event.cost });
        // A tenth given back (an answer that does not count), a tenth charged more (what the origin reported).
        const after = event.atMs + random.int(2_000);
        const draw = random.next();
        const follow = (kind: "refund" | "charge", units: number): Event => ({
          atMs: after,
          kind,
          key,
          units,
          of: event.seq,
          seq: seq++,
        });
        let next: Event | undefined;
        if (draw < 0.1) next = follow("refund", event.cost);
        else if (draw < 0.2) next = follow("charge", 1 + random.int(20));
        if (next !== undefined) {
          let at = i + 1;
          while (
            at < events.length &&
            (events[at]!.atMs < next.atMs || (events[at]!.atMs === next.atMs && events[at]!.seq < next.seq))
          )
            at++;
          events.splice(at, 0, next);
        }
      }
      console.log(`${events.length} events: ${admitted} admitted, ${refused} refused`);
      expect(wrong.slice(0, 10)).toEqual([]);
      expect(refused).toBeGreaterThan(0);

      // What each key's object keeps, period by period, against the ledger.
      const mismatches: string[] = [];
      for (const key of keys) {
        const { usage } = await key.stub.usage(key.check);
        const kept = [usage!, ...usage!.past];
        for (const period of kept) {
          const name = periodOf(key.zone, period.startMs);
          const book = ledgers.get(`${key.index} ${name}`) ?? { used: 0, credit: 0 };
          if (period.used !== book.used || period.credit !== book.credit) {
            mismatches.push(
              `key ${key.index} ${name}: object ${period.used}/${period.credit}, ledger ${book.used}/${book.credit}`,
            );
          }
        }
        // Every period the ledger charged is one the object keeps.
        const keptNames = new Set(kept.map((p) => periodOf(key.zone, p.startMs)));
        for (const name of ["2031-02", "2031-03"]) {
          const book = ledgers.get(`${key.index} ${name}`);
          if (book !== undefined && (book.used !== 0 || book.credit !== 0) && !keptNames.has(name)) {
            mismatches.push(`key ${key.index} ${name}: charged ${book.used}, not kept`);
          }
        }
      }
      expect(mismatches.slice(0, 10)).toEqual([]);
    } finally {
      vi.useRealTimers();
    }
  }, 600_000);
});
