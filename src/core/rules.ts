/**
 * @module
 * Rate-limit rules: the `[[vars.RULES]]` schema, and its validation into
 * compiled rules. Every problem is reported, each naming the rule and field.
 */
import type { CountWhen } from "./count.ts";
import { type Duration, parseDurationMs } from "./duration.ts";
import { isZero, parseChoice, parseFlag, parseIntegerFrom1, TOKEN } from "./fields.ts";
import { type AdaptiveInput, type HealthTarget, parseAdaptive } from "./health.ts";
import type { Address } from "./ip.ts";
import { type IpRange, inAnyRange, parseRanges } from "./ip-ranges.ts";
import type { AnyKind, Fields, KindName, Quota } from "./kinds/kind.ts";
import { KIND_FIELDS, KINDS, type KindFieldsOf, kindsMarked, kindsWith } from "./kinds/registry.ts";
import {
  compileRuleGlob,
  globCounts,
  matchedIn,
  type PathGlob,
  pathAsWritten,
  type RequestPath,
  type RuleGlob,
} from "./paths.ts";
import type { Priority } from "./priorities.ts";
import { fail, mapAll, ok, type Result } from "./result.ts";
import { show } from "./show.ts";

/** What every rule may have, whatever it limits. */
type RuleCommonInput = {
  /** Unique name, `[a-z0-9_-]`, at most 64 characters. Shown in headers and logs. */
  id: string;
  /**
   * Glob or globs the path must match; `*` matches any run of characters.
   * `;parameters`, a trailing slash and (unless `case_sensitive`) case are
   * ignored, so `/login` also counts `/login/`, `/login;jsessionid=x` and `/LOGIN`. Default `"/*"`.
   */
  path?: string | string[];
  /** Methods the rule applies to; `GET` also covers `HEAD`. Default: all. */
  methods?: string[];
  /** Globs of paths the rule skips, matched against the path as written only (case, `;parameters` and trailing slash included). */
  exclude?: string | string[];
  /** Tell paths that differ only in case apart when matching `path` and in the `path` key. Default false. */
  case_sensitive?: boolean;
  /** Characteristics that make the client key, combined; `"a|b"` uses the first one present. Default `["ip"]`. */
  key?: string | string[];
  /** `"block"` (default) answers 429 over the limit; `"log"` only logs what it would have done. */
  action?: "block" | "log";
  /** When the limiter cannot decide: `"open"` (default) forwards, `"closed"` answers 503. */
  on_error?: "open" | "closed";
  /** Let the client see `cost_header`. Default false: it is stripped. */
  keep_cost_header?: boolean;
  /** CIDRs: the rule applies only to clients in them. IPv4 and IPv6; `::ffff:a.b.c.d` is matched as IPv4. */
  ips?: string[];
  /** CIDRs: the rule skips clients in them, such as your own monitoring. */
  exclude_ips?: string[];
  /**
   * Hold a request over the limit for at most this long, written like
   * `period`, more than 0 and at most 60 s: it is sent on at the instant it
   * would be admitted instead of refused. On a concurrency rule, how long a
   * request may wait for a place. Absent: refused at once.
   */
  max_delay?: Duration;
  /** With `max_delay`: how many of a client's requests may be held (or wait for a place) at once, 1–10 000. Default 1000. */
  max_held?: number;
  /**
   * Makes the rule adaptive: its limit (or concurrency) follows the origin's
   * health, between `floor` and the configured value (docs/adaptive.md).
   * Absent: the limit is always the configured one.
   */
  adaptive?: AdaptiveInput;
};

/** A rule that limits requests per period. */
export type RateRuleInput = RuleCommonInput & {
  /** Requests admitted per period; an integer ≥ 1. */
  limit: number;
  /** Seconds as a number, or `"500ms"`, `"10s"`, `"1m"`, `"1h"`, `"1d"`. */
  period: Duration;
  /** Buckets per period, 1–60. Default 1: the seeds' two-counter sliding window. */
  precision?: number;
  /** Never admit more than `limit` in any window of length `period`. Default false. */
  strict?: boolean;
  /** What one request counts, from 1 to `limit`. Default 1. */
  cost?: number;
  /** A response header that says what the request really cost, such as `"x-tokens-used"`. */
  cost_header?: string;
  /** Which responses count: `"all"` (default), `"failed"`, `"successful"`, or statuses and classes (`[401, "5xx"]`). */
  count?: "all" | "failed" | "successful" | (number | `${1 | 2 | 3 | 4 | 5}xx`)[];
  /**
   * A penalty: once the rule refuses a client, refuse every request of it
   * under the rule until this long after that refusal. Written like `period`,
   * from 1 s to 365 d; absent or 0 for none (the default).
   */
  block_for?: Duration;
  burst?: undefined;
  concurrency?: undefined;
  place_timeout?: undefined;
};

