/**
 * @module
 * The Durable Object that holds one client key's counters, one row per rule.
 *
 * Every RPC method is synchronous: the counters are read, decided on and
 * written with no `await` in between, so the object's single thread makes
 * each check atomic, and the output gate holds the answer until the write is
 * durable.
 *
 * A row is named by the rule's id and its bucket layout (period and
 * precision), so two rules that share an id but not a period count apart.
 * Each row has an epoch, chosen when it is created: counts handed back with
 * a receipt from an earlier epoch (before an admin reset) are ignored. A row
 * also keeps when its rule's penalty (`block_for`) ends, if one was started:
 * stored with the counts, so a restart and every caller honour it.
 *
 * A request over its limit may be held instead of refused, when the caller
 * can hold it: its counts are booked for its turn (`booking-book.ts`), and a
 * later request under the same rule queues behind it, from any isolate. A
 * concurrency rule's places live here too (`place-book.ts`). One timer
 * (`wake.ts`) answers the callers awaiting a turn or a place.
 */
import { DurableObject } from "cloudflare:workers";
import type { BookedCount, Rows } from "../core/bookings.ts";
import type { Override, OverrideSetting } from "../core/overrides.ts";
import { penaltyLeftMs, underPenalty } from "../core/penalty.ts";
import { NOTHING_LEFT_RETRY_MS } from "../core/priorities.ts";
import type { Decision } from "../core/sliding-window.ts";
import { logEvent } from "../observe/log.ts";
import { BookingBook, type HeldBooking, type Replanned, turnAnswerOf } from "./booking-book.ts";
import { ClaimedTiers } from "./claimed-tiers.ts";
import { ControllerBook } from "./controller-book.ts";
import { type ControllerView, controllerName, type FactorAnswer, type HealthReport } from "./controller-protocol.ts";
import { FactorsSeen } from "./factors-seen.ts";
import type { Counter, Credit, Seen, Usage } from "./kinds/counter.ts";
import { type CountedKind, countedUntilMs, counterOf, counterOfKind, kindOfCheck, PACE } from "./kinds/registry.ts";
import { PlaceBook, type ReplannedPlaces } from "./place-book.ts";
import { type Checked, checked, type Plan, PlanBook } from "./plan-book.ts";
import {
  ADAPTIVE_LEASE_MAX_MS,
  type Cancellation,
  type CheckOptions,
  type CheckResult,
  costOf,
  DEFAULT_MAX_HELD,
  LEASE_HARMLESS_SHARE,
  LEASE_MAX_MS,
  LEASE_MIN_UNITS,
  LEASE_SHARE,
  type Lease,
  type LeaseRequest,
  NOWHERE,
  type PlaceAcquired,
  type PlaceAnswer,
  type PlaceRequest,
  type PlacesNow,
  type PlaceWait,
  penalizes,
  type Receipt,
  type Refund,
  type Renewal,
  type RuleCheck,
  type RuleVerdict,
  type TurnAnswer,
} from "./protocol.ts";
import { Wake } from "./wake.ts";

/**
 * A rule's counters for this key, in its kind's arithmetic (`counter`, over
 * `data`). `key` is its name in storage and in receipts (the counter's
 * `rowOf`). `penaltyUntilMs` is when the rule's penalty ends (0: none was
 * started).
 */
type Row = {
  key: string;
  id: string;
  kind: CountedKind;
  counter: Counter<unknown>;
  epoch: number;
  data: unknown;
  penaltyUntilMs: number;
};

const SCHEMA = `CREATE TABLE IF NOT EXISTS counters (
  rule TEXT PRIMARY KEY,
  period_ms INTEGER NOT NULL,
  precision INTEGER NOT NULL,
  bucket INTEGER NOT NULL,
  counts TEXT NOT NULL,
  epoch INTEGER NOT NULL DEFAULT 0,
  penalty_until INTEGER NOT NULL DEFAULT 0,
  kind TEXT NOT NULL DEFAULT 'window'
)`;

/**
 * How a read without a request sees the client: `lastTier`, under the tier
 * its last request's token claimed (an admin read, which has no token); by
 * default, as the check says (the client's own view, made with its token).
 * A quota's usage and credits are admin reads: always under it.
 */
export type Read = { lastTier?: boolean };

/** What `usage` answers: the client's usage (null for a kind that keeps no periods), and what applied to it. */
export type UsageAnswer = { nowMs: number; usage: Usage | null; override?: OverrideSetting["kind"]; tier?: string };

/** What `credit` answers: the client's usage before and after the change (null for a kind that keeps no periods). */
export type CreditAnswer = {
  nowMs: number;
  before: Usage | null;
  after: Usage | null;
  override?: OverrideSetting["kind"];
  tier?: string;
};

/** A deny without an expiry is reported as lasting a year; callers hold it at most their own cap. */
const DENY_FOREVER_MS = 365 * 86_400_000;

/**
 * The instant after which a row holds nothing: its state is all zeros (its newest bucket and the `precision`
 * before it have rotated out) and its penalty, if any, has ended.
 */
/** The latest alarm set, 2100-01-01: workerd refuses alarms some centuries ahead. */
const LATEST_ALARM_MS = Date.UTC(2100, 0, 1);
const DAY_MS = 86_400_000;

const expiresAtMs = ({ counter, data, penaltyUntilMs }: Row): number =>
  Math.max(counter.expiresAtMs(data), penaltyUntilMs);

/** A fresh row's epoch: never 0, which rows stored before epochs existed have. */
const newEpoch = (): number => (crypto.getRandomValues(new Uint32Array(1))[0]! % 0x7fffffff) + 1;

/** A name for a booking, a place or a ticket: unguessable, so one caller cannot cancel another's. */
const newId = (): string => crypto.randomUUID();

/** An evaluation now, and, when held requests wait ahead under an enforcing rule, the turn a request would get behind them. */
type Looked = Seen<unknown> & { turnMs?: number };

export class RateLimiter extends DurableObject<unknown> {
  private readonly sql: SqlStorage;
  private readonly rows = new Map<string, Row>();
  private schemaReady = false;
  /** When the cleanup alarm is set for, or null when none is needed. */
  private alarmAtMs: number | null;
  /** Per row, until when a caller may still refund counts it took; refusals then are not to be remembered. */
  private readonly refundsDue = new Map<string, number>();
  /**
   * Per row, a penalty started by a refusal that rested on counts a caller may still refund, and until when:
   * a refund in that time lifts it, as the refusal may not have happened without the counts refunded.
   */
  private readonly tentativePenalties = new Map<string, number>();

  /** This client's overrides, and how each rule applies to it now (its override, then its factor). */
  private readonly plans: PlanBook;
  /** The tier each rule's last request claimed, for the admin API's reads, which carry no token. */
  private readonly claimed: ClaimedTiers;

