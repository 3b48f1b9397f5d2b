/**
 * @module
 * The isolate's words, and the one place that reads a settlement: key
 * groups, calls, how a call landed, refusals the isolate knows of, lease
 * units spent, and the settlement of one key group of one request. A leaf:
 * it imports nothing else of the isolate layer, and every file of it may
 * import from here.
 */
import type { CountedRule, PlacedRule, Rule } from "../core/rules.ts";
import type {
  CheckResult,
  FailureReason,
  Held,
  LimiterOutcome,
  PlaceAcquired,
  PlaceRefused,
  Receipt,
  RuleVerdict,
} from "../object/protocol.ts";

/** The rules of one request that share a client key, and so one Durable Object. */
export type KeyGroup = {
  canonical: string;
  /** The isolate's digest of `canonical`. */
  digest: string;
  /** Its counted rules (a window, …): one check decides them all. */
  rules: CountedRule[];
  /** Its rules that give places (concurrency): a place under each, once the counted rules admit the request. */
  places: PlacedRule[];
};

/** A group's call to its object: the object's name, what came back, and when it was sent (isolate time). */
export type KeyCall = { name: string; outcome: LimiterOutcome; sentAtMs: number; sent: number };

/** A call the object answered. */
export type AnsweredCall = KeyCall & { outcome: Extract<LimiterOutcome, { ok: true }> };

/** What is to be handed back for a request whose client hung up or that was turned away once it had it. */
export type Cancel =
  /** A held request's booking: taken back before its turn, refunded after it. */
  | { kind: "booking"; name: string; id: string }
  /** A request's place in the line for a place (or the place given to it and not collected). */
  | { kind: "ticket"; name: string; id: string }
  /** A place it holds. */
  | { kind: "place"; name: string; id: string };

/**
 * A held request's turn, as the request reads it once it has come: where
 * each rule's count was taken (per rule, in the order checked; null for one
 * not counted), or null when the request went on its own timer before the
 * object said; then `later` is what the object says, if it does.
 */
export type Turn = { counted: (Receipt | null)[] | null; later?: Promise<(Receipt | null)[] | null> };

/** How a call ended, as the requests that waited for it read it. */
export type Landing =
  | { ok: true }
  /** `name` is the key's object name, for the waiters' log lines. */
  | { ok: false; reason: FailureReason; message: string; attempts: number; name: string };

/** A call that failed, as the requests that waited for it share it. */
export type Failure = Extract<Landing, { ok: false }>;

/** The parts of a verdict that say what applied to the client, and the quota units it had left (`r`). */
export type Applied = Pick<RuleVerdict, "limit" | "override" | "tier" | "reduced" | "never" | "remaining" | "own">;

/** One refusal the isolate knows of, for one client key under one rule. */
export class KnownRefusal {
  private memo: { seconds: number; rules: readonly Rule[]; value: unknown } | null = null;
  /** Isolate time (Unix ms) at which the object admits this key again, if nothing else is admitted. */
  readonly retryAtMs: number;
  /** Isolate time until which this entry answers: `retryAtMs`, or sooner under the cap. */
  readonly untilMs: number;
  /** The weighted count the object saw when it refused. */
  readonly weighted: number;
  /** The key's object name (SHA-256 hex), for log lines. */
  readonly name: string;
  /** What applied to this client when it was refused: the limit, an override and its tier, if any, and the units left (fewer than a request's cost). */
  readonly applied: Applied;

  constructor(retryAtMs: number, untilMs: number, weighted: number, name: string, applied: Applied) {
    this.retryAtMs = retryAtMs;
    this.untilMs = untilMs;
    this.weighted = weighted;
    this.name = name;
    this.applied = applied;
  }

  /**
   * A value derived from this refusal (the 429 sent again), made once and
   * reused while the wait reads the same whole `seconds` and the request
   * matched the same `rules`, the same objects in the same order.
   */
  reuse<T>(seconds: number, rules: readonly Rule[], make: () => T): T {
    const memo = this.memo;
    if (memo !== null && memo.seconds === seconds && sameRules(memo.rules, rules)) return memo.value as T;
    const value = make();
    this.memo = { seconds, rules, value };
    return value;
  }
}

