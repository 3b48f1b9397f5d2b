/**
 * @module
 * What a counted kind is in its client's object: the state of its row, and
 * what a check, a lease, a held request's turn, a refund and a charge do to
 * it. The object (rate-limiter.ts) decides every counted rule of a key the
 * same way, all or nothing, with penalties, overrides, factors, leases and
 * bookings, and asks the rule's counter for the arithmetic alone. A leaf:
 * it imports no counter.
 */
import type { Decision } from "../../core/sliding-window.ts";
import type { Receipt, RuleCheck } from "../protocol.ts";

/**
 * What a request now would see of a row: whether one more request of the
 * rule's cost fits, and the row brought to now; `never` when no wait makes
 * it fit (it costs more than the row ever admits at once).
 */
export type Seen<D> = { allowed: boolean; data: D; weighted: number; never?: true };

/** A row as it is stored: the columns of the `counters` table a counter's state is written in. */
export type Stored = { periodMs: number; precision: number; bucket: number; counts: string };

/** What a client used of a quota in one period, and what operators credited it (negative: took from it). */
export type PeriodUsage = { startMs: number; endMs: number; used: number; credit: number };

/** A client's usage of a kind that keeps periods: the current one, with what is left, and earlier ones kept. */
export type Usage = PeriodUsage & {
  /** The period's number (see core/calendar.ts, `Period.index`). */
  index: number;
  /** The limit that applies to the client: the rule's, a tier's or an override's. */
  limit: number;
  /** What it has left this period: `limit + credit − used`, at least 0. */
  remaining: number;
  /** Earlier periods in which it used or was credited something, newest first, as far as they are kept. */
  past: PeriodUsage[];
  /**
   * Periods count from the client's first request, and it has made none:
   * its first period starts with its next request (the bounds here are where
   * it would fall now, for the arithmetic; nothing to show).
   */
  pending?: true;
};

/** A change to what a client has left this period: units added to it, taken from it, or what it is set to. */
export type Credit = { add: number } | { take: number } | { set: number };

/**
 * A counted kind's arithmetic in the object, over its row's data `D`. Every
 * function is pure: a state and an instant in, a state out; the object reads
 * the clock and writes storage.
 */
export interface Counter<D = unknown> {
  /** The row a rule's counts live in: its id and the layout they are counted in (another layout: another row). */
  rowOf(check: RuleCheck): string;
  /** A row made at `nowMs`; `previous`, the rule's row in another layout (the rule changed), whose count it may carry over. */
  fresh(nowMs: number, check: RuleCheck, previous?: { data: unknown; counter: Counter<unknown> }): D;
  /** What a request at `nowMs` sees: whether it fits, the row brought to `nowMs`, and its count (for display). */
  see(data: D, nowMs: number, check: RuleCheck): Seen<D>;
  /**
   * A row counted under another limit than the check's, carried over to it
   * as of `fromMs()` (the instant the limit changed, when known; the row's last
   * count and now bound it): a token bucket's spent units, refilled at the
   * new rate from then on. Undefined when the row needs no carrying. The
   * object keeps and stores the row as carried at once: carried again from
   * the stored row at each later read, the time between would refill at the
   * old rate. Absent: rows are never carried.
   */
  carried?(data: D, check: RuleCheck, fromMs: () => number, nowMs: number): D | undefined;
  /** A row seen at `nowMs` with the request counted in it (`cost` units). */
  admit(seen: D, cost: number, check: RuleCheck, nowMs: number): D;
  /**
   * A row seen at `nowMs` as this rule's refusal of a request leaves it,
   * when a refusal changes it (stored at once); undefined when it does not.
   * A quota's periods from a first request start at the first request,
   * refused or not. Absent: a refusal changes nothing.
   */
  refuse?(seen: D, check: RuleCheck): D | undefined;
  /**
   * The verdict's numbers for a request seen at `nowMs`, counted or not;
   * `windowMs` when `w` is the row's own (a calendar period's length);
   * `resetAtMs` when the reset is a boundary every response names alike (a
   * calendar period's end, on the object's clock);
   * `never` as {@link Seen} says.
   */
  describe(
    seen: Seen<D>,
    nowMs: number,
    check: RuleCheck,
    counted: boolean,
  ): Decision & { windowMs?: number; resetAtMs?: number; never?: true };
  /** Where a count taken now goes (a receipt's `bucket`). */
  where(seen: D, check: RuleCheck): number;
  /** What a receipt keeps besides, to hand the count back: read from the row just after it went in (a receipt's `mark`). */
  mark?(data: D): readonly number[];
  /** Where a count taken at `atMs` goes (a held request's turn), in `data` as it is once counted there. */
  whereAt(atMs: number, check: RuleCheck, data: D): number;
  /** Whether a row seen at `nowMs` has room for `units` more and one more request (held requests booked ahead). */
  roomFor(seen: D, units: number, nowMs: number, check: RuleCheck): boolean;
  /** The earliest instant from `fromMs` at which a request fits in the row (a held request's turn). */
  earliestAdmission(data: D, check: RuleCheck, fromMs: number): number;
  /** The row with a request counted at `atMs`, not before the row's own last count (a held request's turn). */
  admitAt(data: D, check: RuleCheck, atMs: number): D;
  /** `units` counted ahead now for a lease that may be spent until `endsAtMs`: the row after, and where they went. */
  countAhead(seen: D, units: number, check: RuleCheck, endsAtMs: number): { data: D; where: number };
  /** How long a lease may last from `nowMs`: no longer than the counts it holds stay where they were counted; 0: none. */
  leaseEndsInMs(nowMs: number, check: RuleCheck): number;
  /**
   * False: an isolate never answers a refusal of this kind itself, so a
   * credit admits the client's next request at once, wherever it lands.
   * Absent: it may, for as long as the refusal holds.
   */
  readonly refusalsHold?: false;
  /** The row at `nowMs` with `units` taken back from where the receipt says they were counted; null when they are there no more (rotated out). */
  takeBack(data: D, receipt: Receipt, units: number, nowMs: number): D | null;
  /** The row at `nowMs` with `units` more where a request was counted (a `cost_header` charge); null when that is gone. */
  addAt(data: D, receipt: Receipt, units: number, nowMs: number): D | null;
  /** When the row holds nothing any more: it may be deleted from then on. */
  expiresAtMs(data: D): number;
  /** Until when a count in the row can still be taken back (a held request's booking is kept until then); absent: `expiresAtMs`. */
  refundableUntilMs?(data: D): number;
  /** A kind that keeps periods: the client's usage at `nowMs`, under the limit that applies (`check.limit`). */
  usage?(data: D, nowMs: number, check: RuleCheck): Usage;
  /** A kind that keeps periods: the row with what is left this period changed by an operator. */
  credit?(data: D, change: Credit, nowMs: number, check: RuleCheck): D;
  /** The row in its storage columns, and back. */
  encode(data: D): Stored;
  decode(stored: Stored): D;
}
