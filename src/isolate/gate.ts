/**
 * @module
 * The gate of one client key and rule set: the requests of this isolate
 * that need the key's object, the call in flight for them, and the batch
 * forming behind it. A state machine: each transition takes the time and
 * returns the request's next step as data, which settle.ts carries out. The
 * gate never awaits, never calls, never reads a clock and never sets a
 * timer, so its tests drive it on a clock of their own.
 *
 * While one request's call that may bring a lease is on its way, concurrent
 * requests for the key wait for it (a burst would otherwise have the object
 * count many leases at once, and refuse requests while their units sat
 * unspent here). Requests that waited for a call and still need the object
 * once it has landed go together: the first of them to look sends one call
 * that decides all of them (batch.ts).
 *
 * A waiter never awaits anything that belongs to the request that called:
 * if that request's client hangs up, the runtime cancels its call, and a
 * promise tied to it may never settle. A waiter sleeps on a promise of its
 * own, with a timer of its own at the step's `untilMs`; the call's landing
 * wakes it early. So a waiter costs one timer, however long it waits, and
 * when the call never lands it gives up on its own time and decides alone.
 *
 * A request's states (see README.md for the drawing):
 * - `arriving`: it looks at the gate: no call in flight → `calling`; else → `waiting`;
 * - `waiting` for another request's call, until it lands, is presumed lost, or the request's patience ends;
 * - `trying`: the call landed without deciding it: a lease unit or a known refusal may;
 * - `sending` the batch it is in, as the first of it to find nothing;
 * - `reading` its answer from the batch another request sent with it in;
 * - `calling` the object alone;
 * - `done`.
 */
import type { Rule } from "../core/rules.ts";
import { answerOf, Batch, type Ticket } from "./batch.ts";
import type { IsolateCounters } from "./counters.ts";
import { type CallTimes, Flight, STALE_AFTER_TYPICAL } from "./flight.ts";
import type { Failure, KeyCall, Landing, Settlement } from "./vocabulary.ts";

/** What a request at the gate does next. */
export type Step =
  /** Call the object alone, then report with {@link Gate.called}. */
  | { do: "call" }
  /** Sleep on a timer of its own until `untilMs` (a landing wakes it earlier: {@link Visit.wake}), then report with {@link Gate.woke}. */
  | { do: "wait"; untilMs: number }
  /** Look for a lease unit or a known refusal, then report what was found with {@link Gate.tried}. */
  | { do: "try" }
  /** Send the batch, this request in it ({@link Gate.sendBatch}), then report with {@link Gate.sent}. */
  | { do: "send"; batch: Batch }
  /** Nothing more: how the gate settled the request. */
  | { do: "done"; end: End };

/** How a request left the gate. */
export type End =
  /** A lease unit or a known refusal decided it, after the call it waited for landed. */
  | { by: "found"; settlement: Settlement }
  /** A call's answer: its own call's, or its slot of a batch's. */
  | { by: "answer"; settlement: Settlement }
  /** The call it waited for failed: the failure is shared, not repeated. */
  | { by: "failure"; failure: Failure }
  /** Its time ran out while it waited; `batch` and `ticket` when it was in a batch that was sent. */
  | { by: "ran out"; batch?: Batch; ticket?: Ticket }
  /** Its client hung up. */
  | { by: "gone" };

/** Where a request is at the gate. */
export type At =
  | { at: "arriving" }
  | { at: "waiting"; flight: Flight; untilMs: number }
  | { at: "trying" }
  | { at: "sending"; batch: Batch }
  | { at: "reading"; flight: Flight; untilMs: number }
  | { at: "calling" }
  | { at: "done" };

const ARRIVING: At = Object.freeze({ at: "arriving" });
const TRYING: At = Object.freeze({ at: "trying" });
const CALLING: At = Object.freeze({ at: "calling" });
const DONE: At = Object.freeze({ at: "done" });
const CALL: Step = Object.freeze({ do: "call" });
const TRY: Step = Object.freeze({ do: "try" });
const GONE: Step = Object.freeze({ do: "done", end: Object.freeze({ by: "gone" }) });

