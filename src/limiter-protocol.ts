/**
 * @module
 * What the Worker and a key's Durable Object say to each other: the rules
 * to check, the verdicts, leases and refunds. Types and pure helpers only,
 * so Node-side tools can use them too.
 */
import type { Rule } from "./core/rules.ts";
import type { Decision, WindowLimit } from "./core/sliding-window.ts";

/** One rule to check, as the Worker sends it. */
export type RuleCheck = WindowLimit & {
  id: string;
  /** False for `action = "log"`: the rule is counted and reported but never refuses the request. */
  enforce: boolean;
};

/** A rule's verdict within one check. */
export type RuleVerdict = Decision & {
  /** Whether this rule alone would admit the request. */
  ruleAllows: boolean;
  /** The bucket the request was counted in, for a refund; -1 when not counted. */
  bucket: number;
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
  /** Per rule, in the order given, the bucket the units were counted in. */
  buckets: number[];
  /** How long the caller may spend them, from `nowMs`: the end of the earliest current bucket, at most {@link LEASE_MAX_MS}. */
  expiresInMs: number;
};

/** Options of a check. */
export type CheckOptions = {
  /** Admissions to count ahead as a {@link Lease}, if the key is far enough below every limit. */
  leaseUnits?: number;
  /** Units of earlier leases that were never spent, taken back before deciding. */
  returns?: Refund[];
};

/** Leases live at most this long, whatever the period. */
export const LEASE_MAX_MS = 300_000;
/** A lease takes at most this share of what a rule has left, so keys near a limit are decided one by one. */
export const LEASE_SHARE = 1 / 8;
/** Smaller leases are not worth their bookkeeping. */
export const LEASE_MIN_UNITS = 2;

/** Counts counted here and to be taken back: a request another object refused, or a lease's unspent units. */
export type Refund = { id: string; bucket: number; count?: number };

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

/** What the object needs to know of a rule. */
export const toRuleCheck = (rule: Rule): RuleCheck => ({
  id: rule.id,
  limit: rule.limit,
  periodMs: rule.periodMs,
  precision: rule.precision,
  strict: rule.strict,
  enforce: rule.action === "block",
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