/** Whether two lists hold the same rule objects in the same order. */
export function sameRules(a: readonly Rule[], b: readonly Rule[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A refusal the isolate knows of, for one rule of a group, and the group's key digest. */
export type RuleRefusal = { rule: Rule; digest: string; refusal: KnownRefusal };

/**
 * A lease a spent unit came from, as the request that spent it sees it:
 * where the unit was counted, and how to give it back. The key's state
 * owns the lease; only it changes it.
 */
export interface LeaseSource {
  readonly receipt: Receipt;
  /** The key's object name, known once a call granted the lease. */
  readonly name: string | null;
  /** Gives `units` back to this lease, or, once it is retired, to its object. */
  giveBack(units: number): void;
}

/** One request's units spent per rule of a key group (its cost): the verdicts to report, and where to give them back. */
export type SpentUnits = { verdicts: RuleVerdict[]; leases: LeaseSource[]; costs: number[] };

/** Gives a request's spent units back to the leases they came from: every rule's, or only those at `indexes`. */
export function giveBackSpent(spent: SpentUnits, indexes?: number[]): void {
  if (indexes === undefined) for (let j = 0; j < spent.leases.length; j++) spent.leases[j]!.giveBack(spent.costs[j]!);
  else for (const j of indexes) spent.leases[j]!.giveBack(spent.costs[j]!);
}

/** How a key group was settled. */
export type Settlement =
  | { via: "lease"; spent: SpentUnits }
  | { via: "known"; known: RuleRefusal[] }
  | { via: "call"; call: KeyCall }
  /**
   * Another request's call for this key failed while this one waited for it: the failure is shared, not
   * repeated. Or this request's time ran out while it waited for a call: then, when it was in the batch
   * that call carries and its rules settle by the response, `late` is what the batch decides for it, if
   * it does in time.
   */
  | { via: "shared"; failure: Failure; late?: Promise<CheckResult | undefined> }
  /**
   * Held until its turn (the object booked it, and it has come): the call's verdicts are its admission
   * then; its counts were taken where `turn` says.
   */
  | { via: "held"; call: AnsweredCall; held: Held; turn: Turn }
  /**
   * The request's client hung up while it waited: it decides nothing more. (The runtime cancels such a
   * request, unless it has work in the background: then it goes on, and must not send, or be served by,
   * what it waited for.) `cancel`: a booking it had, to give back.
   */
  | { via: "gone"; cancel?: Cancel }
  /** A place under a rule that gives places: held while the request is in flight. `waited`: it waited in line for it. */
  | { via: "place"; name: string; place: PlaceAcquired; waited: boolean }
  /** No place: none free (or none by the end of its wait), or an override denies the client. */
  | { via: "no place"; name: string; refusal: PlaceRefused }
  /** The object could not be asked for a place: the rule's `on_error` applies. */
  | { via: "failed"; failure: Failure };

export const GONE: Settlement = Object.freeze({ via: "gone" });

/** Nothing to count: a key group whose rules all give places has no counted rules to settle. */
export const NOTHING_COUNTED: Settlement = Object.freeze({
  via: "lease",
  spent: Object.freeze({ verdicts: [], leases: [], costs: [] }),
}) as Settlement;

/**
 * One part of a request's decision: one key group's rules that one call to
 * its object decides, and how they were settled. A group's counted rules
 * (a window, …) are one part; each rule of it that gives places
 * (concurrency) is a part of its own, taken once the counted parts admit
 * the request.
 */
export type Part<R extends Rule = Rule> = { group: KeyGroup; rules: readonly R[]; settlement: Settlement };

// Reading a settlement: every file that needs a fact of one asks here.

/** The key's object name, when the settlement knows it. */
export function nameOf(settlement: Settlement): string | null {
  switch (settlement.via) {
    case "call":
    case "held":
      return settlement.call.name;
    case "shared":
    case "failed":
      return settlement.failure.name;
    case "place":
    case "no place":
      return settlement.name;
    case "lease":
      return settlement.spent.leases[0]?.name ?? null;
    default:
      return null;
  }
}

/**
 * How long a request refused a place is told to wait, in milliseconds: a
 * place frees whenever a request of the client ends, which nothing here
 * can foresee, so the shortest wait `Retry-After` can say (1 second) is
 * the honest one; a client that comes back sooner is refused again, at
 * the cost of one call.
 */
export const PLACE_RETRY_MS = 1_000;

/**
 * Rule `j`'s verdict in a part, when its settlement has one: from a lease
 * unit, from the object's answer, or a place's (given or refused) as a
 * verdict: `remaining` is the places free.
 */
export function verdictOf(part: Part, j: number): RuleVerdict | undefined {
  const { settlement } = part;
  switch (settlement.via) {
    case "lease":
      return settlement.spent.verdicts[j];
    case "call":
      return settlement.call.outcome.ok ? settlement.call.outcome.result.verdicts[j] : undefined;
    case "held":
      return settlement.call.outcome.result.verdicts[j];
    case "place":
      return placeVerdict(part.rules[j]!, settlement.place);
    case "no place":
      return placeVerdict(part.rules[j]!, settlement.refusal);
    default:
      return undefined;
  }
}

function placeVerdict(rule: Rule, answer: PlaceAcquired | PlaceRefused): RuleVerdict {
  const acquired = answer.status === "acquired";
  return {
    allowed: acquired,
    ruleAllows: acquired,
    weighted: acquired ? (answer.limit ?? rule.limit) - answer.free : answer.inUse,
    remaining: acquired ? answer.free : 0,
    retryAfterMs: acquired ? 0 : PLACE_RETRY_MS,
    resetMs: 0,
    counted: null,
    holdsForMs: 0,
    ...(answer.limit !== undefined ? { limit: answer.limit } : {}),
    ...(!acquired && answer.reduced === true ? { reduced: true } : {}),
    ...(answer.override !== undefined ? { override: answer.override } : {}),
    ...(answer.tier !== undefined ? { tier: answer.tier } : {}),
  };
}

/** Whether the request waited for this part: held until its turn, or in line for its place. */
export const waitedFor = (settlement: Settlement): boolean =>
  settlement.via === "held" || (settlement.via === "place" && settlement.waited);

/** Whether this part took a call to the key's object (its latency is worth counting). */
export const calledObject = (settlement: Settlement): boolean =>
  settlement.via === "call" ||
  settlement.via === "held" ||
  settlement.via === "place" ||
  settlement.via === "no place" ||
  settlement.via === "failed";

/** Where rule `j`'s count for this request was taken, or null when it was not counted. */
export function receiptOf(settlement: Settlement, j: number): Receipt | null {
  if (settlement.via === "lease") return settlement.spent.leases[j]!.receipt;
  if (settlement.via === "call" && settlement.call.outcome.ok)
    return settlement.call.outcome.result.verdicts[j]?.counted ?? null;
  // A held request's counts: where its turn took them (a cancellation ahead may have moved it to another bucket).
  if (settlement.via === "held") return settlement.turn.counted?.[j] ?? null;
  return null;
}

/** Why the key could not be decided, when it could not: its own call's failure, or a shared one. */
export function failureOf(settlement: Settlement): { reason: FailureReason; message: string; attempts: number } | null {
  if (settlement.via === "shared" || settlement.via === "failed") return settlement.failure;
  if (settlement.via === "call" && !settlement.call.outcome.ok) return settlement.call.outcome;
  return null;
}

/**
 * The answer still to come of a call that timed out (its request went on
 * under `on_error = "open"`), or of the batch it ran out waiting for: what
 * it counts for the request, if it decides in time.
 */
export function lateAnswerOf(settlement: Settlement): Promise<CheckResult | undefined> | undefined {
  if (settlement.via === "shared") return settlement.late;
  if (settlement.via === "held") return heldLater(settlement);
  if (settlement.via !== "call" || settlement.call.outcome.ok) return undefined;
  return settlement.call.outcome.late;
}

/** A held request that went on its own timer: its turn's receipts, as a late answer reads them, once the object says. */
function heldLater(settlement: Extract<Settlement, { via: "held" }>): Promise<CheckResult | undefined> | undefined {
  const { later } = settlement.turn;
  if (settlement.turn.counted !== null || later === undefined) return undefined;
  const result = settlement.call.outcome.result;
  return later.then((counted) =>
    counted === null
      ? undefined
      : { ...result, allowed: true, verdicts: result.verdicts.map((v, j) => ({ ...v, counted: counted[j] ?? null })) },
  );
}

/** What the object counted for this request, when its own answer admitted it: the counts to refund if it is turned away. */
export function admittedBy(settlement: Settlement): { name: string; result: CheckResult } | null {
  if (settlement.via !== "call" || !settlement.call.outcome.ok || !settlement.call.outcome.result.allowed) return null;
  return { name: settlement.call.name, result: settlement.call.outcome.result };
}
