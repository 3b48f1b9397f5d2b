/**
 * @module
 * A key's held requests: their bookings, stored in SQLite so they survive
 * eviction and restarts, the queue per row they form (see
 * `core/bookings.ts`), and the callers awaiting their turns.
 *
 * A booking is ahead until its turn, then counted into its rows (by the
 * object, which owns the rows) and kept a while as counted, so that a
 * caller that hangs up just after its turn still gets its counts refunded.
 * Nothing here reads the clock: the object passes its instant in.
 */
import {
  type BookedCount,
  type Booking,
  countIn,
  dueBy,
  type Rows,
  repack,
  type Tail,
  type Turn,
  tailsOf,
  turnOf,
} from "../core/bookings.ts";
import { Callers } from "./callers.ts";
import type { Receipt, Refund, RuleCheck, RuleVerdict, TurnAnswer } from "./protocol.ts";

/** A booking as stored: its counts, which rule of the check each was (`slots`), and, once counted, where. */
export type HeldBooking = Booking & {
  /** Arrival order. */
  seq: number;
  /** The number of rules in the check that booked it: the length of the receipts `awaitTurn` answers. */
  rules: number;
  /** For each count, the index of its rule in the check. */
  slots: number[];
  /** Where each rule's count was taken, once its turn came; null while ahead. */
  counted: (Receipt | null)[] | null;
  /**
   * For each count, its rule's check as the caller sent it, before any
   * override or factor: an admin change to the client plans the booking
   * again from it. Absent in bookings stored before it was kept.
   */
  checks?: RuleCheck[];
  /** The rules (their indexes in the check) an `unlimited` override lifted while it was held; kept in memory only. */
  lifted?: number[];
  /**
   * The rules (their indexes in the check, with their checks) a reset took
   * its counts off while it was held: at its turn, its headers tell what
   * each has left then, as for a request counted nowhere under it; in memory only.
   */
  forgotten?: { slot: number; check: RuleCheck }[];
  /** Whether it was planned again while held (its admission at its turn is not the one it was told); in memory only. */
  replanned?: true;
  /** Its verdicts as its turn admitted it, once counted, when it was planned again; in memory only. */
  verdicts?: (RuleVerdict | null)[];
};

/**
 * How long a booking waits to be claimed by its caller (a call awaiting its
 * turn) from when it was booked, or from when the object loaded it after a
 * restart, before it is taken to be a request that no longer exists (its
 * isolate vanished, or the runtime was killed): then it is dropped, and
 * its counts given back. A caller sends its claim as soon as it is told it
 * is held, and again at once when a restart of the object cuts that call.
 */
export const CLAIM_WITHIN_MS = 5_000;

/** How an admin change applies a rule to a held request: the rule as it now applies, no count at all, or a refusal. */
export type Replanned = BookedCount["window"] | "unlimited" | "deny";

const SCHEMA = `CREATE TABLE IF NOT EXISTS bookings (
  id TEXT PRIMARY KEY,
  seq INTEGER NOT NULL,
  at_ms INTEGER NOT NULL,
  counts TEXT NOT NULL,
  rules INTEGER NOT NULL,
  slots TEXT NOT NULL,
  counted TEXT,
  checks TEXT
)`;

/** How long a count taken at `atMs` stays in its row (its kind's arithmetic): nothing is left to refund after. */
export type CountedUntil = (count: BookedCount, atMs: number) => number;

/** The id of the rule a row counts for (a row is named `id|…`, its layout after the bar). */
const ruleIdOf = (row: string): string => row.slice(0, row.indexOf("|"));

/** What a counted booking took, to be given back: per count, its receipt and cost. */
function refundsOf(booking: HeldBooking): Refund[] {
  const counted = booking.counted ?? [];
  return booking.counts.flatMap((count, k): Refund[] => {
    const receipt = counted[booking.slots[k]!];
    return receipt ? [{ receipt, count: count.window.cost ?? 1 }] : [];
  });
}

/** The earliest turn of these bookings, or Infinity. */
function earliestOf(bookings: readonly Booking[]): number {
  let earliest = Number.POSITIVE_INFINITY;
  for (const booking of bookings) earliest = Math.min(earliest, booking.atMs);
  return earliest;
}

