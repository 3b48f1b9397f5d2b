/**
 * @module
 * Settles the counted rules of one key group of one request that no lease
 * or known refusal covered when it came in: takes it through its key's
 * gate (gate.ts), carrying out each step the gate returns: a call of its
 * own, a sleep on its own timer, a look for a lease unit or a known
 * refusal, the batch it sends, a hold until its booked turn. The only
 * `await`s are on the request's own promises and calls, and it listens for
 * its client hanging up once per gate (waits.ts).
 */
import type { Settings } from "../config/settings.ts";
import { settledByAnswer } from "../core/rules.ts";
import { awaitTurn, deadline } from "../object/client.ts";
import type { CheckResult, Receipt } from "../object/protocol.ts";
import type { Batch, Ticket } from "./batch.ts";
import { batchable, type CallContext, callObject, objectName, refundableForMs } from "./call.ts";
import type { ClientKeys } from "./client-keys.ts";
import { keepGoing } from "./effects.ts";
import { type End, type Gate, type Step, Visit } from "./gate.ts";
import { GONE, type KeyCall, type KeyGroup, type RuleRefusal, type Settlement } from "./vocabulary.ts";
import { HangUpWatch, sleep } from "./waits.ts";

/** What settling needs besides the group. */
export type SettleContext = CallContext & {
  settings: Settings;
  /** Whether the request has other key groups, or places to take, which may refuse it: then counts taken here may be refunded. */
  otherKeys: boolean;
  /** How long the request may wait (held, or in line for a place) before the others have decided, at most. */
  waitMs?: number;
  /** Aborts when the request's client hangs up (with `enable_request_signal`): a waiter is then no longer woken. */
  gone?: AbortSignal | undefined;
};

/** The refusals the isolate knows of for a group's enforcing rules. */
export function knownRefusals(group: KeyGroup, keys: ClientKeys, nowMs: number): RuleRefusal[] {
  const state = keys.peek(group.digest);
  if (state === undefined) return NONE;
  let known: RuleRefusal[] = NONE;
  for (const rule of group.rules) {
    if (rule.action !== "block") continue;
    const refusal = state.refusals.get(rule, nowMs);
    if (refusal === undefined) continue;
    if (known === NONE) known = [];
    known.push({ rule, digest: group.digest, refusal });
  }
  return known;
}

const NONE: RuleRefusal[] = [];

/** A lease unit for the group, or the refusals the isolate knows of for it, or null. */
function tryLocally(group: KeyGroup, keys: ClientKeys, nowMs: number): Settlement | null {
  const spent = keys.peek(group.digest)?.leases.spend(group.rules, nowMs);
  if (spent) return { via: "lease", spent };
  const known = knownRefusals(group, keys, nowMs);
  return known.length > 0 ? { via: "known", known } : null;
}

/**
 * Settles a group. `deadlineMs` is this request's own deadline, in isolate
 * time. While a call for the key is in flight, the request waits for it; if
 * it lands without deciding the request (no lease unit left for it, no
 * refusal), the request goes with the others that waited for it in one
 * batch: one call decides them all.
 */
export async function settle(group: KeyGroup, deadlineMs: number, ctx: SettleContext): Promise<Settlement> {
  const { isolate } = ctx;
  const { keys, clock } = isolate;
  const gate = keys.use(group.digest, clock()).gate(group.rules);
  const visit = new Visit(
    deadlineMs,
    batchable(group, keys),
    refundableForMs(group, ctx.otherKeys, ctx.settings.timeoutMs, ctx.waitMs ?? 0),
  );
  // Held: the object's answer to awaitTurn once it came, and its receipts still to come.
  let turnAnswer: TurnAnswerOrFailed | null = null;
  let later: Promise<(Receipt | null)[] | null> | undefined;
  const watch = new HangUpWatch(gate, visit, ctx, ctx.gone);
  try {
    let step: Step = gate.enter(visit, clock());
    for (;;) {
      switch (step.do) {
        case "done":
          return await ended(step.end, group, ctx, later);
        case "hold":
          if (step.ask) {
            // A deadline past the turn: the object answers then. Its answer wakes the request early.
            const waitMs = Math.max(0, step.untilMs - clock()) + 2 * ctx.settings.timeoutMs;
            later = awaitTurn(ctx.ns, step.name, step.bookingId, waitMs).then((answered) => {
              turnAnswer = answered.ok ? answered.value : "failed";
              visit.wake();
              return answered.ok && answered.value.status === "turn" ? answered.value.counted : null;
            });
          }
          await sleep(visit, step.untilMs - clock());
          step = gate.turned(visit, turnAnswer, clock(), clock() + ctx.settings.timeoutMs);
          break;
        case "wait":
          await sleep(visit, step.untilMs - clock());
          step = gate.woke(visit, clock());
          break;
        case "try":
          step = gate.tried(visit, tryLocally(group, keys, clock()), clock());
          break;
        case "call": {
          const callBy = step.deadlineMs ?? deadlineMs;
          const call = callObject(group, gate, callBy, { alone: true, refundableMs: visit.refundableMs }, ctx);
          watch.calling = call;
          const answered = await call;
          watch.calling = null;
          step = gate.called(visit, answered, clock());
          break;
        }
        case "send": {
          const answered = await sendBatch(
            group,
            gate,
            visit,
            step.batch,
            (call) => {
              watch.calling = call;
            },
            ctx,
          );
          watch.calling = null;
          step = gate.sent(visit, answered, clock());
          break;
        }
      }
    }
  } finally {
    watch.stop();
  }
}