/** A token bucket: a sustained rate of `limit` per `period`, and bursts of up to `burst` at once (docs/token-bucket.md). */
export type BucketRuleInput = RuleCommonInput &
  Pick<RateRuleInput, "limit" | "period" | "cost" | "cost_header" | "count" | "block_for"> & {
    /** The most the bucket admits at once, in the units of `limit` and `cost`; 1 to 1 000 000 000. */
    burst: number;
    precision?: undefined;
    strict?: undefined;
    concurrency?: undefined;
    place_timeout?: undefined;
  };

/** A rule that limits how many of a client's requests are in flight at once. */
export type ConcurrencyRuleInput = RuleCommonInput & {
  /** Requests of a client in flight at once, from forwarding until the response has been sent; 1–10 000. */
  concurrency: number;
  /**
   * How long a place whose holder stopped renewing it (an isolate that
   * vanished) stays counted, written like `period`, from 5 s to 1 h. Default `"60s"`.
   */
  place_timeout?: Duration;
  limit?: undefined;
  period?: undefined;
  burst?: undefined;
};

/** A rule that gives a client a quota per calendar period: 100 000 a month, reset on the 1st at midnight in its timezone. */
export type QuotaRuleInput = Omit<RuleCommonInput, "max_delay" | "max_held" | "adaptive"> & {
  /** Units a client has per period; an integer ≥ 1. */
  quota: number;
  /** The period: `"day"`, `"week"`, `"month"` or `"year"`. */
  per: "day" | "week" | "month" | "year";
  /** The IANA time zone its periods follow, such as `"America/New_York"`. Default `"UTC"`. */
  timezone?: string;
  /**
   * Where a period starts: `day` (of the month, 1–31, a shorter month's last
   * day for 29–31; of the week, 1 Monday to 7 Sunday; of `month` for a year)
   * and `time` (`"HH:MM"`). Default: midnight, Monday, the 1st, 1 January.
   */
  anchor?: { month?: number; day?: number; time?: string };
  /** `"calendar"` (default): periods from the anchor, for every client; `"first-request"`: from each client's first request. */
  reset?: "calendar" | "first-request";
  /** What one request counts, from 1 to `quota`. Default 1. */
  cost?: number;
  /** A response header that says what the request really cost, such as `"x-tokens-used"`. */
  cost_header?: string;
  /** Which responses count, as for a window rule. */
  count?: RateRuleInput["count"];
  /** Spread `Retry-After` over up to this long past the boundary, by client (`"10m"`). Default: none. */
  retry_jitter?: Duration;
  limit?: undefined;
  period?: undefined;
  concurrency?: undefined;
};

/** One rule as written in `wrangler.toml` (`[[vars.RULES]]`) or passed to `rateLimit()`. */
export type RuleInput = RateRuleInput | BucketRuleInput | ConcurrencyRuleInput | QuotaRuleInput;

/** Where one part of a client key comes from. */
export type Source =
  | { kind: "ip" | "method" | "host" }
  /** A network fact from `request.cf`: the client's AS number, country, continent, or JA4 TLS fingerprint. */
  | { kind: NetworkFact }
  /** A claim of the verified bearer token, by its dot path (`org.id`). */
  | { kind: "jwt"; name: string }
  /** The matching path (see `matchingPath`), with the case sensitivity of the rule the key belongs to. */
  | { kind: "path"; caseSensitive: boolean }
  | { kind: "header" | "cookie" | "query"; name: string };

/** The facts of `request.cf` a key can be made of. */
export type NetworkFact = "asn" | "country" | "continent" | "ja4";

