/**
 * @module
 * The admin API: the validated rules, a client's count without counting it,
 * and a reset to unblock a client. On only while the `ADMIN_TOKEN` secret is
 * set; then every path under its prefix is answered here, never proxied to
 * the origin and never rate-limited. Off, the prefix is an ordinary path.
 *
 * - `GET    {prefix}/rules`
 * - `GET    {prefix}/status?rule=<id>&key=<client>`
 * - `DELETE {prefix}/status?rule=<id>&key=<client>`
 */
import type { MiddlewareHandler } from "hono";
import { getOrCreate, parseAdminPrefix, type Settings, settingsFromEnv } from "../../config/settings.ts";
import { formatDuration, show } from "../../core/duration.ts";
import { hashKey } from "../../core/keys.ts";
import { normalizePath } from "../../core/paths.ts";
import type { Rule } from "../../core/rules.ts";
import {
  INVALID_CONFIG,
  invalidConfigResponse,
  LIMITER_UNAVAILABLE,
  type Problem,
  problemResponse,
} from "../../http/problem.ts";
import { defaultIsolate, type Isolate } from "../../isolate/isolate.ts";
import { type LimiterNamespace, withDeadline } from "../../object/client.ts";
import { toRuleCheck } from "../../object/protocol.ts";
import { keyHashPrefix, logEvent } from "../../observe/log.ts";
import type { Env } from "../env.ts";
import { adminKey, keyAsWritten } from "./key.ts";

export const UNKNOWN_RULE = "urn:edge-rate-limiter:unknown-rule";
export const MALFORMED_KEY = "urn:edge-rate-limiter:malformed-key";

const prefixes = new Map<string, ReturnType<typeof parseAdminPrefix>>();

/**
 * The admin API as middleware; mount it before `rateLimit()`.
 * Requests outside its prefix, and every request while `ADMIN_TOKEN` is unset, go on untouched.
 */
export const adminApi = (options: { isolate?: Isolate } = {}): MiddlewareHandler<{ Bindings: Env }> =>
  async function adminMiddleware(c, next) {
    const token = c.env.ADMIN_TOKEN;
    if (token === undefined || token === "") return next();
    const parsed = getOrCreate(prefixes, String(c.env.ADMIN_PREFIX ?? ""), () => parseAdminPrefix(c.env.ADMIN_PREFIX));
    if (!parsed.ok) {
      // Which paths are the API's is unknown, and proxying one would hand the token to the origin.
      logEvent({ event: "invalid_config", errors: [parsed.error] }, "error");
      return invalidConfigResponse();
    }
    const url = new URL(c.req.url);
    // Matched like the rules match paths, so `//__ratelimit` or `/%5F_ratelimit` cannot slip past to the origin.
    const path = normalizePath(url.pathname);
    const { prefix } = parsed;
    if (path !== prefix && !path.startsWith(`${prefix}/`)) return next();

    if (!(await bearerMatches(c.req.header("authorization"), token))) {
      return unauthorized(c.req.header("authorization") !== undefined);
    }
    return route(c.req.method, path.slice(prefix.length), url, c.env, prefix, options.isolate ?? defaultIsolate());
  };

const encoder = new TextEncoder();
const sha256 = (text: string) => crypto.subtle.digest("SHA-256", encoder.encode(text));

/**
 * Whether `Authorization` carries `Bearer <token>`. Both sides are hashed
 * first, so the comparison takes the same time whatever the length or the
 * first differing byte of a guess.
 */
export async function bearerMatches(authorization: string | undefined, token: string): Promise<boolean> {
  const given = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization ?? "")?.[1];
  if (given === undefined) return false;
  const [a, b] = await Promise.all([sha256(given), sha256(token)]);
  return crypto.subtle.timingSafeEqual(a, b);
}

function unauthorized(tokenSent: boolean): Response {
  // RFC 6750 §3: no error code when no credentials came; invalid_token when a wrong one did.
  const challenge = tokenSent ? 'Bearer realm="admin", error="invalid_token"' : 'Bearer realm="admin"';
  return problemResponse(
    {
      type: "about:blank",
      title: "Unauthorized",
      status: 401,
      detail: "Send the admin token: Authorization: Bearer <token>.",
    },
    { "WWW-Authenticate": challenge },
  );
}

const ROUTES: Record<string, string[]> = { "/rules": ["GET"], "/status": ["GET", "DELETE"] };

async function route(
  method: string,
  subPath: string,
  url: URL,
  env: Env,
  prefix: string,
  isolate: Isolate,
): Promise<Response> {
  const allowed = ROUTES[subPath];
  if (allowed === undefined) {
    return problemResponse({
      type: "about:blank",
      title: "Not Found",
      status: 404,
      detail: `No admin route here. Routes: GET ${prefix}/rules, GET and DELETE ${prefix}/status?rule=<id>&key=<client>.`,
    });
  }
  if (!allowed.includes(method)) {
    return problemResponse(
      {
        type: "about:blank",
        title: "Method Not Allowed",
        status: 405,
        detail: `${prefix}${subPath} allows ${allowed.join(", ")}.`,
      },
      { Allow: allowed.join(", ") },
    );
  }
  const settings = settingsFromEnv(env);
  if (!settings.ok) {
    // Only a holder of the token gets here, so the problems themselves may be shown.
    return problemResponse({
      type: INVALID_CONFIG,
      title: "Internal Server Error",
      status: 500,
      detail: "The rate limiter's configuration is invalid.",
      errors: settings.errors,
    });
  }
  if (subPath === "/rules") return json(rulesView(settings.value));
  return status(method, url, settings.value, env.RATE_LIMITER, isolate);
}