/** One request at a gate. The gate changes it; the request reads it, and sets {@link wake}. */
export class Visit {
  /** The request's own deadline, in isolate time. */
  readonly deadlineMs: number;
  /** Whether it joins the batch behind a call it waits for (see settle.ts). */
  readonly batching: boolean;
  /** How long what the object counts for it may be handed back, for its ticket. */
  readonly refundableMs: number;
  at: At = ARRIVING;
  /** Its place in a batch, while it has one. */
  batch: Batch | null = null;
  ticket: Ticket | null = null;
  /** Until when it waits for calls of others at most, this time round. */
  giveUpAtMs = 0;
  /** Its client hung up. */
  gone = false;
  /** Wakes the request from its current sleep; set by whoever carries out a `wait`. */
  wake: () => void = () => {};
  /** What a landing calls: the request's current {@link wake}. */
  readonly wakeUp = (): void => this.wake();

  constructor(deadlineMs: number, batching: boolean, refundableMs: number) {
    this.deadlineMs = deadlineMs;
    this.batching = batching;
    this.refundableMs = refundableMs;
  }
}

export class Gate {
  /** The rule set this gate is for. */
  readonly rules: Rule[];
  private readonly times: CallTimes;
  private readonly counters: IsolateCounters;
  /** The call in flight, until it lands or is presumed lost. */
  private flight: Flight | null = null;
  /** The requests that wait for {@link flight} and go to the object together once it lands, unless it decides them. */
  private next: Batch | null = null;
  /**
   * How long the next call is waited for before it is presumed lost, when
   * this gate's own calls say to wait longer than the typical call: four
   * times its last call, or, after a call presumed lost, twice the wait for
   * that one. A hot key's object that is slower than the isolate's other
   * objects (it is overloaded) is then not sent a new call every few
   * typical call times, each queueing behind the last.
   */
  private patienceMs = 0;

  constructor(rules: Rule[], times: CallTimes, counters: IsolateCounters) {
    this.rules = rules;
    this.times = times;
    this.counters = counters;
  }

  // The call in flight.

  /** The call in flight, unless it has landed or is presumed lost. */
  current(nowMs: number): Flight | undefined {
    const flight = this.flight;
    if (flight === null) return undefined;
    if (flight.landing === null && nowMs < flight.staleAtMs) return flight;
    this.flight = null;
    this.next = null;
    // Presumed lost: the next call is waited for twice as long, in case this one was only slow (then each next
    // one would queue behind it), until a call lands and says how long they take. Not longer: the request of the
    // next call may be cancelled too (its client hung up), and its waiters then need time for a call of their own.
    if (flight.landing === null) this.patienceMs = 2 * (flight.staleAtMs - flight.departedAtMs);
    return undefined;
  }

  /** Files a call about to be sent, so concurrent requests wait for it. */
  depart(nowMs: number, timeoutMs: number): Flight {
    const flight = new Flight(nowMs, nowMs + this.times.lostAfterMs(this.patienceMs, timeoutMs));
    this.flight = flight;
    this.next = null;
    return flight;
  }

  /** Records how a call ended, and wakes its waiters to read it. */
  land(flight: Flight, landing: Landing, nowMs: number): void {
    flight.land(landing);
    const tookMs = nowMs - flight.departedAtMs;
    if (landing.ok) this.times.took(tookMs);
    this.patienceMs = STALE_AFTER_TYPICAL * tookMs;
    if (this.flight === flight) {
      this.flight = null;
      this.next = null;
    }
  }

  /** Files the call that sends the request's batch, and seals the batch: who is in it, in order. */
  sendBatch(visit: Visit, nowMs: number, timeoutMs: number): { flight: Flight; size: number; refundableMs: number } {
    const flight = this.depart(nowMs, timeoutMs);
    return { flight, ...visit.batch!.seal(flight) };
  }

