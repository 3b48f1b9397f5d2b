/**
 * @module
 * Rate-limit rules: the `[[vars.RULES]]` schema, and its validation into
 * compiled rules. Every problem is reported, each naming the rule and field.
 */
import { type Duration, parseDurationMs, show } from "./duration.ts";
import {
  compileGlob,
  compileRuleGlob,
  globCounts,
  type PathGlob,
  pathAsWritten,
  type RequestPath,
  type RuleGlob,
} from "./paths.ts";
import type { WindowLimit } from "./sliding-window.ts";

/** One rule as written in `wrangler.toml` (`[[vars.RULES]]`) or passed to `rateLimit()`. */
export type RuleInput = {
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
  /** Requests admitted per period; an integer ≥ 1. */
  limit: number;
  /** Seconds as a number, or `"500ms"`, `"10s"`, `"1m"`, `"1h"`, `"1d"`. */
  period: Duration;
  /** Characteristics that make the client key, combined; `"a|b"` uses the first one present. Default `["ip"]`. */
  key?: string | string[];
  /** `"block"` (default) answers 429 over the limit; `"log"` only logs what it would have done. */
  action?: "block" | "log";
  /** When the limiter cannot decide: `"open"` (default) forwards, `"closed"` answers 503. */
  on_error?: "open" | "closed";
  /** Buckets per period, 1–60. Default 1: the seeds' two-counter sliding window. */
  precision?: number;
  /** Never admit more than `limit` in any window of length `period`. Default false. */
  strict?: boolean;
};

/** Where one part of a client key comes from. */
export type Source =
  | { kind: "ip" | "method" | "host" }
  /** The matching path (see `matchingPath`), with the case sensitivity of the rule the key belongs to. */
  | { kind: "path"; caseSensitive: boolean }
  | { kind: "header" | "cookie" | "query"; name: string };

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
] as const;

const ID = /^[a-z0-9_-]{1,64}$/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const MAX_LIMIT = 1_000_000_000;
const MAX_PRECISION = 60;

/** Problems found in one rule, each already naming the rule and field. */
export type RuleErrors = string[];

/**
 * Validates rules. Returns the compiled rules, or every problem found.
 * `where` names the list in messages (`RULES` for wrangler.toml).
 */
export function parseRules(
  input: unknown,
  where = "RULES",
): { ok: true; rules: Rule[] } | { ok: false; errors: RuleErrors } {
  if (!Array.isArray(input)) {
    return { ok: false, errors: [`${where}: must be a list of rules ([[vars.${where}]]); got ${show(input)}`] };
  }
  const errors: string[] = [];
  const rules: Rule[] = [];
  const seen = new Map<string, number>();
  input.forEach((raw: unknown, index) => {
    const result = parseRule(raw, `${where}[${index}]`);
    if (!result.ok) {
      errors.push(...result.errors);
      return;
    }
    const first = seen.get(result.rule.id);
    if (first !== undefined) {
      errors.push(
        `${where}[${index}] "${result.rule.id}": field "id": duplicates ${where}[${first}]; ids must be unique`,
      );
      return;
    }
    seen.set(result.rule.id, index);
    rules.push(result.rule);
  });
  return errors.length > 0 ? { ok: false, errors } : { ok: true, rules };
}

