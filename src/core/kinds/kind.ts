/**
 * @module
 * What a kind of limit is, as the rest of the limiter sees it: the words
 * every kind's module and the registry share, and nothing else. A leaf: it
 * imports no kind.
 *
 * A rule is one kind: a sliding window (requests per period), a token
 * bucket (a rate and a burst), a number of requests in flight at once
 * (concurrency), or a calendar quota (units per day, week, month or year).
 * Each kind is one module in this folder that owns its own
 * fields and their validation, how its quota reads in the rate-limit
 * headers and in words, how the admin API shows it, what `check-config`
 * warns of, and by which protocol its client's object decides it: `count`
 * (a check counts the request, all or nothing with the key's other counted
 * rules, with leases, known refusals and held requests) or `place` (a place
 * is taken once the counted rules admit the request, and held until it
 * ends). Nothing outside the kinds' modules and the registry asks which kind
 * a rule is.
 */
import type { Result } from "../result.ts";

/** The kinds there are (see registry.ts). */
export type KindName = "window" | "concurrency" | "bucket" | "quota";

/** How a client's object decides a rule: it counts the request, or gives it a place while it is in flight. */
export type Protocol = "count" | "place";

/**
 * A rule's quota as the rate-limit headers and the problem details say it
 * (draft-ietf-httpapi-ratelimit-headers-11): the window `w` of a quota that
 * renews with time (absent for one that does not, such as requests in
 * flight: then no `t` and no `X-RateLimit-Reset` either), the quota unit
 * `qu` when it is not requests, and the quota in words.
 */
export type Quota = {
  /** `w`, in milliseconds: the time the quota is for. Absent: it does not renew with time. */
  readonly windowMs?: number;
  /**
   * `w` at an instant, when it is not the same at every instant (a calendar
   * month of 28 to 31 days); `windowMs` is then its usual length. A verdict
   * that says its own (`windowMs`) comes first.
   */
  windowAt?(nowMs: number): number;
  /**
   * `w` under a limit, when it changes with the limit (a token bucket's
   * depth, `burst × period / limit`, its burst following the limit);
   * `windowMs` is then the rule's own.
   */
  windowFor?(limit: number): number;
  /** The period `limit` is per, when it is not `w` (a token bucket's rate; its `w` is its depth). */
  readonly periodMs?: number;
  /** What the admin API's `/status` shows of the quota under `limit`, besides the limit and the period (a bucket's burst and depth). */
  shown?(limit: number): Readonly<Record<string, number>>;
  /**
   * What a verdict's `remaining` and `resetMs` become once `units` more are
   * counted for its request after its answer (given back when negative: a
   * `cost_header`, or a response `count` does not count), under `limit`,
   * for requests of `cost`; told in that response's headers before the
   * charge is made. Absent: `remaining` moves by the units and the reset
   * stays (a calendar quota's reset is its period's end whatever is used).
   */
  charged?(
    limit: number,
    cost: number,
    verdict: { remaining: number; resetMs: number },
    units: number,
  ): { remaining: number; resetMs: number };
  /** `qu`: the quota's unit, when it is not requests. */
  readonly unit?: "concurrent-requests";
  /** `q` under a limit, when it is not the limit itself: a token bucket's burst. */
  quota?(limit: number): number;
  /**
   * The quota `limit` in words, for a problem's detail: "100 per minute", "2
   * requests in flight at once"; given the instant it resets (Unix
   * milliseconds), a kind that names it says it: "100000 per month, resets
   * 2026-12-01T00:00:00-05:00".
   */
  words(limit: number, resetAtMs?: number): string;
};

/**
 * A kind's own fields that a tier or an override gives one client beside
 * the limit, by their names as written (`burst`). What they make of the
 * kind's part (its compiled fields, and its check in the client's object)
 * is a record of that part's fields, merged into it where it has them: the
 * rule, its check and its quota then read as for a rule written so.
 */
export type ClientFields<Part> = {
  readonly names: readonly string[];
  /**
   * The fields given (each of `names` or absent) for a client given
   * `limit`, checked against the rule: the part's fields they set, each
   * written one among them under its own name (the admin API shows those).
   */
  parse(part: Part, given: Fields, limit: number): Result<Readonly<Record<string, number>>>;
};

/** Records a field's problems against its name and answers its value, or `fallback` when it has problems. */
export type TakeField = <T>(field: string, parsed: Result<T>, fallback: T) => T;

