/**
 * @module
 * Work a decision leaves to run past its answer, in one place: the only
 * one to hand work to a sink (work.ts), and the only caller of the refund
 * and charge calls. Counts taken
 * for a request that was turned away go back (lease units to their leases,
 * a call's counts to its object); units of keys the isolate no longer keeps
 * are handed back; a call that timed out is watched for its late answer; a
 * call other requests wait for goes on when its own request's client hangs
 * up; a `cost_header` charge is sent; a held request's booking, a ticket
 * in line for a place, a place, is given back; the places of a request in
 * flight are renewed while it is, and released when it ends. Everything sent
 * in the background that does not arrive is written off and counted.
 */
import type { Settings } from "../config/settings.ts";
import type { CountedRule } from "../core/rules.ts";
import {
  cancelBooking,
  cancelTicket,
  chargeKey,
  type LimiterNamespace,
  refundKey,
  releasePlaces,
  renewPlaces,
} from "../object/client.ts";
import { type CheckResult, costOf, type LimiterOutcome, type Refund, unitsOf } from "../object/protocol.ts";
import { keyHashPrefix, logEvent } from "../observe/log.ts";
import type { Batch } from "./batch.ts";
import type { ClientKeys } from "./client-keys.ts";
import type { IsolateCounters } from "./counters.ts";
import type { HeldPlaces } from "./held-places.ts";
import { flushStats, type StatsNamespace, type StatsRecorder } from "./stats.ts";
import { admittedBy, type Cancel, giveBackSpent, type KeyCall, type KeyGroup, type Part } from "./vocabulary.ts";
import type { Sink } from "./work.ts";

/** What the effects need: the namespace, the isolate's keys and counters, and where work past the answer goes. */
export type Effects = {
  settings: Pick<Settings, "timeoutMs">;
  ns: LimiterNamespace;
  isolate: { keys: ClientKeys; counters: IsolateCounters };
  /** The decision's own work, or, once the answer is out, the caller's `waitUntil`. */
  work: Sink;
};

/**
 * Keeps a call going past its request: when the request's client hangs up
 * the runtime cancels the request, and with it the call, which other
 * requests may be waiting for (the lease it may bring, the batch it
 * carries, how it lands).
 */
export function keepGoing(call: Promise<unknown>, effects: Effects): void {
  effects.work.add(call);
}

/**
 * A refused request counts nowhere: lease units go back to their leases,
 * counts to their objects, a held request's booking to its object (taken
 * back before its turn, refunded after), a place to its object; and so
 * does a booking or a ticket a request had when its client hung up.
 */
export function giveBackAll(parts: readonly Part[], effects: Effects): void {
  for (const { group, settlement: s } of parts) {
    switch (s.via) {
      case "lease":
        giveBackSpent(s.spent);
        break;
      case "held":
        giveBack({ kind: "booking", name: s.call.name, id: s.held.bookingId }, effects);
        break;
      case "gone":
        if (s.cancel !== undefined) giveBack(s.cancel, effects);
        break;
      case "place":
        giveBack({ kind: "place", name: s.name, id: s.place.placeId }, effects);
        break;
      default: {
        const admitted = admittedBy(s);
        if (admitted !== null) refundCounted(admitted.name, admitted.result, group.rules, effects);
      }
    }
  }
}

/** Takes back, in the background, what an answer counted for a request that was then turned away. */
function refundCounted(name: string, result: CheckResult, rules: CountedRule[], effects: Effects): void {
  if (!result.allowed) return;
  const refunds = result.verdicts.flatMap((v, j): Refund[] =>
    v.counted ? [{ receipt: v.counted, count: costOf(rules[j]!) }] : [],
  );
  if (refunds.length > 0) refund(name, refunds, effects);
}

/** Hands counts back to an object in the background; what fails to arrive is written off, and counted. */
export function refund(name: string, refunds: Refund[], effects: Effects): void {
  const units = unitsOf(refunds);
  effects.work.add(
    refundKey(effects.ns, name, refunds, effects.settings.timeoutMs).then((taken) => {
      if (!taken) effects.isolate.counters.writeOff("refund failed", units);
    }),
  );
}

/** Charges counts to an object in the background (a `cost_header` said the request cost more). */
export function charge(name: string, charges: Refund[], effects: Effects): void {
  effects.work.add(chargeKey(effects.ns, name, charges, effects.settings.timeoutMs));
}

/** Units of keys the isolate no longer keeps, handed back to their objects. */
export function sendOutbox(effects: Effects): void {
  for (const { name, refunds } of effects.isolate.keys.takeOutbox()) refund(name, refunds, effects);
}

/**
 * A call that timed out may still decide. What it counted for a request that
 * was then turned away is taken back once it does; a lease it brings is kept
 * (its units were counted for this isolate to spend).
 */
export function watchLate(call: KeyCall, group: KeyGroup, turnedAway: boolean, effects: Effects): void {
  const late = call.outcome.ok ? undefined : call.outcome.late;
  if (!late) return;
  effects.work.add(
    late.then((result) => {
      if (!result) return;
      const { verdicts, lease } = result;
      effects.isolate.keys.use(group.digest, call.sentAtMs).keep({
        name: call.name,
        rules: group.rules,
        verdicts,
        lease,
        sentAtMs: call.sentAtMs,
        sent: call.sent,
        asked: false,
      });
      if (turnedAway) refundCounted(call.name, result, group.rules, effects);
      sendOutbox(effects);
    }),
  );
}

