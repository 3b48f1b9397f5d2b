/**
 * The gate of one client key and rule set (src/isolate/gate.ts), alone: its
 * transitions on a clock of the test's own (plain numbers, in isolate
 * milliseconds), with calls the test lands, answers, or never lands. Each
 * test takes requests through the states a request can be in: arriving,
 * waiting for another's call, trying what the isolate holds, sending its
 * batch, reading its answer from a batch another sent, calling alone, done.
 */
import { describe, expect, it } from "vitest";
import { IsolateCounters } from "../src/isolate/counters.ts";
import { CallTimes } from "../src/isolate/flight.ts";
import { Gate, type PlaceStep, type Step, Visit } from "../src/isolate/gate.ts";
import type { KeyCall, Settlement } from "../src/isolate/vocabulary.ts";
import type { CheckResult, Refund, RuleVerdict, TurnAnswer } from "../src/object/protocol.ts";
import { counted, settingsFor } from "./support/isolate.ts";

const TIMEOUT_MS = 1_000;
/** Before any call has landed, a call is presumed lost after 4 typical calls of 50 ms. */
const STALE_MS = 200;

const rules = counted(settingsFor([{ id: "gate", limit: 10, period: "1m" }]).rules);

/** Where the gate's batches send what they give back, and count what they write off: kept for the test to read. */
function newHost() {
  const handed: { name: string; refunds: Refund[] }[] = [];
  return {
    counters: new IsolateCounters(),
    handed,
    handBack: (name: string, refunds: Refund[]) => handed.push({ name, refunds }),
  };
}

function setUp(gateRules = rules) {
  const host = newHost();
  return { gate: new Gate(gateRules, new CallTimes(), host), counters: host.counters, host };
}

/** A request at the gate, and how often a landing woke it. */
function arrive(deadlineMs: number, { batching = true } = {}) {
  const visit = new Visit(deadlineMs, batching, 0);
  const woken = { times: 0 };
  visit.wake = () => {
    woken.times++;
  };
  return { visit, woken };
}

const verdict = (allowed: boolean): RuleVerdict => ({
  allowed,
  ruleAllows: allowed,
  weighted: allowed ? 1 : 10,
  remaining: allowed ? 8 : 0,
  retryAfterMs: allowed ? 0 : 5_000,
  resetMs: 5_000,
  counted: allowed ? { row: "gate|60000|1", epoch: 1, bucket: 0 } : null,
  holdsForMs: 0,
});

/** What a batch's call brings back: the first `admitted` of it admitted, the rest refused. */
const batchResult = (admitted: number): CheckResult => ({
  nowMs: 0,
  allowed: admitted > 0,
  verdicts: [verdict(admitted > 0)],
  admitted,
  refused: [verdict(false)],
});

const answered = (result: CheckResult): KeyCall => ({
  name: "object",
  sentAtMs: 0,
  sent: 1,
  outcome: { ok: true, result, attempts: 1 },
});

const LANDED = { ok: true } as const;
const found: Settlement = { via: "known", known: [] };

/** The settlement a step ends with, or what it does instead. */
const endOf = (step: Step | PlaceStep) => (step.do === "done" ? step.end : step);
const allowedBy = (step: Step): boolean | undefined => {
  if (step.do !== "done" || step.end.by !== "answer") return undefined;
  const s = step.end.settlement;
  return s.via === "call" && s.call.outcome.ok ? s.call.outcome.result.allowed : undefined;
};