/** A rule as the API shows it: its fields as they would be written in wrangler.toml, plus the period in milliseconds. */
export type RuleView = {
  id: string;
  path: string[];
  /** Upper-case methods; null for every method. */
  methods: string[] | null;
  exclude: string[];
  case_sensitive: boolean;
  limit: number;
  /** The period as wrangler.toml spells it, such as "1m". */
  period: string;
  periodMs: number;
  key: string[];
  action: "block" | "log";
  on_error: "open" | "closed";
  precision: number;
  strict: boolean;
};

export const ruleView = (rule: Rule): RuleView => ({
  id: rule.id,
  path: rule.paths.map((glob) => glob.source),
  methods: rule.methods === null ? null : [...rule.methods],
  exclude: rule.exclude.map((glob) => glob.source),
  case_sensitive: rule.caseSensitive,
  limit: rule.limit,
  period: formatDuration(rule.periodMs),
  periodMs: rule.periodMs,
  key: keyAsWritten(rule.key),
  action: rule.action,
  on_error: rule.onError,
  precision: rule.precision,
  strict: rule.strict,
});

const rulesView = (settings: Settings) => ({
  rules: settings.rules.map(ruleView),
  ipv6Prefix: settings.ipv6PrefixBits,
  trustedIpHeader: settings.trustedIpHeader,
  timeoutMs: settings.timeoutMs,
});

async function status(
  method: string,
  url: URL,
  settings: Settings,
  ns: LimiterNamespace,
  isolate: Isolate,
): Promise<Response> {
  const ruleId = url.searchParams.get("rule");
  const rule = settings.rules.find((r) => r.id === ruleId);
  if (rule === undefined) {
    const known = settings.rules.map((r) => r.id);
    return badRequest(UNKNOWN_RULE, "Unknown rule", {
      detail:
        ruleId === null
          ? `The "rule" query parameter is required; rules: ${known.join(", ")}.`
          : `No rule ${show(ruleId)}; rules: ${known.join(", ")}.`,
      rules: known,
    });
  }
  const key = adminKey(rule, url.searchParams.getAll("key"), settings.ipv6PrefixBits);
  if (!key.ok) return badRequest(MALFORMED_KEY, "Malformed key", { detail: key.error });

  const name = await hashKey(key.canonical);
  const stub = ns.get(ns.idFromName(name));
  const about = { rule: rule.id, key: JSON.parse(key.canonical) as unknown, keyHash: keyHashPrefix(name) };
  if (method === "DELETE") {
    const reset = await withDeadline(stub.reset([rule.id]), settings.timeoutMs);
    if (!reset.ok) return unavailable(about.rule, about.keyHash, reset.message);
    // This isolate forgets its refusal and its lease at once; other isolates' refusals lapse within maxRefusalMs.
    const digest = isolate.digest(key.canonical);
    isolate.refusals.forget(rule, digest);
    isolate.leases.forget(digest, rule, isolate.clock());
    logEvent({ event: "admin_reset", rule: rule.id, key: about.keyHash }, "warn");
    return json({ ...about, reset: true });
  }
  const peeked = await withDeadline(stub.peek([toRuleCheck(rule)]), settings.timeoutMs);
  if (!peeked.ok) return unavailable(about.rule, about.keyHash, peeked.message);
  const verdict = peeked.value.verdicts[0]!;
  return json({
    ...about,
    limit: rule.limit,
    periodMs: rule.periodMs,
    weighted: verdict.weighted,
    allowed: verdict.ruleAllows,
    remaining: verdict.remaining,
    retryAfterSeconds: Math.ceil(verdict.retryAfterMs / 1000),
    retryAfterMs: verdict.retryAfterMs,
    resetSeconds: Math.ceil(verdict.resetMs / 1000),
    resetMs: verdict.resetMs,
  });
}

function unavailable(rule: string, keyHash: string, message: string): Response {
  logEvent({ event: "admin_unavailable", rule, key: keyHash, message }, "error");
  return problemResponse({
    type: LIMITER_UNAVAILABLE,
    title: "Service Unavailable",
    status: 503,
    detail: `The client's Durable Object did not answer: ${message}`,
  });
}

function badRequest(type: string, title: string, fields: { detail: string } & Record<string, unknown>): Response {
  const problem: Problem = { type, title, status: 400, ...fields };
  return problemResponse(problem);
}

const json = (body: unknown): Response =>
  new Response(JSON.stringify(body), {
    headers: { "Content-Type": "application/json", "Cache-Control": "no-store" },
  });