/**
 * Sends a batch, this request in it. The batch holds requests that came
 * after this one, whose deadlines are later: its call gets a whole timeout
 * of its own, and this request waits for it only until its own deadline.
 * (Bound to this request's deadline, a batch sent by a request that had
 * waited long would time out with the answers of all the others in it.)
 * Past its deadline, the call goes on without it: it carries the others'
 * answers, and must not end with this request's response.
 */
async function sendBatch(
  group: KeyGroup,
  gate: Gate,
  visit: Visit,
  batch: Batch,
  making: (call: Promise<KeyCall>) => void,
  ctx: SettleContext,
): Promise<KeyCall | "timeout"> {
  const { clock } = ctx.isolate;
  const { timeoutMs } = ctx.settings;
  const sealed = gate.sendBatch(visit, clock(), timeoutMs);
  const refundableMs = Math.max(visit.refundableMs, sealed.refundableMs);
  const caller = { alone: false as const, batch, flight: sealed.flight, size: sealed.size, refundableMs };
  const call = callObject(group, gate, clock() + timeoutMs, caller, ctx);
  making(call);
  const own = deadline(Math.max(0, visit.deadlineMs - clock()));
  try {
    const answered = await Promise.race([call, own.expired]);
    if (answered === "timeout" && !visit.gone) keepGoing(call, ctx);
    return answered;
  } finally {
    own.clear();
  }
}

type TurnAnswerOrFailed = Parameters<Gate["turned"]>[1];

/** The settlement a request leaves the gate with; `later`, a held request's receipts still to come. */
async function ended(
  end: End,
  group: KeyGroup,
  ctx: SettleContext,
  later?: Promise<(Receipt | null)[] | null>,
): Promise<Settlement> {
  switch (end.by) {
    case "gone":
      return end.cancel === undefined ? GONE : { via: "gone", cancel: end.cancel };
    case "turn": {
      const { call, held, counted } = end;
      const turn = counted === null && later !== undefined ? { counted, later } : { counted };
      return { via: "held", call, held, turn };
    }
    case "found":
      return end.settlement;
    case "answer":
      return orHeldUnit(end.settlement, group, ctx);
    case "failure":
      return { via: "shared", failure: end.failure };
    case "ran out":
      return ranOut(group, ctx, end.batch && lateAnswer(group, end.batch, end.ticket!, ctx));
  }
}

/**
 * What the batch a request ran out waiting for decides for it, when its
 * rules settle what it counts by the response (`count`, `cost_header`): the
 * request may go on (`on_error = "open"`), and its response then settles
 * that. Watched for as long as the batch's call and its late answer may
 * take. Undefined for other rules, and when a rule fails closed (the
 * request is refused): nothing is watched.
 */
function lateAnswer(
  group: KeyGroup,
  batch: Batch,
  ticket: Ticket,
  ctx: SettleContext,
): Promise<CheckResult | undefined> | undefined {
  const goesOn = group.rules.every((rule) => rule.action === "log" || rule.onError === "open");
  if (!goesOn || !group.rules.some(settledByAnswer)) return undefined;
  return batch.lateAnswer(ticket, 2 * ctx.settings.timeoutMs);
}

/**
 * A refusal by the object, unless this isolate holds a unit for the key: a
 * concurrent call may have brought a lease while this one was on its way,
 * and the object counted it when it refused. Those units are admissions
 * counted for this isolate, so one of them is this request's.
 */
function orHeldUnit(settlement: Settlement, group: KeyGroup, ctx: SettleContext): Settlement {
  if (settlement.via !== "call" || !settlement.call.outcome.ok || settlement.call.outcome.result.allowed) {
    return settlement;
  }
  const spent = ctx.isolate.keys.peek(group.digest)?.leases.spend(group.rules, ctx.isolate.clock());
  return spent ? { via: "lease", spent } : settlement;
}

/**
 * A request whose time ran out while it waited for a call that was not
 * presumed lost: the same failure as a call of its own that timed out.
 */
async function ranOut(
  group: KeyGroup,
  ctx: SettleContext,
  late?: Promise<CheckResult | undefined>,
): Promise<Settlement> {
  const name = await objectName(group, ctx.isolate.keys.peek(group.digest));
  const message = `no decision within ${ctx.settings.timeoutMs}ms`;
  const failure = { ok: false, reason: "timeout", message, attempts: 0, name } as const;
  return late === undefined ? { via: "shared", failure } : { via: "shared", failure, late };
}