/** One part of a client key: its sources in order of preference; the first present one is used. */
export type Characteristic = Source[];

/** What every validated rule has, whatever its kind. */
export type RuleCommon = {
  id: string;
  paths: RuleGlob[];
  exclude: RuleGlob[];
  /** Upper-case method names as written, or null for every method. `GET` also covers `HEAD` (see {@link ruleMatches}). */
  methods: ReadonlySet<string> | null;
  caseSensitive: boolean;
  key: Characteristic[];
  action: "block" | "log";
  onError: "open" | "closed";
  /** The only clients the rule applies to (`ips`); every client when absent. */
  ips?: IpRange[];
  /** Clients the rule skips (`exclude_ips`). */
  excludeIps?: IpRange[];
  /** The rule's limit in each tier of `TIERS` that gives it one (set with the settings, not a rule field). */
  tiers?: Readonly<Record<string, number>>;
  /** Per tier, the kind's own fields that tier gives a client beside its limit (a token bucket's burst), as its kind's `clientFields` made them. */
  tierOwn?: Readonly<Record<string, Readonly<Record<string, number>>>>;
  /** The tier a verified token's `tier_claim` put this request in; `limit` is then that tier's. */
  tier?: string;
  /** Under an adaptive rule with priorities, the request's priority (a variant of the rule per priority: isolate/rule-ids.ts). */
  priority?: Priority;
  /** A sheddable request refused because its isolate's requests in flight crowd the origin (a variant: isolate/rule-ids.ts). */
  crowded?: true;
  /**
   * How long a request over the limit may be held until its turn, or wait
   * in line for a place (`max_delay`); absent: refused at once.
   */
  maxDelayMs?: number;
  /** With `maxDelayMs`: how many of a client's requests may be held at once under the rule (`max_held`). */
  maxHeld?: number;
  /** The health target that makes the rule adaptive (`adaptive`); absent: its limit never moves. */
  adaptive?: HealthTarget;
  /** The rule's quota as the rate-limit headers and the problem details say it (its kind's). */
  quota: Quota;
};

/**
 * A validated rule: what every rule has, its kind's name, and its kind's
 * own fields (kinds/). Its `limit` is the number a tier, an override and an
 * adaptive factor scale: requests per period, or places.
 */
export type Rule = { [K in KindName]: RuleCommon & { kind: K } & KindFieldsOf[K] }[KindName];

/** A rule of one kind. */
export type RuleOf<K extends KindName> = Extract<Rule, { kind: K }>;

/** A rule its client's object counts (the `count` protocol): a check decides it, with the key's other counted rules. */
export type CountedRule = RuleOf<"window" | "bucket" | "quota">;

/** A rule its client's object gives places under (the `place` protocol), once the request's counted rules admit it. */
export type PlacedRule = RuleOf<"concurrency">;

/** Whether a rule's object counts it (its kind's protocol is `count`), or else gives places under it. */
export const isCounted = (rule: Rule): rule is CountedRule => KINDS[rule.kind].protocol === "count";

/** The fields every rule may have, whatever its kind. */
const COMMON_FIELDS = [
  "id",
  "path",
  "methods",
  "exclude",
  "case_sensitive",
  "key",
  "action",
  "on_error",
  "ips",
  "exclude_ips",
  "max_delay",
  "max_held",
  "adaptive",
] as const;

/** Every rule field: the common ones, then each kind's own. */
export const RULE_FIELDS: readonly string[] = [...COMMON_FIELDS, ...KIND_FIELDS];

const ID = /^[a-z0-9_-]{1,64}$/;
/** The longest a request may be held: a held request keeps its client's connection open. */
export const MAX_DELAY_MS = 60_000;
/** The most requests of one client held (or waiting for a place) at once under a rule, and the default. */
export const MAX_HELD = 10_000;
export const DEFAULT_MAX_HELD = 1_000;

/**
 * Validates rules. Returns the compiled rules, or every problem found.
 * `where` names the list in messages (`RULES` for wrangler.toml).
 */
