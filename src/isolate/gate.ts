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
 * - `held` until the turn the object booked for it (a rule's `max_delay`):
 *   a wait with no call, on a timer of its own at the turn, and on the
 *   object's answer to `awaitTurn`, whichever comes first;
 * - `acquiring` a concurrency rule's place, once the rate rules admit it;
 * - `queued` for a place (`max_delay` on a concurrency rule): a wait on a
 *   timer of its own at the end of its wait, and on `awaitPlace`;
 * - `done`.
 *
 * A visit is either for a rate rule set (arriving … calling, held) or for one
 * concurrency rule (acquiring, queued): each is a gate of the same key state.
 */
import type { CountedRule, Rule } from "../core/rules.ts";
import type { Answered } from "../object/client.ts";
import type {
  Held,
  PlaceAcquired,
  PlaceAnswer,
  PlaceRefused,
  PlaceWait,
  Receipt,
  TurnAnswer,
} from "../object/protocol.ts";
import { answerOf, Batch, type Ticket } from "./batch.ts";
import { type CallTimes, Flight, STALE_AFTER_TYPICAL } from "./flight.ts";
import type { LeaseHost } from "./held-leases.ts";
import type { AnsweredCall, Cancel, Failure, KeyCall, Landing, Settlement } from "./vocabulary.ts";

/** What a request at a rate rule set's gate does next. */
export type Step =
  /**
   * Call the object alone, then report with {@link Gate.called}; by
   * `deadlineMs` when given (a held request deciding again, long after its
   * own deadline), else by the request's own.
   */
  | { do: "call"; deadlineMs?: number }
  /** Sleep on a timer of its own until `untilMs` (a landing wakes it earlier: {@link Visit.wake}), then report with {@link Gate.woke}. */
  | { do: "wait"; untilMs: number }
  /** Look for a lease unit or a known refusal, then report what was found with {@link Gate.tried}. */
  | { do: "try" }
  /** Send the batch, this request in it ({@link Gate.sendBatch}), then report with {@link Gate.sent}. */
  | { do: "send"; batch: Batch }
  /**
   * Held: sleep on a timer of its own until `untilMs`, its turn by this
   * isolate's clock; with `ask`, call `awaitTurn` too (once: its answer wakes
   * the request). Then report with {@link Gate.turned}.
   */
  | { do: "hold"; untilMs: number; ask: boolean; bookingId: string; name: string }
  /** Nothing more: how the gate settled the request. */
  | { do: "done"; end: End };

/** What a request at a concurrency rule's gate does next, for a place. */
export type PlaceStep =
  /** Ask the key's object for a place, then report with {@link Gate.acquired}. */
  | { do: "acquire" }
  /**
   * Wait in line for a place: sleep on a timer of its own until `untilMs`;
   * with `ask`, call `awaitPlace` too (once: its answer wakes the request).
   * Then report with {@link Gate.placed}.
   */
  | { do: "queue"; untilMs: number; ask: boolean; ticketId: string }
  /** Nothing more: how the gate settled the request's place. */
  | { do: "done"; end: PlaceEnd };

/** Its client hung up; `cancel`: what it had that must be handed back. */
type Gone = { by: "gone"; cancel?: Cancel };

/** How a request left a rate rule set's gate. */
export type End =
  /** A lease unit or a known refusal decided it, after the call it waited for landed. */
  | { by: "found"; settlement: Settlement }
  /** A call's answer: its own call's, or its slot of a batch's. */
  | { by: "answer"; settlement: Settlement }
  /** The call it waited for failed: the failure is shared, not repeated. */
  | { by: "failure"; failure: Failure }
  /** Its time ran out while it waited; `batch` and `ticket` when it was in a batch that was sent. */
  | { by: "ran out"; batch?: Batch; ticket?: Ticket }
  /** Held, its turn has come: where its counts were taken, or null when its own timer came first. */
  | { by: "turn"; call: AnsweredCall; held: Held; counted: TurnCounted }
  | Gone;

/** How a request left a concurrency rule's gate. */
export type PlaceEnd =
  /** A place; `waited` when it waited in line for it. */
  | { by: "place"; place: PlaceAcquired; waited: boolean }
  /** No place: none free, none by the end of its wait (then `cancel` gives its ticket back), or the client is denied. */
  | { by: "no place"; refusal: PlaceRefused; cancel?: Cancel }
  /** The object could not be asked for a place. */
  | { by: "place failure"; message: string }
  | Gone;

/** Where a turn's counts were taken, per rule; null when the request's own timer came before the object's answer. */
export type TurnCounted = (Receipt | null)[] | null;

/** Where a request is at the gate. */
export type At =
  | { at: "arriving" }
  | { at: "waiting"; flight: Flight; untilMs: number }
  | { at: "trying" }
  | { at: "sending"; batch: Batch }
  | { at: "reading"; flight: Flight; untilMs: number }
  | { at: "calling" }
  | { at: "held"; call: AnsweredCall; held: Held; untilMs: number; name: string }
  | { at: "acquiring" }
  | { at: "queued"; ticketId: string; name: string; deadlineMs: number; untilMs: number; limit?: number }
  | { at: "done" };

const ARRIVING: At = Object.freeze({ at: "arriving" });
const TRYING: At = Object.freeze({ at: "trying" });
const CALLING: At = Object.freeze({ at: "calling" });
const ACQUIRING: At = Object.freeze({ at: "acquiring" });
const ACQUIRE: PlaceStep = Object.freeze({ do: "acquire" });
const DONE: At = Object.freeze({ at: "done" });
const CALL: Step = Object.freeze({ do: "call" });
const TRY: Step = Object.freeze({ do: "try" });
/** The end of a visit whose client hung up with nothing to hand back: at either kind of gate. */
const GONE = Object.freeze({ do: "done", end: Object.freeze({ by: "gone" }) } as const);

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
  /** It asked again once already: for a place, after the object forgot its ticket (a restart); held, after its claim's call failed. */
  askedAgain = false;
  /** For a place: how long past its deadline in line it waits for the object's answer (a call's timeout). */
  marginMs = 0;
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
  /** Where what a batch admitted for a request it did not serve goes: back to the object, or written off. */
  private readonly host: LeaseHost;
  /** Whether a request of this gate that runs out waiting is refused (a rule fails closed). */
  private readonly failsClosed: boolean;
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

  constructor(rules: Rule[], times: CallTimes, host: LeaseHost) {
    this.rules = rules;
    this.times = times;
    this.host = host;
    this.failsClosed = rules.some((rule) => rule.action === "block" && rule.onError === "closed");
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

  /** What the request's own call answered, at `nowMs`. */
  called(visit: Visit, call: KeyCall, nowMs: number): Step {
    if (visit.at.at !== "calling") throw new Error(`gate: called while ${visit.at.at}`);
    const held = call.outcome.ok ? call.outcome.result.held : undefined;
    if (held !== undefined) {
      // Booked for its turn. Gone meanwhile: the booking is given back, so the next in line moves up.
      const cancel: Cancel = { kind: "booking", name: call.name, id: held.bookingId };
      if (visit.gone) return this.end(visit, { do: "done", end: { by: "gone", cancel } });
      // Its own timer counts the wait from the answer, on this isolate's clock: late is safe, early is not.
      const untilMs = nowMs + held.waitMs;
      visit.at = { at: "held", call: call as AnsweredCall, held, untilMs, name: call.name };
      return { do: "hold", untilMs, ask: true, bookingId: held.bookingId, name: call.name };
    }
    // Gone while its call went on for the others: what the call counted for it stands, as for any request
    // cancelled once its call has answered.
    if (visit.gone) return this.end(visit, GONE);
    return this.end(visit, answerStep({ via: "call", call }));
  }

  /**
   * A held request woke: `answer` is the object's answer to `awaitTurn` if
   * it came (its turn, or no such booking), "failed" if the call failed, or
   * null (its own timer). It goes at its turn as the object says it has
   * come, or at its own timer, whichever is first; never before either.
   * When the object no longer has its booking (an admin change withdrew it,
   * or it was dropped as unclaimed), it decides again, by `againByMs`; when
   * the call failed (the object restarted), it claims its booking again,
   * once.
   */
  turned(visit: Visit, answer: TurnAnswer | "failed" | null, nowMs: number, againByMs: number): Step {
    const { at } = visit;
    if (at.at !== "held") throw new Error(`gate: turned while ${at.at}`);
    // Gone: its booking was given back when it hung up (see hangUp).
    if (visit.gone) return this.end(visit, GONE);
    const { call, held } = at;
    if (answer !== null && answer !== "failed" && answer.status === "turn") {
      return this.end(visit, {
        do: "done",
        end: { by: "turn", call: asTurned(call, answer), held, counted: answer.counted },
      });
    }
    if (answer !== null && answer !== "failed" && answer.status === "unknown") {
      visit.at = CALLING;
      return { do: "call", deadlineMs: againByMs };
    }
    if (nowMs >= at.untilMs) return this.end(visit, { do: "done", end: { by: "turn", call, held, counted: null } });
    if (answer === "failed" && !visit.askedAgain) {
      visit.askedAgain = true;
      return { do: "hold", untilMs: at.untilMs, ask: true, bookingId: held.bookingId, name: at.name };
    }
    // The object could not say: its own timer decides, as safely.
    return { do: "hold", untilMs: at.untilMs, ask: false, bookingId: held.bookingId, name: at.name };
  }

  // A place under a concurrency rule (a gate whose rule set is that one rule).

  /** A request asks for a place: its rate rules admitted it. */
  enterPlace(visit: Visit): PlaceStep {
    if (visit.gone) return this.end(visit, GONE);
    visit.at = ACQUIRING;
    return ACQUIRE;
  }

  /** What `acquire` answered at `nowMs` (of the object's key `name`), or why it did not. */
  acquired(visit: Visit, answer: Answered<PlaceAnswer>, name: string, nowMs: number): PlaceStep {
    if (visit.at.at !== "acquiring") throw new Error(`gate: acquired while ${visit.at.at}`);
    if (!answer.ok) {
      if (visit.gone) return this.end(visit, GONE);
      return this.end(visit, { do: "done", end: { by: "place failure", message: answer.message } });
    }
    const got = answer.value;
    if (visit.gone) {
      if (got.status === "acquired") return this.goneWith(visit, { kind: "place", name, id: got.placeId });
      if (got.status === "queued") return this.goneWith(visit, { kind: "ticket", name, id: got.ticketId });
      return this.end(visit, GONE);
    }
    if (got.status === "acquired")
      return this.end(visit, { do: "done", end: { by: "place", place: got, waited: false } });
    if (got.status === "refused") return this.end(visit, { do: "done", end: { by: "no place", refusal: got } });
    // In line until its deadline, by this isolate's clock from the answer, and one timeout more for the
    // object's own answer at the deadline to arrive: past that, it gives its ticket back and is refused.
    const untilMs = nowMs + (got.deadlineMs - got.nowMs) + visit.marginMs;
    const deadlineMs = nowMs + (got.deadlineMs - got.nowMs);
    visit.at = { at: "queued", ticketId: got.ticketId, name, deadlineMs, untilMs, ...limitOf(got) };
    return { do: "queue", untilMs, ask: true, ticketId: got.ticketId };
  }

  /**
   * A request in line woke: `answer` is the object's answer to `awaitPlace`
   * if it came, or why not; null: its own timer (or a spurious wake).
   */
  placed(visit: Visit, answer: Answered<PlaceWait> | null, name: string, nowMs: number): PlaceStep {
    const { at } = visit;
    if (at.at !== "queued") throw new Error(`gate: placed while ${at.at}`);
    if (visit.gone) {
      // Its ticket was given back when it hung up; a place that came meanwhile goes back too.
      if (answer?.ok && answer.value.status === "acquired") {
        return this.goneWith(visit, { kind: "place", name, id: answer.value.placeId });
      }
      return this.end(visit, GONE);
    }
    if (answer?.ok && answer.value.status === "acquired") {
      return this.end(visit, { do: "done", end: { by: "place", place: answer.value, waited: true } });
    }
    if (answer?.ok && answer.value.status === "refused") {
      return this.end(visit, { do: "done", end: { by: "no place", refusal: answer.value } });
    }
    if (answer !== null && nowMs < at.deadlineMs && !visit.askedAgain) {
      // The object no longer knows the ticket, or the call broke: the object restarted, and its line with
      // it. Once, it asks again, at the end of the new line.
      visit.askedAgain = true;
      visit.at = ACQUIRING;
      return ACQUIRE;
    }
    if (nowMs >= at.untilMs || answer !== null) {
      // No place by the end of its wait: refused, its ticket given back in case a place comes to it later.
      // Every place it waited for is held: the client's own number when an override, a tier or a factor gave one.
      const limit = at.limit ?? this.rules[0]?.limit ?? 0;
      const refusal: PlaceRefused = { status: "refused", nowMs, free: 0, inUse: limit, ...limitOf(at) };
      const cancel: Cancel = { kind: "ticket", name, id: at.ticketId };
      return this.end(visit, { do: "done", end: { by: "no place", refusal, cancel } });
    }
    return { do: "queue", untilMs: at.untilMs, ask: false, ticketId: at.ticketId };
  }

  /**
   * The request's client hung up: it leaves its batch, or has what the batch
   * admits for it written off, and is no longer woken (woken, a cancelled
   * request's promise makes the runtime print a warning). Its next step ends it.
   * Returns what it held that goes back at once: a booking, or a ticket.
   */
  hangUp(visit: Visit): Cancel | null {
    visit.gone = true;
    if (visit.ticket !== null) visit.batch!.hangUp(visit.ticket);
    const { at } = visit;
    if (at.at === "waiting" || at.at === "reading") at.flight.waiters.delete(visit.wakeUp);
    // Held, or in line: what it waits for goes back at once, to the next in line.
    if (at.at === "held") return { kind: "booking", name: at.name, id: at.held.bookingId };
    if (at.at === "queued") return { kind: "ticket", name: at.name, id: at.ticketId };
    return null;
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
      if (this.next === null) this.next = new Batch(this.failsClosed);
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
    this.abandon(visit, true);
    return this.look(visit, nowMs);
  }

  /** The request stopped waiting for a flight that has not landed. */
  private gaveUp(visit: Visit, nowMs: number): Step {
    if (visit.at.at === "reading") {
      const again = nowMs < visit.deadlineMs;
      this.abandon(visit, again);
      if (again) return this.look(visit, nowMs); // the batch's call is presumed lost
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

  /**
   * The request stops waiting for the batch it was sent with, to ask again
   * (`again`) or to run out: what it admits for it is given back, or written
   * off (see {@link Batch.abandon}).
   */
  private abandon(visit: Visit, again = false): void {
    visit.batch!.abandon(visit.ticket!, again);
    // If the call answered already; else the call does when it does.
    visit.batch!.writeOffAbandoned(this.rules as CountedRule[], this.host);
  }

  /** Ends a request whose client hung up, with what it had that must be handed back. */
  private goneWith(visit: Visit, cancel: Cancel): Extract<Step & PlaceStep, { do: "done" }> {
    return this.end(visit, { do: "done", end: { by: "gone", cancel } });
  }

  private end<S extends Step | PlaceStep>(visit: Visit, step: S): S {
    visit.at = DONE;
    return step;
  }
}

const answerStep = (settlement: Settlement): Step => ({ do: "done", end: { by: "answer", settlement } });

/** The places a queued request waits for, when its answer says they are other than the rule's. */
const limitOf = ({ limit }: { limit?: number }): { limit?: number } => (limit === undefined ? {} : { limit });

/**
 * A held request's call as its turn leaves it: planned again while held (an
 * admin change), each rule's verdict is its admission at its turn, as the
 * object says; and a rule an `unlimited` override lifted reads as lifted, so
 * that its answer carries no headers for that rule (as a request after the
 * change).
 */
function asTurned(call: AnsweredCall, turn: Extract<TurnAnswer, { status: "turn" }>): AnsweredCall {
  const { lifted, verdicts: atTurn } = turn;
  if ((lifted === undefined || lifted.length === 0) && atTurn === undefined) return call;
  const { result } = call.outcome;
  const verdicts = result.verdicts.map((v, j) => {
    if (lifted?.includes(j)) return { ...v, override: "unlimited" as const };
    const fresh = atTurn?.[j];
    return fresh === null || fresh === undefined ? v : { ...fresh, counted: v.counted };
  });
  return { ...call, outcome: { ...call.outcome, result: { ...result, verdicts } } };
}
