/**
 * @module
 * What an isolate counts about itself: units written off on purpose, by
 * reason: leased units, counts of refused requests it could not hand back,
 * bookings and places it could not give back. A unit is never lost silently: it is spent, handed back, or written
 * off here, with a log line.
 */
import { logEvent } from "../observe/log.ts";

export type WriteOffReason =
  /** An admin reset wiped the rows the units were counted in. */
  | "reset"
  /** More evicted keys' units waited to be handed back than the isolate keeps. */
  | "outbox full"
  /** The call that would have handed them back failed. */
  | "refund failed"
  /** The call that carried them back failed or was retried: the object may have taken them, or not. */
  | "call failed"
  /** The call that carried them back never answered: its request was cancelled mid-call. */
  | "call lost"
  /** Admitted by a batch for requests that had stopped waiting for it (they decided on their own). */
  | "batch abandoned"
  /** Units of a key whose object was never named (cannot happen: a lease comes from a call). */
  | "unnamed"
  /** A held request's booking, or a ticket in line for a place, that could not be given back: it lapses by itself. */
  | "cancel failed"
  /** A place that could not be released: it is taken back when it expires (its rule's place_timeout). */
  | "release failed"
  /** A held request's count to settle by its response (`count`, `cost_header`) whose turn's receipts never came. */
  | "turn unknown";

export class IsolateCounters {
  /** Units written off, by reason. */
  readonly writtenOff: Record<WriteOffReason, number> = {
    reset: 0,
    "outbox full": 0,
    "refund failed": 0,
    "call failed": 0,
    "call lost": 0,
    "batch abandoned": 0,
    unnamed: 0,
    "cancel failed": 0,
    "release failed": 0,
    "turn unknown": 0,
  };

  writeOff(reason: WriteOffReason, units: number): void {
    if (units <= 0) return;
    this.writtenOff[reason] += units;
    logEvent({ event: "lease_units_written_off", reason, units }, "warn");
  }
}
