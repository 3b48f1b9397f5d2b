/**
 * @module
 * What the Worker and a key's Durable Object say to each other: the rules
 * to check, the verdicts, leases, receipts and refunds; held requests'
 * bookings; concurrency rules' places. Types and pure
 * helpers only, so Node-side tools can use them too.
 */
import type { BucketCheck } from "../core/kinds/bucket.ts";
import type { QuotaLimit } from "../core/kinds/quota.ts";
import { kindOf } from "../core/kinds/registry.ts";
import type { OverrideSetting } from "../core/overrides.ts";
import type { Priority } from "../core/priorities.ts";
import { type CountedRule, DEFAULT_MAX_HELD, type PlacedRule } from "../core/rules.ts";
import type { Decision, WindowLimit } from "../core/sliding-window.ts";

/**
 * One rule to check, as the Worker sends it: what every counted rule has,
 * and its kind's own part (`kind` names it; absent: a sliding window, as
 * before kinds).
 */
export type RuleCheck = WindowCheck | CheckOf<BucketCheck> | CheckOf<QuotaLimit>;

/** A sliding window's check. */
export type WindowCheck = CheckOf<WindowLimit & { kind?: "window" }>;

/** A rule check of a kind whose own part is `Own`. */
export type CheckOf<Own> = Own & CheckCommon;

/** What every rule check has, whatever its kind. */
type CheckCommon = {
  id: string;
  /** The limit that applies (a tier's, when `tier` chose one); an override still comes first. */
  limit: number;
  /** What one request counts, when not 1. */
  cost?: number;
  /** False for `action = "log"`: the rule is counted and reported but never refuses the request. */
  enforce: boolean;
  /** The rule's limit in each tier of `TIERS` that gives it one, for a client an override puts in a tier. */
  tiers?: Readonly<Record<string, number>>;
  /** Per tier, the kind's own fields that tier gives beside its limit (a token bucket's burst and the limit it goes with). */
  tierOwn?: Readonly<Record<string, Readonly<Record<string, number>>>>;
  /** The rule's penalty (`block_for`) in milliseconds; absent when it has none. */
  blockForMs?: number;
  /** The tier whose limit `limit` is, when a verified token's claim chose it; an override still comes first. */
  tier?: string;
  /**
   * How long a request this rule makes wait may be held until its turn
   * (`max_delay`), when the caller can hold it ({@link CheckOptions.hold});
   * absent: refused at once.
   */
  maxDelayMs?: number;
  /** With `maxDelayMs`: how many of the key's requests may be held at once under the rule; {@link DEFAULT_MAX_HELD} when absent. */
  maxHeld?: number;
  /**
   * An adaptive rule's factor, as the caller last learned it from the rule's
   * controller: the limit that applies to the client (the rule's, a tier's,
   * an override's) is multiplied by it (`scaledLimit`), never below `cost`.
   * Absent on a rule that is not adaptive; a lease under it lasts at most
   * {@link ADAPTIVE_LEASE_MAX_MS}.
   */
  factor?: number;
  /** Under an adaptive rule with priorities, the request's: `factor` is that priority's. */
  priority?: Priority;
  /**
   * A sheddable request its isolate found crowded (its requests in flight
   * at the origin past what the origin answered in time): refused as a
   * reduction, counted nowhere, after the client's override (as a priority
   * with nothing left is). `factor` is unchanged by it.
   */
  crowded?: true;
};

/** How many of a key's requests a rule holds at once when it names no `maxHeld`. */
export { DEFAULT_MAX_HELD };

/** Whether a rule's refusals start a penalty, and a running one is honoured: an enforcing rule with `block_for`. */
export const penalizes = (rule: RuleCheck): boolean => rule.enforce && (rule.blockForMs ?? 0) > 0;

/**
 * Where counts were taken: a rule's row in the object, the row's epoch, and
 * the bucket. Handing a receipt back with a {@link Refund} takes the counts
 * back, unless the row was reset or deleted since (its epoch changed) or the
 * bucket has rotated out: then there is nothing left to take back.
 */
