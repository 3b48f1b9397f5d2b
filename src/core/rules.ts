/**
 * @module
 * Rate-limit rules: the `[[vars.RULES]]` schema, and its validation into
 * compiled rules. Every problem is reported, each naming the rule and field.
 */
import { COUNT_ALL, type CountWhen, parseCount } from "./count.ts";
import { type Duration, formatDuration, parseDurationMs } from "./duration.ts";
import { type AdaptiveInput, type HealthTarget, parseAdaptive } from "./health.ts";
import type { Address } from "./ip.ts";
import { type IpRange, inAnyRange, parseRanges } from "./ip-ranges.ts";
import {
  compileGlob,
  compileRuleGlob,
  globCounts,
  type PathGlob,
  pathAsWritten,
  type RequestPath,
  type RuleGlob,
} from "./paths.ts";
import { fail, mapAll, ok, type Result } from "./result.ts";
import { show } from "./show.ts";
import type { WindowLimit } from "./sliding-window.ts";

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
};

/** One rule as written in `wrangler.toml` (`[[vars.RULES]]`) or passed to `rateLimit()`. */
export type RuleInput = RateRuleInput | ConcurrencyRuleInput;

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

/** A validated rule. */
export type Rule = WindowLimit & {
  id: string;
  paths: RuleGlob[];
  exclude: PathGlob[];
  /** Upper-case method names as written, or null for every method. `GET` also covers `HEAD` (see {@link ruleMatches}). */
  methods: ReadonlySet<string> | null;
  caseSensitive: boolean;
  key: Characteristic[];
  action: "block" | "log";
  onError: "open" | "closed";
  /** Which responses count (the `count` field); the rest are given back once the origin answers. */
  count: CountWhen;
  /** The response header that says what the request really cost (lower-case); the difference is charged after. */
  costHeader?: string;
  /** Whether the client sees that header; by default it is stripped. */
  keepCostHeader?: boolean;
  /** How long a refusal under this rule blocks the client, in milliseconds; 0 for no penalty. */
  blockForMs: number;
  /** The only clients the rule applies to (`ips`); every client when absent. */
  ips?: IpRange[];
  /** Clients the rule skips (`exclude_ips`). */
  excludeIps?: IpRange[];
  /** The rule's limit in each tier of `TIERS` that gives it one (set with the settings, not a rule field). */
  tiers?: Readonly<Record<string, number>>;
  /** The tier a verified token's `tier_claim` put this request in; `limit` is then that tier's. */
  tier?: string;
  /** How long a request over the limit may be held until its turn (`max_delay`); absent: refused at once. */
  maxDelayMs?: number;
  /** With `maxDelayMs`: how many of a client's requests may be held at once under the rule (`max_held`). */
  maxHeld?: number;
  /**
   * A concurrency rule's places (`concurrency`): requests of a client in
   * flight at once. `limit` is the same number (a tier or an override gives
   * a client another through it, as for a rate), `periodMs` is
   * `placeTimeoutMs`; the window fields count nothing for such a rule.
   */
  concurrency?: number;
  /** With `concurrency`: how long a place not renewed stays counted (`place_timeout`). */
  placeTimeoutMs?: number;
  /** The health target that makes the rule adaptive (`adaptive`); absent: its limit never moves. */
  adaptive?: HealthTarget;
};

export const RULE_FIELDS = [
  "id",
  "path",
  "methods",
  "exclude",
  "case_sensitive",
  "limit",
  "period",
  "key",
  "action",
  "on_error",
  "precision",
  "strict",
  "count",
  "cost",
  "cost_header",
  "keep_cost_header",
  "block_for",
  "ips",
  "exclude_ips",
  "max_delay",
  "max_held",
  "concurrency",
  "place_timeout",
  "adaptive",
] as const;

