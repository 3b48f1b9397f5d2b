/**
 * @module
 * Priorities under an adaptive rule (docs/adaptive.md#priorities): which
 * requests are critical, which sheddable (the rest are default), and how
 * one controller factor becomes a factor per priority, so that a reduction
 * refuses sheddable requests first, then default ones, and critical ones
 * only when nothing else is left. Pure: no I/O, no clock.
 */
import {
  compileGlob,
  compileRuleGlob,
  encodedGlob,
  globCounts,
  looseReading,
  matchedIn,
  matchesBare,
  type PathGlob,
  type RequestPath,
  type RuleGlob,
} from "./paths.ts";
import { fail, ok, type Result } from "./result.ts";
import { show } from "./show.ts";

/** A request's priority under an adaptive rule. */
export type Priority = "critical" | "default" | "sheddable";

/** Every priority, from the one refused last to the one refused first. */
export const PRIORITIES: readonly Priority[] = ["critical", "default", "sheddable"];

/** A factor for each priority. */
export type Factors = Record<Priority, number>;

/** What marks a request: written as `"path:/api/prefetch/*"`, `"header:x-priority=critical"`, `"jwt:plan=enterprise"`, `"tier:gold"`, `"method:GET"` or `"*"`. */
export type Matcher =
  | { kind: "all"; source: string }
  | { kind: "path"; source: string; glob: RuleGlob; loose: PathGlob }
  | { kind: "header" | "jwt"; source: string; name: string; value: string | null }
  | { kind: "tier" | "method"; source: string; value: string };

/** What a matcher reads of a request. */
export type PriorityFacts = {
  method: string;
  path: RequestPath;
  header: (name: string) => string | null;
  /** A claim of the request's verified token; null without one. */
  claim: (path: string) => string | null;
  /** The tier the token puts the request in; null without one. */
  tier: string | null;
};

/** An adaptive rule's priorities, validated. */
export type Priorities = {
  critical: readonly Matcher[];
  sheddable: readonly Matcher[];
  /** The share of the limit in force kept for critical requests while the limit is reduced, in [0, 0.9]. */
  reserve: number;
};

