/**
 * @module
 * Batches: requests of one key that waited in one isolate for the same call
 * in flight, and still need the object once it has landed, go to the object
 * together in one call (`CheckOptions.batch`), which decides each of them in
 * order, all or nothing. Here are a batch and the places in it (tickets),
 * how each request reads its answer from the call, and what is written off
 * for a request that stopped waiting for it. The gate (gate.ts) forms and
 * sends them.
 */
import type { CountedRule } from "../core/rules.ts";
import { type CheckResult, costOf, type Refund } from "../object/protocol.ts";
import type { Flight } from "./flight.ts";
import type { LeaseHost } from "./held-leases.ts";
import type { KeyCall, Settlement } from "./vocabulary.ts";

/** A request's place in a batch, as the request reads it. Only its batch changes it. */
export type Ticket = {
  /** How long what the object counts for this request under every rule may still be handed back, in ms. */
  readonly refundableMs: number;
  /** Its place among the batch's requests once the batch is sent (the object decides them in this order); null before. */
  readonly slot: number | null;
  /** True once it left the batch before it was sent: something else decided it. */
  readonly left: boolean;
  /** True once it stopped waiting for the batch it was sent with: an admission counted for it is not its. */
  readonly abandoned: boolean;
  /**
   * True once it is known the request is not served on what the batch admits
   * for it (its client hung up, it asked again, or it was refused): that
   * admission goes back to the object. Otherwise (it went on without its
   * answer) an admission counted for it stays counted, and is written off.
   */
  readonly givenBack: boolean;
};

/** A ticket as its batch changes it. */
type Place = { -readonly [K in keyof Ticket]: Ticket[K] };

/**
 * Requests that waited for the same call in flight and still need the
 * object once it has landed (it brought no lease, or too small a one, and
 * no refusal): the first of them to look sends one call that decides them
 * all, in order, each all or nothing, and the others read their answers
 * from it. Near a limit every request needs the object; so one isolate
 * makes at most one call for a key while another is in flight, whatever
 * its rate, and the object's queue stays as short as the isolates are few.
 */
export class Batch {
  private readonly places: Place[] = [];
  /** The call that carries the batch, once sent. */
  flight: Flight | null = null;
  /** Abandoned slots already written off, so none is written off twice. */
  private readonly writtenOff = new Set<number>();
  /** What that call brought back, kept before its flight lands: how many it admitted (the first slots), and the verdicts. */
  call: KeyCall | null = null;
  /** What the call decided, once it has (`result` undefined: it never did, in time); null before. */
  private decision: { result: CheckResult | undefined } | null = null;
  /** How to wake each request that went on without its answer and waits for it, to settle by its response. */
  private readonly lateWaiters = new Set<() => void>();

  /** Whether a request of the batch that runs out waiting for it is refused (`on_error = "closed"`). */
  private readonly failsClosed: boolean;

  constructor(failsClosed = false) {
    this.failsClosed = failsClosed;
  }

  join(refundableMs: number): Ticket {
    const place: Place = { refundableMs, slot: null, left: false, abandoned: false, givenBack: false };
    this.places.push(place);
    return place;
  }

  /** Leaves the batch, unless it was sent: then the ticket keeps its slot. */
  leave(ticket: Ticket): void {
    const place = ticket as Place;
    if (place.slot === null) place.left = true;
  }

  /**
   * The ticket's request stopped waiting for the batch it was sent with.
   * What the batch admits for it goes back to the object when the request is
   * not served on it: `again` (it asks the object again), or its rules fail
   * closed (it is refused); otherwise (it went on without its answer) it is
   * written off, and stays counted.
   */
  abandon(ticket: Ticket, again = false): void {
    const place = ticket as Place;
    place.abandoned = true;
    if (again || this.failsClosed) place.givenBack = true;
  }

  /**
   * The ticket's request is gone (its client hung up, and the runtime
   * cancelled it): it leaves the batch before it is sent, or what the batch
   * admits for it is written off when the call answers, as for any request
   * that stopped waiting.
   */
  hangUp(ticket: Ticket): void {
    this.leave(ticket);
    if (ticket.slot !== null && this.call === null) this.abandon(ticket, true);
  }

  /**
   * Sends the batch with `flight`: numbers the requests still in it, in the
   * order they joined. Returns how many, and how long what the object counts
   * for any of them may be handed back: the longest of theirs, so that the
   * object decides each as if it had called itself.
   */
  seal(flight: Flight): { size: number; refundableMs: number } {
    let size = 0;
    let refundableMs = 0;
    for (const place of this.places) {
      if (place.left) continue;
      place.slot = size++;
      refundableMs = Math.max(refundableMs, place.refundableMs);
    }
    this.flight = flight;
    return { size, refundableMs };
  }

  /** The tickets given slots when the batch was sent, whose requests stopped waiting for it. */
  private abandonedSlots(): number[] {
    return this.places.flatMap((t) => (t.abandoned && t.slot !== null ? [t.slot] : []));
  }