describe("the gate of one client key and rule set, on a clock of its own", () => {
  it("arriving: with no call in flight the request calls alone; its answer ends it", () => {
    const { gate } = setUp();
    const { visit } = arrive(1_000);
    expect(gate.enter(visit, 0)).toEqual({ do: "call" });
    expect(visit.at.at).toBe("calling");
    const step = gate.called(visit, answered(batchResult(1)), 20);
    expect(allowedBy(step)).toBe(true);
    expect(visit.at.at).toBe("done");
  });

  it("waiting: behind a call in flight, until it is presumed lost or the request's deadline, whichever is first", () => {
    const { gate } = setUp();
    gate.depart(0, TIMEOUT_MS);
    const long = arrive(1_000);
    expect(gate.enter(long.visit, 10)).toEqual({ do: "wait", untilMs: STALE_MS });
    const short = arrive(150);
    expect(gate.enter(short.visit, 10)).toEqual({ do: "wait", untilMs: 150 });
    expect([long.visit.at.at, short.visit.at.at]).toEqual(["waiting", "waiting"]);
  });

  it("waiting without batches: half of the time left at most, then a call of its own", () => {
    const { gate } = setUp();
    gate.depart(0, TIMEOUT_MS);
    const { visit } = arrive(110, { batching: false });
    expect(gate.enter(visit, 10)).toEqual({ do: "wait", untilMs: 60 });
    expect(visit.ticket).toBeNull();
    expect(gate.woke(visit, 60)).toEqual({ do: "call" });
  });

  it("trying: the call landed without deciding it; a lease unit or a known refusal ends it, and it leaves its batch", () => {
    const { gate } = setUp();
    const flight = gate.depart(0, TIMEOUT_MS);
    const { visit, woken } = arrive(1_000);
    gate.enter(visit, 10);
    gate.land(flight, LANDED, 40);
    expect(woken.times).toBe(1);
    expect(gate.woke(visit, 40)).toEqual({ do: "try" });
    expect(visit.at.at).toBe("trying");
    expect(endOf(gate.tried(visit, found, 40))).toEqual({ by: "found", settlement: found });
    expect(visit.ticket?.left).toBe(true);
  });

  it("sending and reading: the first to find nothing sends the batch with everyone still in it, in arrival order; the others read their own slots", () => {
    const { gate } = setUp();
    const first = gate.depart(0, TIMEOUT_MS);
    const [a, b, c] = [arrive(1_000), arrive(1_000), arrive(1_000)];
    for (const { visit } of [a, b, c]) gate.enter(visit, 10);
    gate.land(first, LANDED, 40);
    expect(gate.woke(a.visit, 40)).toEqual({ do: "try" });
    const send = gate.tried(a.visit, null, 40);
    expect(send.do).toBe("send");
    expect(a.visit.at.at).toBe("sending");
    const sealed = gate.sendBatch(a.visit, 40, TIMEOUT_MS);
    expect(sealed.size).toBe(3);
    expect([a, b, c].map(({ visit }) => visit.ticket!.slot)).toEqual([0, 1, 2]);
    // b and c were woken by the first call's landing: they find their batch sent, and wait for its call.
    expect(gate.woke(b.visit, 40)).toEqual({ do: "wait", untilMs: Math.min(sealed.flight.staleAtMs, 1_000) });
    expect(b.visit.at.at).toBe("reading");
    gate.woke(c.visit, 40);
    // The call admits two of the three: a and b.
    const call = answered(batchResult(2));
    a.visit.batch!.answered(call, rules, newHost());
    gate.land(sealed.flight, LANDED, 60);
    expect([b.woken.times, c.woken.times]).toEqual([2, 2]);
    expect(allowedBy(gate.sent(a.visit, call, 60))).toBe(true);
    expect(allowedBy(gate.woke(b.visit, 60))).toBe(true);
    expect(allowedBy(gate.woke(c.visit, 60))).toBe(false);
    // Arrivals behind the batch's call form the next batch, not this one.
    const d = arrive(1_000);
    expect(gate.enter(d.visit, 60).do).toBe("call");
  });

  it("reading from an object that decides only the first of a batch (an earlier version): the others look again", () => {
    const { gate } = setUp();
    const first = gate.depart(0, TIMEOUT_MS);
    const [a, b] = [arrive(1_000), arrive(1_000)];
    gate.enter(a.visit, 10);
    gate.enter(b.visit, 10);
    gate.land(first, LANDED, 20);
    gate.woke(a.visit, 20);
    gate.tried(a.visit, null, 20);
    const sealed = gate.sendBatch(a.visit, 20, TIMEOUT_MS);
    gate.woke(b.visit, 20);
    const call = answered({ nowMs: 0, allowed: true, verdicts: [verdict(true)] });
    a.visit.batch!.answered(call, rules, newHost());
    gate.land(sealed.flight, LANDED, 30);
    expect(allowedBy(gate.sent(a.visit, call, 30))).toBe(true);
    expect(gate.woke(b.visit, 30)).toEqual({ do: "call" });
  });

  it("a call that never lands: its waiters give up when it is presumed lost, the first to look again calls, and the next call is waited for twice as long", () => {
    const { gate } = setUp();
    gate.depart(0, TIMEOUT_MS); // its request was cancelled: it never lands
    const [a, b] = [arrive(1_000), arrive(1_000)];
    gate.enter(a.visit, 10);
    gate.enter(b.visit, 10);
    expect(gate.woke(a.visit, STALE_MS)).toEqual({ do: "call" });
    expect(a.visit.ticket?.left).toBe(true);
    const next = gate.depart(STALE_MS, TIMEOUT_MS);
    expect(next.staleAtMs - STALE_MS).toBe(2 * STALE_MS);
    // b wakes on its own timer too, and waits for a's call.
    expect(gate.woke(b.visit, STALE_MS)).toEqual({ do: "wait", untilMs: next.staleAtMs });
  });

  it("a waiter with batches waits for a slow call to its own deadline, then runs out as a call of its own would", () => {
    const { gate } = setUp();
    gate.depart(0, TIMEOUT_MS);
    const { visit } = arrive(150);
    gate.enter(visit, 10);
    expect(endOf(gate.woke(visit, 150))).toEqual({ by: "ran out" });
    expect(visit.ticket?.left).toBe(true);
  });

  it.each([
    ["the object's own error is shared with every waiter", "error", "done"],
    ["the caller's timeout is not: it says the caller's time ran out, not this request's", "timeout", "try"],
  ] as const)("a failed call: %s", (_, reason, next) => {
    const { gate } = setUp();
    const flight = gate.depart(0, TIMEOUT_MS);
    const { visit } = arrive(1_000);
    gate.enter(visit, 10);
    const landing = { ok: false, reason, message: "landed by the test", attempts: 1, name: "object" } as const;
    gate.land(flight, landing, 50);
    const step = gate.woke(visit, 50);
    expect(step.do).toBe(next);
    if (step.do === "done") expect(step.end).toEqual({ by: "failure", failure: landing });
  });

  it("a client that hangs up while it waits is not woken, leaves its batch, and its next step ends it", () => {
    const { gate } = setUp();
    const flight = gate.depart(0, TIMEOUT_MS);
    const [gone, stays] = [arrive(1_000), arrive(1_000)];
    gate.enter(gone.visit, 10);
    gate.enter(stays.visit, 10);
    gate.hangUp(gone.visit);
    gate.land(flight, LANDED, 40);
    expect([gone.woken.times, stays.woken.times]).toEqual([0, 1]);
    expect(endOf(gate.woke(gone.visit, STALE_MS))).toEqual({ by: "gone" });
    gate.woke(stays.visit, 40);
    gate.tried(stays.visit, null, 40);
    expect(gate.sendBatch(stays.visit, 40, TIMEOUT_MS).size).toBe(1);
  });

  it("a client that hangs up once its batch was sent: what the batch admits for it is given back to the object, once", () => {
    const { gate, counters, host } = setUp();
    const first = gate.depart(0, TIMEOUT_MS);
    const [sender, gone] = [arrive(1_000), arrive(1_000)];
    gate.enter(sender.visit, 10);
    gate.enter(gone.visit, 10);
    gate.land(first, LANDED, 20);
    gate.woke(sender.visit, 20);
    gate.tried(sender.visit, null, 20);
    const sealed = gate.sendBatch(sender.visit, 20, TIMEOUT_MS);
    gate.woke(gone.visit, 20); // reading
    gate.hangUp(gone.visit);
    const call = answered(batchResult(2));
    sender.visit.batch!.answered(call, rules, host);
    sender.visit.batch!.writeOffAbandoned(rules, host);
    gate.land(sealed.flight, LANDED, 30);
    expect(counters.writtenOff["batch abandoned"]).toBe(0);
    expect(host.handed).toEqual([{ name: "object", refunds: [{ receipt: verdict(true).counted, count: 1 }] }]);
    expect(gone.woken.times).toBe(1); // by the first landing only
    expect(endOf(gate.woke(gone.visit, 1_000))).toEqual({ by: "gone" });
    expect(allowedBy(gate.sent(sender.visit, call, 30))).toBe(true);
  });

  it("a batch whose sender leaves (its own deadline came first): the sender runs out, the others read their answers, and what was admitted for the sender is written off", () => {
    const { gate, counters, host } = setUp();
    const first = gate.depart(0, TIMEOUT_MS);
    const [sender, other] = [arrive(100), arrive(1_000)];
    gate.enter(sender.visit, 10);
    gate.enter(other.visit, 10);
    gate.land(first, LANDED, 90);
    gate.woke(sender.visit, 90);
    gate.tried(sender.visit, null, 90);
    const sealed = gate.sendBatch(sender.visit, 90, TIMEOUT_MS);
    gate.woke(other.visit, 90);
    const ranOut = endOf(gate.sent(sender.visit, "timeout", 100));
    expect(ranOut).toMatchObject({ by: "ran out", ticket: { slot: 0, abandoned: true } });
    const call = answered(batchResult(2));
    other.visit.batch!.answered(call, rules, host);
    gate.land(sealed.flight, LANDED, 150);
    expect(counters.writtenOff["batch abandoned"]).toBe(1);
    expect(allowedBy(gate.woke(other.visit, 150))).toBe(true);
  });

  it("a late answer: a batch's call that timed out decides later; a request that went on reads its own slot and stays counted, and one that asked again is given back", async () => {
    const { gate, counters, host } = setUp();
    const first = gate.depart(0, TIMEOUT_MS);
    const [sender, other] = [arrive(100), arrive(1_000)];
    gate.enter(sender.visit, 10);
    gate.enter(other.visit, 10);
    gate.land(first, LANDED, 20);
    gate.woke(sender.visit, 20);
    gate.tried(sender.visit, null, 20);
    const sealed = gate.sendBatch(sender.visit, 20, TIMEOUT_MS);
    gate.woke(other.visit, 20);
    const ranOut = gate.sent(sender.visit, "timeout", 100);
    if (ranOut.do !== "done" || ranOut.end.by !== "ran out") throw new Error("the sender should have run out");
    // The batch's call times out at the object's end too, and answers later.
    let answer!: (result: CheckResult | undefined) => void;
    const late = new Promise<CheckResult | undefined>((resolve) => {
      answer = resolve;
    });
    const timedOut: KeyCall = {
      name: "object",
      sentAtMs: 20,
      sent: 1,
      outcome: { ok: false, reason: "timeout", message: "no decision within 1000ms", attempts: 1, late },
    };
    const batch = sender.visit.batch!;
    batch.answered(timedOut, rules, host);
    const forSender = batch.lateAnswer(ranOut.end.ticket!, 2 * TIMEOUT_MS);
    gate.land(sealed.flight, { ok: false, reason: "timeout", message: "late", attempts: 1, name: "object" }, 1_020);
    // The other request took the call's timeout as its own: it stops waiting for the batch, and looks again.
    expect(gate.woke(other.visit, 1_020)).toEqual({ do: "call" });
    expect(other.visit.ticket?.abandoned).toBe(true);
    const decided = batch.lateDecision(sealed.size, late, rules, host);
    answer(batchResult(2));
    await decided;
    expect((await forSender)?.allowed).toBe(true);
    expect(counters.writtenOff["batch abandoned"]).toBe(1);
    expect(host.handed).toEqual([{ name: "object", refunds: [{ receipt: verdict(true).counted, count: 1 }] }]);
  });

  it("reading a batch whose call is presumed lost: stops waiting (what it admits is written off) and looks again; past its deadline it runs out", () => {
    const { gate } = setUp();
    const first = gate.depart(0, TIMEOUT_MS);
    const [sender, early, late] = [arrive(1_000), arrive(150), arrive(1_000)];
    for (const { visit } of [sender, early, late]) gate.enter(visit, 10);
    gate.land(first, LANDED, 20);
    gate.woke(sender.visit, 20);
    gate.tried(sender.visit, null, 20);
    const sealed = gate.sendBatch(sender.visit, 20, TIMEOUT_MS); // its request is then cancelled: it never lands
    expect(gate.woke(early.visit, 20)).toEqual({ do: "wait", untilMs: 150 });
    expect(gate.woke(late.visit, 20)).toEqual({ do: "wait", untilMs: sealed.flight.staleAtMs });
    expect(gate.woke(late.visit, sealed.flight.staleAtMs)).toEqual({ do: "call" });
    expect(late.visit.ticket?.abandoned).toBe(true);
    const ended = endOf(gate.woke(early.visit, 150));
    expect(ended).toMatchObject({ by: "ran out", ticket: { slot: 1, abandoned: true } });
  });

  it("refuses a transition the request is not in the state for", () => {
    const { gate } = setUp();
    const { visit } = arrive(1_000);
    gate.enter(visit, 0); // calling
    expect(() => gate.tried(visit, null, 0)).toThrow(/tried while calling/);
    expect(() => gate.woke(visit, 0)).toThrow(/woke while calling/);
    expect(() => gate.sent(visit, "timeout", 0)).toThrow(/sent while calling/);
  });
});