/** The most matchers one priority may list. */
export const MAX_MATCHERS = 32;
const HEADER_NAME = /^[a-z0-9!#$%&'*+.^_`|~-]+$/;
const CLAIM_PATH = /^[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*$/;
const PERCENT = /^(\d+(?:\.\d+)?)\s*%$/;
const MATCHER_EXAMPLES =
  '"path:/api/prefetch/*", "header:x-priority=critical", "jwt:plan=enterprise", "tier:gold", "method:GET" or "*"';

/** One matcher as written; `caseSensitive` is the rule's, for paths. */
export function parseMatcher(text: unknown, caseSensitive: boolean): Result<Matcher> {
  if (typeof text !== "string") return fail(`must be a string such as ${MATCHER_EXAMPLES}; got ${show(text)}`);
  if (text === "*") return ok({ kind: "all", source: text });
  const colon = text.indexOf(":");
  const kind = colon < 0 ? text : text.slice(0, colon);
  const rest = colon < 0 ? "" : text.slice(colon + 1);
  switch (kind) {
    case "path":
      return rest.startsWith("/")
        ? ok({
            kind,
            source: text,
            glob: compileRuleGlob(rest, caseSensitive),
            loose: compileGlob(looseReading(encodedGlob(rest))),
          })
        : fail(`path: needs a glob that starts with "/", as in "path:/api/prefetch/*"; got ${show(text)}`);
    case "header":
    case "jwt": {
      const equals = rest.indexOf("=");
      const name = equals < 0 ? rest : rest.slice(0, equals);
      const value = equals < 0 ? null : rest.slice(equals + 1);
      const named = kind === "header" ? HEADER_NAME.test(name.toLowerCase()) : CLAIM_PATH.test(name);
      if (!named || value === "") {
        return fail(
          `${kind}: needs a ${kind === "header" ? "header name" : "claim"} and, if any, a value after "=", as in "${kind === "header" ? "header:x-priority=critical" : "jwt:plan=enterprise"}"; got ${show(text)}`,
        );
      }
      return ok({ kind, source: text, name: kind === "header" ? name.toLowerCase() : name, value });
    }
    case "tier":
    case "method":
      return rest !== ""
        ? ok({ kind, source: text, value: kind === "method" ? rest.toUpperCase() : rest })
        : fail(`${kind}: needs a value, as in "${kind === "tier" ? "tier:gold" : "method:GET"}"; got ${show(text)}`);
    default:
      return fail(`unknown matcher ${show(text)}; use ${MATCHER_EXAMPLES}`);
  }
}

/** A list of matchers (`critical` or `sheddable`); problems name the item. */
export function parseMatchers(value: unknown, caseSensitive: boolean): Result<Matcher[]> {
  if (value === undefined) return ok([]);
  const items = typeof value === "string" ? [value] : value;
  if (!Array.isArray(items) || items.length === 0 || items.length > MAX_MATCHERS) {
    return fail(`must be a list of 1 to ${MAX_MATCHERS} matchers such as ${MATCHER_EXAMPLES}; got ${show(value)}`);
  }
  const matchers: Matcher[] = [];
  const errors: string[] = [];
  items.forEach((item, i) => {
    const parsed = parseMatcher(item, caseSensitive);
    if (parsed.ok) matchers.push(parsed.value);
    else errors.push(...parsed.errors.map((e) => `item ${i + 1}: ${e}`));
  });
  return errors.length > 0 ? fail(...errors) : ok(matchers);
}

/** `reserve`: a share written with `%`, from `"0%"` to `"90%"`. */
export function parseReserve(value: unknown): Result<number> {
  if (value === undefined) return ok(0);
  const match = typeof value === "string" ? PERCENT.exec(value.trim()) : null;
  const share = match ? Number(match[1]) / 100 : Number.NaN;
  return share >= 0 && share <= 0.9
    ? ok(share)
    : fail(`must be a share written with "%", from "0%" to "90%", such as "20%"; got ${show(value)}`);
}

/**
 * Whether a matcher matches a request. A path glob reads the path as a
 * rule counts it (`lenient`: every spelling an origin may route alike, an
 * encoded slash, `;parameters`, a trailing slash), or only by every
 * reading at once, as the origin receives it (in either case for a
 * case-insensitive rule) and as matched: a `critical` list, where a
 * spelling some origin routes elsewhere would be privileged.
 */
function matches(m: Matcher, facts: PriorityFacts, caseSensitive: boolean, lenient: boolean): boolean {
  switch (m.kind) {
    case "all":
      return true;
    case "path": {
      if (lenient) return globCounts(m.glob, facts.path, caseSensitive);
      // Critical by every reading: as written (in either case, for a case-insensitive rule; the glob's bare prefix
      // too, as a rule's path counts it: `/api/*` is `/api`), and as matched.
      const written = facts.path.written;
      if (!matchesBare(m.glob, written) && !(!caseSensitive && matchesBare(m.glob.canonical, written.toLowerCase())))
        return false;
      // And as the most lenient server could read it (every escape decoded, twice; `\` a slash): a path an origin
      // that decodes `%5C` as a separator, or decodes twice, routes elsewhere is not privileged.
      if ((written.includes("%") || written.includes("\\")) && !matchesBare(m.loose, looseReading(written)))
        return false;
      return matchedIn(m.glob, facts.path, caseSensitive);
    }
    case "header": {
      const got = facts.header(m.name);
      return got !== null && (m.value === null || got === m.value);
    }
    case "jwt": {
      const got = facts.claim(m.name);
      return got !== null && (m.value === null || got === m.value);
    }
    case "tier":
      return facts.tier === m.value;
    case "method":
      return facts.method === m.value;
  }
}

/** A request's priority: critical when a `critical` matcher matches it, else sheddable when a `sheddable` one does, else default. */
export function priorityOf(priorities: Priorities, facts: PriorityFacts, caseSensitive: boolean): Priority {
  if (priorities.critical.some((m) => matches(m, facts, caseSensitive, false))) return "critical";
  if (priorities.sheddable.some((m) => matches(m, facts, caseSensitive, true))) return "sheddable";
  return "default";
}

/** Whether any matcher reads a verified token (a claim or a tier): the request's token must then be verified. */
export const readsToken = (priorities: Priorities): boolean =>
  [...priorities.critical, ...priorities.sheddable].some((m) => m.kind === "jwt" || m.kind === "tier");

/**
 * The stages one controller factor goes through, cut first to cut last:
 * sheddable (when the rule has `sheddable` matchers), default, critical
 * (when it has `critical` ones). Each is a span of the factor; a rule with
 * neither has one stage, default, and its factor is the controller's. A
 * stage's priority goes down to one request a period; past it, to none.
 */
export type Stages = {
  readonly order: readonly Priority[];
  /** The factor at which each stage begins (1 for the first), by position in `order`. */
  readonly tops: readonly number[];
  /** The lowest factor of each stage's own priority: `bottom` for all but the last, `minFactor` for the last. */
  readonly lows: readonly number[];
  /** The lowest the controller's factor goes. */
  readonly minFactor: number;
  readonly reserve: number;
};

/**
 * The stages of a rule with these priorities, whose limit is `limit` and
 * whose floor gives `minFactor` (floor ÷ limit). A priority other than the
 * last is taken down to one request's `cost` a period (`cost ÷ limit`): its
 * requests all but stop before the next priority is touched.
 */
export function stagesOf(priorities: Priorities | undefined, limit: number, cost: number, minFactor: number): Stages {
  const order: Priority[] = [];
  if (priorities !== undefined && priorities.sheddable.length > 0) order.push("sheddable");
  order.push("default");
  if (priorities !== undefined && priorities.critical.length > 0) order.push("critical");
  const bottom = Math.min(minFactor, Math.max(1, cost) / Math.max(1, limit));
  const lows = order.map((_, i) => (i === order.length - 1 ? minFactor : bottom));
  const tops: number[] = [];
  let top = 1;
  for (let i = 0; i < order.length; i++) {
    tops.push(top);
    top *= lows[i]!;
  }
  return { order, tops, lows, minFactor: top, reserve: priorities?.reserve ?? 0 };
}

/** The stage a controller factor is in: the last whose top it is at or under. */
export function stageAt(stages: Stages, factor: number): number {
  let at = 0;
  for (let i = 1; i < stages.order.length; i++) if (factor <= stages.tops[i]! * (1 + 1e-12)) at = i;
  return at;
}

/**
 * Each priority's factor under the controller's `factor`: a priority
 * before the current stage at 0 (nothing left: every request of it is
 * refused, counted nowhere), the current one at its share of the stage, down
 * to its lowest, those after it at 1. While the limit is reduced, default
 * and sheddable requests get at most `1 − reserve` of critical ones' limit.
 */
export function factorsAt(stages: Stages, factor: number): Factors {
  const factors: Factors = { critical: 1, default: 1, sheddable: 1 };
  const stage = stageAt(stages, factor);
  stages.order.forEach((priority, i) => {
    factors[priority] =
      i < stage ? 0 : i > stage ? 1 : Math.min(1, Math.max(stages.lows[i]!, factor / stages.tops[i]!));
  });
  // A priority the rule names no matchers for has no requests: it reads as default.
  for (const priority of PRIORITIES) if (!stages.order.includes(priority)) factors[priority] = factors.default;
  if (factor < 1 && stages.reserve > 0) {
    const most = factors.critical * (1 - stages.reserve);
    factors.default = Math.min(factors.default, most);
    factors.sheddable = Math.min(factors.sheddable, most);
  }
  return factors;
}

/**
 * How long a request of a priority with nothing left (its factor 0) is told
 * to wait, and its refusal is remembered: the soonest a report can bring a raise.
 */
export const NOTHING_LEFT_RETRY_MS = 1_000;

/** The controller's factor at which a stage's own priority has `own` as its factor. */
export const factorOfStage = (stages: Stages, stage: number, own: number): number => stages.tops[stage]! * own;