export function parseRules(input: unknown, where = "RULES"): Result<Rule[]> {
  if (!Array.isArray(input)) {
    return fail(`${where}: must be a list of rules ([[vars.${where}]]); got ${show(input)}`);
  }
  const errors: string[] = [];
  const rules: Rule[] = [];
  const seen = new Map<string, number>();
  input.forEach((raw: unknown, index) => {
    const parsed = parseRule(raw, `${where}[${index}]`);
    if (!parsed.ok) {
      errors.push(...parsed.errors);
      return;
    }
    const rule = parsed.value;
    const first = seen.get(rule.id);
    if (first !== undefined) {
      errors.push(`${where}[${index}] "${rule.id}": field "id": duplicates ${where}[${first}]; ids must be unique`);
      return;
    }
    seen.set(rule.id, index);
    rules.push(rule);
  });
  return errors.length > 0 ? fail(...errors) : ok(rules);
}

/** Validates one rule; `where` is its position, such as `RULES[2]`. */
export function parseRule(raw: unknown, where: string): Result<Rule> {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    return fail(`${where}: must be a table of fields; got ${show(raw)}`);
  }
  const fields = raw as Record<string, unknown>;
  const label = typeof fields.id === "string" && fields.id !== "" ? `${where} "${fields.id}"` : where;
  const errors: string[] = [];
  const rule = readFields(fields, (field, parsed, fallback) => {
    if (parsed.ok) return parsed.value;
    // A table's problems name its own field (`"adaptive.latency": …`).
    for (const message of parsed.errors) {
      errors.push(`${label}: field ${message.startsWith(`"${field}.`) ? message : `"${field}": ${message}`}`);
    }
    return fallback;
  });
  return errors.length > 0 ? fail(...errors) : ok(rule);
}

/** The value of a field's parse; or, once its errors are recorded against `field`, `fallback`. */
type Take = <T>(field: string, parsed: Result<T>, fallback: T) => T;

/**
 * A rule made from its fields, each parsed in the order the schema lists
 * them, so problems are reported in that order. The rule is only used when
 * `take` recorded no problem, so a fallback never reaches a caller.
 */
function readFields(fields: Record<string, unknown>, take: Take): Rule {
  for (const name of Object.keys(fields)) {
    if (!isRuleField(name)) take(name, fail(`is not a rule field; known fields are ${RULE_FIELDS.join(", ")}`), null);
  }
  const id = take("id", parseId(fields.id), "");
  const caseSensitive = take("case_sensitive", parseFlag(fields.case_sensitive ?? false), false);
  const paths = take(
    "path",
    parseGlobs(fields.path ?? "/*", (glob) => compileRuleGlob(glob, caseSensitive)),
    [],
  );
  const exclude = take(
    "exclude",
    parseGlobs(fields.exclude ?? [], (glob) => compileRuleGlob(glob, caseSensitive)),
    [],
  );
  if (Array.isArray(fields.path) && fields.path.length === 0) {
    take("path", fail("must name at least one path glob"), null);
  }
  const methods = take("methods", parseMethods(fields.methods), null);
  const kind = kindOfFields(fields, take);
  const own = kind.parse(fields, take) as KindFieldsOf[KindName];
  const key = take("key", parseKey(fields.key ?? ["ip"], caseSensitive), []);
  const action = take("action", parseChoice(fields.action ?? "block", ["block", "log"]), "block");
  const onError = take("on_error", parseChoice(fields.on_error ?? "open", ["open", "closed"]), "open");
  const ips = take("ips", parseIps(fields.ips), null);
  const excludeIps = take(
    "exclude_ips",
    fields.exclude_ips === undefined ? ok([]) : parseRanges(fields.exclude_ips),
    [],
  );
  const maxDelayMs = take("max_delay", parseMaxDelay(fields.max_delay), null);
  const maxHeld = take("max_held", parseMaxHeld(fields.max_held, fields.max_delay !== undefined), DEFAULT_MAX_HELD);
  const cost = ("cost" in own ? own.cost : undefined) ?? 1;
  const adaptive = take(
    "adaptive",
    fields.adaptive === undefined
      ? ok(null)
      : parseAdaptive(fields.adaptive, Math.max(1, own.limit), cost, caseSensitive),
    null,
  );
  const held = maxDelayMs === null ? {} : { maxDelayMs, maxHeld };
  const ranges = { ...(ips === null ? {} : { ips }), ...(excludeIps.length === 0 ? {} : { excludeIps }) };
  return {
    id,
    kind: kind.name,
    paths,
    exclude,
    methods,
    caseSensitive,
    ...own,
    key,
    action,
    onError,
    ...ranges,
    ...held,
    ...(adaptive === null ? {} : { adaptive }),
    quota: kind.quota(own as never),
  } as Rule;
}