  // A request's transitions.

  /** A request arrives. */
  enter(visit: Visit, nowMs: number): Step {
    return this.look(visit, nowMs);
  }

  /** The request's sleep ended: its timer, or a landing. */
  woke(visit: Visit, nowMs: number): Step {
    const { at } = visit;
    if (at.at !== "waiting" && at.at !== "reading") throw new Error(`gate: woke while ${at.at}`);
    at.flight.waiters.delete(visit.wakeUp);
    if (visit.gone) return this.end(visit, GONE);
    return this.waitFor(visit, at, nowMs);
  }

  /** What the request found on its own after the call it waited for landed: a lease unit or a known refusal, or nothing. */
  tried(visit: Visit, found: Settlement | null, nowMs: number): Step {
    if (visit.at.at !== "trying") throw new Error(`gate: tried while ${visit.at.at}`);
    if (found !== null) {
      this.leave(visit);
      return this.end(visit, { do: "done", end: { by: "found", settlement: found } });
    }
    // The first of the batch to find nothing: it sends the batch, this request in it.
    if (visit.ticket !== null) {
      const batch = visit.batch!;
      visit.at = { at: "sending", batch };
      return { do: "send", batch };
    }
    return this.look(visit, nowMs);
  }

  /** What the call that sent the request's batch answered, or `"timeout"` when the request's own deadline came first. */
  sent(visit: Visit, answered: KeyCall | "timeout", nowMs: number): Step {
    if (visit.at.at !== "sending") throw new Error(`gate: sent while ${visit.at.at}`);
    // Gone: what the batch admits for it is written off (Batch.hangUp), so it is not served too.
    if (visit.gone) return this.end(visit, GONE);
    const batch = visit.batch!;
    const ticket = visit.ticket!;
    if (answered !== "timeout") {
      const answer = answerOf(answered, ticket.slot!);
      // Null: the object decided the first request alone (an earlier version): look again.
      return answer === null ? this.look(visit, nowMs) : this.end(visit, answerStep(answer));
    }
    batch.abandon(ticket); // what the call admits for it is written off when it answers
    return this.end(visit, { do: "done", end: { by: "ran out", batch, ticket } });
  }

  /** What the request's own call answered. */
  called(visit: Visit, call: KeyCall): Step {
    if (visit.at.at !== "calling") throw new Error(`gate: called while ${visit.at.at}`);
    // Gone while its call went on for the others: what the call counted for it stands, as for any request
    // cancelled once its call has answered.
    if (visit.gone) return this.end(visit, GONE);
    return this.end(visit, answerStep({ via: "call", call }));
  }

  /**
   * The request's client hung up: it leaves its batch, or has what the batch
   * admits for it written off, and is no longer woken (woken, a cancelled
   * request's promise makes the runtime print a warning). Its next step ends it.
   */
  hangUp(visit: Visit): void {
    visit.gone = true;
    if (visit.ticket !== null) visit.batch!.hangUp(visit.ticket);
    const { at } = visit;
    if (at.at === "waiting" || at.at === "reading") at.flight.waiters.delete(visit.wakeUp);
  }

  /** Looks at the gate: waits for the call in flight, or calls. */
  private look(visit: Visit, nowMs: number): Step {
    if (visit.gone) return this.end(visit, GONE);
    const flight = this.current(nowMs);
    if (flight === undefined) {
      visit.at = CALLING;
      return CALL;
    }
    if (visit.batching) {
      if (this.next === null) this.next = new Batch();
      const batch = this.next;
      visit.batch = batch;
      visit.ticket = batch.join(visit.refundableMs);
    } else {
      visit.batch = null;
      visit.ticket = null;
    }
    // Without batches: half of what is left at most, so that a call of its own still has time. With them,
    // a call that is slow but not presumed lost is waited for to the end: a call of its own would queue
    // behind it at the same object, and one per waiter is how a slow object's queue grows without bound.
    visit.giveUpAtMs = visit.batching ? visit.deadlineMs : nowMs + (visit.deadlineMs - nowMs) / 2;
    const untilMs = Math.min(flight.staleAtMs, visit.giveUpAtMs);
    return this.waitFor(visit, { at: "waiting", flight, untilMs }, nowMs);
  }

