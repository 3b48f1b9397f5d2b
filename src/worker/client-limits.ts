/**
 * @module
 * The client-limits endpoint: a client reads its own limits without
 * spending a request, as GitHub's `GET /rate_limit` answers. It answers the
 * calling client, identified as the rules identify it (its IP as the rules
 * read it, its headers, cookies, verified token), with every enforcing rule
 * it is under: limit, remaining and reset in the terms of the `RateLimit`
 * headers. Each of the client's objects is read without counting (`peek`
 * and `peekPlaces`, as the admin API's `GET /status` reads them), and the
 * endpoint's own limit against abuse lives in the isolate's memory: no count
 * is taken anywhere. The Worker answers it at `CLIENT_LIMITS_PATH`
 * ({@link clientLimitsRoute}); your own app mounts {@link clientLimits}.
 */
import type { Env as HonoEnv, MiddlewareHandler } from "hono";
import type { ConfigInput } from "../config/configuration.ts";
import { configurationFromEnv } from "../config/memo.ts";
import type { Settings } from "../config/settings.ts";
import { type Address, ipKey, parseAddress } from "../core/ip.ts";
import { hashKey } from "../core/keys.ts";
import type { KindName } from "../core/kinds/kind.ts";
import { windowQuota } from "../core/kinds/window.ts";
import { LruMap } from "../core/lru.ts";
import { looseReading, pathnameOf, type RequestPath, requestPath } from "../core/paths.ts";
import { type Rule, ruleCoversClient } from "../core/rules.ts";
import { check, emptyState, type WindowLimit, type WindowState } from "../core/sliding-window.ts";
import { invalidConfigResponse, LIMITER_UNAVAILABLE, problemResponse, reportInvalidConfig } from "../http/problem.ts";
import { type Policy, type Reported, rateLimitHeaders, windowSeconds } from "../http/rate-limit-headers.ts";
import { tooManyRequests } from "../http/refusals.ts";
import { clientAddress } from "../http/request-facts.ts";
import type { Reading } from "../isolate/answers.ts";
import { DEFAULT_MAX_KEYS, defaultIsolate, type Isolate } from "../isolate/isolate.ts";
import { claimsFor, inClaimedTier, keyGroups } from "../isolate/match.ts";
import { report } from "../isolate/reports.ts";
import type { KeyGroup } from "../isolate/vocabulary.ts";
import { type LimiterNamespace, withDeadline } from "../object/client.ts";
import { type RuleVerdict, ruleCheckOf, toPlaceRequest } from "../object/protocol.ts";
import { keyHashPrefix, logEvent } from "../observe/log.ts";
import { limiterNamespace } from "./binding.ts";
import { type RuleLimit, ruleLimits } from "./decision.ts";
import type { Env } from "./env.ts";
import { inBackground, type RateLimitOptions, settingsSource } from "./middleware.ts";

/**
 * The endpoint's own limit: 30 reads a minute per client IP, in each
 * isolate's memory (no count in any object). Its 200 and its 429 carry it
 * in their `RateLimit` headers as the policy `client-limits`.
 */
export const CLIENT_LIMITS_RULE: WindowLimit & Policy = {
  id: "client-limits",
  kind: "window",
  limit: 30,
  periodMs: 60_000,
  precision: 1,
  strict: false,
  quota: windowQuota(60_000),
};

/** A rule whose client key includes the request's path or method: one count per path (or method), none to show here. */
export type PerRequestRuleLimit = {
  /** The rule's kind (see `RuleLimit`). */
  kind: KindName;
  id: string;
  /** The rule's quota (its tier's, for a client a verified token puts in one). */
  limit: number;
  /** The policy's window in seconds, for a quota that renews with time. */
  windowSeconds?: number;
  /** What the count is kept per besides the client: `"path"`, `"method"`, or both. */
  countedPer: ("path" | "method")[];
};

/** What the endpoint answers: every enforcing rule the client is under, in the order the rules are written. */
export type ClientLimits = { rules: (RuleLimit | PerRequestRuleLimit)[] };

/** Options of {@link clientLimits}: how your `rateLimit()` middlewares count, so that it reads the same counts. */
// biome-ignore lint/suspicious/noExplicitAny: Hono's own default for an app's environment
export type ClientLimitsOptions<E extends HonoEnv = any> = Pick<
  RateLimitOptions<E>,
  "rules" | "binding" | "ipv6Prefix" | "trustedIpHeader" | "timeoutMs" | "isolate" | "key"
>;

/**
 * The client-limits endpoint as a handler for your own app: mount it on the
 * path you choose, with the rules (and `key`) your `rateLimit()` middlewares
 * count with. Answers `GET` (and `HEAD`); other methods get `405`.
 * @example app.get("/rate_limit", clientLimits({ rules: [login, api] }))
 */