/** A rule's fields as written, each by its name in wrangler.toml. */
export type Fields = Record<string, unknown>;

/**
 * What every kind's own fields compile to, besides its own: the limit a
 * tier, an override or an adaptive factor scales (a rate's requests, a
 * number of places), and what one request costs in the same units (1 when
 * the kind has no `cost`).
 */
export type KindFields = { limit: number; cost?: number };

/** What every rule has that a kind's warnings read: whether it enforces, and its delay and bound on held requests. */
export type Common = { action: "block" | "log"; maxDelayMs?: number | undefined; maxHeld?: number | undefined };

/** One kind of limit: everything about a rule of this kind that is not common to every rule. `Part`: its own compiled fields. */
export interface RuleKind<Part extends KindFields = KindFields> {
  readonly name: KindName;
  readonly protocol: Protocol;
  /** Its own fields, as wrangler.toml writes them, in the order they are checked. */
  readonly fields: readonly string[];
  /** The fields whose presence makes a rule this kind (none: the default kind). */
  readonly marks: readonly string[];
  /** The fields a rule of this kind cannot do without: with all of them, a rule is whole as this kind. */
  readonly required: readonly string[];
  /** The most a limit of this kind may be, from a tier or an override too. */
  readonly maxLimit: number;
  /** The field that says its limit, as wrangler.toml writes it (for messages: "concurrency", "limit"). */
  readonly limitField: string;
  /** What its limit counts, for messages: "requests", "places". */
  readonly limitNoun: string;
  /** Why another kind's field does not apply to a rule of this kind; absent (or undefined): its owner says (see {@link ownField}). */
  foreignField?(field: string): string | undefined;
  /** Why one of its own fields does not apply to a rule of another kind. */
  ownField(field: string): string;
  /** Fields every rule may have that a rule of this kind does not take, each with why. */
  readonly refuses?: Readonly<Record<string, string>>;
  /** Its own fields parsed; `take` records each field's problems (a value from a field with problems is never used). */
  parse(fields: Fields, take: TakeField): Part;
  /** Its quota, for the rate-limit headers and the problem details. */
  quota(part: Part): Quota;
  /**
   * A counted kind's own fields in the check its client's object decides it
   * by, beside the limit, the cost and what every rule sends (absent: none).
   */
  check?(part: Part): Readonly<Record<string, unknown>>;
  /**
   * The most limit a tier or an override may give this rule when its own
   * fields make it less than {@link maxLimit}, and why: a token bucket's
   * burst grows with its limit.
   */
  limitCap?(part: Part): { max: number; because: string };
  /**
   * Its own fields a tier or an override may give one client beside the
   * limit (a token bucket's `burst`); absent: none, the limit alone.
   */
  readonly clientFields?: ClientFields<Part>;
  /**
   * Its own fields as the admin API shows them (wrangler.toml's spelling,
   * plus durations in milliseconds): `limit`, the fields that say the limit
   * (shown before the rule's key), and `counting`, the fields that say how
   * it counts (after it).
   */
  view(part: Part): {
    limit: Record<string, unknown>;
    counting?: Record<string, unknown>;
    /** The limit in a line, as the dashboard shows it: "50 per 1d", "10 per 1s, bursts of 20", "2 in flight at once". */
    summary: string;
    /** Whether a client's usage of it is kept by period, with credits ({prefix}/credits). */
    credits?: true;
  };
  /** What `check-config` warns of in its own fields (`written`: the rule as written), given what every rule has. */
  warnings(rule: Part & Common, written: Fields): string[];
  /**
   * What makes two rules of this kind count the same requests, beside their
   * paths, methods and key: two such rules where one has the lower limit
   * leave the other nothing to refuse.
   */
  measure(part: Part): string | number;
  /** The words `check-config` warns with when two rules of this kind count the same requests. */
  overlap(a: string, b: string, looser: string, same: boolean): string;
}

/** Any kind, as the registry lists them: each takes its own fields, which the registry hands it by the rule's `kind`. */
// biome-ignore lint/suspicious/noExplicitAny: each kind's own fields; the registry dispatches by the rule's kind name
export type AnyKind = RuleKind<any>;

const NUMBER = new Intl.NumberFormat("en-US");

/** A count as a rule's summary writes it: "100,000". */
export const grouped = (n: number): string => NUMBER.format(n);