/**
 * A rule's quota for a client a tier or an override gave its kind's own
 * fields beside its limit (a token bucket's burst): its kind's, as for a
 * rule written with them.
 */
export const quotaUnder = (rule: Rule, own: Readonly<Record<string, number>>): Quota =>
  KINDS[rule.kind].quota({ ...rule, ...own } as never);

/**
 * The kind a rule's fields are written as: the one whose marking field it
 * has (`concurrency`), or the default (a rate: `limit` and `period`). Two
 * kinds' marks at once, or a field another kind has and this one does not,
 * is an error naming the field.
 */
function kindOfFields(fields: Fields, take: Take): AnyKind {
  // Marked as several kinds, or as one beside a whole rule of the default kind: the one the rule is whole as
  // (every required field there), a marked kind before the default, then the one it has most fields of (the
  // first listed, on a tie). The others' marks are errors.
  const has = (kind: AnyKind) => kind.fields.filter((field) => fields[field] !== undefined);
  const whole = (kind: AnyKind) => kind.required.every((field) => fields[field] !== undefined);
  const marked = kindsMarked(fields);
  const rank = (kind: AnyKind) => [whole(kind) ? 1 : 0, kind === KINDS.window ? 0 : 1, has(kind).length];
  const before = (a: AnyKind, b: AnyKind) => {
    const [x, y] = [rank(a), rank(b)];
    const at = x.findIndex((value, i) => value !== y[i]);
    return at >= 0 && x[at]! > y[at]!;
  };
  const kind = [...marked, KINDS.window].reduce((best, k) => (before(k, best) ? k : best));
  const oneKind = new Set<string>();
  for (const other of marked) {
    if (other === kind) continue;
    // One error, on its mark, for all of the other kind's fields that this kind does not have.
    const theirs = has(other).filter((f) => !kind.fields.includes(f));
    const mark = other.marks.find((f) => theirs.includes(f));
    if (mark === undefined) continue;
    for (const field of theirs) oneKind.add(field);
    const ours = has(kind).filter((f) => !other.fields.includes(f));
    const them = theirs.length === 1 ? "it" : `them (${theirs.map(show).join(", ")})`;
    take(
      mark,
      fail(
        `makes a rule ${KIND_NOUN[other.name]}, and this one is ${KIND_NOUN[kind.name]} (it has ${ours.map(show).join(", ")}): a rule is one kind; remove ${them}, or make ${KIND_NOUN[other.name]} a rule of its own`,
      ),
      null,
    );
  }
  for (const field of KIND_FIELDS) {
    if (fields[field] === undefined || kind.fields.includes(field) || oneKind.has(field)) continue;
    take(field, fail(kind.foreignField?.(field) ?? kindsWith(field)[0]!.ownField(field)), null);
  }
  for (const [field, why] of Object.entries(kind.refuses ?? {})) {
    if (fields[field] !== undefined) take(field, fail(why), null);
  }
  return kind;
}

/** Each kind as a message names it. */
const KIND_NOUN: Record<AnyKind["name"], string> = {
  window: "a sliding window",
  concurrency: "a concurrency rule",
  bucket: "a token bucket",
  quota: "a calendar quota",
};

const isRuleField = (name: string): boolean => (RULE_FIELDS as readonly string[]).includes(name);

const parseId = (value: unknown): Result<string> =>
  typeof value === "string" && ID.test(value)
    ? ok(value)
    : fail(`must be 1–64 characters of [a-z0-9_-]; got ${show(value)}`);

/** `ips`: the only clients the rule applies to; null (every client) when absent. */
function parseIps(value: unknown): Result<IpRange[] | null> {
  if (value === undefined) return ok(null);
  if (Array.isArray(value) && value.length === 0)
    return fail("must name at least one range; leave it out for every client");
  return parseRanges(value);
}