// biome-ignore lint/suspicious/noExplicitAny: Hono's own default for an app's environment
export const clientLimits = <E extends HonoEnv = any>(options: ClientLimitsOptions<E> = {}): MiddlewareHandler<E> => {
  const binding = options.binding ?? "RATE_LIMITER";
  const settingsOf = settingsSource(options);
  const { key } = options;
  return async function clientLimitsHandler(c) {
    const env = (c.env ?? {}) as Record<string, unknown>;
    const { settings, errors } = settingsOf(env as ConfigInput);
    const bound = limiterNamespace(env, binding);
    if ("error" in bound) {
      reportInvalidConfig([...errors, bound.error]);
      return invalidConfigResponse();
    }
    const { ns } = bound;
    // What is invalid is left out, and the rest applies; the errors are logged, at most every 10 s.
    if (errors.length > 0) reportInvalidConfig(errors);
    return answer(c.req.raw, {
      settings,
      ns,
      isolate: options.isolate ?? defaultIsolate(),
      clientKey: key === undefined ? undefined : await key(c),
      background: inBackground(() => c.executionCtx),
    });
  };
};

/** The Worker's endpoint: answers `CLIENT_LIMITS_PATH`, when set, before any rule counts it; any other request goes on. */
export const clientLimitsRoute = (): MiddlewareHandler<{ Bindings: Env }> =>
  async function clientLimitsMiddleware(c, next) {
    // What of the configuration is valid applies, as for the rules (the errors are reported where they decide).
    const { settings } = configurationFromEnv(c.env);
    if (!isClientLimitsPath(requestPath(pathnameOf(c.req.url)), settings)) return next();
    return answer(c.req.raw, {
      settings,
      ns: c.env.RATE_LIMITER,
      isolate: defaultIsolate(),
      background: inBackground(() => c.executionCtx),
    });
  };

/**
 * Whether a request's path is the endpoint's: matched as a case-insensitive
 * rule's `path` matches (core/paths.ts), or read as leniently as any origin
 * or proxy might read it ({@link looseReading}: `%2F`, `%5C`, `%3B` and
 * escapes encoded twice decoded), so that no spelling of it (`/Rate_Limit/`,
 * `//rate_limit`, `/rate%5Flimit`, `/rate_limit;x`, `/v1%2Frate_limit`)
 * goes on to the rules and the origin.
 */
export function isClientLimitsPath(path: RequestPath, settings: Settings): boolean {
  const own = settings.clientLimitsPath;
  if (own === null) return false;
  if (path.matching(false) === own) return true;
  // Only an escape left encoded can be read otherwise by an origin: the matching path has resolved the rest.
  return path.written.includes("%") && looseReading(path.written) === own;
}

/** What an answer needs besides the request. */
type AnswerContext = {
  settings: Settings;
  ns: LimiterNamespace;
  isolate: Isolate;
  /** The client as your app names it (`rateLimit({ key })`): every rule's key. */
  clientKey?: string | undefined;
  background: (task: Promise<unknown>) => void;
};

const ALLOWED_METHODS = ["GET", "HEAD"];

async function answer(request: Request, context: AnswerContext): Promise<Response> {
  if (!ALLOWED_METHODS.includes(request.method)) {
    return problemResponse(
      { type: "about:blank", title: "Method Not Allowed", status: 405, detail: "Read your limits with GET." },
      { Allow: ALLOWED_METHODS.join(", ") },
    );
  }
  const { settings, isolate } = context;
  const address = clientAddress(request.headers, settings.trustedIpHeader);
  const own = endpointLimit(isolate, ipKey(address, settings.ipv6PrefixBits));
  if (!own.verdict.allowed) return tooManyRequests([CLIENT_LIMITS_RULE], [own], settings.legacyHeaders);
  const limits = await limitsOf(request, parseAddress(address), context);
  if (!limits.ok) {
    logEvent({ event: "client_limits_unavailable", key: keyHashPrefix(limits.name), message: limits.message }, "error");
    return problemResponse({
      type: LIMITER_UNAVAILABLE,
      title: "Service Unavailable",
      status: 503,
      detail: `Your limits could not be read: ${limits.message}`,
    });
  }
  const body: ClientLimits = { rules: limits.rules };
  return new Response(JSON.stringify(body), {
    headers: {
      "Content-Type": "application/json",
      "Cache-Control": "no-store",
      ...rateLimitHeaders([CLIENT_LIMITS_RULE], [own], settings.legacyHeaders),
    },
  });
}

/** Each isolate's counts of reads of the endpoint, by client IP, the least recently seen forgotten first. */
const reads = new WeakMap<Isolate, LruMap<string, WindowState>>();

/** Counts one read by this client in this isolate's memory; its verdict under {@link CLIENT_LIMITS_RULE}. */
function endpointLimit(isolate: Isolate, ip: string): Reported {
  let counts = reads.get(isolate);
  if (counts === undefined) {
    counts = new LruMap(DEFAULT_MAX_KEYS);
    reads.set(isolate, counts);
  }
  const nowMs = isolate.clock();
  const state = counts.get(ip) ?? emptyState(nowMs, CLIENT_LIMITS_RULE);
  const { state: next, decision } = check(state, nowMs, CLIENT_LIMITS_RULE);
  counts.set(ip, next);
  const verdict: RuleVerdict = { ...decision, ruleAllows: decision.allowed, counted: null, holdsForMs: 0 };
  return { ...CLIENT_LIMITS_RULE, verdict, nowMs };
}