  /** Waits for a flight: read its landing if it has landed, give up once `untilMs` has come, else sleep. */
  private waitFor(visit: Visit, at: Extract<At, { at: "waiting" | "reading" }>, nowMs: number): Step {
    visit.at = at;
    const { flight } = at;
    if (flight.landing !== null) return this.landed(visit, flight.landing, nowMs);
    if (nowMs >= at.untilMs) return this.gaveUp(visit, nowMs);
    flight.waiters.add(visit.wakeUp);
    return { do: "wait", untilMs: at.untilMs };
  }

  /** The flight the request waited for landed. */
  private landed(visit: Visit, landing: Landing, nowMs: number): Step {
    if (visit.at.at === "reading") return this.read(visit, landing, nowMs);
    // The object's own failure is shared; a timeout only says the caller's time ran out, not ours.
    if (!landing.ok && landing.reason !== "timeout") {
      this.leave(visit);
      return this.end(visit, { do: "done", end: { by: "failure", failure: landing } });
    }
    if (visit.ticket?.slot != null) {
      // Another request that waited with this one has sent the batch, with this one in it.
      const flight = visit.batch!.flight!;
      const untilMs = Math.min(flight.staleAtMs, visit.deadlineMs);
      return this.waitFor(visit, { at: "reading", flight, untilMs }, nowMs);
    }
    visit.at = TRYING;
    return TRY;
  }

  /** The call that carries the request's batch landed: its answer, or the others' failure. */
  private read(visit: Visit, landing: Landing, nowMs: number): Step {
    const batch = visit.batch!;
    const ticket = visit.ticket!;
    if (landing.ok && batch.call !== null) {
      const answer = answerOf(batch.call, ticket.slot!);
      return answer === null ? this.look(visit, nowMs) : this.end(visit, answerStep(answer));
    }
    if (!landing.ok && landing.reason !== "timeout")
      return this.end(visit, { do: "done", end: { by: "failure", failure: landing } });
    // It ended without an answer in its caller's time: look again.
    this.abandon(visit);
    return this.look(visit, nowMs);
  }

  /** The request stopped waiting for a flight that has not landed. */
  private gaveUp(visit: Visit, nowMs: number): Step {
    if (visit.at.at === "reading") {
      this.abandon(visit);
      if (nowMs < visit.deadlineMs) return this.look(visit, nowMs); // the batch's call is presumed lost
      const { batch, ticket } = visit;
      return this.end(visit, { do: "done", end: { by: "ran out", batch: batch!, ticket: ticket! } });
    }
    this.leave(visit);
    if (nowMs < visit.giveUpAtMs) return this.look(visit, nowMs); // presumed lost: the first to look calls next
    // Waited long enough. With batches, as a call of its own would have: on_error applies. Without, it calls.
    if (visit.batching) return this.end(visit, { do: "done", end: { by: "ran out" } });
    visit.at = CALLING;
    return CALL;
  }

  /** Leaves the request's batch, if it has not been sent. */
  private leave(visit: Visit): void {
    if (visit.ticket !== null) visit.batch!.leave(visit.ticket);
  }

  /** The request stops waiting for the batch it was sent with: what it admits for it is written off. */
  private abandon(visit: Visit): void {
    visit.batch!.abandon(visit.ticket!);
    // If the call answered already; else the call does when it does.
    visit.batch!.writeOffAbandoned(this.rules, this.counters);
  }

  private end(visit: Visit, step: Step): Step {
    visit.at = DONE;
    return step;
  }
}

const answerStep = (settlement: Settlement): Step => ({ do: "done", end: { by: "answer", settlement } });
