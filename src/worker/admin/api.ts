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
 * - `{prefix}/overrides`: per-client limits (see overrides.ts)
 * - `GET    {prefix}/`: the dashboard, whose page and files alone need no token (see dashboard.ts)
 * - `GET    {prefix}/stats?minutes=<1..1440>`, `GET {prefix}/metrics`: statistics (see stats.ts)
 * - `GET` and `DELETE {prefix}/status?rule=<id>&hash=<hash>`: a client known by its hash (see status.ts)
 * - `GET` and `POST {prefix}/credits?rule=<id>&key=<client>`: a client's usage of a quota, and credits (see credits.ts)
 */
import type { MiddlewareHandler } from "hono";
import { parseAdminPrefix } from "../../config/admin-prefix.ts";
import { configurationFromEnv } from "../../config/memo.ts";
import { getOrCreate } from "../../core/maps.ts";
import { looseReading, normalizePath, pathnameOf } from "../../core/paths.ts";
import type { Result } from "../../core/result.ts";
import { INVALID_CONFIG, problemResponse } from "../../http/problem.ts";
import { defaultIsolate, type Isolate } from "../../isolate/isolate.ts";
import type { Env } from "../env.ts";
import { withLibraryRules } from "../library-rules.ts";
import { bearerMatches, tokenName, unauthorized } from "./auth.ts";
import { credits } from "./credits.ts";
import { dashboard, isDashboardPath } from "./dashboard.ts";
import { overrides } from "./overrides.ts";
import { statistics } from "./stats.ts";
import { clientStatus } from "./status.ts";
import { json, settingsView } from "./views.ts";

export type AdminApiOptions = {
  /**
   * The isolate whose refusal and lease for a client a reset forgets at once
   * (other isolates' lapse within their `maxRefusalMs`). Pass the one your
   * `rateLimit()` middlewares use.
   * @default the isolate-wide default, the one `rateLimit()` uses by default
   */
  isolate?: Isolate;
};

const prefixes = new Map<string, ReturnType<typeof parseAdminPrefix>>();

/**
 * The admin API as middleware; mount it before `rateLimit()`.
 * Requests outside its prefix, and every request while `ADMIN_TOKEN` is unset, go on untouched.
 */
export const adminApi = (options: AdminApiOptions = {}): MiddlewareHandler<{ Bindings: Env }> =>
  async function adminMiddleware(c, next) {
    const token = c.env.ADMIN_TOKEN;
    const parsed = adminPrefix(c.env);
    if (parsed === null || token === undefined) return next();
    if (!parsed.ok) {
      // Which paths are the API's is unknown: a request that carries the token is answered here, with every
      // error, never forwarded with it to the origin; every other request goes on.
      if (!(await bearerMatches(c.req.header("authorization"), token))) return next();
      return invalidConfigAnswer(configurationFromEnv(c.env).errors);
    }
    const path = adminPath(c.req.url);
    const { value: prefix } = parsed;
    if (!isUnder(path, prefix)) return readsUnder(path, prefix) ? respelled(prefix) : next();

    // The dashboard's page, script and styles hold no data: the only paths answered without the token.
    const sub = path.slice(prefix.length);
    if (isDashboardPath(sub)) return dashboard(c.req.method, sub, prefix);
    if (!(await bearerMatches(c.req.header("authorization"), token))) {
      return unauthorized(c.req.header("authorization") !== undefined);
    }
    const request: AdminRequest = {
      raw: c.req.raw,
      by: await tokenName(token),
      method: c.req.method,
      route: path.slice(prefix.length),
      url: new URL(c.req.url),
      prefix,
      env: c.env,
      isolate: options.isolate ?? defaultIsolate(),
      background: (task) => {
        try {
          c.executionCtx.waitUntil(task);
        } catch {
          void task; // no execution context (a test calling the app directly): the task runs loose
        }
      },
    };
    return route(request);
  };

/**
 * The admin API's prefix: null while the API is off (`ADMIN_TOKEN` unset or
 * empty), else `ADMIN_PREFIX` parsed, which may have failed.
 */
export function adminPrefix(env: Env): Result<string> | null {
  const token = env.ADMIN_TOKEN;
  if (token === undefined || token === "") return null;
  return getOrCreate(prefixes, String(env.ADMIN_PREFIX ?? ""), () => parseAdminPrefix(env.ADMIN_PREFIX));
}

/**
 * The path the prefix is matched against: normalised like the paths rules
 * match, so `//__ratelimit` or `/%5F_ratelimit` cannot slip past to the
 * origin; and, like them, without parsing the URL of every request that is
 * not the API's.
 */
export const adminPath = (url: string): string => normalizePath(pathnameOf(url));

/** Whether a path from {@link adminPath} is the prefix or under it. */
export const isUnder = (path: string, prefix: string): boolean =>
  path.startsWith(prefix) && (path.length === prefix.length || path.charCodeAt(prefix.length) === SLASH);

const SLASH = 47;