export class BookingBook {
  /** Bookings whose turn has not come, in arrival order. */
  private ahead: HeldBooking[] = [];
  /** Every booking known: ahead, and counted ones kept for refunds. */
  private readonly byId = new Map<string, HeldBooking>();
  /** Bookings ahead per row. */
  private readonly perRow = new Map<string, number>();
  /** Units booked ahead per row (a booking counts its rule's cost). */
  private readonly unitsPerRow = new Map<string, number>();
  /** The rows' tails, or null when they must be worked out again (after anything but a new booking). */
  private tails: Map<string, Tail> | null = null;
  /** Callers awaiting their turn, by booking. */
  private readonly waiting = new Callers<TurnAnswer>();
  private schemaReady = false;
  private lastSeq = 0;
  /** The earliest turn ahead (Infinity: none), so that a check finds nothing due without a scan. */
  private nextDueMs = Number.POSITIVE_INFINITY;
  /** When every booking's counts will have rotated out, or null: kept as bookings come, worked out again as they go. */
  private latestMs: number | null = null;
  /**
   * Bookings no caller has claimed yet (no call has awaited their turn since
   * this object started), and by when one must: see {@link CLAIM_WITHIN_MS}.
   */
  private readonly unclaimed = new Map<string, number>();

  private readonly sql: SqlStorage;
  private readonly countedUntil: CountedUntil;

  /** `countedUntil`: how long each kind's count stays in its row. */
  constructor(sql: SqlStorage, countedUntil: CountedUntil) {
    this.sql = sql;
    this.countedUntil = countedUntil;
  }

  /** When every count of a booking will have left its rows. */
  private countedUntilMs(booking: Booking): number {
    let until = booking.atMs;
    for (const count of booking.counts) until = Math.max(until, this.countedUntil(count, booking.atMs));
    return until;
  }

  /**
   * Reads the stored bookings (the object's constructor calls it when the
   * table exists, at `nowMs`). None is claimed: the calls that awaited them
   * ended with the object's last run.
   */
  load(nowMs: number): void {
    this.schemaReady = true;
    if (!this.sql.exec("SELECT * FROM bookings LIMIT 0").columnNames.includes("checks")) {
      this.sql.exec("ALTER TABLE bookings ADD COLUMN checks TEXT");
    }
    const stored = this.sql.exec<Record<string, string | number | null>>("SELECT * FROM bookings ORDER BY seq");
    for (const row of stored) {
      const booking: HeldBooking = {
        id: String(row.id),
        seq: Number(row.seq),
        atMs: Number(row.at_ms),
        counts: JSON.parse(String(row.counts)) as BookedCount[],
        rules: Number(row.rules),
        slots: JSON.parse(String(row.slots)) as number[],
        counted: row.counted === null ? null : (JSON.parse(String(row.counted)) as (Receipt | null)[]),
        ...(typeof row.checks === "string" ? { checks: JSON.parse(row.checks) as RuleCheck[] } : {}),
      };
      this.byId.set(booking.id, booking);
      // One counted before the restart was served or not: nobody can say, and its count stays.
      if (booking.counted === null) {
        this.enqueue(booking);
        this.unclaimed.set(booking.id, nowMs + CLAIM_WITHIN_MS);
      }
      this.lastSeq = Math.max(this.lastSeq, booking.seq);
    }
    this.latestMs = this.workOutLatest();
  }

  /** Whether any booking is known: then a check counts the turns that have come first. */
  get active(): boolean {
    return this.byId.size > 0;
  }

  /** Whether any booking is ahead. */
  get anyAhead(): boolean {
    return this.ahead.length > 0;
  }

  /** Requests held under a row: bookings ahead that count in it. */
  heldIn(row: string): number {
    return this.perRow.get(row) ?? 0;
  }

  /** The units the bookings ahead count in a row. */
  unitsIn(row: string): number {
    return this.unitsPerRow.get(row) ?? 0;
  }

  get(id: string): HeldBooking | undefined {
    return this.byId.get(id);
  }

  /** The row with every booking ahead counted, and its last turn; undefined for a row with none ahead. */
  tailOf(row: string, rows: Rows): Tail | undefined {
    return this.currentTails(rows).get(row);
  }

  /** The turn of a request counting `counts`, from `nowMs` (see `turnOf`). */
  turnOf(counts: readonly BookedCount[], nowMs: number, rows: Rows): Turn {
    return turnOf(counts, nowMs, this.currentTails(rows), rows);
  }