const ID = /^[a-z0-9_-]{1,64}$/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** The largest limit a rule, a tier or an override may give. */
export const MAX_LIMIT = 1_000_000_000;
const MAX_PRECISION = 60;
/** The shortest penalty: anything shorter is over before a client could notice. */
const MIN_BLOCK_FOR_MS = 1_000;
/** The longest a request may be held: a held request keeps its client's connection open. */
export const MAX_DELAY_MS = 60_000;
/** The most requests of one client held (or waiting for a place) at once under a rule, and the default. */
export const MAX_HELD = 10_000;
export const DEFAULT_MAX_HELD = 1_000;
/** The most places a concurrency rule may give one client. */
export const MAX_CONCURRENCY = 10_000;
/** A place not renewed is taken back after this long by default, and within these bounds. */
export const DEFAULT_PLACE_TIMEOUT_MS = 60_000;
const MIN_PLACE_TIMEOUT_MS = 5_000;
const MAX_PLACE_TIMEOUT_MS = 3_600_000;
/** The fields of a rate that a concurrency rule has no use for. */
const RATE_ONLY_FIELDS = ["precision", "strict", "cost", "cost_header", "count", "block_for"] as const;

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
  const exclude = take("exclude", parseGlobs(fields.exclude ?? [], compileGlob), []);
  if (Array.isArray(fields.path) && fields.path.length === 0) {
    take("path", fail("must name at least one path glob"), null);
  }
  const methods = take("methods", parseMethods(fields.methods), null);
  // A concurrency rule: `concurrency` instead of `limit` and `period`, and none of a rate's other fields.
  const concurrent = fields.concurrency !== undefined;
  if (concurrent) {
    for (const field of ["limit", "period"] as const) {
      if (fields[field] !== undefined) take(field, fail(BOTH_KINDS), null);
    }
  }
  const concurrency = concurrent ? take("concurrency", parseIntegerFrom1(fields.concurrency, MAX_CONCURRENCY), 1) : 0;
  const placeTimeoutMs = take("place_timeout", parsePlaceTimeout(fields.place_timeout, concurrent), 0);
  const limit = concurrent ? concurrency : take("limit", parseIntegerFrom1(fields.limit, MAX_LIMIT), 0);
  const periodMs = concurrent ? placeTimeoutMs : take("period", parsePeriod(fields.period), 0);
  const key = take("key", parseKey(fields.key ?? ["ip"], caseSensitive), []);
  const action = take("action", parseChoice(fields.action ?? "block", ["block", "log"]), "block");
  const onError = take("on_error", parseChoice(fields.on_error ?? "open", ["open", "closed"]), "open");
  if (concurrent) {
    for (const field of RATE_ONLY_FIELDS) {
      if (fields[field] !== undefined) take(field, fail(NOT_CONCURRENT), null);
    }
  }
  const precision = take("precision", parseIntegerFrom1(fields.precision ?? 1, MAX_PRECISION), 1);
  const strict = take("strict", parseFlag(fields.strict ?? false), false);
  const count = take("count", parseCount(fields.count), COUNT_ALL);
  const cost = take("cost", parseCost(fields.cost, limit), 1);
  const costHeader = take("cost_header", parseHeaderName(fields.cost_header), null);
  const keepCostHeader = take("keep_cost_header", parseFlag(fields.keep_cost_header ?? false), false);
  const blockForMs = take("block_for", parseBlockFor(fields.block_for), 0);
  const ips = take("ips", parseIps(fields.ips), null);
  const excludeIps = take(
    "exclude_ips",
    fields.exclude_ips === undefined ? ok([]) : parseRanges(fields.exclude_ips),
    [],
  );
  const maxDelayMs = take("max_delay", parseMaxDelay(fields.max_delay), null);
  const maxHeld = take("max_held", parseMaxHeld(fields.max_held, fields.max_delay !== undefined), DEFAULT_MAX_HELD);
  const adaptive = take(
    "adaptive",
    fields.adaptive === undefined ? ok(null) : parseAdaptive(fields.adaptive, Math.max(1, limit), cost),
    null,
  );
  const window = concurrent
    ? { limit, periodMs, precision: 1, strict: false }
    : { limit, periodMs, precision, strict, ...(cost === 1 ? {} : { cost }) };
  const held = maxDelayMs === null ? {} : { maxDelayMs, maxHeld };
  const places = concurrent ? { concurrency, placeTimeoutMs } : {};
  const charged = costHeader === null ? {} : { costHeader, keepCostHeader };
  const ranges = { ...(ips === null ? {} : { ips }), ...(excludeIps.length === 0 ? {} : { excludeIps }) };
  return {
    id,
    paths,
    exclude,
    methods,
    caseSensitive,
    ...window,
    key,
    action,
    onError,
    count,
    ...charged,
    blockForMs,
    ...ranges,
    ...held,
    ...places,
    ...(adaptive === null ? {} : { adaptive }),
  };
}

const BOTH_KINDS =
  'a rule has either "limit" and "period" (requests per period) or "concurrency" (requests in flight at once), not both';
const NOT_CONCURRENT =
  "does not apply to a concurrency rule, which counts requests in flight, each holding one place until it ends; remove it";

const isRuleField = (name: string): boolean => (RULE_FIELDS as readonly string[]).includes(name);

const parseId = (value: unknown): Result<string> =>
  typeof value === "string" && ID.test(value)
    ? ok(value)
    : fail(`must be 1–64 characters of [a-z0-9_-]; got ${show(value)}`);