// Held requests and places: states of the same gate, on the same clock of the test's own.

const smoothRules = counted(settingsFor([{ id: "smooth", limit: 2, period: "1s", max_delay: "5s" }]).rules);
const capRules = settingsFor([{ id: "cap", concurrency: 3, max_delay: "10s" }]).rules;
const RECEIPT = { row: "smooth|1000|1", epoch: 7, bucket: 3 };

/** What the object answers a request it books for its turn, `waitMs` after its clock's `nowMs`. */
const heldCall = (waitMs: number, nowMs = 5_000): KeyCall => ({
  name: "object",
  sentAtMs: 0,
  sent: 1,
  outcome: {
    ok: true,
    attempts: 1,
    result: {
      nowMs,
      allowed: false,
      verdicts: [{ ...verdict(true), counted: RECEIPT }],
      held: { bookingId: "booking-1", atMs: nowMs + waitMs, waitMs },
    },
  },
});

/** A request at a rate gate whose rule holds, calling alone; its call answered at `nowMs`, booked `waitMs` ahead. */
function heldAt(waitMs: number, nowMs: number) {
  const gate = new Gate(smoothRules, new CallTimes(), newHost());
  const { visit, woken } = arrive(nowMs + TIMEOUT_MS, { batching: false });
  expect(gate.enter(visit, nowMs - 10)).toEqual({ do: "call" });
  const step = gate.called(visit, heldCall(waitMs), nowMs);
  return { gate, visit, woken, step };
}