  /** Books a held request for its turn, at `nowMs`: stored, queued, counted into the tails, to be claimed by its caller. */
  book(booking: Omit<HeldBooking, "seq" | "counted">, nowMs: number, rows: Rows): HeldBooking {
    const held: HeldBooking = { ...booking, seq: ++this.lastSeq, counted: null };
    const tails = this.currentTails(rows);
    countIn(tails, held, rows);
    this.byId.set(held.id, held);
    this.enqueue(held);
    this.unclaimed.set(held.id, nowMs + CLAIM_WITHIN_MS);
    this.latestMs = Math.max(this.latestMs ?? 0, this.countedUntilMs(held));
    this.ensureSchema();
    this.sql.exec(
      "INSERT INTO bookings (id, seq, at_ms, counts, rules, slots, counted, checks) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)",
      held.id,
      held.seq,
      held.atMs,
      JSON.stringify(held.counts),
      held.rules,
      JSON.stringify(held.slots),
      held.checks === undefined ? null : JSON.stringify(held.checks),
    );
    return held;
  }

  /**
   * Takes the bookings whose turn has come off the queue, in order, for the
   * object to count; it then calls {@link counted} with each one's receipts.
   */
  takeDue(nowMs: number): HeldBooking[] {
    if (this.nextDueMs > nowMs) return [];
    const { due, ahead } = dueBy(this.ahead, nowMs);
    this.ahead = ahead;
    this.nextDueMs = earliestOf(this.ahead);
    for (const booking of due) this.unqueue(booking);
    // The tails stay right: a row's tail counts the same bookings, now from the state they were counted into.
    if (this.tails !== null) {
      for (const row of [...this.tails.keys()]) if (this.heldIn(row) === 0) this.tails.delete(row);
    }
    return due;
  }

  /** Records where a booking's counts were taken, and answers the callers awaiting its turn. */
  counted(booking: HeldBooking, receipts: (Receipt | null)[], nowMs: number, verdicts?: (RuleVerdict | null)[]): void {
    booking.counted = receipts;
    if (verdicts !== undefined) booking.verdicts = verdicts;
    this.sql.exec("UPDATE bookings SET counted = ? WHERE id = ?", JSON.stringify(receipts), booking.id);
    this.waiting.answer(booking.id, turnAnswerOf(booking, nowMs));
  }

  /**
   * Cancels a booking ahead: the ones after it move up to their earliest
   * turns again, never later (see `repack`). Answers its callers: unknown.
   */
  cancel(id: string, nowMs: number, rows: Rows): void {
    const booking = this.byId.get(id);
    if (booking === undefined || booking.counted !== null) return;
    this.withdraw(booking, nowMs);
    this.latestMs = this.workOutLatest();
    this.moveUp(nowMs, rows);
  }

  /** Takes a booking ahead off the queue and out of storage; its callers are answered unknown (they decide again). */
  private withdraw(booking: HeldBooking, nowMs: number): void {
    this.byId.delete(booking.id);
    this.unclaimed.delete(booking.id);
    this.ahead = this.ahead.filter((b) => b !== booking);
    this.unqueue(booking);
    this.sql.exec("DELETE FROM bookings WHERE id = ?", booking.id);
    this.waiting.answer(booking.id, { status: "unknown", nowMs });
  }

  /** Forgets a counted booking (its counts were refunded). */
  forget(id: string): void {
    this.unclaimed.delete(id);
    if (!this.byId.delete(id)) return;
    this.sql.exec("DELETE FROM bookings WHERE id = ?", id);
    this.latestMs = this.workOutLatest();
  }

  /**
   * Moves every booking ahead up to its earliest turn again, after counts
   * were taken back (a cancellation, a refund): the places freed go to the
   * next in line. Stores the turns that moved.
   */
  moveUp(nowMs: number, rows: Rows): void {
    this.tails = null;
    if (this.ahead.length === 0) return;
    const moved = repack(this.ahead, nowMs, rows);
    moved.forEach((booking, i) => {
      const before = this.ahead[i]!;
      if (booking.atMs === before.atMs) return;
      before.atMs = booking.atMs;
      this.sql.exec("UPDATE bookings SET at_ms = ? WHERE id = ?", booking.atMs, booking.id);
    });
    this.nextDueMs = earliestOf(this.ahead);
  }

  /** The tails must be worked out again: a row's settled counts changed under its bookings (a refund, a charge, a reset). */
  invalidate(): void {
    this.tails = null;
  }