const parseFlag = (value: unknown): Result<boolean> =>
  typeof value === "boolean" ? ok(value) : fail(`must be true or false; got ${show(value)}`);

/** An integer from 1 to `max`: a rule's `limit` or `precision`. */
export const parseIntegerFrom1 = (value: unknown, max: number): Result<number> =>
  typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= max
    ? ok(value)
    : fail(`must be an integer from 1 to ${max}; got ${show(value)}`);

/** One of `choices`, such as `"block"` or `"log"`. */
function parseChoice<const C extends string>(value: unknown, choices: readonly C[]): Result<C> {
  if ((choices as readonly unknown[]).includes(value)) return ok(value as C);
  return fail(`must be ${choices.map((choice) => `"${choice}"`).join(" or ")}; got ${show(value)}`);
}

/** A response header's name, lower-cased; null when absent. */
const parseHeaderName = (value: unknown): Result<string | null> =>
  value === undefined
    ? ok(null)
    : typeof value === "string" && TOKEN.test(value)
      ? ok(value.toLowerCase())
      : fail(`must be a header name such as "x-tokens-used"; got ${show(value)}`);

/** `ips`: the only clients the rule applies to; null (every client) when absent. */
function parseIps(value: unknown): Result<IpRange[] | null> {
  if (value === undefined) return ok(null);
  if (Array.isArray(value) && value.length === 0)
    return fail("must name at least one range; leave it out for every client");
  return parseRanges(value);
}

/** What one request counts: an integer from 1 to the rule's limit (1 when absent). */
const parseCost = (value: unknown, limit: number): Result<number> =>
  value === undefined
    ? ok(1)
    : parseIntegerFrom1(value, Math.max(1, limit)).ok
      ? ok(value as number)
      : fail(`must be an integer from 1 to the rule's limit (${limit}); got ${show(value)}`);

const parsePeriod = (value: unknown): Result<number> =>
  value === undefined ? fail('is required: seconds, or a string like "10s", "1m", "1h", "1d"') : parseDurationMs(value);

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

/** A concurrency rule's `place_timeout`: 60 s when absent, from 5 s to 1 h; no other rule has one. */
function parsePlaceTimeout(value: unknown, concurrent: boolean): Result<number> {
  if (!concurrent) {
    return value === undefined
      ? ok(0)
      : fail('only a concurrency rule has places; add "concurrency" (and remove "limit" and "period"), or remove it');
  }
  if (value === undefined) return ok(DEFAULT_PLACE_TIMEOUT_MS);
  const outOfRange = fail(
    `must be from ${formatDuration(MIN_PLACE_TIMEOUT_MS)} to ${formatDuration(MAX_PLACE_TIMEOUT_MS)}; got ${show(value)}`,
  );
  if (typeof value === "number" && value < 0) return outOfRange;
  const parsed = parseDurationMs(value);
  return parsed.ok && (parsed.value < MIN_PLACE_TIMEOUT_MS || parsed.value > MAX_PLACE_TIMEOUT_MS)
    ? outOfRange
    : parsed;
}

/** A penalty's length: absent or zero is none (0); otherwise a duration of at least 1 s. */
function parseBlockFor(value: unknown): Result<number> {
  if (value === undefined || isZero(value)) return ok(0);
  const tooShort = fail(`must be at least 1s, or 0 for no penalty; got ${show(value)}`);
  if (typeof value === "number" && value < 0) return tooShort;
  const parsed = parseDurationMs(value);
  return parsed.ok && parsed.value < MIN_BLOCK_FOR_MS ? tooShort : parsed;
}

/** `0`, or a zero written with a unit, such as `"0s"`. */
const isZero = (value: unknown): boolean =>
  value === 0 || (typeof value === "string" && /^0+(?:\.0+)?\s*(?:ms|s|m|h|d)$/.test(value.trim()));

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
export const settledByAnswer = (rule: Pick<Rule, "count" | "costHeader">): boolean =>
  !rule.count.all || rule.costHeader !== undefined;

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
 * spelling of a path (see {@link globCounts}); `exclude` globs exempt the
 * path as written only, so that spelling a request differently never buys
 * an exemption.
 */
export function ruleMatches(rule: Rule, method: string, path: string | RequestPath): boolean {
  const methods = rule.methods;
  if (methods !== null && !methods.has(method) && !(method === "HEAD" && methods.has("GET"))) return false;
  const request = typeof path === "string" ? pathAsWritten(path) : path;
  if (!rule.paths.some((glob) => globCounts(glob, request, rule.caseSensitive))) return false;
  return !rule.exclude.some((glob) => glob.test(request.written));
}