describe("held: a wait with no call, until the turn the object booked", () => {
  it("sleeps on its own timer until the wait the object said, counted from the answer on this isolate's clock, and asks for its turn once", () => {
    const { visit, step } = heldAt(700, 40);
    expect(step).toEqual({ do: "hold", untilMs: 740, ask: true, bookingId: "booking-1", name: "object" });
    expect(visit.at.at).toBe("held");
  });

  it("goes when the object says its turn has come (cancellations ahead moved it up), with the receipts of its turn", () => {
    const { gate, visit } = heldAt(700, 40);
    const moved = { ...RECEIPT, bucket: 2 };
    const step = gate.turned(visit, { status: "turn", nowMs: 5_300, atMs: 5_300, counted: [moved] }, 340, 1_340);
    expect(endOf(step)).toMatchObject({ by: "turn", held: { bookingId: "booking-1" }, counted: [moved] });
  });

  it("goes at its own timer when the object's answer has not come (the call never lands): its receipts are still to come", () => {
    const { gate, visit } = heldAt(700, 40);
    expect(endOf(gate.turned(visit, null, 740, 1_740))).toMatchObject({ by: "turn", counted: null });
  });

  it("never goes early: woken for no reason, it sleeps on to its own timer, without asking again", () => {
    const { gate, visit } = heldAt(700, 40);
    expect(gate.turned(visit, null, 100, 1_100)).toEqual({
      do: "hold",
      untilMs: 740,
      ask: false,
      bookingId: "booking-1",
      name: "object",
    });
    expect(endOf(gate.turned(visit, null, 740, 1_740))).toMatchObject({ by: "turn", counted: null });
  });

  it("when the call to await its turn failed (the object restarted), claims its booking again, once; then sleeps on to its own timer", () => {
    const { gate, visit } = heldAt(700, 40);
    const again = { do: "hold", untilMs: 740, bookingId: "booking-1", name: "object" };
    expect(gate.turned(visit, "failed", 100, 1_100)).toEqual({ ...again, ask: true });
    expect(gate.turned(visit, "failed", 120, 1_120)).toEqual({ ...again, ask: false });
    expect(endOf(gate.turned(visit, null, 740, 1_740))).toMatchObject({ by: "turn", counted: null });
  });

  it("when the object no longer has its booking (an admin change withdrew it, or nobody claimed it in time), decides again by a deadline of its own: never goes uncounted", () => {
    const { gate, visit } = heldAt(700, 40);
    const unknown = { status: "unknown", nowMs: 5_100 } as const;
    expect(gate.turned(visit, unknown, 100, 1_100)).toEqual({ do: "call", deadlineMs: 1_100 });
    expect(visit.at.at).toBe("calling");
    // Its new call answers as any: held again (at the end of the line), or refused (a deny).
    expect(gate.called(visit, heldCall(700), 130)).toMatchObject({ do: "hold", ask: true, untilMs: 830 });
  });

  it("a client that hangs up while held gives its booking back at once, and is not woken again: its next step ends it", () => {
    const { gate, visit, woken } = heldAt(700, 40);
    expect(gate.hangUp(visit)).toEqual({ kind: "booking", name: "object", id: "booking-1" });
    expect(woken.times).toBe(0);
    // The late answer of its turn (the object counted it meanwhile) changes nothing: its booking went back.
    const late: TurnAnswer = { status: "turn", nowMs: 5_700, atMs: 5_700, counted: [RECEIPT] };
    expect(endOf(gate.turned(visit, late, 740, 1_740))).toEqual({ by: "gone" });
  });

  it("a client that hangs up while its call is on its way: when the call comes back held, the booking goes back", () => {
    const gate = new Gate(smoothRules, new CallTimes(), newHost());
    const { visit } = arrive(TIMEOUT_MS, { batching: false });
    gate.enter(visit, 0);
    expect(gate.hangUp(visit)).toBeNull(); // nothing booked yet
    expect(endOf(gate.called(visit, heldCall(700), 30))).toEqual({
      by: "gone",
      cancel: { kind: "booking", name: "object", id: "booking-1" },
    });
  });

  it("is never a refusal: a held answer is not an answer step, and what it reports is its admission at its turn", () => {
    const { gate, visit } = heldAt(700, 40);
    const step = gate.turned(visit, null, 740, 1_740);
    if (step.do !== "done" || step.end.by !== "turn") throw new Error("expected its turn");
    expect(step.end.call.outcome.result.verdicts[0]).toMatchObject({ allowed: true, ruleAllows: true });
  });

  it("refuses a transition the request is not in the state for", () => {
    const { gate, visit } = heldAt(700, 40);
    expect(() => gate.woke(visit, 100)).toThrow(/woke while held/);
    const other = arrive(1_000);
    gate.enter(other.visit, 0);
    expect(() => gate.turned(other.visit, null, 0, 1_000)).toThrow(/turned while calling/);
  });
});