export type Receipt = {
  /** The row: the rule's id and the layout of its buckets. */
  row: string;
  /** Chosen when the row was created; a reset row gets a new one. */
  epoch: number;
  bucket: number;
  /** What the row's kind keeps of the count besides, to hand it back (a token bucket's state after it); absent for a window. */
  mark?: readonly number[];
};

/** A rule's verdict within one check. */
export type RuleVerdict = Decision & {
  /**
   * `w` for this client now, in milliseconds, when it is not the same at
   * every instant or for every client: the calendar period a quota is in.
   */
  windowMs?: number;
  /**
   * The instant the quota resets, Unix milliseconds on the object's clock,
   * when it is a boundary every response names alike (a calendar quota's
   * period end): the headers say it, not the caller's `now` + `resetMs`.
   */
  resetAtMs?: number;
  /** Whether this rule alone would admit the request. */
  ruleAllows: boolean;
  /** Where the request was counted, for a refund; null when it was not counted. */
  counted: Receipt | null;
  /**
   * When this rule refuses: how long the caller may go on refusing this key
   * under this rule without asking, in milliseconds. `retryAfterMs`, or 0
   * while counts that may still be refunded weigh in on the refusal.
   */
  holdsForMs: number;
  /**
   * The limit that applied, when it is not the rule's own: an override's (or
   * its tier's), or any limit under a factor below 1 (the current quota).
   * Absent when the rule's own applied, or none did (unlimited, deny).
   */
  limit?: number;
  /**
   * This rule refused only because of its factor: the limit before the
   * factor would have admitted the request. The caller answers it as a
   * temporary reduction of capacity (503), not a quota exceeded (429).
   */
  reduced?: true;
  /** When an override for this client applied, what kind. */
  override?: OverrideSetting["kind"];
  /** When a tier's limit applied, the tier. */
  tier?: string;
  /**
   * While a penalty (`block_for`) of this rule lasts for this client, what is
   * left of it in milliseconds; absent otherwise. The verdict is then a
   * refusal, and `retryAfterMs` is at least this.
   */
  penaltyMs?: number;
  /**
   * This rule refuses the request whatever the wait: it costs more than the
   * rule ever admits at once (a token bucket's burst). No `Retry-After`
   * comes true; `retryAfterMs` is then only how long the refusal may be
   * remembered.
   */
  never?: true;
  /**
   * The kind's own fields that applied to this client, when a tier or an
   * override gave them beside its limit (a token bucket's `burst`, and the
   * limit it goes with): the rule's quota for this client is its kind's
   * under them.
   */
  own?: Readonly<Record<string, number>>;
};

export type CheckResult = {
  /** The object's clock when it decided, in Unix milliseconds. */
  nowMs: number;
  /** True when every enforcing rule admits; then every rule that admits has counted the request. */
  allowed: boolean;
  /** One verdict per rule, in the order given. */
  verdicts: RuleVerdict[];
  /** Admissions counted ahead for the caller to spend itself, when asked for and granted. */
  lease?: Lease;
  /**
   * With `batch` > 1: how many of the batch's requests were admitted, the
   * first ones in order (`allowed` and `verdicts` are then the last admitted
   * one's, or, none admitted, the refusal).
   */
  admitted?: number;
  /** With `batch` > 1, when some of its requests were admitted and the rest refused: the refusal's verdicts. */
  refused?: RuleVerdict[];
  /**
   * When the request is held ({@link CheckOptions.hold}): booked for its turn.
   * `allowed` is then false (it may not go now), and the verdicts are its
   * admission at `held.atMs`: what it counted where (`counted`), and what it
   * leaves there (`remaining`, `resetMs` from `atMs`).
   */
  held?: Held;
};

/** A held request's booking: send it on at `atMs`; its counts are taken there. */
export type Held = {
  /** Names the booking to the object's `awaitTurn` and `cancelBooking`. */
  bookingId: string;
  /** Its turn, in Unix milliseconds of the object's clock. Going later is safe; going earlier is not. */
  atMs: number;
  /** `atMs` − `nowMs`. */
  waitMs: number;
};

