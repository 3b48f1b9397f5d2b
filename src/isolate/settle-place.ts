/**
 * @module
 * A request's place under one rule that gives places (concurrency), once
 * its counted rules admitted it: asked for at its key's object, and, when
 * none is free and the rule has `max_delay`, waited for in line. Carries
 * out each step the key's gate returns for it (gate.ts).
 */
import type { Settings } from "../config/settings.ts";
import type { PlacedRule } from "../core/rules.ts";
import { type Answered, acquirePlace, awaitPlace } from "../object/client.ts";
import { type PlaceRequest, type PlaceWait, toPlaceRequest } from "../object/protocol.ts";
import { type CallContext, objectName } from "./call.ts";
import { giveBack } from "./effects.ts";
import { type PlaceEnd, type PlaceStep, Visit } from "./gate.ts";
import { GONE, type KeyGroup, type Settlement } from "./vocabulary.ts";
import { HangUpWatch, sleep } from "./waits.ts";

/** What taking a place needs besides the group and rule. */
export type PlaceContext = CallContext & {
  settings: Settings;
  /** Aborts when the request's client hangs up (with `enable_request_signal`). */
  gone: AbortSignal | undefined;
};

/**
 * A place for the request under one concurrency rule of its group, once
 * its rate rules admitted it (or its held turn came): asked for, and, when
 * none is free and the rule has `max_delay`, waited for in line, on a timer
 * of its own at the end of the wait and on the object's answer to
 * `awaitPlace`. A client that hangs up gives its ticket, or the place that
 * came, back. `deadlineMs`: the asking call's, in isolate time.
 */
export async function settlePlace(
  group: KeyGroup,
  rule: PlacedRule,
  deadlineMs: number,
  ctx: PlaceContext,
): Promise<Settlement> {
  const { isolate, settings } = ctx;
  const { keys, clock } = isolate;
  const state = keys.use(group.digest, clock());
  const gate = state.gate([rule]);
  const visit = new Visit(deadlineMs, false, 0);
  visit.marginMs = settings.timeoutMs;
  const name = await objectName(group, state);
  let waited: Answered<PlaceWait> | null = null;
  const watch = new HangUpWatch(gate, visit, ctx, ctx.gone);
  try {
    let step: PlaceStep = gate.enterPlace(visit);
    for (;;) {
      switch (step.do) {
        case "done":
          return placeEnded(step.end, name, ctx);
        case "acquire": {
          const leftMs = Math.max(1, Math.max(deadlineMs, clock() + settings.timeoutMs / 2) - clock());
          const call = acquirePlace(
            ctx.ns,
            name,
            rule.id,
            isolate.adaptive.placeRequestOf(rule, placeRequestOf(rule)),
            leftMs,
          );
          watch.calling = call;
          const answered = await call;
          watch.calling = null;
          step = gate.acquired(visit, answered, name, clock());
          break;
        }
        case "queue":
          if (step.ask) {
            waited = null;
            const waitMs = Math.max(0, step.untilMs - clock()) + settings.timeoutMs;
            void awaitPlace(ctx.ns, name, step.ticketId, waitMs).then((answered) => {
              waited = answered;
              visit.wake();
            });
          }
          await sleep(visit, step.untilMs - clock());
          step = gate.placed(visit, waited, name, clock());
          break;
      }
    }
  } finally {
    watch.stop();
  }
}

/** How a place was settled, from how the request left its gate; what it must hand back goes back now. */
function placeEnded(end: PlaceEnd, name: string, ctx: PlaceContext): Settlement {
  switch (end.by) {
    case "place":
      return { via: "place", name, place: end.place, waited: end.waited };
    case "no place":
      if (end.cancel !== undefined) giveBack(end.cancel, ctx);
      return { via: "no place", name, refusal: end.refusal };
    case "place failure": {
      const reason = end.message.startsWith("no answer within") ? "timeout" : "error";
      return { via: "failed", failure: { ok: false, reason, message: end.message, attempts: 1, name } };
    }
    case "gone":
      if (end.cancel !== undefined) giveBack(end.cancel, ctx);
      return GONE;
  }
}

const placeRequests = new WeakMap<PlacedRule, PlaceRequest>();
/**
 * What `acquire` asks for a rule, made once per rule: a shadow rule
 * (`action = "log"`) never waits in line, as it never refuses.
 */
function placeRequestOf(rule: PlacedRule): PlaceRequest {
  let request = placeRequests.get(rule);
  if (request === undefined) {
    const { maxDelayMs: _delay, maxHeld: _held, ...now } = toPlaceRequest(rule);
    request = rule.action === "log" ? now : toPlaceRequest(rule);
    placeRequests.set(rule, request);
  }
  return request;
}
