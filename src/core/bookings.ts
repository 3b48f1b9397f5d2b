/**
 * @module
 * Held requests' bookings: each one's turn, first come first served per rule.
 *
 * A request over its limit may be held until the instant it would be
 * admitted. Its counts are booked for that instant, so that no request that
 * comes later takes the place meanwhile. Per row (a rule's counters), the
 * bookings form a queue in arrival order: a new request's turn is the
 * earliest admission no earlier than the last booking of every row it counts
 * in, on the state with every earlier booking counted at its instant. Turns
 * are therefore non-decreasing per row, and replaying every admission in
 * time order never finds a window over its limit (strict mode: no window of
 * length `periodMs`), because each was decided on everything counted before.
 *
 * When a booking is cancelled, the ones after it move up ({@link repack}):
 * each to its earliest turn again, never later than it was.
 *
 * Pure: states and queues in, states and queues out. No I/O, no clock.
 * The arithmetic of a row is its kind's ({@link Pace}): a sliding window's
 * buckets, a bucket's theoretical arrival time. Every function is
 * O(bookings × k).
 */

/**
 * One row a booking counts in, and how: the rule as it applied when booked
 * (its limit, its layout, the request's cost), which the row's kind reads.
 */
export type BookedCount = { row: string; window: { cost?: number | undefined } };

/** A row's settled state, as its kind keeps it. */
export type RowState = unknown;

/** How a row's kind paces held requests: its state with a request counted at an instant, and its earliest turn. */
export interface Pace {
  /** The state a row with no counts starts from, for a request counted in it at `atMs`. */
  start(count: BookedCount, atMs: number): RowState;
  /** The state with the request counted at `atMs` (no earlier than the row's own last count). */
  admitAt(state: RowState, count: BookedCount, atMs: number): RowState;
  /** The earliest instant from `fromMs` at which the row admits the request. */
  earliestAdmission(state: RowState, count: BookedCount, fromMs: number): number;
}

/** A held request's counts, booked for `atMs`. */
export type Booking = {
  id: string;
  /** The instant its counts go in, in Unix milliseconds. */
  atMs: number;
  counts: readonly BookedCount[];
};

/** A row's counts settled so far: its state, or undefined for a row with none. */
export type StateOf = (row: string) => RowState | undefined;

/** A row with bookings ahead: its state with every one of them counted, and the last one's instant. */
export type Tail = { state: RowState; lastAtMs: number };

/** The rows' settled states, and how each kind paces a request in them. */
export type Rows = { stateOf: StateOf; pace: Pace };

/** The state a count starts from: the row's own, or none counted yet. */
const startOf = (rows: Rows, count: BookedCount, atMs: number): RowState =>
  rows.stateOf(count.row) ?? rows.pace.start(count, atMs);

/** The tails of every row `queue` books in, counted from their settled states. */
export function tailsOf(queue: readonly Booking[], rows: Rows): Map<string, Tail> {
  const tails = new Map<string, Tail>();
  for (const booking of queue) countIn(tails, booking, rows);
  return tails;
}

/** Counts a booking into `tails` (in place: the caller owns them). */
export function countIn(tails: Map<string, Tail>, booking: Booking, rows: Rows): void {
  for (const count of booking.counts) {
    const before = tails.get(count.row)?.state ?? startOf(rows, count, booking.atMs);
    tails.set(count.row, { state: rows.pace.admitAt(before, count, booking.atMs), lastAtMs: booking.atMs });
  }
}

/** A request's turn: the instant all its counts admit, and each count's own earliest instant. */
export type Turn = {
  atMs: number;
  /** Per count, in the order given: its own earliest admission in its row; above `fromMs` when that row makes the request wait. */
  earliestMs: number[];
};

/**
 * The turn of a request counting `counts`, no earlier than `fromMs` (now).
 * In each row it counts in, its earliest admission no earlier than the
 * row's last booking, with every booking ahead counted; from there on the
 * row admits it at every instant (nothing is booked after, and the count
 * never rises on its own), so the latest of those instants is admissible
 * in every row, and is the turn.
 */
export function turnOf(
  counts: readonly BookedCount[],
  fromMs: number,
  tails: ReadonlyMap<string, Tail>,
  rows: Rows,
): Turn {
  const earliestMs = counts.map((count) => {
    const tail = tails.get(count.row);
    if (tail === undefined) return rows.pace.earliestAdmission(startOf(rows, count, fromMs), count, fromMs);
    return rows.pace.earliestAdmission(tail.state, count, Math.max(fromMs, tail.lastAtMs));
  });
  return { atMs: Math.max(fromMs, ...earliestMs), earliestMs };
}

/**
 * The queue with every booking moved up to its earliest turn again, in
 * order, each no earlier than `nowMs` nor than the bookings before it in its
 * rows, and never later than it was. After a cancellation (or a refund) the
 * places freed go to the next in line. Returns the queue in the same order,
 * with a new object for each booking that moved.
 */
export function repack<B extends Booking>(queue: readonly B[], nowMs: number, rows: Rows): B[] {
  const tails = new Map<string, Tail>();
  return queue.map((booking) => {
    const turn = turnOf(booking.counts, nowMs, tails, rows);
    // Never later: counts moved earlier weigh no more at any later instant, so the old turn still admits;
    // the bound keeps a turn already promised even where counts were charged past a limit since.
    const atMs = Math.min(turn.atMs, booking.atMs);
    const moved = atMs === booking.atMs ? booking : { ...booking, atMs };
    countIn(tails, moved, rows);
    return moved;
  });
}

/** The queue split at `nowMs`: the bookings whose turn has come, in order, and the rest. */
export function dueBy<B extends Booking>(queue: readonly B[], nowMs: number): { due: B[]; ahead: B[] } {
  const due: B[] = [];
  const ahead: B[] = [];
  for (const booking of queue) (booking.atMs <= nowMs ? due : ahead).push(booking);
  return { due, ahead };
}