/**
 * What `awaitTurn` answers: the turn has come (at `atMs`, its counts taken
 * where `counted` says, per rule in the order the check gave, null for a
 * rule not counted), or the object knows no such booking (cancelled, or
 * counted long ago).
 */
export type TurnAnswer =
  | {
      status: "turn";
      nowMs: number;
      atMs: number;
      counted: (Receipt | null)[];
      /** The rules (their indexes in the check) an `unlimited` override lifted while the request was held: no headers for them. */
      lifted?: number[];
      /**
       * Of a request planned again while held (an admin change, a factor): each
       * rule's verdict as its turn admitted it, by index in the check (null: as
       * when it was held), for its headers.
       */
      verdicts?: (RuleVerdict | null)[];
    }
  | { status: "unknown"; nowMs: number };

/**
 * What `cancelBooking` did: took back the counts of a booking whose turn had
 * not come (`cancelled`; those after it moved up), refunded those of one
 * already counted (`refunded`), or found none (`unknown`).
 */
export type Cancellation = { status: "cancelled" | "refunded" | "unknown" };

/** What `acquire` asks for a concurrency rule's place. */
export type PlaceRequest = {
  /** Places under the rule: its `limit` (a tier's, where a token's claim chose one); an override comes first. */
  concurrency: number;
  /** A place not renewed for this long is taken back. */
  placeTimeoutMs: number;
  /** How long the request may wait for a place; absent: refused at once when none is free. */
  maxDelayMs?: number;
  /** With `maxDelayMs`: how many of the key's requests may wait at once; {@link DEFAULT_MAX_HELD} when absent. */
  maxHeld?: number;
  /** The rule's limit per tier, for a client an override puts in a tier. */
  tiers?: Readonly<Record<string, number>>;
  /** The tier whose limit `concurrency` is, when a token's claim chose it. */
  tier?: string;
  /**
   * An adaptive rule's factor, as the caller last learned it: the places
   * that apply to the client (the rule's, a tier's, an override's) are
   * multiplied by it (`scaledLimit`), at least 1. Places already held stay
   * until their requests end. Absent on a rule that is not adaptive.
   */
  factor?: number;
  /** Under an adaptive rule with priorities, the request's: `factor` is that priority's. */
  priority?: Priority;
};

/** A place given: hold it while the request is in flight, renew it every third of the timeout, release it at the end. */
export type PlaceAcquired = {
  status: "acquired";
  nowMs: number;
  placeId: string;
  /** When it is taken back unless renewed, in Unix milliseconds. */
  expiresAtMs: number;
  /** Places left free after this one. */
  free: number;
  /** The limit an override (or its tier) gave this client, when one did. */
  limit?: number;
  override?: OverrideSetting["kind"];
  /** The tier whose limit applied (an override's, or a token's `tier_claim`), when one did. */
  tier?: string;
};

/**
 * No place: every one is held (or an override denies the client).
 * `limit`: the number of places that refused it, when an override, a tier
 * or a factor made it other than the rule's. `reduced`: only the factor of
 * an adaptive rule refused it (fewer places are held than the limit before
 * it), and `limit` is the current number.
 */
export type PlaceRefused = {
  status: "refused";
  nowMs: number;
  free: 0;
  inUse: number;
  override?: "deny" | "limit" | "tier";
  reduced?: true;
  limit?: number;
  /** The tier whose limit refused it, when one did. */
  tier?: string;
};

/** The request waits for a place until `deadlineMs`: `awaitPlace(ticketId)` answers when it gets one, or at the deadline. */
export type PlaceQueued = {
  status: "queued";
  nowMs: number;
  ticketId: string;
  deadlineMs: number;
  /** Requests waiting ahead of this one. */
  ahead: number;
  /** The places it waits for, when an override, a tier or a factor made them other than the rule's: its refusal at the deadline says so. */
  limit?: number;
};

export type PlaceAnswer = PlaceAcquired | PlaceRefused | PlaceQueued;

