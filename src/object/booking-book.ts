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
  repack,
  type StateOf,
  type Tail,
  type Turn,
  tailsOf,
  turnOf,
} from "../core/bookings.ts";
import { bucketIndex, bucketStartMs } from "../core/sliding-window.ts";
import { Callers } from "./callers.ts";
import type { Receipt, TurnAnswer } from "./protocol.ts";

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
};

const SCHEMA = `CREATE TABLE IF NOT EXISTS bookings (
  id TEXT PRIMARY KEY,
  seq INTEGER NOT NULL,
  at_ms INTEGER NOT NULL,
  counts TEXT NOT NULL,
  rules INTEGER NOT NULL,
  slots TEXT NOT NULL,
  counted TEXT
)`;

/** A count stays in its row until its bucket and the `precision` after it have rotated out: then nothing is left to refund. */
function countedUntilMs(booking: Booking): number {
  let until = booking.atMs;
  for (const { window } of booking.counts) {
    until = Math.max(until, bucketStartMs(bucketIndex(booking.atMs, window) + window.precision + 1, window));
  }
  return until;
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

  private readonly sql: SqlStorage;

  constructor(sql: SqlStorage) {
    this.sql = sql;
  }

  /** Reads the stored bookings (the object's constructor calls it when the table exists). */
  load(): void {
    this.schemaReady = true;
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
      };
      this.byId.set(booking.id, booking);
      if (booking.counted === null) this.enqueue(booking);
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
  tailOf(row: string, stateOf: StateOf): Tail | undefined {
    return this.currentTails(stateOf).get(row);
  }

  /** The turn of a request counting `counts`, from `nowMs` (see `turnOf`). */
  turnOf(counts: readonly BookedCount[], nowMs: number, stateOf: StateOf): Turn {
    return turnOf(counts, nowMs, this.currentTails(stateOf), stateOf);
  }

  /** Books a held request for its turn: stored, queued, counted into the tails. */
  book(booking: Omit<HeldBooking, "seq" | "counted">, stateOf: StateOf): HeldBooking {
    const held: HeldBooking = { ...booking, seq: ++this.lastSeq, counted: null };
    const tails = this.currentTails(stateOf);
    countIn(tails, held, stateOf);
    this.byId.set(held.id, held);
    this.enqueue(held);
    this.latestMs = Math.max(this.latestMs ?? 0, countedUntilMs(held));
    this.ensureSchema();
    this.sql.exec(
      "INSERT INTO bookings (id, seq, at_ms, counts, rules, slots, counted) VALUES (?, ?, ?, ?, ?, ?, NULL)",
      held.id,
      held.seq,
      held.atMs,
      JSON.stringify(held.counts),
      held.rules,
      JSON.stringify(held.slots),
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
  counted(booking: HeldBooking, receipts: (Receipt | null)[], nowMs: number): void {
    booking.counted = receipts;
    this.sql.exec("UPDATE bookings SET counted = ? WHERE id = ?", JSON.stringify(receipts), booking.id);
    this.waiting.answer(booking.id, { status: "turn", nowMs, atMs: booking.atMs, counted: receipts });
  }

  /**
   * Cancels a booking ahead: the ones after it move up to their earliest
   * turns again, never later (see `repack`). Answers its callers: unknown.
   */
  cancel(id: string, nowMs: number, stateOf: StateOf): void {
    const booking = this.byId.get(id);
    if (booking === undefined || booking.counted !== null) return;
    this.byId.delete(id);
    this.ahead = this.ahead.filter((b) => b.id !== id);
    this.unqueue(booking);
    this.sql.exec("DELETE FROM bookings WHERE id = ?", id);
    this.waiting.answer(id, { status: "unknown", nowMs });
    this.latestMs = this.workOutLatest();
    this.moveUp(nowMs, stateOf);
  }

  /** Forgets a counted booking (its counts were refunded). */
  forget(id: string): void {
    if (!this.byId.delete(id)) return;
    this.sql.exec("DELETE FROM bookings WHERE id = ?", id);
    this.latestMs = this.workOutLatest();
  }

  /**
   * Moves every booking ahead up to its earliest turn again, after counts
   * were taken back (a cancellation, a refund): the places freed go to the
   * next in line. Stores the turns that moved.
   */
  moveUp(nowMs: number, stateOf: StateOf): void {
    this.tails = null;
    if (this.ahead.length === 0) return;
    const moved = repack(this.ahead, nowMs, stateOf);
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
    return this.waiting.wait(id);
  }

  /** The earliest turn a caller awaits, or null: the one instant the object's timer must wake for. */
  nextWakeMs(): number | null {
    let next: number | null = null;
    for (const id of this.waiting.ids()) {
      const booking = this.byId.get(id);
      if (booking && booking.counted === null) next = Math.min(next ?? booking.atMs, booking.atMs);
    }
    return next;
  }

  /** Forgets counted bookings whose counts have rotated out of their rows: nothing is left to refund. */
  purge(nowMs: number): void {
    for (const booking of [...this.byId.values()]) {
      if (booking.counted === null || countedUntilMs(booking) > nowMs) continue;
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
    for (const booking of this.byId.values()) latest = Math.max(latest ?? 0, countedUntilMs(booking));
    return latest;
  }

  /** Forgets everything (the object's storage is being deleted); callers still waiting are answered unknown. */
  clear(nowMs: number): void {
    this.waiting.answerAll({ status: "unknown", nowMs });
    this.ahead = [];
    this.byId.clear();
    this.perRow.clear();
    this.unitsPerRow.clear();
    this.tails = null;
    this.schemaReady = false;
    this.nextDueMs = Number.POSITIVE_INFINITY;
    this.latestMs = null;
  }

  private currentTails(stateOf: StateOf): Map<string, Tail> {
    this.tails ??= tailsOf(this.ahead, stateOf);
    return this.tails;
  }

  private enqueue(booking: HeldBooking): void {
    this.ahead.push(booking);
    this.nextDueMs = Math.min(this.nextDueMs, booking.atMs);
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