/** How long a request may be held (`max_delay`): null when absent; otherwise more than 0 and at most 60 s. */
function parseMaxDelay(value: unknown): Result<number | null> {
  if (value === undefined) return ok(null);
  const outOfRange = fail(`must be more than 0 and at most 60s; got ${show(value)}`);
  if (isZero(value) || (typeof value === "number" && value < 0)) return outOfRange;
  const parsed = parseDurationMs(value);
  return parsed.ok && parsed.value > MAX_DELAY_MS ? outOfRange : parsed;
}

/** How many requests may be held at once (`max_held`), which only `max_delay` gives a meaning. */
function parseMaxHeld(value: unknown, delayed: boolean): Result<number> {
  if (value === undefined) return ok(DEFAULT_MAX_HELD);
  if (!delayed) return fail('needs "max_delay": it bounds how many requests are held, and without max_delay none is');
  return parseIntegerFrom1(value, MAX_HELD);
}

/** A glob or a list of globs, each compiled. */
function parseGlobs<G extends PathGlob>(value: unknown, compile: (glob: string) => G): Result<G[]> {
  const list = typeof value === "string" ? [value] : value;
  if (!Array.isArray(list)) return fail(`must be a path glob or a list of them, such as "/api/*"; got ${show(value)}`);
  return mapAll(list, (glob: unknown) =>
    typeof glob === "string" && glob.startsWith("/")
      ? ok(compile(glob))
      : fail(`${show(glob)} is not a path glob starting with "/"`),
  );
}

/** Upper-case method names, or null (every method) when the field is absent. */
function parseMethods(value: unknown): Result<ReadonlySet<string> | null> {
  if (value === undefined) return ok(null);
  if (!Array.isArray(value) || value.length === 0) {
    return fail(`must be a non-empty list of HTTP methods such as ["GET", "POST"]; got ${show(value)}`);
  }
  const names = mapAll(value, (method: unknown) =>
    typeof method === "string" && TOKEN.test(method)
      ? ok(method.toUpperCase())
      : fail(`${show(method)} is not an HTTP method`),
  );
  return names.ok ? ok(new Set(names.value)) : names;
}

/** The characteristics a `key` can name as they are: `"ip"`, `"path"`, `"asn"`, … (docs/configuration.md lists them). */
export const PLAIN_CHARACTERISTICS = ["ip", "path", "method", "host", "asn", "country", "continent", "ja4"] as const;
/** The characteristics a `key` names with a name after a colon: `"header:x-api-key"`, `"jwt:sub"`, … */
export const NAMED_CHARACTERISTICS = ["header", "cookie", "query", "jwt"] as const;
/** A named characteristic as the docs and messages write it: `header:<name>`, `jwt:<claim>`. */
export const namedForm = (kind: (typeof NAMED_CHARACTERISTICS)[number]): string =>
  `${kind}:<${kind === "jwt" ? "claim" : "name"}>`;

// `path` is parsed apart: it carries the rule's case sensitivity.
const SIMPLE_SOURCES = new Set<string>(PLAIN_CHARACTERISTICS.filter((kind) => kind !== "path"));
const NAMED_SOURCES = new Set<string>(NAMED_CHARACTERISTICS);
const CHARACTERISTIC_LIST = [...PLAIN_CHARACTERISTICS, ...NAMED_CHARACTERISTICS.map(namedForm)];
const CHARACTERISTIC_CHOICES = `${CHARACTERISTIC_LIST.slice(0, -1).join(", ")} or ${CHARACTERISTIC_LIST.at(-1)}`;
/**
 * A claim's dot path: names of up to 128 characters, none empty, with no
 * space, `|`, `,` or `=` (which separate sources and admin key parameters).
 */
export const CLAIM_PATH = /^[^.\s|,=]{1,128}(\.[^.\s|,=]{1,128}){0,7}$/;

/** Whether a source is a verified token's claim. */
export const isClaim = (source: Source): source is { kind: "jwt"; name: string } => source.kind === "jwt";

/** A characteristic or a list of them, such as `["header:x-api-key|ip", "method"]`. */
function parseKey(value: unknown, caseSensitive: boolean): Result<Characteristic[]> {
  const list = typeof value === "string" ? [value] : value;
  if (!Array.isArray(list) || list.length === 0) {
    return fail(`must be a non-empty list of characteristics such as ["ip"]; got ${show(value)}`);
  }
  return mapAll(list, (item: unknown) => parseCharacteristic(item, caseSensitive));
}