  /** Held requests' bookings. */
  private readonly books: BookingBook;
  /** Per adaptive rule and priority, the factor its checks last carried here: a raise moves those held up. */
  private readonly factorsSeen = new FactorsSeen();
  /** Concurrency rules' places. */
  private readonly places: PlaceBook;
  /** The one timer: the next turn or place a caller awaits. */
  private readonly wake = new Wake(() => this.onWake());
  /**
   * The controller of an adaptive rule, when this object is one (named
   * `adaptive:<rule id>`, never a client's): loaded on first use.
   */
  private controller: ControllerBook | undefined;
  /** Whether a controller is stored here, loaded or not. */
  private hasController: boolean;
  /** The rows' settled states, and how their kinds pace held requests, for the bookings' arithmetic. */
  private readonly booked: Rows = { stateOf: (row) => this.rows.get(row)?.data, pace: PACE };

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.books = new BookingBook(this.sql, countedUntilMs);
    this.places = new PlaceBook(this.sql, (check, granted, nowMs) =>
      grantedUnder(this.plans.plan(check as RuleCheck, nowMs), granted, check as RuleCheck),
    );
    this.plans = new PlanBook(this.sql, ctx.id.name);
    this.claimed = new ClaimedTiers(this.sql);
    // A fresh or cleaned-up object has no tables: reading them must not create one.
    const tables = new Set(
      this.sql
        .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table'")
        .toArray()
        .map((t) => t.name),
    );
    this.hasController = tables.has("controller");
    if (tables.has("bookings")) this.books.load(Date.now());
    if (tables.has("places")) this.places.load();
    if (tables.has("overrides")) this.plans.load();
    if (tables.has("claimed_tiers")) this.claimed.load();
    if (!tables.has("counters")) {
      this.alarmAtMs = this.lastExpiry();
      return;
    }
    this.schemaReady = true;
    this.upgradeSchema();
    for (const row of this.sql.exec<Record<string, string | number>>("SELECT * FROM counters")) {
      const key = String(row.rule);
      const kind = String(row.kind) as CountedKind;
      const counter = counterOfKind(kind);
      this.rows.set(key, {
        key,
        id: key.slice(0, key.indexOf("|")),
        kind,
        counter,
        epoch: Number(row.epoch),
        data: counter.decode({
          periodMs: Number(row.period_ms),
          precision: Number(row.precision),
          bucket: Number(row.bucket),
          counts: String(row.counts),
        }),
        penaltyUntilMs: Number(row.penalty_until),
      });
    }
    // Every write that moved a row's expiry later also moved the alarm there (scheduleCleanup, alarm),
    // so the alarm is known without reading it: an object woken for one request sets none.
    this.alarmAtMs = this.lastExpiry();
  }

  /**
   * Rows stored before epochs were named by the rule id alone: give them their layout and epoch 0.
   * Rows stored before penalties have none running.
   */
  private upgradeSchema(): void {
    const columns = this.sql.exec("SELECT * FROM counters LIMIT 0").columnNames;
    if (!columns.includes("epoch")) {
      this.sql.exec("ALTER TABLE counters ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0");
      this.sql.exec(
        "UPDATE counters SET rule = rule || '|' || period_ms || '|' || precision WHERE instr(rule, '|') = 0",
      );
    }
    if (!columns.includes("penalty_until")) {
      this.sql.exec("ALTER TABLE counters ADD COLUMN penalty_until INTEGER NOT NULL DEFAULT 0");
    }
    if (!columns.includes("kind")) {
      this.sql.exec("ALTER TABLE counters ADD COLUMN kind TEXT NOT NULL DEFAULT 'window'");
    }
  }

  /**
   * A check that carries a higher factor than the last its rule (and
   * priority) carried here, with requests held: those held under it are
   * planned again under it, as under an override's raise (docs/adaptive.md):
   * they move up, in the order they came, before the request that brought
   * the raise is decided. A cut leaves the turns they were given.
   */
  private followRaises(rules: RuleCheck[], nowMs: number): void {
    const raised = this.factorsSeen.raised(rules, this.books.anyAhead);
    if (raised === undefined) return;
    this.replanHeld(raised.ruleIds, nowMs, raised.checkNow);
    this.rearm(nowMs);
  }

  /**
   * A request for a place that carries another factor than the last its
   * rule (and priority) carried here: the requests in line under it wait
   * for places under the new factor, as under an override's change: a raise
   * serves the line at once, in order, before the request that brought it;
   * after a cut, a place freed goes to the line only below the fewer places.
   */
  private followFactor(now: RuleCheck, nowMs: number): void {
    const checkNow = this.factorsSeen.lineUnder(now);
    if (checkNow === null) return;
    this.replanLine(now.id, nowMs, checkNow);
    this.rearm(nowMs);
  }

  /**
   * The requests held under `ruleIds` planned again, each from its stored
   * check as `checkNow` makes it (the check itself under an override's
   * change; with a new factor under an adaptive rule's): they move up where
   * the new plan leaves room, a deny withdraws them, `unlimited` drops their count.
   */
  private replanHeld(ruleIds: ReadonlySet<string>, nowMs: number, checkNow: (check: RuleCheck) => RuleCheck = same) {
    if (!this.books.anyAhead) return;
    this.books.replan(ruleIds, (check) => heldUnder(this.plans.plan(checkNow(check), nowMs)), nowMs, this.booked);
    this.countTurnsDue(nowMs);
  }

  /** The line for a concurrency rule's places planned again, each ticket from its stored check as `checkNow` makes it. */
  private replanLine(ruleId: string, nowMs: number, checkNow: (check: RuleCheck) => RuleCheck = same) {
    this.places.replan(
      ruleId,
      (check: RuleCheck) => placesUnder(this.plans.plan(checkNow(check), nowMs)),
      nowMs,
      newId,
    );
  }

  /**
   * Checks one request against every rule of this key, all or nothing: if an
   * enforcing rule refuses it, no rule counts it.
   */
  check(rules: RuleCheck[], options: CheckOptions = {}): CheckResult {
    if (options.returns?.length) this.refund(options.returns);
    const nowMs = Date.now();
    if (this.books.active) this.countTurnsDue(nowMs);
    this.followRaises(rules, nowMs);
    for (const rule of rules) this.claimed.saw(rule.id, rule.tier);
    const plans = rules.map((rule) => checked(this.plans.plan(rule, nowMs), rule));
    const rows = plans.map((plan) => (plan.kind === "count" ? this.current(plan.rule, nowMs) : undefined));
    const batch = Math.max(1, Math.floor(options.batch ?? 1));
    // Booking work only for a caller that can hold, and a rule that allows a delay.
    if (options.hold && batch === 1 && rules.some((rule) => rule.enforce && rule.maxDelayMs !== undefined)) {
      const held = this.hold(rules, plans, rows, nowMs);
      if (held) return held;
    }
    const first = this.decideOne(plans, rows, nowMs);
    if (!first.allowed) {
      this.scheduleCleanup(); // a penalty started may keep a row past its counts
      if (options.hold) holdLess(rules, first.verdicts);
      rememberedTogether(rules, rows, first.verdicts);
      const refusal = { nowMs, allowed: false, verdicts: first.verdicts };
      return batch > 1 ? { ...refusal, admitted: 0 } : refusal;
    }
    // What the first counted may be handed back: a later request of the batch refused now is refused on a
    // count that may go, exactly as if it had called after the first (its refusal does not hold, its
    // penalty is tentative).
    if (options.refundableForMs) this.refundsDueFor(rows, first.verdicts, nowMs, options);
    // The rest of a batch, in order, each as if it had called: a refusal changes nothing, so the first one
    // refused is the last one decided, and every later one would be refused the same.
    let verdicts = first.verdicts;
    let admitted = 1;
    let refused: RuleVerdict[] | undefined;
    while (admitted < batch) {
      const next = this.decideOne(plans, rows, nowMs);
      if (!next.allowed) {
        refused = rememberedTogether(rules, rows, next.verdicts);
        break;
      }
      verdicts = next.verdicts;
      admitted++;
    }
    // A lease only when the whole batch fitted: a refusal says the key is at a limit.
    const lease = options.lease && !refused ? this.grant(plans, rows, verdicts, nowMs, options.lease) : undefined;
    // A rule that admitted the first request counted it (a shadow rule may refuse later ones of a batch).
    rows.forEach((row, i) => {
      if (row && first.verdicts[i]!.ruleAllows) this.save(row);
    });
    this.scheduleCleanup();
    const result: CheckResult = lease ? { nowMs, allowed: true, verdicts, lease } : { nowMs, allowed: true, verdicts };
    if (batch > 1) {
      result.admitted = admitted;
      if (refused) result.refused = refused;
    }
    return result;
  }

  /**
   * Marks the rows a request was counted in as holding counts that may be handed back for as long as the
   * caller says (per rule, or for all), or later: an earlier call's counts may be handed back until then,
   * however soon this one's must be.
   */
  private refundsDueFor(rows: (Row | undefined)[], verdicts: RuleVerdict[], nowMs: number, options: CheckOptions) {
    rows.forEach((row, i) => {
      if (!row || !verdicts[i]!.ruleAllows) return;
      const forMs = options.refundableByRuleMs?.[i] ?? options.refundableForMs ?? 0;
      if (forMs > 0 && nowMs + forMs > (this.refundsDue.get(row.key) ?? 0)) this.refundsDue.set(row.key, nowMs + forMs);
    });
  }

  /**
   * Decides one request against every rule, all or nothing: counts it in
   * every rule that admits it when every enforcing rule does, and starts
   * the penalties of the rules that refuse it.
   */
  private decideOne(plans: Checked[], rows: (Row | undefined)[], nowMs: number) {
    const evaluations = plans.map((plan, i) =>
      plan.kind === "count" ? this.see(rows[i]!, nowMs, plan.rule) : undefined,
    );
    const allowed = plans.every(
      (plan, i) =>
        plan.kind === "unlimited" || (plan.kind === "count" && (!plan.rule.enforce || evaluations[i]!.allowed)),
    );
    const verdicts = plans.map((plan, i) => {
      if (plan.kind !== "count") return fixedVerdict(plan, nowMs);
      const ev = evaluations[i]!;
      const row = rows[i]!;
      const counted = allowed && ev.allowed;
      // A shadow rule counts now even where requests are held ahead: their tails must count it too.
      if (counted && this.books.anyAhead && this.books.heldIn(row.key) > 0) this.books.invalidate();
      row.data = counted ? row.counter.admit(ev.data, costOf(plan.rule), plan.rule, nowMs) : ev.data;
      if (!ev.allowed) {
        // Refused by this rule: what its kind keeps of a refusal, stored at once (refusals store nothing else).
        const refused = plan.rule.enforce ? row.counter.refuse?.(row.data, plan.rule) : undefined;
        if (refused !== undefined) {
          row.data = refused;
          this.save(row);
        }
        this.penalize(plan.rule, row, nowMs);
      }
      return this.verdict(ev, nowMs, plan, row, counted);
    });
    return { allowed, verdicts };
  }

  /**
   * What a request now would see of a row: the window's evaluation, refused
   * while the rule's penalty lasts, and, under an enforcing rule, refused
   * while held requests wait ahead in the row, with the turn it would get
   * behind them. A later request never takes a place promised to an earlier one.
   */
  private see(row: Row, nowMs: number, rule: RuleCheck): Looked {
    const ev = evaluateRow(row, nowMs, rule);
    if (!this.books.anyAhead || !rule.enforce || ev.never || this.books.heldIn(row.key) === 0) return ev;
    if (ev.allowed && this.roomForAll(row, ev.data, rule, nowMs)) return ev;
    const tail = this.books.tailOf(row.key, this.booked)!;
    const turnMs = row.counter.earliestAdmission(tail.state, rule, Math.max(nowMs, tail.lastAtMs));
    return { ...ev, allowed: false, turnMs };
  }

  /**
   * Whether a row (its state brought to `nowMs`) has room for every unit
   * booked ahead in it and this request, were they all counted now. Then
   * the request takes no place promised to a held one: a count weighs no
   * more at any later instant than it does now, so each booking still
   * admits at its turn. A rule far from its limit beside one that holds
   * requests (10 a second, 1 000 an hour) neither queues nor refuses them.
   */
  private roomForAll(row: Row, seen: unknown, rule: RuleCheck, nowMs: number): boolean {
    return row.counter.roomFor(seen, this.books.unitsIn(row.key), nowMs, rule);
  }

  /**
   * Books a request for its turn instead of refusing it, when every
   * enforcing rule admits it now or makes it wait at most the smallest
   * `maxDelayMs` of the rules that make it wait, each with fewer than its
   * `maxHeld` held; undefined otherwise (admitted now, or refused: the
   * ordinary path decides). All or nothing: the turn is the instant every
   * enforcing rule admits it, with everything booked before counted, and
   * each of them counts it there. Shadow rules count it now, as they would.
   */
  private hold(
    rules: RuleCheck[],
    plans: Checked[],
    rows: (Row | undefined)[],
    nowMs: number,
  ): CheckResult | undefined {
    const counts: BookedCount[] = [];
    const slots: number[] = [];
    for (const [i, plan] of plans.entries()) {
      if (plan.kind === "deny" || plan.kind === "shed") return undefined;
      if (plan.kind !== "count" || !plan.rule.enforce) continue;
      const row = rows[i]!;
      if (penalizes(plan.rule) && penaltyLeftMs(row.penaltyUntilMs, nowMs) > 0) return undefined;
      counts.push({ row: row.key, window: plan.rule });
      slots.push(i);
    }
    if (counts.length === 0) return undefined;
    // Every rule admits it now (its rows have room for those held, or none are): the ordinary path admits it.
    if (
      plans.every(
        (plan, i) => plan.kind !== "count" || !plan.rule.enforce || this.see(rows[i]!, nowMs, plan.rule).allowed,
      )
    ) {
      return undefined;
    }
    const turn = this.books.turnOf(counts, nowMs, this.booked);
    if (turn.atMs === nowMs) return undefined;
    let delayMs = Number.POSITIVE_INFINITY;
    for (const [k, earliestMs] of turn.earliestMs.entries()) {
      if (earliestMs <= nowMs) continue;
      const rule = (plans[slots[k]!] as Plan & { kind: "count" }).rule;
      if (rule.maxDelayMs === undefined) {
        // A rule without a delay that waits only for its place in line, with room for everyone held: not it.
        const row = rows[slots[k]!]!;
        if (this.roomForAll(row, evaluateRow(row, nowMs, rule).data, rule, nowMs)) continue;
        return undefined;
      }
      if (this.books.heldIn(counts[k]!.row) >= (rule.maxHeld ?? DEFAULT_MAX_HELD)) return undefined;
      delayMs = Math.min(delayMs, rule.maxDelayMs);
    }
    if (turn.atMs - nowMs > delayMs) return undefined;
    // The verdicts are the admission at the turn: each row as it will be then, before this request.
    const before = counts.map(({ row }) => this.books.tailOf(row, this.booked)?.state ?? this.rows.get(row)!.data);
    const checks = slots.map((i) => rules[i]!);
    const booked = { id: newId(), atMs: turn.atMs, counts, rules: plans.length, slots, checks };
    const booking = this.books.book(booked, nowMs, this.booked);
    const verdicts = plans.map((plan, i): RuleVerdict => {
      if (plan.kind !== "count") return fixedVerdict(plan, nowMs);
      const row = rows[i]!;
      const k = slots.indexOf(i);
      if (k >= 0) {
        this.save(row); // its epoch is in the receipt: stored now, so a restart keeps it
        return this.verdict(row.counter.see(before[k]!, booking.atMs, plan.rule), booking.atMs, plan, row, true);
      }
      const ev = evaluateRow(row, nowMs, plan.rule);
      if (ev.allowed && this.books.heldIn(row.key) > 0) this.books.invalidate();
      row.data = ev.allowed ? row.counter.admit(ev.data, costOf(plan.rule), plan.rule, nowMs) : ev.data;
      if (ev.allowed) this.save(row);
      return this.verdict(ev, nowMs, plan, row, ev.allowed);
    });
    this.scheduleCleanup();
    return {
      nowMs,
      allowed: false,
      verdicts,
      held: { bookingId: booking.id, atMs: booking.atMs, waitMs: booking.atMs - nowMs },
    };
  }

  /**
   * Counts every booking whose turn has come into its rows, at its turn, in
   * order, and answers the callers awaiting those turns. A row reset (or
   * cleaned up) since is made afresh: the held request went on, so it counts.
   */
  private countTurnsDue(nowMs: number): void {
    // Bookings no caller claimed in time are of requests that no longer exist: they go, and what they counted.
    const unclaimed = this.books.dropUnclaimed(nowMs, this.booked);
    if (unclaimed.length > 0) this.refund(unclaimed);
    const turned: { booking: HeldBooking; receipts: (Receipt | null)[]; verdicts?: (RuleVerdict | null)[] }[] = [];
    for (const booking of this.books.takeDue(nowMs)) {
      const receipts = new Array<Receipt | null>(booking.rules).fill(null);
      // Planned again while held: its headers say its admission at its turn, under the plan that applies then.
      const verdicts = booking.replanned ? new Array<RuleVerdict | null>(booking.rules).fill(null) : undefined;
      booking.counts.forEach((count, k) => {
        const check = count.window as RuleCheck;
        const row = this.rowFor(count, booking.atMs);
        const original = booking.checks?.[k];
        if (verdicts !== undefined && original !== undefined) {
          const plan = checked(this.plans.plan(original, booking.atMs), original);
          if (plan.kind === "count") {
            const seen = row.counter.see(row.data, booking.atMs, plan.rule);
            verdicts[booking.slots[k]!] = this.verdict(seen, booking.atMs, plan, row, true);
          }
        }
        row.data = row.counter.admitAt(row.data, check, booking.atMs);
        this.save(row);
        receipts[booking.slots[k]!] = {
          row: row.key,
          epoch: row.epoch,
          bucket: row.counter.whereAt(booking.atMs, check, row.data),
          ...markOf(row),
        };
      });
      // Counted nowhere under the rules a reset took its counts off: its headers tell what each has left now.
      for (const { slot, check } of verdicts === undefined ? [] : (booking.forgotten ?? [])) {
        const plan = checked(this.plans.plan(check, booking.atMs), check);
        if (plan.kind !== "count") continue;
        const row = this.current(plan.rule, booking.atMs);
        const told = this.verdict(this.see(row, booking.atMs, plan.rule), booking.atMs, plan, row, false);
        verdicts![slot] = admittedAtTurn(told);
      }
      turned.push(verdicts === undefined ? { booking, receipts } : { booking, receipts, verdicts });
    }
    // Answered once every turn due is counted: each planned again tells the wait a request after it has.
    for (const { booking, receipts, verdicts } of turned) {
      if (verdicts !== undefined) this.behindStillHeld(booking, verdicts, nowMs);
      this.books.counted(booking, receipts, nowMs, verdicts);
    }
  }

  /**
   * A held request planned again while held (an admin change) goes at its
   * turn, admitted: its headers say so, and the wait a request after it
   * has, under the plan now, behind the requests still held ahead of it
   * and those counted with it (found from outside: `t=1` on the last of six
   * held requests after a lower limit, where the next request waited 25 s).
   */
  private behindStillHeld(booking: HeldBooking, verdicts: (RuleVerdict | null)[], nowMs: number): void {
    booking.counts.forEach((count, k) => {
      const slot = booking.slots[k]!;
      const verdict = verdicts[slot];
      const original = booking.checks?.[k];
      const row = this.rows.get(count.row);
      if (!verdict || original === undefined || row === undefined) return;
      const plan = checked(this.plans.plan(original, nowMs), original);
      if (plan.kind !== "count") return;
      const next = this.verdict(this.see(row, nowMs, plan.rule), nowMs, plan, row, false);
      const waitMs = next.ruleAllows ? 0 : nowMs + next.retryAfterMs - booking.atMs;
      const admitted = admittedAtTurn(verdict);
      verdicts[slot] =
        waitMs > 0 ? { ...admitted, remaining: 0, resetMs: Math.max(verdict.resetMs, waitMs) } : admitted;
    });
  }

  /** The row a booked count goes into: the row, or a fresh one if it was reset or cleaned up since. */
  private rowFor(count: BookedCount, atMs: number): Row {
    const row = this.rows.get(count.row);
    if (row) return row;
    const check = count.window as RuleCheck;
    const counter = counterOf(check);
    const fresh: Row = {
      key: count.row,
      id: count.row.slice(0, count.row.indexOf("|")),
      kind: kindOfCheck(check),
      counter,
      epoch: newEpoch(),
      data: counter.fresh(atMs, check),
      penaltyUntilMs: 0,
    };
    this.rows.set(count.row, fresh);
    return fresh;
  }

  /**
   * Answers when a held request's turn has come: at once if it has, at its
   * turn (or earlier, if cancellations moved it up) otherwise, or unknown
   * if there is no such booking (cancelled, or counted long ago). The
   * caller's own timer at the turn stands in if this call is lost.
   */
  awaitTurn(bookingId: string): TurnAnswer | Promise<TurnAnswer> {
    const nowMs = Date.now();
    if (this.books.active) this.countTurnsDue(nowMs);
    const booking = this.books.get(bookingId);
    if (booking === undefined) return { status: "unknown", nowMs };
    if (booking.counted !== null) {
      this.books.claim(bookingId);
      return turnAnswerOf(booking, nowMs);
    }
    const answer = this.books.wait(bookingId);
    this.rearm(nowMs);
    return answer;
  }

  /**
   * A held request's client hung up: its counts are taken back, and the
   * bookings after it move up. Once its turn has come, its counts are
   * refunded instead, never below zero.
   */
  cancelBooking(bookingId: string): Cancellation {
    const nowMs = Date.now();
    if (this.books.active) this.countTurnsDue(nowMs);
    const booking = this.books.get(bookingId);
    if (booking === undefined) return { status: "unknown" };
    if (booking.counted !== null) {
      const refunds = booking.counts.flatMap((count, k): Refund[] => {
        const receipt = booking.counted![booking.slots[k]!];
        return receipt ? [{ receipt, count: costOf(count.window) }] : [];
      });
      this.books.forget(bookingId);
      this.refund(refunds);
      return { status: "refunded" };
    }
    this.books.cancel(bookingId, nowMs, this.booked);
    this.rearm(nowMs);
    this.scheduleCleanup();
    return { status: "cancelled" };
  }

  /**
   * A place under a concurrency rule for a request about to be forwarded: a
   * place, or a ticket to wait for one (`awaitPlace`) when it may wait, or a
   * refusal. An override gives the client another number of places, or none
   * to count (`unlimited`), or refuses it (`deny`).
   */
  acquire(ruleId: string, request: PlaceRequest): PlaceAnswer {
    const nowMs = Date.now();
    const check = placeCheck(ruleId, request);
    this.claimed.saw(ruleId, request.tier);
    this.followFactor(check, nowMs);
    const plan = this.plans.plan(check, nowMs);
    if (plan.kind === "deny") return { status: "refused", nowMs, free: 0, inUse: 0, override: "deny" };
    const limit = plan.kind === "unlimited" ? Number.POSITIVE_INFINITY : plan.rule.limit;
    const answer = this.places.acquire(
      ruleId,
      {
        limit,
        timeoutMs: request.placeTimeoutMs,
        maxHeld: request.maxHeld ?? DEFAULT_MAX_HELD,
        ...(request.maxDelayMs === undefined ? {} : { maxDelayMs: request.maxDelayMs, check }),
      },
      nowMs,
      newId,
    );
    this.rearm(nowMs);
    this.scheduleCleanup();
    // The limit that applied, when an override or a factor made it other than the rule's: a refusal says it too.
    const own = plan.kind === "count" && (plan.override !== undefined || plan.configured !== undefined);
    if (answer.status === "refused" && own) {
      // Fewer held than the places before the factor: the reduction alone refused it.
      const reduced = plan.configured !== undefined && answer.inUse < plan.configured;
      const kind = plan.override?.kind;
      return {
        ...answer,
        limit,
        ...(kind === "limit" || kind === "tier" ? { override: kind } : {}),
        ...(reduced ? { reduced: true } : {}),
        ...tierOf(plan.rule, plan.override),
      };
    }
    if (answer.status === "queued" && own) return { ...answer, limit };
    if (answer.status === "refused" && plan.kind === "count") return { ...answer, ...tierOf(plan.rule, undefined) };
    if (answer.status !== "acquired") return answer;
    return grantedUnder(plan, answer, check);
  }

  /**
   * What a concurrency rule's places are for this client now, without taking
   * one: how many its override (or tier) gives it (null when an override
   * lifts or denies the rule), how many are held, and how many requests wait.
   */
  peekPlaces(ruleId: string, request: PlaceRequest, read: Read = {}): PlacesNow {
    const nowMs = Date.now();
    const check = placeCheck(ruleId, request);
    const plan = this.plans.plan(read.lastTier ? this.claimed.applied(check) : check, nowMs);
    const { inUse, waiting } = this.places.peek(ruleId, nowMs);
    if (plan.kind !== "count") {
      const never = plan.kind === "deny" && plan.expiresAtMs === null ? { never: true as const } : {};
      return { nowMs, limit: null, inUse, waiting, override: plan.kind, ...never };
    }
    const limit = plan.rule.limit;
    const override = plan.override ? { override: plan.override.kind } : {};
    return { nowMs, limit, inUse, waiting, ...override, ...tierOf(plan.rule, plan.override) };
  }

  /** Answers a ticket with a place when one frees (first come, first served), or refused at its deadline; unknown if no such ticket. */
  awaitPlace(ticketId: string): PlaceWait | Promise<PlaceWait> {
    const nowMs = Date.now();
    const answer = this.places.wait(ticketId, nowMs, newId);
    this.rearm(nowMs);
    return answer;
  }

  /** A request waiting for a place hung up: its ticket is dropped (or the place it got and never took is freed). */
  cancelTicket(ticketId: string): Cancellation {
    const nowMs = Date.now();
    const done = this.places.cancelTicket(ticketId, nowMs, newId);
    this.rearm(nowMs);
    return { status: done === "unknown" ? "unknown" : "cancelled" };
  }

  /** Frees places: their requests ended (the response was sent, the client hung up, the origin failed). */
  release(placeIds: string[]): { nowMs: number; released: string[]; unknown: string[] } {
    const nowMs = Date.now();
    const released = this.places.release(placeIds, nowMs, newId);
    this.rearm(nowMs);
    return { nowMs, ...released };
  }

  /** Extends places still held to now plus their timeout; answers the ids no longer held (released, or taken back). */
  renew(placeIds: string[]): Renewal {
    const nowMs = Date.now();
    const renewal = this.places.renew(placeIds, nowMs, newId);
    this.rearm(nowMs);
    this.scheduleCleanup();
    return renewal;
  }

  /** The timer: turns that have come, places taken back, deadlines passed. */
  private onWake(): void {
    const nowMs = Date.now();
    this.dropExpiredOverrides(nowMs);
    if (this.books.active) this.countTurnsDue(nowMs);
    this.places.serveAll(nowMs, newId);
    this.rearm(nowMs);
  }

  /**
   * Sets the one timer for the next turn or place change a caller awaits:
   * the head of the held requests, a line's next change, and, while any
   * request waits, the next override to expire (which plans them again).
   */
  private rearm(nowMs: number): void {
    let next: number | null = null;
    const waiting = this.books.anyAhead || this.places.anyWaiting;
    for (const at of [
      this.books.nextWakeMs(),
      this.places.nextWakeMs(),
      waiting ? this.plans.nextExpiry(nowMs) : null,
    ]) {
      if (at !== null) next = Math.min(next ?? at, at);
    }
    this.wake.set(next, nowMs);
  }

  /**
   * Drops the overrides past their expiry, and plans the requests waiting
   * under their rules again, as a deletion does: an override ends on its own
   * clock for the requests already waiting too (docs/per-client-limits.md).
   */
  private dropExpiredOverrides(nowMs: number): void {
    const expired = this.plans.purge(nowMs);
    if (expired.size === 0) return;
    for (const ruleId of expired) this.carryAtChange(ruleId, nowMs);
    this.replanHeld(expired, nowMs);
    for (const ruleId of expired) this.replanLine(ruleId, nowMs);
  }

  /**
   * Starts the rule's penalty for this client, if it has one and none is
   * running: the rule has just refused. A refusal during a penalty does not
   * extend it. Stored at once, as the refusal stores nothing else.
   */
  private penalize(rule: RuleCheck, row: Row, nowMs: number): void {
    if (!penalizes(rule) || penaltyLeftMs(row.penaltyUntilMs, nowMs) > 0) return;
    row.penaltyUntilMs = nowMs + rule.blockForMs!;
    const refundsDueMs = this.refundsDue.get(row.key) ?? 0;
    if (refundsDueMs > nowMs) this.tentativePenalties.set(row.key, refundsDueMs);
    else this.tentativePenalties.delete(row.key);
    this.save(row);
  }

  /**
   * Sets this client's override of a rule; the next check applies it. A
   * change older than the last one applied (a lower `version`) is ignored.
   */
  setOverride(ruleId: string, override: Override, version: number): void {
    if (!this.plans.set(ruleId, override, version)) return;
    this.carryAtChange(ruleId, Date.now());
    this.replanWaiting(ruleId);
    this.scheduleCleanup();
  }

  /** Removes this client's override of a rule, unless a newer change was applied. */
  deleteOverride(ruleId: string, version: number): void {
    if (!this.plans.delete(ruleId, version)) return;
    this.carryAtChange(ruleId, Date.now());
    this.replanWaiting(ruleId);
  }

  /**
   * A rule's override changed for this client (set, deleted, or ran out):
   * its row is carried to the limit the rule gives it now, from the change
   * on, under the check its last request sent. Left to the client's next
   * request, a token bucket would go on refilling at the old rate until
   * then, and the cleanup could delete it as full at that rate, what was
   * spent with it (found from outside: 600 a minute lowered to 6, and 7 s
   * later a whole burst of 60 again). Without a request since the object
   * started, the next request carries it from then (a restart forgets when
   * the change was).
   */
  private carryAtChange(ruleId: string, nowMs: number): void {
    const check = this.plans.lastCheck(ruleId);
    if (check === undefined) return;
    const plan = checked(this.plans.plan(check, nowMs), check);
    if (plan.kind !== "count" || !this.rows.has(counterOf(plan.rule).rowOf(plan.rule))) return;
    this.current(plan.rule, nowMs);
  }

  /**
   * An override of a rule changed for this client: its requests held, and
   * those waiting in line for a place, are planned again under it at once,
   * in the order they came (docs/per-client-limits.md, "Requests already
   * waiting"). Held: a deny withdraws them (each decides again, and is
   * refused), unlimited drops their count under the rule, another limit or
   * tier moves them up where it leaves room (a lower one leaves the turns
   * they were given). In line: a deny refuses them, the others wait for
   * places under the new limit, served at once where there is room.
   */
  private replanWaiting(ruleId: string): void {
    const nowMs = Date.now();
    this.replanHeld(new Set([ruleId]), nowMs);
    this.replanLine(ruleId, nowMs);
    this.rearm(nowMs);
  }

  /** This client's overrides, live or expired and not yet cleaned up, by rule id. */
  listOverrides(): Record<string, Override> {
    return this.plans.list();
  }

  /**
   * Counts more admissions ahead into `rows` when every rule has plenty left:
   * at most {@link LEASE_SHARE} of the least any rule has left, and no more
   * than the caller's recent demand says it will spend before the lease ends,
   * or than {@link LEASE_HARMLESS_SHARE} of the smallest limit, whichever is
   * more. Each unit is admissible now: `remaining` already counts this request.
   */
  private grant(
    plans: Checked[],
    rows: (Row | undefined)[],
    verdicts: RuleVerdict[],
    nowMs: number,
    wanted: LeaseRequest,
  ) {
    if (!verdicts.every((v) => v.ruleAllows)) return undefined;
    const rules = plans.flatMap((plan) => (plan.kind === "count" ? [plan.rule] : []));
    // Units leased before a penalty starts would be spent during it: a rule with one decides every request here.
    if (rules.some(penalizes)) return undefined;
    const counted = verdicts.filter((_, i) => plans[i]!.kind === "count");
    // Every rule lifted for this client: units cost nothing and are counted nowhere, until the soonest override ends.
    if (rules.length === 0) {
      const ends = plans.map((plan) =>
        plan.kind === "unlimited" && plan.expiresAtMs !== null ? plan.expiresAtMs : Infinity,
      );
      const expiresInMs = Math.min(LEASE_MAX_MS, ...ends.map((at) => at - nowMs));
      return { units: wanted.units, receipts: plans.map(() => NOWHERE), expiresInMs } satisfies Lease;
    }
    // Under an adaptive rule, no longer than an isolate takes to learn a cut: units leased before it go unspent.
    const longest = rules.some((rule) => rule.factor !== undefined) ? ADAPTIVE_LEASE_MAX_MS : LEASE_MAX_MS;
    // Nor past an override's own end: units leased under it would be spent under the limit it gave.
    const overridden = plans.map((plan) =>
      plan.kind === "count" && plan.override?.expiresAtMs != null ? plan.override.expiresAtMs - nowMs : longest,
    );
    const expiresInMs = Math.min(
      longest,
      ...overridden,
      ...rules.map((rule) => counterOf(rule).leaseEndsInMs(nowMs, rule)),
    );
    if (expiresInMs <= 0) return undefined; // a kind that leases nothing (a quota)
    // No more than the caller saw lately, and less when the lease ends sooner than that demand was seen in:
    // units leased to an isolate that does not spend them are counted against the key everywhere.
    const likely = Math.floor((wanted.seen * Math.min(expiresInMs, wanted.seenInMs)) / wanted.seenInMs);
    const harmless = Math.floor(Math.min(...rules.map((rule) => rule.limit)) * LEASE_HARMLESS_SHARE);
    const units = Math.min(
      wanted.units,
      Math.max(likely, harmless),
      ...counted.map((v) => Math.floor(v.remaining * LEASE_SHARE)),
    );
    if (units < LEASE_MIN_UNITS) return undefined;
    const receipts = rows.map((row, i): Receipt => {
      if (!row) return NOWHERE;
      const rule = (plans[i] as Plan & { kind: "count" }).rule;
      const ahead = row.counter.countAhead(row.data, units, rule, nowMs + expiresInMs);
      row.data = ahead.data;
      return { row: row.key, epoch: row.epoch, bucket: ahead.where, ...markOf(row) };
    });
    return { units, receipts, expiresInMs } satisfies Lease;
  }

  /**
   * A client's usage of a rule whose kind keeps periods (a quota): this
   * period's, under the limit that applies to it (its override's or tier's),
   * and earlier ones as far as the row keeps them; `usage` null for a kind
   * that keeps none, and `limit` null when an override lifts or denies the rule.
   */
  usage(asked: RuleCheck): UsageAnswer {
    const nowMs = Date.now();
    const rule = this.claimed.applied(asked);
    const counter = counterOf(rule);
    if (counter.usage === undefined) return { nowMs, usage: null };
    if (this.books.active) this.countTurnsDue(nowMs);
    const plan = this.plans.plan(rule, nowMs);
    const row = this.current(rule, nowMs);
    const applied = plan.kind === "count" ? plan.rule : rule;
    return { nowMs, usage: counter.usage(row.data, nowMs, applied), ...appliedTo(plan) };
  }

  /**
   * Changes what a client has left this period under a rule whose kind
   * keeps periods (a quota): adds to it, takes from it, or sets it, under
   * the limit that applies to it. Its next request is decided on it, and
   * requests held ahead move up where it leaves room. `before` and `after`
   * null for a kind that keeps no periods (nothing is changed).
   */
  credit(asked: RuleCheck, change: Credit): CreditAnswer {
    const nowMs = Date.now();
    const rule = this.claimed.applied(asked);
    const counter = counterOf(rule);
    if (counter.usage === undefined || counter.credit === undefined) return { nowMs, before: null, after: null };
    if (this.books.active) this.countTurnsDue(nowMs);
    const plan = this.plans.plan(rule, nowMs);
    const row = this.current(rule, nowMs);
    const applied = plan.kind === "count" ? plan.rule : rule;
    const before = counter.usage(row.data, nowMs, applied);
    row.data = counter.credit(row.data, change, nowMs, applied);
    this.save(row);
    this.scheduleCleanup();
    // Held requests ahead in the row were promised their turns; the next ones are worked out with the credit.
    this.books.invalidate();
    if (this.books.anyAhead) {
      this.books.moveUp(nowMs, this.booked);
      this.countTurnsDue(nowMs);
      this.rearm(nowMs);
    }
    return { nowMs, before, after: counter.usage(row.data, nowMs, applied), ...appliedTo(plan) };
  }

  /** What a request now would see, without counting it. */
  peek(rules: RuleCheck[], read: Read = {}): CheckResult {
    const nowMs = Date.now();
    if (this.books.active) this.countTurnsDue(nowMs);
    const rows: (Row | undefined)[] = [];
    const verdicts = rules.map((asked) => {
      const rule = read.lastTier ? this.claimed.applied(asked) : asked;
      const plan = checked(this.plans.plan(rule, nowMs), rule);
      if (plan.kind !== "count") return fixedVerdict(plan, nowMs);
      const row = this.current(plan.rule, nowMs);
      rows.push(row);
      return this.verdict(this.see(row, nowMs, plan.rule), nowMs, plan, row, false);
    });
    rememberedTogether(rules, rows, verdicts);
    const allowed = verdicts.every((v, i) => v.ruleAllows || (!rules[i]!.enforce && v.override !== "deny"));
    return { nowMs, allowed, verdicts };
  }

  /**
   * Takes back counts: requests another object refused, and leased units
   * never spent. Counts of an earlier epoch (the row was reset) or in a
   * bucket that has rotated out are gone already, and are not taken again.
   */
  refund(refunds: Refund[]): void {
    const nowMs = Date.now();
    for (const { receipt, count: taken } of refunds) {
      const row = this.rows.get(receipt.row);
      if (!row || row.epoch !== receipt.epoch) continue;
      const after = row.counter.takeBack(row.data, receipt, taken, nowMs);
      if (after === null) continue;
      row.data = after;
      this.liftTentativePenalty(row);
      this.save(row);
    }
    // The counts taken back were under any bookings ahead: they move up, and their callers wake sooner.
    if (this.books.anyAhead) {
      this.countTurnsDue(nowMs);
      this.books.moveUp(nowMs, this.booked);
      this.rearm(nowMs);
    }
  }

  /**
   * Adds counts where receipts say requests were counted: what a request
   * cost beyond what it was admitted at, as its response reported (a rule's
   * `cost_header`). The count may pass the limit; the client is then refused
   * until the window has room again. Counts for a row reset since (another
   * epoch) or a bucket rotated out are dropped: that window is gone.
   */
  charge(charges: Refund[]): void {
    const nowMs = Date.now();
    for (const { receipt, count } of charges) {
      const row = this.rows.get(receipt.row);
      if (!row || row.epoch !== receipt.epoch || count <= 0) continue;
      const after = row.counter.addAt(row.data, receipt, count, nowMs);
      if (after === null) continue;
      row.data = after;
      this.save(row);
    }
    // Bookings ahead keep their turns (they were promised); the next ones are worked out with the charge.
    this.books.invalidate();
    this.scheduleCleanup();
  }

  /** A refund in time lifts a penalty started by a refusal that rested on the counts refunded. */
  private liftTentativePenalty(row: Row): void {
    const dueMs = this.tentativePenalties.get(row.key);
    if (dueMs === undefined) return;
    this.tentativePenalties.delete(row.key);
    if (Date.now() < dueMs) row.penaltyUntilMs = 0;
  }

  /**
   * Forgets the given rules' counters (and penalties) for this key (every
   * layout of each id), or all of them; its held requests go on at once,
   * counted nowhere under them, and its places under them are freed (the
   * requests waiting in line get them).
   */
  async reset(ruleIds?: string[]): Promise<{ freed: number }> {
    for (const [key, row] of this.rows) {
      if (ruleIds && !ruleIds.includes(row.id)) continue;
      this.forgetRow(key);
    }
    // As a client never seen: its held requests count under these rules no more, and go on at once (under
    // its other rules, at their turns), before any request that comes after the reset.
    const nowMs = Date.now();
    if (this.books.anyAhead) {
      this.books.forgetRules(ruleIds === undefined ? null : new Set(ruleIds), nowMs, this.booked);
      this.countTurnsDue(nowMs);
      this.rearm(nowMs);
    } else this.books.invalidate();
    const freed = ruleIds === undefined ? 0 : this.freePlaces(ruleIds);
    if (this.nothingLeft()) await this.clear();
    return { freed };
  }

  /** Frees every place this client holds under these concurrency rules: the requests waiting for one get them. */
  private freePlaces(ruleIds: string[]): number {
    const nowMs = Date.now();
    let freed = 0;
    for (const ruleId of ruleIds) freed += this.places.releaseAll(ruleId, nowMs, newId);
    this.rearm(nowMs);
    return freed;
  }

  /** Whether the object holds nothing: no counters, overrides, bookings or places, and is no controller. */
  private nothingLeft(): boolean {
    return this.rows.size === 0 && this.plans.empty && !this.books.active && this.places.empty && !this.hasController;
  }

  /**
   * An isolate's report on an adaptive rule's health, to the rule's
   * controller object: the controller decides on it (on this object's
   * clock), and the answer is the factor its limit is multiplied by now.
   */
  reportHealth(report: HealthReport): FactorAnswer {
    const nowMs = Date.now();
    const name = this.ctx.id.name;
    if (name !== undefined && name !== controllerName(report.rule)) {
      // A bug in the caller: nothing is counted, and version 0 is never newer than what an isolate applies.
      logEvent({ event: "adaptive_misdirected", object: name, rule: report.rule }, "error");
      return {
        nowMs,
        factor: 1,
        version: 0,
        mode: "full",
        limit: report.limit,
        reportInMs: 1_000,
        lateMs: null,
        drift: false,
      };
    }
    return this.controllerOf(report.rule).report(report, nowMs);
  }

  /** The adaptive rule's controller and its history since `sinceMs`; null when this object is none. */
  controllerView(sinceMs = 0): ControllerView | null {
    const name = this.ctx.id.name;
    if (this.controller === undefined && !this.hasController) return null;
    const rule = this.controller === undefined && name?.startsWith("adaptive:") ? name.slice("adaptive:".length) : null;
    const controller = this.controller ?? (rule === null ? undefined : this.controllerOf(rule));
    return controller?.view(Date.now(), sinceMs) ?? null;
  }

  private controllerOf(rule: string): ControllerBook {
    this.controller ??= new ControllerBook(this.sql, rule);
    this.hasController = true;
    return this.controller;
  }

  private forgetRow(key: string): void {
    this.rows.delete(key);
    this.refundsDue.delete(key);
    this.tentativePenalties.delete(key);
    // A row only read since the object deleted its storage (a peek) was never stored: there is no table.
    if (this.schemaReady) this.sql.exec("DELETE FROM counters WHERE rule = ?", key);
  }

  /**
   * Deletes the counters whose windows have all expired (and whose penalty has ended), and the overrides
   * past their expiry; once nothing is left, deletes everything. Safe to run again.
   */
  override async alarm(): Promise<void> {
    const nowMs = Date.now();
    if (this.books.active) {
      this.countTurnsDue(nowMs);
      this.books.purge(nowMs);
    }
    this.dropExpiredOverrides(nowMs);
    this.places.serveAll(nowMs, newId);
    for (const [key, row] of this.rows) {
      if (nowMs < expiresAtMs(row) || this.books.heldIn(key) > 0) continue;
      this.forgetRow(key);
    }
    if (this.nothingLeft()) return this.clear();
    this.rearm(nowMs);
    this.alarmAtMs = this.lastExpiry();
    if (this.alarmAtMs === null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(this.alarmAtMs);
  }

  /**
   * When the last counter or expiring override expires, or null when nothing will (no counters, only lasting
   * overrides). No later than the runtime can set an alarm for: an earlier version stored overrides expiring
   * centuries ahead, and an alarm that runs before they expire only sets the next.
   */
  private lastExpiry(): number | null {
    let latest: number | null = null;
    for (const row of this.rows.values()) latest = Math.max(latest ?? 0, expiresAtMs(row));
    const overridden = this.plans.lastExpiry();
    if (overridden !== null) latest = Math.max(latest ?? 0, overridden);
    const booked = this.books.lastExpiry();
    if (booked !== null) latest = Math.max(latest ?? 0, booked);
    const placed = this.places.lastExpiry();
    if (placed !== null) latest = Math.max(latest ?? 0, placed);
    return latest === null ? null : Math.min(latest, Math.max(LATEST_ALARM_MS, Date.now() + DAY_MS));
  }

  /**
   * The rule's row, made if missing. A new row carries over the weighted
   * count of a row of the same id with another layout, and its penalty: a rule
   * whose period or precision changed keeps its clients' counts. (Two live rules that
   * share an id only meet here once, when the second row is made.)
   */
  private current(rule: RuleCheck, nowMs: number): Row {
    const counter = counterOf(rule);
    const key = counter.rowOf(rule);
    const row = this.rows.get(key);
    if (row) {
      // Counted under another limit (an override, a tier, a factor changed): carried over once, and kept so. From
      // the instant an override changed it (its expiry, if it ran out unseen), not after; else from now.
      // (An optional call: for a kind that never carries, its arguments are never made.)
      const carried = row.counter.carried?.(
        row.data,
        rule,
        () => this.plans.changedAtMs(rule.id, nowMs) ?? nowMs,
        nowMs,
      );
      if (carried !== undefined) {
        row.data = carried;
        this.save(row);
        // Held requests' tails were counted from the row as it was.
        if (this.books.anyAhead && this.books.heldIn(key) > 0) this.books.invalidate();
      }
      return row;
    }
    // The rule's layout changed (its period, its precision): the new row carries the old one's count and penalty.
    const previous = [...this.rows.values()].find((r) => r.id === rule.id);
    const fresh: Row = {
      key,
      id: rule.id,
      kind: kindOfCheck(rule),
      counter,
      epoch: newEpoch(),
      data: counter.fresh(nowMs, rule, previous),
      penaltyUntilMs: previous?.penaltyUntilMs ?? 0,
    };
    this.rows.set(key, fresh);
    return fresh;
  }

  private verdict(ev: Looked, nowMs: number, plan: Plan & { kind: "count" }, row: Row, counted: boolean): RuleVerdict {
    const { rule, override, configured } = plan;
    const penaltyMs = penalizes(rule) ? penaltyLeftMs(row.penaltyUntilMs, nowMs) : 0;
    const described = row.counter.describe(ev, nowMs, rule, counted);
    const decision = underPenalty(behindHeld(described, ev.turnMs, nowMs), penaltyMs);
    if (!ev.allowed && penaltyMs === 0 && ev.turnMs === undefined && override?.expiresAtMs != null) {
      decision.retryAfterMs = this.waitAcrossExpiry(
        ev,
        nowMs,
        rule.id,
        row,
        override.expiresAtMs,
        decision.retryAfterMs,
      );
    }
    // No wait admits it: the refusal holds until the rule changes for this client (the isolate caps it).
    const never = described.never === true;
    const refundDue = (this.refundsDue.get(row.key) ?? 0) > nowMs;
    // A refusal under an override holds no longer than the override.
    const untilChange = override?.expiresAtMs != null ? override.expiresAtMs - nowMs : Number.POSITIVE_INFINITY;
    return {
      ...decision,
      ...(penaltyMs > 0 ? { penaltyMs } : {}),
      ruleAllows: ev.allowed,
      counted: counted
        ? { row: row.key, epoch: row.epoch, bucket: row.counter.where(ev.data, rule), ...markOf(row) }
        : null,
      // Behind held requests, the wait shrinks when one of their clients hangs up: not to be remembered.
      // A kind whose refusals a credit may lift at any time (a quota): every request asks.
      holdsForMs:
        ev.allowed || refundDue || ev.turnMs !== undefined || row.counter.refusalsHold === false
          ? 0
          : Math.min(never ? DENY_FOREVER_MS : decision.retryAfterMs, untilChange),
      ...(never ? { never: true } : {}),
      ...(override || configured !== undefined || plan.own !== undefined ? { limit: rule.limit } : {}),
      ...(plan.own !== undefined ? { own: plan.own } : {}),
      ...(override ? { override: override.kind } : {}),
      ...(!ev.allowed && this.reducedOnly(ev, nowMs, plan, row) ? { reduced: true } : {}),
      ...tierOf(rule, override),
    };
  }

  /**
   * The wait of a refusal under an override that runs out sooner: at its
   * expiry the rule applies as it would without it, and where that admits
   * the request then, the wait is to the expiry (a limit of 1 a minute for
   * 15 s more, over the rule's 10 a minute: 15 s, not 60); where it
   * refuses, to the expiry and the rule's wait from there, sooner or later
   * than the override's own (a raise that ends first leaves the rule's).
   */
  private waitAcrossExpiry(
    ev: Looked,
    nowMs: number,
    ruleId: string,
    row: Row,
    expiresAtMs: number,
    waitMs: number,
  ): number {
    const untilMs = expiresAtMs - nowMs;
    const check = this.plans.lastCheck(ruleId);
    if (!(untilMs < waitMs) || check === undefined) return waitMs;
    const after = checked(this.plans.plan(check, expiresAtMs), check);
    if (after.kind === "unlimited") return Math.max(0, untilMs);
    if (after.kind !== "count" || row.counter.rowOf(after.rule) !== row.key) return waitMs;
    // Carried over to the rule's own limit at the expiry, as the next request then would carry it.
    const data = row.counter.carried?.(ev.data, after.rule, () => expiresAtMs, expiresAtMs) ?? ev.data;
    const then = evaluateRow({ ...row, data }, expiresAtMs, after.rule);
    if (then.allowed) return Math.max(0, untilMs);
    // The override is over before its own wait: the rule's wait from its end, longer or shorter (found from outside:
    // a raise ending in 15 s told the raise's wait, 23 s, where the rule's own 10 a minute refused until 30 s).
    return Math.max(0, untilMs) + row.counter.describe(then, expiresAtMs, after.rule, false).retryAfterMs;
  }

  /**
   * Whether a refusal is the factor's doing alone: the limit before it would
   * have admitted the request now (no penalty, and no held request ahead).
   */
  private reducedOnly(ev: Looked, nowMs: number, plan: Plan & { kind: "count" }, row: Row): boolean {
    if (plan.configured === undefined || ev.turnMs !== undefined) return false;
    return evaluateRow({ ...row, data: ev.data }, nowMs, { ...plan.rule, limit: plan.configured }).allowed;
  }

  private save(row: Row): void {
    if (!this.schemaReady) {
      this.sql.exec(SCHEMA);
      this.schemaReady = true;
    }
    const stored = row.counter.encode(row.data);
    this.sql.exec(
      `INSERT INTO counters (rule, period_ms, precision, bucket, counts, epoch, penalty_until, kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (rule) DO UPDATE SET bucket = excluded.bucket, counts = excluded.counts, epoch = excluded.epoch,
         penalty_until = excluded.penalty_until`,
      row.key,
      stored.periodMs,
      stored.precision,
      stored.bucket,
      stored.counts,
      row.epoch,
      row.penaltyUntilMs,
      row.kind,
    );
  }

  /** Makes sure an alarm will clean up once everything that expires has. Sets it only when it must move later. */
  private scheduleCleanup(): void {
    const latest = this.lastExpiry();
    if (latest === null || (this.alarmAtMs != null && this.alarmAtMs >= latest)) return;
    this.alarmAtMs = latest;
    void this.ctx.storage.setAlarm(latest);
  }

  private async clear(): Promise<void> {
    const nowMs = Date.now();
    this.books.clear(nowMs);
    this.places.clear(nowMs);
    this.wake.set(null, nowMs);
    this.rows.clear();
    this.plans.clear();
    this.claimed.clear();
    this.refundsDue.clear();
    this.tentativePenalties.clear();
    this.schemaReady = false;
    this.alarmAtMs = null;
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
  }
}