/** What `awaitPlace` answers: a place, none by the deadline, or no such ticket (cancelled, lapsed, or lost). */
export type PlaceWait = PlaceAcquired | PlaceRefused | { status: "unknown"; nowMs: number };

/** What `peekPlaces` answers: a concurrency rule's places for one client, read without taking one. */
export type PlacesNow = {
  nowMs: number;
  /** The places this client has: the rule's, or an override's or a tier's; null when an override lifts or denies the rule. */
  limit: number | null;
  /** Places held now. */
  inUse: number;
  /** Requests waiting for a place. */
  waiting: number;
  override?: OverrideSetting["kind"];
  /** The tier whose limit `limit` is (an override's, or a token's `tier_claim`), when one is. */
  tier?: string;
  /** An override denies the client with no expiry: no wait gives it a place. */
  never?: true;
};

/** What `renew` answers: each place still held, to its new expiry; and the ids not held (released, or taken back). */
export type Renewal = { nowMs: number; renewed: { placeId: string; expiresAtMs: number }[]; unknown: string[] };

/**
 * Admissions counted now, up front, for the caller to spend on its next
 * requests for this key without calling the object. Every unit was
 * admissible when granted, and it must be spent before the current bucket
 * ends, so the counts stay where the requests land and no limit is exceeded.
 */
export type Lease = {
  /** Admissions counted ahead, for every rule of the check. */
  units: number;
  /** Per rule, in the order given, where the units were counted ({@link NOWHERE} for a rule an override lifted). */
  receipts: Receipt[];
  /** How long the caller may spend them, from `nowMs`: the end of the earliest current bucket, at most {@link LEASE_MAX_MS}. */
  expiresInMs: number;
};

/** What a caller asks of a lease: its recent demand for the key, so units are not leased where they will not be spent. */
export type LeaseRequest = {
  /** Units wanted at most. */
  units: number;
  /** Requests for this key the caller saw in the last `seenInMs`, this one included. */
  seen: number;
  seenInMs: number;
};

/** Options of a check. */
export type CheckOptions = {
  /** Admissions to count ahead as a {@link Lease}, if the key is far enough below every limit. */
  lease?: LeaseRequest;
  /** Counts to take back before deciding: units of earlier leases that were never spent. */
  returns?: Refund[];
  /**
   * The caller checks other keys for the same request and may refund this
   * one's counts within this many milliseconds. Until then a refusal of this
   * key is not to be remembered: it may rest on a count about to be given back.
   */
  refundableForMs?: number;
  /**
   * Per rule, in the order given, how long its count may be handed back,
   * when that differs between the rules: a rule whose count the origin's
   * answer settles (`count`, `cost_header`) may give its own back long after
   * the rules beside it can give back theirs. Each rule's row takes its own;
   * `refundableForMs` is then the longest of them (what an object that knows
   * no per-rule windows applies to every row).
   */
  refundableByRuleMs?: number[];
  /**
   * The caller can hold a request until its turn and send it on then. A
   * request that rules with `maxDelayMs` make wait, no longer than the
   * smallest of their delays and with fewer than `maxHeld` held under each,
   * is then booked and answered `held`, not refused. A caller that cannot
   * hold leaves it out and is refused as before (its `Retry-After` counting
   * the bookings ahead). Only with `batch` 1.
   */
  hold?: boolean;
  /**
   * How many requests of the key this check decides, one after another in
   * one turn, each all or nothing as if each had called alone; default 1.
   * Requests that waited in one isolate for a call in flight go together, so
   * n of them cost the object one call, not n.
   */
  batch?: number;
};

/** The receipt of a count never taken (a rule an override lifted): handing it back takes nothing. */
export const NOWHERE: Receipt = { row: "", epoch: 0, bucket: 0 };

/** Leases live at most this long, whatever the period. */
export const LEASE_MAX_MS = 300_000;
/**
 * The longest a lease lasts when an adaptive rule is among its rules: an
 * isolate learns a cut within 1 s (docs/adaptive.md), and units leased
 * before it must not be spent long after.
 */