/** A batch's call that timed out: what it admits when it answers is written off (see {@link Batch.lateDecision}). */
export function watchLateBatch(
  batch: Batch,
  size: number,
  outcome: LimiterOutcome,
  rules: CountedRule[],
  effects: Effects,
): void {
  const late = outcome.ok ? undefined : outcome.late;
  // What it admits for requests it did not serve goes back to the object with the isolate's next returns.
  if (late)
    effects.work.add(batch.lateDecision(size, late, rules, effects.isolate.keys).then(() => sendOutbox(effects)));
}

/** Settles, in the background, what a call's late answer says, once it says it. */
export function whenLate(
  late: Promise<CheckResult | undefined>,
  then: (result: CheckResult | undefined) => void,
  effects: Effects,
): void {
  effects.work.add(late.then(then));
}

/** Sends the isolate's statistics to the statistics object, in the background, when a flush is due. */
export function flushStatsIfDue(recorder: StatsRecorder, ns: StatsNamespace, nowMs: number, effects: Effects): void {
  if (recorder.due(nowMs)) effects.work.add(flushStats(recorder, ns, { nowMs }));
}

/**
 * Hands back, in the background, what a request held at its key's object:
 * a held request's booking (the next in line moves up), its ticket in line
 * for a place, or a place. What does not arrive is written off and counted:
 * a booking or a place then comes back on its own (at its turn's window's
 * end, at the place's timeout), a ticket at its deadline.
 */
export function giveBack(cancel: Cancel, effects: Effects): void {
  const { ns, settings, isolate } = effects;
  const { timeoutMs } = settings;
  const sent =
    cancel.kind === "booking"
      ? cancelBooking(ns, cancel.name, cancel.id, timeoutMs)
      : cancel.kind === "ticket"
        ? cancelTicket(ns, cancel.name, cancel.id, timeoutMs)
        : releasePlaces(ns, cancel.name, [cancel.id], timeoutMs);
  effects.work.add(
    sent.then((answered) => {
      if (!answered.ok) isolate.counters.writeOff(cancel.kind === "booking" ? "cancel failed" : "release failed", 1);
    }),
  );
}

/**
 * How long a place whose request's client hung up is held after the
 * request's connection to the origin was closed: the edge test saw the
 * origin learn of the close up to a millisecond after the next request,
 * sent on the freed place, reached it; 20 ms later it had always learnt.
 */
export const HANG_UP_GRACE_MS = 20;

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Why a request in flight ended, as its places are released. */
export type EndedBy = "sent" | "hung up" | "origin failed" | "closed";

/** A request in flight at the origin with places: renewed while it is, released when it ends. */
export type InFlight = {
  /** Ends it: its places are released, once; later calls do nothing. */
  end(why: EndedBy): void;
};

/** A place a request holds: its key's places (for renewals shared by the key's requests), object, id and timeout. */
export type HeldPlace = { keyPlaces: HeldPlaces; name: string; placeId: string; rule: string; timeoutMs: number };

/**
 * Holds a request's places while it is in flight: each is renewed every
 * third of its timeout, by a timer of the request's own (the key's other
 * requests' places due within a sixth of theirs go with the same call), and
 * all are released, in the background, when the request ends.
 */
export function holdPlaces(places: HeldPlace[], effects: Effects & { isolate: { clock: () => number } }): InFlight {
  const { clock } = effects.isolate;
  const timers = new Map<HeldPlace, ReturnType<typeof setTimeout>>();
  let ended = false;
  const schedule = (place: HeldPlace, inMs: number) => {
    timers.set(
      place,
      setTimeout(() => void renew(place), Math.max(0, inMs)),
    );
  };
  const renew = async (place: HeldPlace) => {
    if (ended) return;
    const nowMs = clock();
    const due = place.keyPlaces.toRenew(place.placeId, nowMs);
    if (due === null) {
      schedule(place, place.keyPlaces.nextRenewalMs(place.placeId, nowMs) - nowMs);
      return;
    }
    const answered = await renewPlaces(effects.ns, place.name, due, effects.settings.timeoutMs);
    if (answered.ok) {
      for (const lost of answered.value.unknown) {
        const held = place.keyPlaces.drop(lost);
        if (held === undefined) continue;
        logEvent(
          {
            event: "place_lost",
            rule: held.rule,
            key: keyHashPrefix(place.name),
            message:
              "the object took the place back (it was not renewed in time, or the client was reset): the request is no longer counted",
          },
          "warn",
        );
      }
    }
    if (!ended && place.keyPlaces.holds(place.placeId)) {
      schedule(place, place.keyPlaces.nextRenewalMs(place.placeId, clock()) - clock());
    }
  };
  const nowMs = clock();
  for (const place of places) {
    place.keyPlaces.hold(place.placeId, place.rule, place.timeoutMs, nowMs);
    schedule(place, place.timeoutMs / 3);
  }
  return {
    end(why) {
      if (ended) return;
      ended = true;
      for (const timer of timers.values()) clearTimeout(timer);
      const byName = new Map<string, string[]>();
      for (const place of places) {
        place.keyPlaces.drop(place.placeId);
        const ids = byName.get(place.name) ?? [];
        ids.push(place.placeId);
        byName.set(place.name, ids);
      }
      // A client gone mid-request: its connection to the origin was closed just now; the origin sees that
      // before another request, sent on the place freed, reaches it.
      const closing = why === "hung up" ? pause(HANG_UP_GRACE_MS) : undefined;
      for (const [name, ids] of byName) {
        const release = () => releasePlaces(effects.ns, name, ids, effects.settings.timeoutMs);
        effects.work.add(
          (closing === undefined ? release() : closing.then(release)).then((answered) => {
            if (!answered.ok) effects.isolate.counters.writeOff("release failed", ids.length);
          }),
        );
      }
    },
  };
}