/** A concurrency rule as a check, so that its overrides and tiers apply as to any rule: `limit` is its places. */
const placeCheck = (ruleId: string, request: PlaceRequest): RuleCheck => ({
  id: ruleId,
  limit: request.concurrency,
  periodMs: request.placeTimeoutMs,
  precision: 1,
  strict: false,
  enforce: true,
  ...(request.tiers === undefined ? {} : { tiers: request.tiers }),
  ...(request.tier === undefined ? {} : { tier: request.tier }),
  ...(request.factor === undefined ? {} : { factor: request.factor }),
  ...(request.priority === undefined ? {} : { priority: request.priority }),
});

/** A stored check as it was. */
const same = (check: RuleCheck): RuleCheck => check;

/** What a held request counts under a plan: the rule as it now applies, or no count, or a refusal. */
const heldUnder = (plan: Plan): Replanned => (plan.kind === "count" ? plan.rule : plan.kind);

/** How many places a plan gives a request in line: the rule's (under an override and a factor), all, or none. */
const placesUnder = (plan: Plan): ReplannedPlaces =>
  plan.kind === "count" ? plan.rule.limit : plan.kind === "unlimited" ? Number.POSITIVE_INFINITY : "deny";

/** A refusal behind held requests: admissible at the turn it would get behind them, not before. */
function behindHeld(decision: Decision, turnMs: number | undefined, nowMs: number): Decision {
  if (turnMs === undefined) return decision;
  const waitMs = Math.max(decision.retryAfterMs, turnMs - nowMs);
  return { ...decision, allowed: false, remaining: 0, retryAfterMs: waitMs, resetMs: waitMs };
}