/** Sources separated by `|`, such as `"header:x-api-key|ip"`. */
function parseCharacteristic(item: unknown, caseSensitive: boolean): Result<Characteristic> {
  if (typeof item !== "string") return fail(`${show(item)} is not a characteristic`);
  const sources = mapAll(item.split("|"), (part) => parseSource(part.trim(), caseSensitive));
  return sources.ok ? sources : fail(...sources.errors.map((message) => `${show(item)}: ${message}`));
}

function parseSource(text: string, caseSensitive: boolean): Result<Source> {
  if (SIMPLE_SOURCES.has(text)) return ok({ kind: text as "ip" | "method" | "host" | NetworkFact });
  if (text === "path") return ok({ kind: "path", caseSensitive });
  const colon = text.indexOf(":");
  const kind = colon < 0 ? text : text.slice(0, colon);
  if (!NAMED_SOURCES.has(kind)) {
    return fail(`unknown characteristic ${show(text)}; use ${CHARACTERISTIC_CHOICES}`);
  }
  const name = colon < 0 ? "" : text.slice(colon + 1);
  if (kind === "jwt") {
    return CLAIM_PATH.test(name)
      ? ok({ kind: "jwt", name })
      : fail('jwt: needs a claim, or a dot path to one, as in "jwt:sub" or "jwt:org.id"');
  }
  if (kind === "query" ? name === "" : !TOKEN.test(name))
    return fail(`${kind}: needs a name, as in "${kind}:x-api-key"`);
  return ok({ kind: kind as "header" | "cookie" | "query", name: kind === "header" ? name.toLowerCase() : name });
}

/**
 * Whether the origin's answer settles what a request counts under this rule
 * (its `count` or `cost_header`): its count may be given back, or charged
 * more, once the response is known.
 */
export const settledByAnswer = (rule: { count?: CountWhen; costHeader?: string }): boolean =>
  (rule.count !== undefined && !rule.count.all) || rule.costHeader !== undefined;

/**
 * Whether the rule applies to this client by its IP ranges: in `ips`, when
 * the rule has them (a client without an IP is in none), and in no
 * `exclude_ips`. The address is read only when a rule has ranges.
 */
export function ruleCoversClient(rule: Rule, address: () => Address | null): boolean {
  if (rule.ips === undefined && rule.excludeIps === undefined) return true;
  const client = address();
  if (rule.ips !== undefined && (client === null || !inAnyRange(client, rule.ips))) return false;
  return !(rule.excludeIps !== undefined && client !== null && inAnyRange(client, rule.excludeIps));
}

/**
 * Whether a rule counts a request with this method and path: the path as
 * `normalizePath` gives it, or a {@link RequestPath}, which works the
 * matching path out once for all rules. `GET` in `methods` also covers `HEAD`,
 * which servers answer with the GET handler. `path` globs count every
 * spelling of a path (see {@link globCounts}); `exclude` globs exempt a
 * request only when they match its path as written and as it is matched
 * too (`%2F` a slash, `;parameters` dropped, the `..` these uncover
 * resolved), so that spelling a request differently never buys an
 * exemption: `/api/public/..%2Fprivate` is `/api/private` to nginx.
 */
export function ruleMatches(rule: Rule, method: string, path: string | RequestPath): boolean {
  const methods = rule.methods;
  if (methods !== null && !methods.has(method) && !(method === "HEAD" && methods.has("GET"))) return false;
  const request = typeof path === "string" ? pathAsWritten(path) : path;
  if (!rule.paths.some((glob) => globCounts(glob, request, rule.caseSensitive))) return false;
  return !rule.exclude.some((glob) => excludes(glob, request, rule.caseSensitive));
}

/** Whether an `exclude` glob exempts a request: its path as written, and its matching path (with or without a trailing slash), both in it. */
function excludes(glob: RuleGlob, path: RequestPath, caseSensitive: boolean): boolean {
  return glob.test(path.written) && matchedIn(glob, path, caseSensitive);
}