  /** Awaits a booking's turn: answered when it is counted, or cancelled. The caller checks it is ahead. */
  wait(id: string): Promise<TurnAnswer> {
    this.claim(id);
    return this.waiting.wait(id);
  }

  /** A caller claims its booking: it awaits its turn, or asks for it once come. */
  claim(id: string): void {
    this.unclaimed.delete(id);
  }

  /**
   * The bookings no caller claimed in time, at `nowMs`: those ahead are
   * withdrawn (the ones after them move up), and those counted already are
   * forgotten, their counts returned as refunds for the object to take back.
   */
  dropUnclaimed(nowMs: number, rows: Rows): Refund[] {
    const refunds: Refund[] = [];
    let withdrawn = false;
    for (const [id, byMs] of [...this.unclaimed]) {
      if (byMs > nowMs) continue;
      this.unclaimed.delete(id);
      const booking = this.byId.get(id);
      if (booking === undefined) continue;
      if (booking.counted === null) {
        this.withdraw(booking, nowMs);
        withdrawn = true;
        continue;
      }
      refunds.push(...refundsOf(booking));
      this.forget(id);
    }
    if (withdrawn) {
      this.latestMs = this.workOutLatest();
      this.moveUp(nowMs, rows);
    }
    return refunds;
  }

  /**
   * An admin change to the client's rules `ruleIds`: each booking ahead
   * that counts under one of them is planned again from its check, as a
   * request now would be: under another limit (a raise moves it up, never
   * later: a lowered limit leaves the turns already given), under no count
   * at all (`unlimited`: its count under the rule is dropped), or refused
   * (`deny`: withdrawn, and its caller decides again). Then the queue moves
   * up, in order. A booking stored before checks were kept is left as it is.
   */
  replan(ruleIds: ReadonlySet<string>, planOf: (check: RuleCheck) => Replanned, nowMs: number, rows: Rows): void {
    for (const booking of [...this.ahead]) {
      const { checks } = booking;
      if (checks === undefined || !checks.some((check) => ruleIds.has(check.id))) continue;
      const planned = checks.map((check) => (ruleIds.has(check.id) ? planOf(check) : null));
      if (planned.includes("deny")) {
        this.withdraw(booking, nowMs);
        continue;
      }
      planned.forEach((plan, k) => {
        const slot = booking.slots[k];
        if (plan === "unlimited" && slot !== undefined && !booking.lifted?.includes(slot)) {
          booking.lifted = [...(booking.lifted ?? []), slot];
        }
      });
      this.recount(booking, (count, k) => {
        const plan = planned[k] as Exclude<Replanned, "deny"> | null | undefined;
        if (plan === null || plan === undefined) return count.window;
        return plan === "unlimited" ? null : plan;
      });
    }
    this.latestMs = this.workOutLatest();
    this.moveUp(nowMs, rows);
  }

  /**
   * A reset of the client's rules `ruleIds` (null: all of them): the bookings ahead count under
   * them no more (a reset forgets everything before it, held requests
   * included: they go on as far as those rules are concerned). Then the
   * queue moves up; a booking left with no count is due at once.
   */
  forgetRules(ruleIds: ReadonlySet<string> | null, nowMs: number, rows: Rows): void {
    const forgotten = (count: BookedCount) => ruleIds === null || ruleIds.has(ruleIdOf(count.row));
    for (const booking of [...this.ahead]) {
      if (!booking.counts.some(forgotten)) continue;
      booking.counts.forEach((count, k) => {
        const check = booking.checks?.[k];
        if (check !== undefined && forgotten(count)) {
          booking.forgotten = [...(booking.forgotten ?? []), { slot: booking.slots[k]!, check }];
        }
      });
      this.recount(booking, (count) => (forgotten(count) ? null : count.window));
    }
    this.latestMs = this.workOutLatest();
    this.moveUp(nowMs, rows);
  }