/**
 * For a caller that can hold: a refusal under a rule with a delay is to be
 * remembered only until its wait is within that delay; a request then may
 * be held, which only the object can decide.
 */
function holdLess(rules: RuleCheck[], verdicts: RuleVerdict[]): void {
  verdicts.forEach((verdict, i) => {
    const delayMs = rules[i]!.maxDelayMs;
    if (delayMs !== undefined) verdict.holdsForMs = Math.max(0, verdict.holdsForMs - delayMs);
  });
}

/**
 * A decision's refusals are remembered by an isolate together, for as long
 * as the shortest of them may be, or not at all: an isolate that answered
 * from some of them would name only those rules, with only their waits
 * (docs/responses.md: the longest wait, every rule named). None is when the
 * key has a quota (a credit may lift it at any moment: docs/quotas.md), and
 * none past the instant an enforcing rule's refusal stops holding before its
 * wait is over: at once for one that never holds (on counts that may be
 * handed back, behind held requests), when a held request may pass under a
 * rule with a delay, or when an override ends. Returns `verdicts`, changed.
 */
function rememberedTogether(rules: RuleCheck[], rows: (Row | undefined)[], verdicts: RuleVerdict[]): RuleVerdict[] {
  let holdsForMs = rows.some((row) => row?.counter.refusalsHold === false) ? 0 : Number.POSITIVE_INFINITY;
  verdicts.forEach((verdict, i) => {
    if (verdict.ruleAllows || !rules[i]!.enforce) return;
    if (verdict.holdsForMs <= 0 || verdict.holdsForMs < verdict.retryAfterMs)
      holdsForMs = Math.min(holdsForMs, Math.max(0, verdict.holdsForMs));
  });
  if (holdsForMs !== Number.POSITIVE_INFINITY)
    for (const verdict of verdicts) verdict.holdsForMs = Math.min(verdict.holdsForMs, holdsForMs);
  return verdicts;
}