/**
 * Whether a path from {@link adminPath} that is not under the prefix would
 * be read as under it by some server in front of or behind the Worker: in
 * another case, with `;parameters`, `%2F` for a slash, `..;`, encoded twice
 * ({@link looseReading}). Such a path is refused, never forwarded: an origin
 * or proxy that read it so would be handed the admin token it carries.
 */
export function readsUnder(path: string, prefix: string): boolean {
  // Most paths hold nothing to decode or resolve (a dot segment starts with "/."): only their case can differ.
  if (!/[%\\;]|\/\./.test(path)) return isUnder(path.slice(0, prefix.length + 1).toLowerCase(), lowerCased(prefix));
  return isUnder(looseReading(path), lowerCased(prefix));
}

let lastPrefix: { prefix: string; lower: string } | undefined;
const lowerCased = (prefix: string): string => {
  if (lastPrefix?.prefix !== prefix) lastPrefix = { prefix, lower: prefix.toLowerCase() };
  return lastPrefix.lower;
};

/** An authorised request under the prefix. */
type AdminRequest = {
  raw: Request;
  /** Who sent it, for the log: a prefix of the admin token's hash. */
  by: string;
  method: string;
  /** The path after the prefix, such as `/rules`. */
  route: string;
  url: URL;
  prefix: string;
  env: Env;
  isolate: Isolate;
  /** Keeps a task running after the response (`waitUntil`). */
  background: (task: Promise<unknown>) => void;
};

/** Every route under the prefix but the dashboard's files, with its methods (docs/admin-api.md lists each). */
export const ADMIN_ROUTES: Readonly<Record<string, readonly string[]>> = {
  "/rules": ["GET"],
  "/status": ["GET", "DELETE"],
  "/credits": ["GET", "POST"],
  "/overrides": ["GET", "PUT", "DELETE"],
  "/overrides/import": ["POST"],
  "/stats": ["GET"],
  "/metrics": ["GET"],
};

async function route({
  raw,
  by,
  method,
  route,
  url,
  prefix,
  env,
  isolate,
  background,
}: AdminRequest): Promise<Response> {
  const allowed = ADMIN_ROUTES[route];
  if (allowed === undefined) return notFound(prefix);
  if (!allowed.includes(method)) return methodNotAllowed(`${prefix}${route}`, allowed);
  const config = configurationFromEnv(env);
  // Until it is fixed, every route answers with every error: the rules it would show are not the configuration.
  if (config.errors.length > 0) return invalidConfigAnswer(config.errors);
  // In your own app, the rules your rateLimit() middlewares were given too.
  const settings = withLibraryRules(config.settings);
  if (route === "/rules") return json(settingsView(settings));
  if (route === "/stats" || route === "/metrics") {
    return statistics(route, url, { ns: env.STATS, settings, isolate, background, limiters: env.RATE_LIMITER });
  }
  if (route.startsWith("/overrides")) {
    return overrides(method, route, raw, { settings, registry: env.OVERRIDES, isolate, by });
  }
  if (route === "/credits") return credits(url, { method, settings, ns: env.RATE_LIMITER, isolate, request: raw, by });
  return clientStatus(url, { method, settings, ns: env.RATE_LIMITER, isolate });
}

/** The 500 of a configuration with errors, listing them: only a holder of the token gets it, so they may be shown. */
const invalidConfigAnswer = (errors: readonly string[]): Response =>
  problemResponse({
    type: INVALID_CONFIG,
    title: "Internal Server Error",
    status: 500,
    detail: "The rate limiter's configuration has errors.",
    errors,
  });

const notFound = (prefix: string): Response =>
  problemResponse({
    type: "about:blank",
    title: "Not Found",
    status: 404,
    detail:
      `No admin route here. Routes: GET ${prefix}/ (the dashboard), GET ${prefix}/rules, ` +
      `GET and DELETE ${prefix}/status?rule=<id>&key=<client> (or &hash=<hash>), ` +
      `GET and POST ${prefix}/credits?rule=<id>&key=<client>, ` +
      `GET, PUT and DELETE ${prefix}/overrides?rule=<id>&key=<client>, GET ${prefix}/overrides, ` +
      `POST ${prefix}/overrides/import, GET ${prefix}/stats?minutes=<1-1440>, GET ${prefix}/metrics.`,
  });

/** The answer to a path that reads as under the prefix but is not spelt so ({@link readsUnder}). */
const respelled = (prefix: string): Response =>
  problemResponse({
    type: "about:blank",
    title: "Not Found",
    status: 404,
    detail:
      "This path reads as a path under the admin API's prefix once decoded or normalised, and is never forwarded " +
      `to the origin; the admin API answers only ${prefix} as written.`,
  });

const methodNotAllowed = (path: string, allowed: readonly string[]): Response =>
  problemResponse(
    { type: "about:blank", title: "Method Not Allowed", status: 405, detail: `${path} allows ${allowed.join(", ")}.` },
    { Allow: allowed.join(", ") },
  );