  /** A booking ahead with each count's window as `windowOf` says (null: the count is dropped), stored. */
  private recount(
    booking: HeldBooking,
    windowOf: (count: BookedCount, k: number) => BookedCount["window"] | null,
  ): void {
    this.unqueue(booking);
    booking.replanned = true;
    const keep: number[] = [];
    const counts: BookedCount[] = [];
    booking.counts.forEach((count, k) => {
      const window = windowOf(count, k);
      if (window === null) return;
      keep.push(k);
      counts.push(window === count.window ? count : { row: count.row, window });
    });
    booking.counts = counts;
    booking.slots = keep.map((k) => booking.slots[k]!);
    if (booking.checks !== undefined) booking.checks = keep.map((k) => booking.checks![k]!);
    this.tally(booking);
    this.sql.exec(
      "UPDATE bookings SET counts = ?, slots = ?, checks = ? WHERE id = ?",
      JSON.stringify(booking.counts),
      JSON.stringify(booking.slots),
      booking.checks === undefined ? null : JSON.stringify(booking.checks),
      booking.id,
    );
  }

  /**
   * The earliest instant the object's timer must wake for, or null: a turn
   * a caller awaits, or a claim that falls due while callers wait (a
   * booking dropped then moves theirs up).
   */
  nextWakeMs(): number | null {
    let next: number | null = null;
    for (const id of this.waiting.ids()) {
      const booking = this.byId.get(id);
      if (booking && booking.counted === null) next = Math.min(next ?? booking.atMs, booking.atMs);
    }
    if (next !== null) for (const byMs of this.unclaimed.values()) next = Math.min(next, byMs);
    return next;
  }

  /** Forgets counted bookings whose counts have rotated out of their rows: nothing is left to refund. */
  purge(nowMs: number): void {
    for (const booking of [...this.byId.values()]) {
      if (booking.counted === null || this.countedUntilMs(booking) > nowMs) continue;
      this.byId.delete(booking.id);
      this.sql.exec("DELETE FROM bookings WHERE id = ?", booking.id);
    }
    this.latestMs = this.workOutLatest();
  }

  /** When the last booking's counts will have rotated out, or null with none: the cleanup alarm waits for it. */
  lastExpiry(): number | null {
    return this.latestMs;
  }

  private workOutLatest(): number | null {
    let latest: number | null = null;
    for (const booking of this.byId.values()) latest = Math.max(latest ?? 0, this.countedUntilMs(booking));
    return latest;
  }

  /** Forgets everything (the object's storage is being deleted); callers still waiting are answered unknown. */
  clear(nowMs: number): void {
    this.waiting.answerAll({ status: "unknown", nowMs });
    this.ahead = [];
    this.byId.clear();
    this.unclaimed.clear();
    this.perRow.clear();
    this.unitsPerRow.clear();
    this.tails = null;
    this.schemaReady = false;
    this.nextDueMs = Number.POSITIVE_INFINITY;
    this.latestMs = null;
  }

  private currentTails(rows: Rows): Map<string, Tail> {
    this.tails ??= tailsOf(this.ahead, rows);
    return this.tails;
  }

  private enqueue(booking: HeldBooking): void {
    this.ahead.push(booking);
    this.nextDueMs = Math.min(this.nextDueMs, booking.atMs);
    this.tally(booking);
  }

  /** Adds a booking ahead to the counts per row. */
  private tally(booking: HeldBooking): void {
    for (const { row, window } of booking.counts) {
      this.perRow.set(row, (this.perRow.get(row) ?? 0) + 1);
      this.unitsPerRow.set(row, (this.unitsPerRow.get(row) ?? 0) + (window.cost ?? 1));
    }
  }

  private unqueue(booking: HeldBooking): void {
    for (const { row, window } of booking.counts) {
      const left = (this.perRow.get(row) ?? 1) - 1;
      if (left > 0) this.perRow.set(row, left);
      else this.perRow.delete(row);
      const units = (this.unitsPerRow.get(row) ?? 0) - (window.cost ?? 1);
      if (units > 0) this.unitsPerRow.set(row, units);
      else this.unitsPerRow.delete(row);
    }
  }

  private ensureSchema(): void {
    if (this.schemaReady) return;
    this.sql.exec(SCHEMA);
    this.schemaReady = true;
  }
}

/** A booking's turn as its caller is answered: where its counts were taken, and the rules lifted while it was held. */
export const turnAnswerOf = (booking: HeldBooking, nowMs: number): TurnAnswer => ({
  status: "turn",
  nowMs,
  atMs: booking.atMs,
  counted: booking.counted ?? [],
  ...(booking.lifted?.length ? { lifted: booking.lifted } : {}),
  ...(booking.verdicts === undefined ? {} : { verdicts: booking.verdicts }),
});