/** What a receipt keeps of a count besides where it went, when the row's kind keeps anything: read from the row as it is now. */
const markOf = (row: Row): { mark?: readonly number[] } =>
  row.counter.mark === undefined ? {} : { mark: row.counter.mark(row.data) };

/** What a request now would see of a row: the window's evaluation, refused while the rule's penalty lasts. */
function evaluateRow(row: Row, nowMs: number, rule: RuleCheck): Seen<unknown> {
  const ev = row.counter.see(row.data, nowMs, rule);
  return ev.allowed && penalizes(rule) && penaltyLeftMs(row.penaltyUntilMs, nowMs) > 0 ? { ...ev, allowed: false } : ev;
}

/** A verdict as a held request's turn tells it: admitted, whatever its rule said of a request then (the turn was promised). */
const admittedAtTurn = (verdict: RuleVerdict): RuleVerdict => ({
  ...verdict,
  allowed: true,
  ruleAllows: true,
  retryAfterMs: 0,
  holdsForMs: 0,
});

/**
 * The verdict of a rule an override lifts or denies for this client, or
 * whose priority has nothing left: nothing counted, nothing evaluated.
 */
function fixedVerdict(plan: Checked & { kind: "unlimited" | "deny" | "shed" }, nowMs: number): RuleVerdict {
  switch (plan.kind) {
    case "unlimited":
      return { ...uncounted(true, 0), override: "unlimited" };
    case "deny":
      // A lasting deny: no wait admits the client (only an operator's change), so it names no reset.
      if (plan.expiresAtMs === null) return { ...uncounted(false, DENY_FOREVER_MS), override: "deny", never: true };
      return { ...uncounted(false, plan.expiresAtMs - nowMs), override: "deny" };
    case "shed":
      // A reduction to nothing, or a crowd: 503, until a report can bring a raise, or the crowd thins; the limit
      // that applied is 0, or the priority's own.
      return { ...uncounted(false, NOTHING_LEFT_RETRY_MS), limit: plan.limit, reduced: true };
  }
}