/** The rules the client is under, read from its objects; or why one could not be read. */
async function limitsOf(
  request: Request,
  address: Address | null,
  context: AnswerContext,
): Promise<{ ok: true; rules: ClientLimits["rules"] } | { ok: false; name: string; message: string }> {
  const { settings, isolate, clientKey } = context;
  // Enforcing rules only, as the headers list them; not a rule whose `ips` leave the client out.
  const covering = settings.rules.filter((rule) => rule.action === "block" && ruleCoversClient(rule, () => address));
  if (covering.length === 0) return { ok: true, rules: [] };
  const claims = await claimsFor(request, covering, settings, isolate.tokens, context.background);
  const rules = inClaimedTier(covering, claims, settings);
  const perRequest = clientKey === undefined ? rules.filter((rule) => countedPer(rule).length > 0) : [];
  const counted = rules.filter((rule) => !perRequest.includes(rule));
  const client = { request, method: request.method, path: requestPath(pathnameOf(request.url)), claims };
  const groups = keyGroups(counted, client, clientKey, settings, isolate.digest);
  const read = await Promise.all(groups.map((group) => readGroup(group, context)));
  const failed = read.find((r) => !r.ok);
  if (failed !== undefined && !failed.ok) return failed;
  const reading: Reading = { policies: counted, reports: read.flatMap((r) => (r.ok ? r.reports : [])) };
  const { rules: limits } = ruleLimits(reading);
  const byId = new Map<string, RuleLimit | PerRequestRuleLimit>(limits.map((limit) => [limit.id, limit]));
  for (const rule of perRequest) byId.set(rule.id, perRequestLimit(rule));
  // In the order the rules are written; a rule an override lifts is left out, as the headers leave it out.
  return { ok: true, rules: rules.flatMap((rule) => byId.get(rule.id) ?? []) };
}

/** One key's object read without counting: a verdict per rate rule, and each concurrency rule's places. */
async function readGroup(
  group: KeyGroup,
  { ns, isolate, settings }: AnswerContext,
): Promise<{ ok: true; reports: Reported[] } | { ok: false; name: string; message: string }> {
  const name = await hashKey(group.canonical);
  const stub = ns.get(ns.idFromName(name));
  const { rules, places } = group;
  const checks = rules.map((rule) =>
    isolate.adaptive.get(rule.id) ? isolate.adaptive.checkOf(rule) : ruleCheckOf(rule),
  );
  const [rated, ...placed] = await Promise.all([
    rules.length === 0 ? undefined : withDeadline(stub.peek(checks), settings.timeoutMs),
    ...places.map((rule) => {
      const base = toPlaceRequest(rule);
      const request = isolate.adaptive.get(rule.id) ? isolate.adaptive.placeRequestOf(rule, base) : base;
      return withDeadline(stub.peekPlaces(rule.id, request), settings.timeoutMs);
    }),
  ]);
  // The isolate's time once answered, as a decision's headers take it: the same terms, the same numbers.
  const nowMs = isolate.clock();
  const reports: Reported[] = [];
  if (rated !== undefined) {
    if (!rated.ok) return { ok: false, name, message: rated.message };
    const { verdicts } = rated.value;
    for (const [i, rule] of rules.entries()) reports.push(reported(rule, verdicts[i]!, nowMs));
  }
  for (const [i, answer] of placed.entries()) {
    if (answer === undefined) continue;
    if (!answer.ok) return { ok: false, name, message: answer.message };
    const { limit, inUse, override, never } = answer.value;
    const free = limit === null ? 0 : Math.max(0, limit - inUse);
    const verdict: RuleVerdict = {
      allowed: free > 0,
      ruleAllows: override !== "deny" && (override === "unlimited" || free > 0),
      weighted: inUse,
      remaining: free,
      retryAfterMs: 0,
      resetMs: 0,
      counted: null,
      holdsForMs: 0,
      ...(limit !== null && limit !== places[i]!.limit ? { limit } : {}),
      ...(override !== undefined ? { override } : {}),
      ...(never ? { never } : {}),
    };
    reports.push(reported(places[i]!, verdict, nowMs));
  }
  return { ok: true, reports };
}

/** A rule's verdict as the headers report it. */
const reported = report;

/** The characteristics of a rule's key that a request supplies rather than its client: its path, its method. */
function countedPer(rule: Rule): ("path" | "method")[] {
  const kinds = new Set(rule.key.flat().map((source) => source.kind));
  return (["path", "method"] as const).filter((kind) => kinds.has(kind));
}

function perRequestLimit(rule: Rule): PerRequestRuleLimit {
  const w = windowSeconds(rule);
  return {
    kind: rule.kind,
    id: rule.id,
    limit: rule.limit,
    ...(w === null ? {} : { windowSeconds: w }),
    countedPer: countedPer(rule),
  };
}