  /**
   * The batch's call came back: kept for the requests that read their
   * answers from it, with what it admitted for those that stopped waiting
   * written off.
   */
  answered(call: KeyCall, rules: CountedRule[], host: LeaseHost): void {
    this.call = call;
    this.writeOffAbandoned(rules, host);
    if (call.outcome.ok || call.outcome.late === undefined)
      this.decided(call.outcome.ok ? call.outcome.result : undefined);
  }

  /** Admissions the batch counted for requests that had stopped waiting for it: given back, or written off. */
  writeOffAbandoned(rules: CountedRule[], host: LeaseHost): void {
    const outcome = this.call?.outcome;
    if (!outcome?.ok) return;
    this.writeOffSlots(outcome.result, this.abandonedSlots(), rules, host);
  }

  /**
   * What `result` admitted for these slots of the batch, each once: given
   * back to the object for a request not served on it, written off (and
   * counted) for one that went on without it.
   */
  private writeOffSlots(result: CheckResult, slots: number[], rules: CountedRule[], host: LeaseHost): void {
    const admitted = result.admitted ?? (result.allowed ? 1 : 0);
    const lost = slots.filter((slot) => slot < admitted && !this.writtenOff.has(slot));
    for (const slot of lost) this.writtenOff.add(slot);
    const back = lost.filter((slot) => this.failsClosed || this.placeAt(slot)?.givenBack === true).length;
    const perRequest = rules.reduce((n, rule) => n + costOf(rule), 0);
    host.counters.writeOff("batch abandoned", (lost.length - back) * perRequest);
    const name = this.call?.name;
    if (back === 0 || name === undefined) return;
    const refunds = result.verdicts.flatMap((v, j): Refund[] =>
      v.counted ? [{ receipt: v.counted, count: back * costOf(rules[j]!) }] : [],
    );
    if (refunds.length > 0) host.handBack(name, refunds);
  }

  /** The place given `slot` when the batch was sent. */
  private placeAt(slot: number): Place | undefined {
    return this.places.find((place) => place.slot === slot);
  }

  /**
   * A batch's call that timed out may still decide: no request waits for
   * that answer (every request in it took the timeout as its own), so what
   * it admits is written off, and counted, when it comes; a request that
   * went on settles its own by its response (see {@link lateAnswer}).
   * Resolves once it is known.
   */
  async lateDecision(
    size: number,
    late: Promise<CheckResult | undefined>,
    rules: CountedRule[],
    host: LeaseHost,
  ): Promise<void> {
    const result = await late;
    if (result) {
      const slots = Array.from({ length: size }, (_, slot) => slot);
      this.writeOffSlots(result, slots, rules, host);
    }
    this.decided(result);
  }

  /** The batch's call decided (or, `undefined`, never will): wakes the requests waiting for their answers. */
  private decided(result: CheckResult | undefined): void {
    if (this.decision !== null) return;
    this.decision = { result };
    for (const wake of this.lateWaiters) wake();
    this.lateWaiters.clear();
  }

  /**
   * What the batch decides for a request that stopped waiting for it and
   * went on (its rules fail open): its own answer, once the call gives it,
   * for its response to settle; undefined when the call decides nothing for
   * it within `withinMs`. On a timer of the request's own, made now: the
   * call belongs to another request, which may be cancelled.
   */
  async lateAnswer(ticket: Ticket, withinMs: number): Promise<CheckResult | undefined> {
    if (this.decision === null) {
      let wake!: () => void;
      const woken = new Promise<void>((resolve) => {
        wake = resolve;
      });
      const timer = setTimeout(wake, withinMs);
      this.lateWaiters.add(wake);
      try {
        await woken;
      } finally {
        clearTimeout(timer);
        this.lateWaiters.delete(wake);
      }
    }
    const result = this.decision?.result;
    return result === undefined || ticket.slot === null ? undefined : (slotResult(result, ticket.slot) ?? undefined);
  }
}

/**
 * One request's answer from a call that decided a batch: admitted if its
 * slot is among the first admitted. Null when the object decided only one
 * request (an object of an earlier version, which knows no batches, during
 * a deploy): its answer is the first slot's, and the others have to ask.
 */
export function answerOf(call: KeyCall, slot: number): Settlement | null {
  if (!call.outcome.ok) {
    // Its late answer is the whole batch's (see Batch.lateDecision): no request of it reads it as its own.
    const { late: _batchs, ...failed } = call.outcome;
    return { via: "call", call: { ...call, outcome: failed } };
  }
  const own = slotResult(call.outcome.result, slot);
  return own === null ? null : { via: "call", call: { ...call, outcome: { ...call.outcome, result: own } } };
}

/** One slot's result of a batch's: null for a later slot of an object that decided only the first. */
function slotResult(result: CheckResult, slot: number): CheckResult | null {
  if (result.admitted === undefined) return slot === 0 ? result : null;
  const verdicts = slot < result.admitted ? result.verdicts : (result.refused ?? result.verdicts);
  return { nowMs: result.nowMs, allowed: slot < result.admitted, verdicts };
}
