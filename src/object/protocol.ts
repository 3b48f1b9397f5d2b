/**
 * @module
 * What the Worker and a key's Durable Object say to each other: the rules
 * to check, the verdicts, leases, receipts and refunds. Types and pure
 * helpers only, so Node-side tools can use them too.
 */
import type { OverrideSetting } from "../core/overrides.ts";
import type { Rule } from "../core/rules.ts";
import type { Decision, WindowLimit } from "../core/sliding-window.ts";

/** One rule to check, as the Worker sends it. */
export type RuleCheck = WindowLimit & {
  id: string;
  /** False for `action = "log"`: the rule is counted and reported but never refuses the request. */
  enforce: boolean;
  /** The rule's limit in each tier of `TIERS` that gives it one, for a client an override puts in a tier. */
  tiers?: Readonly<Record<string, number>>;
  /** The rule's penalty (`block_for`) in milliseconds; absent when it has none. */
  blockForMs?: number;
  /** The tier whose limit `limit` is, when a verified token's claim chose it; an override still comes first. */
  tier?: string;
};

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
};

/** A rule's verdict within one check. */
export type RuleVerdict = Decision & {
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
  /** The limit an override (or its tier) gave this client; absent when the rule's own applied, or none did (unlimited, deny). */
  limit?: number;
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
};

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

/** What the object needs to know of a rule. */
export const toRuleCheck = (rule: Rule): RuleCheck => ({
  id: rule.id,
  limit: rule.limit,
  periodMs: rule.periodMs,
  precision: rule.precision,
  strict: rule.strict,
  ...(rule.cost !== undefined && rule.cost !== 1 ? { cost: rule.cost } : {}),
  enforce: rule.action === "block",
  ...(rule.tiers !== undefined && Object.keys(rule.tiers).length > 0 ? { tiers: rule.tiers } : {}),
  ...(rule.blockForMs > 0 ? { blockForMs: rule.blockForMs } : {}),
  ...(rule.tier !== undefined ? { tier: rule.tier } : {}),
});

const checks = new WeakMap<Rule, RuleCheck>();
/** {@link toRuleCheck}, made once per rule rather than per request. */
export function ruleCheckOf(rule: Rule): RuleCheck {
  let check = checks.get(rule);
  if (!check) {
    check = toRuleCheck(rule);
    checks.set(rule, check);
  }
  return check;
}