/** Validates one rule; `where` is its position, such as `RULES[2]`. */
export function parseRule(raw: unknown, where: string): { ok: true; rule: Rule } | { ok: false; errors: RuleErrors } {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    return { ok: false, errors: [`${where}: must be a table of fields; got ${show(raw)}`] };
  }
  const r = raw as Record<string, unknown>;
  const label = typeof r.id === "string" && r.id !== "" ? `${where} "${r.id}"` : where;
  const errors: string[] = [];
  const fail = (field: string, message: string) => errors.push(`${label}: field "${field}": ${message}`);

  for (const field of Object.keys(r)) {
    if (!(RULE_FIELDS as readonly string[]).includes(field)) {
      fail(field, `is not a rule field; known fields are ${RULE_FIELDS.join(", ")}`);
    }
  }

  if (typeof r.id !== "string" || !ID.test(r.id))
    fail("id", `must be 1–64 characters of [a-z0-9_-]; got ${show(r.id)}`);

  const caseSensitiveField = r.case_sensitive ?? false;
  if (typeof caseSensitiveField !== "boolean")
    fail("case_sensitive", `must be true or false; got ${show(caseSensitiveField)}`);
  const caseSensitive = caseSensitiveField === true;
  const paths = globs(r.path ?? "/*", "path", fail, (glob) => compileRuleGlob(glob, caseSensitive));
  const exclude = globs(r.exclude ?? [], "exclude", fail, compileGlob);
  if (Array.isArray(r.path) && r.path.length === 0) fail("path", "must name at least one path glob");

  let methods: Set<string> | null = null;
  if (r.methods !== undefined) {
    if (!Array.isArray(r.methods) || r.methods.length === 0) {
      fail("methods", `must be a non-empty list of HTTP methods such as ["GET", "POST"]; got ${show(r.methods)}`);
    } else {
      methods = new Set();
      for (const m of r.methods) {
        if (typeof m !== "string" || !TOKEN.test(m)) fail("methods", `${show(m)} is not an HTTP method`);
        else methods.add(m.toUpperCase());
      }
    }
  }

  const limit = r.limit;
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    fail("limit", `must be an integer from 1 to ${MAX_LIMIT}; got ${show(limit)}`);
  }

  let periodMs = 0;
  if (r.period === undefined) fail("period", 'is required: seconds, or a string like "10s", "1m", "1h", "1d"');
  else {
    const period = parseDurationMs(r.period);
    if ("error" in period) fail("period", period.error);
    else periodMs = period.ms;
  }

  const key = parseKey(r.key ?? ["ip"], fail, caseSensitive);

  const action = r.action ?? "block";
  if (action !== "block" && action !== "log") fail("action", `must be "block" or "log"; got ${show(action)}`);

  const onError = r.on_error ?? "open";
  if (onError !== "open" && onError !== "closed") fail("on_error", `must be "open" or "closed"; got ${show(onError)}`);

  const precision = r.precision ?? 1;
  if (typeof precision !== "number" || !Number.isInteger(precision) || precision < 1 || precision > MAX_PRECISION) {
    fail("precision", `must be an integer from 1 to ${MAX_PRECISION}; got ${show(precision)}`);
  }

  const strict = r.strict ?? false;
  if (typeof strict !== "boolean") fail("strict", `must be true or false; got ${show(strict)}`);

  if (errors.length > 0) return { ok: false, errors };
  return {
    ok: true,
    rule: {
      id: r.id as string,
      paths,
      exclude,
      methods,
      caseSensitive,
      limit: limit as number,
      periodMs,
      precision: precision as number,
      strict: strict as boolean,
      key,
      action: action as Rule["action"],
      onError: onError as Rule["onError"],
    },
  };
}

type Fail = (field: string, message: string) => void;

function globs<G extends PathGlob>(value: unknown, field: string, fail: Fail, compile: (glob: string) => G): G[] {
  const list = typeof value === "string" ? [value] : value;
  if (!Array.isArray(list)) {
    fail(field, `must be a path glob or a list of them, such as "/api/*"; got ${show(value)}`);
    return [];
  }
  const out: G[] = [];
  for (const glob of list) {
    if (typeof glob !== "string" || !glob.startsWith("/"))
      fail(field, `${show(glob)} is not a path glob starting with "/"`);
    else out.push(compile(glob));
  }
  return out;
}

const SIMPLE_SOURCES = new Set(["ip", "method", "host"]);
const NAMED_SOURCES = new Set(["header", "cookie", "query"]);

function parseKey(value: unknown, fail: Fail, caseSensitive: boolean): Characteristic[] {
  const list = typeof value === "string" ? [value] : value;
  if (!Array.isArray(list) || list.length === 0) {
    fail("key", `must be a non-empty list of characteristics such as ["ip"]; got ${show(value)}`);
    return [];
  }
  const key: Characteristic[] = [];
  for (const item of list) {
    if (typeof item !== "string") {
      fail("key", `${show(item)} is not a characteristic`);
      continue;
    }
    const sources: Source[] = [];
    for (const part of item.split("|")) {
      const source = parseSource(part.trim(), caseSensitive);
      if (typeof source === "string") fail("key", `${show(item)}: ${source}`);
      else sources.push(source);
    }
    key.push(sources);
  }
  return key;
}

function parseSource(text: string, caseSensitive: boolean): Source | string {
  if (SIMPLE_SOURCES.has(text)) return { kind: text as "ip" | "method" | "host" };
  if (text === "path") return { kind: "path", caseSensitive };
  const colon = text.indexOf(":");
  const kind = colon < 0 ? text : text.slice(0, colon);
  if (!NAMED_SOURCES.has(kind)) {
    return `unknown characteristic ${show(text)}; use ip, path, method, host, header:<name>, cookie:<name> or query:<name>`;
  }
  const name = colon < 0 ? "" : text.slice(colon + 1);
  if (kind === "query" ? name === "" : !TOKEN.test(name)) return `${kind}: needs a name, as in "${kind}:x-api-key"`;
  return { kind: kind as "header" | "cookie" | "query", name: kind === "header" ? name.toLowerCase() : name };
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