/** A verdict that counted nothing and evaluated nothing: admitted, or refused for `waitMs`. */
const uncounted = (allowed: boolean, waitMs: number): RuleVerdict => ({
  allowed,
  ruleAllows: allowed,
  weighted: 0,
  remaining: 0,
  retryAfterMs: waitMs,
  resetMs: waitMs,
  counted: null,
  holdsForMs: waitMs,
});

/** What applied to the client besides the rule: an override (or its tier), or a tier its token claimed. */
function appliedTo(plan: Plan): { override?: OverrideSetting["kind"]; tier?: string } {
  if (plan.kind !== "count") return { override: plan.kind };
  return { ...(plan.override ? { override: plan.override.kind } : {}), ...tierOf(plan.rule, plan.override) };
}

/**
 * A place given, in the terms of the plan that applies to the client when it
 * is given: the places an override, a tier or a factor gives it, and, under
 * `unlimited`, the rule's own number as what is free (nothing counts).
 * Asked for at once, or given later to a request waiting in line.
 */
function grantedUnder(plan: Plan, answer: PlaceAcquired, check: RuleCheck): PlaceAcquired {
  if (plan.kind === "deny") return answer;
  if (plan.kind === "unlimited") return { ...answer, free: check.limit, override: "unlimited" };
  const tier = tierOf(plan.rule, plan.override);
  const limit = plan.rule.limit;
  if (plan.override) return { ...answer, limit, override: plan.override.kind, ...tier };
  return plan.configured !== undefined ? { ...answer, limit, ...tier } : { ...answer, ...tier };
}

/** The tier whose limit a verdict applied: an override's, or else the one the request's token claimed. */
function tierOf(rule: RuleCheck, override: Override | undefined): { tier?: string } {
  if (override === undefined) return rule.tier !== undefined ? { tier: rule.tier } : {};
  return override.kind === "tier" && rule.tiers?.[override.tier] !== undefined ? { tier: override.tier } : {};
}