/** A request asking for a place under a concurrency rule of 3, at a gate of its own. */
function asking(marginMs = TIMEOUT_MS) {
  const gate = new Gate(capRules, new CallTimes(), newHost());
  const { visit, woken } = arrive(TIMEOUT_MS, { batching: false });
  visit.marginMs = marginMs;
  expect(gate.enterPlace(visit)).toEqual({ do: "acquire" });
  expect(visit.at.at).toBe("acquiring");
  return { gate, visit, woken };
}

const acquiredAnswer = (placeId = "place-1") =>
  ({ status: "acquired", nowMs: 5_000, placeId, expiresAtMs: 65_000, free: 0 }) as const;
const refusedAnswer = { status: "refused", nowMs: 5_000, free: 0, inUse: 3 } as const;
/** The object's line: waiting until its clock's 15 000 (10 s from 5 000). */
const queuedAnswer = { status: "queued", nowMs: 5_000, ticketId: "ticket-1", deadlineMs: 15_000, ahead: 2 } as const;
const ok = <T>(value: T) => ({ ok: true as const, value });

describe("a place under a concurrency rule: acquiring, and queued in line for one", () => {
  it("acquiring: a place at once, or a refusal with the places in use, or the object's failure", () => {
    const a = asking();
    expect(endOf(a.gate.acquired(a.visit, ok(acquiredAnswer()), "object", 20))).toEqual({
      by: "place",
      place: acquiredAnswer(),
      waited: false,
    });
    const r = asking();
    expect(endOf(r.gate.acquired(r.visit, ok(refusedAnswer), "object", 20))).toEqual({
      by: "no place",
      refusal: refusedAnswer,
    });
    const f = asking();
    const failed = { ok: false as const, message: "no answer within 1000ms" };
    expect(endOf(f.gate.acquired(f.visit, failed, "object", 20))).toEqual({
      by: "place failure",
      message: failed.message,
    });
  });

  it("queued: sleeps until the end of its wait on this isolate's clock and one timeout more, asking for its place once", () => {
    const { gate, visit } = asking();
    expect(gate.acquired(visit, ok(queuedAnswer), "object", 20)).toEqual({
      do: "queue",
      untilMs: 20 + 10_000 + TIMEOUT_MS,
      ask: true,
      ticketId: "ticket-1",
    });
    expect(visit.at.at).toBe("queued");
    // Woken early for no reason: it sleeps on, without asking again.
    expect(gate.placed(visit, null, "object", 500)).toMatchObject({ do: "queue", ask: false });
  });

  it("queued: the place that frees comes to it, or the object's refusal at the end of its wait", () => {
    const a = asking();
    a.gate.acquired(a.visit, ok(queuedAnswer), "object", 20);
    expect(endOf(a.gate.placed(a.visit, ok(acquiredAnswer()), "object", 3_000))).toEqual({
      by: "place",
      place: acquiredAnswer(),
      waited: true,
    });
    const r = asking();
    r.gate.acquired(r.visit, ok(queuedAnswer), "object", 20);
    expect(endOf(r.gate.placed(r.visit, ok(refusedAnswer), "object", 10_020))).toEqual({
      by: "no place",
      refusal: refusedAnswer,
    });
  });

  it("queued, and the call that awaits its place never lands: refused at its own timer, and its ticket goes back in case a place comes to it later", () => {
    const { gate, visit } = asking();
    gate.acquired(visit, ok(queuedAnswer), "object", 20);
    expect(endOf(gate.placed(visit, null, "object", 11_020))).toEqual({
      by: "no place",
      refusal: { status: "refused", nowMs: 11_020, free: 0, inUse: 3 },
      cancel: { kind: "ticket", name: "object", id: "ticket-1" },
    });
  });

  it("queued, and the object forgot its ticket (it restarted): asks again once, at the end of the new line; a second time, it is refused", () => {
    const { gate, visit } = asking();
    gate.acquired(visit, ok(queuedAnswer), "object", 20);
    expect(gate.placed(visit, ok({ status: "unknown", nowMs: 6_000 } as const), "object", 1_000)).toEqual({
      do: "acquire",
    });
    expect(gate.acquired(visit, ok({ ...queuedAnswer, ticketId: "ticket-2" }), "object", 1_010)).toMatchObject({
      do: "queue",
      ticketId: "ticket-2",
    });
    const broken = { ok: false as const, message: "the object restarted" };
    expect(endOf(gate.placed(visit, broken, "object", 2_000))).toMatchObject({
      by: "no place",
      cancel: { kind: "ticket", id: "ticket-2" },
    });
  });

  it("a client that hangs up in line gives its ticket back at once; a place that comes for it afterwards goes back too", () => {
    const { gate, visit, woken } = asking();
    gate.acquired(visit, ok(queuedAnswer), "object", 20);
    expect(gate.hangUp(visit)).toEqual({ kind: "ticket", name: "object", id: "ticket-1" });
    expect(woken.times).toBe(0);
    expect(endOf(gate.placed(visit, ok(acquiredAnswer("late-place")), "object", 3_000))).toEqual({
      by: "gone",
      cancel: { kind: "place", name: "object", id: "late-place" },
    });
  });

  it.each([
    ["a place", ok(acquiredAnswer()), { kind: "place", name: "object", id: "place-1" }],
    ["a ticket", ok(queuedAnswer), { kind: "ticket", name: "object", id: "ticket-1" }],
    ["a refusal", ok(refusedAnswer), undefined],
  ] as const)("a client that hangs up while it asks: %s that comes back is handed back", (_, answer, cancel) => {
    const { gate, visit } = asking();
    expect(gate.hangUp(visit)).toBeNull();
    const ended = endOf(gate.acquired(visit, answer, "object", 20));
    expect(ended).toEqual(cancel === undefined ? { by: "gone" } : { by: "gone", cancel });
  });
});