export const ADAPTIVE_LEASE_MAX_MS = 1_000;
/** A lease takes at most this share of what a rule has left, so keys near a limit are decided one by one. */
export const LEASE_SHARE = 1 / 8;
/** Smaller leases are not worth their bookkeeping. */
export const LEASE_MIN_UNITS = 2;
/**
 * A lease may be this share of a rule's limit whatever the caller's demand:
 * units that few cannot matter to the key. An isolate that never sees the
 * key again strands them until their bucket rotates out, so the share is
 * small enough that 300 such isolates (one per Cloudflare location) strand
 * under 2% of the limit. Below a limit of 32 768 it is less than two units,
 * so there demand alone decides.
 */
export const LEASE_HARMLESS_SHARE = 1 / 16_384;

/** What one request under a rule counts: its cost, 1 by default. */
export const costOf = (rule: { cost?: number | undefined }): number => rule.cost ?? 1;

/** Counts counted here and to be taken back: a request another object refused, or a lease's unspent units. */
export type Refund = { receipt: Receipt; count: number };

/** The units a list of refunds takes back. */
export const unitsOf = (refunds: Refund[]): number => refunds.reduce((n, r) => n + r.count, 0);

export type FailureReason = "timeout" | "overloaded" | "error";

export type LimiterOutcome =
  | {
      ok: true;
      result: CheckResult;
      attempts: number;
      /** The error the first attempt failed with, when a retry decided. */
      retriedAfter?: string;
    }
  | {
      ok: false;
      reason: FailureReason;
      message: string;
      attempts: number;
      /** A call that timed out still runs: what it decides, if it does within one more timeout. */
      late?: Promise<CheckResult | undefined>;
    };

/** The row a rule's counters live in: two rules that share an id but not a bucket layout never share counts. */
export const rowOf = (rule: Pick<WindowLimit, "periodMs" | "precision"> & { id: string }): string =>
  `${rule.id}|${rule.periodMs}|${rule.precision}`;

/** What the object needs to know of a rule: what every counted rule has, and its kind's own part. */
export const toRuleCheck = (rule: CountedRule): RuleCheck =>
  ({
    id: rule.id,
    limit: rule.limit,
    ...kindOf(rule).check?.(rule),
    ...(rule.cost !== undefined && rule.cost !== 1 ? { cost: rule.cost } : {}),
    enforce: rule.action === "block",
    ...(rule.tiers !== undefined && Object.keys(rule.tiers).length > 0 ? { tiers: rule.tiers } : {}),
    ...(rule.tierOwn !== undefined ? { tierOwn: rule.tierOwn } : {}),
    ...(rule.tier !== undefined ? { tier: rule.tier } : {}),
    ...(rule.maxDelayMs !== undefined
      ? { maxDelayMs: rule.maxDelayMs, maxHeld: rule.maxHeld ?? DEFAULT_MAX_HELD }
      : {}),
  }) as RuleCheck;

/** What `acquire` needs of a concurrency rule (one with `concurrency`), with `limit` as its places (a tier's, if chosen). */
export const toPlaceRequest = (rule: PlacedRule): PlaceRequest => ({
  concurrency: rule.limit,
  placeTimeoutMs: rule.placeTimeoutMs,
  ...(rule.maxDelayMs !== undefined ? { maxDelayMs: rule.maxDelayMs, maxHeld: rule.maxHeld ?? DEFAULT_MAX_HELD } : {}),
  ...(rule.tiers !== undefined && Object.keys(rule.tiers).length > 0 ? { tiers: rule.tiers } : {}),
  ...(rule.tier !== undefined ? { tier: rule.tier } : {}),
});

const checks = new WeakMap<CountedRule, RuleCheck>();
/** {@link toRuleCheck}, made once per rule rather than per request. */
export function ruleCheckOf(rule: CountedRule): RuleCheck {
  let check = checks.get(rule);
  if (!check) {
    check = toRuleCheck(rule);
    checks.set(rule, check);
  }
  return check;
}
