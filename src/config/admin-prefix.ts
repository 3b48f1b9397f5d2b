/**
 * @module
 * `ADMIN_PREFIX`: the path the admin API answers under.
 *
 * src/config/ is the Worker's variables, validated; pure, so the offline
 * checker (tools/check-config.ts) runs the same code.
 */
import { fail, ok, type Result } from "../core/result.ts";
import { show } from "../core/show.ts";

export const DEFAULT_ADMIN_PREFIX = "/__ratelimit";

/**
 * Parses `ADMIN_PREFIX`: one or more path segments of unreserved characters,
 * with no trailing slash, such as `/__ratelimit` or `/ops/limits`.
 */
export function parseAdminPrefix(raw: unknown): Result<string> {
  if (raw === undefined || raw === "") return ok(DEFAULT_ADMIN_PREFIX);
  if (typeof raw !== "string" || !/^(\/[A-Za-z0-9._~-]+)+$/.test(raw)) {
    return fail(
      `ADMIN_PREFIX: must be a path such as "/__ratelimit": segments of [A-Za-z0-9._~-], no trailing slash; got ${show(raw)}`,
    );
  }
  return ok(raw);
}

/**
 * The dashboard's public paths, after the prefix: `""` is `{prefix}` itself.
 * Every other path under the prefix needs the token (the worker's
 * dashboard.ts serves them).
 */
export const DASHBOARD_PATHS = [
  "",
  "/",
  "/dashboard.js",
  "/dashboard.css",
  "/uplot.js",
  "/uplot.css",
  "/favicon.svg",
] as const;

/**
 * The paths the admin API answers after its prefix: the dashboard's files
 * and its routes. `CLIENT_LIMITS_PATH` is answered first, so it must be none
 * of them (test/client-limits.test.ts checks the routes against the admin
 * API's own).
 */
export const ADMIN_PATHS: readonly string[] = [
  ...DASHBOARD_PATHS,
  "/rules",
  "/status",
  "/credits",
  "/overrides",
  "/overrides/import",
  "/stats",
  "/metrics",
];

/**
 * The admin path `path` (as its requests' matching path reads: lower case)
 * would hide under `prefix`, or null when it hides none.
 */
export function hiddenAdminPath(path: string, prefix: string): string | null {
  const under = prefix.toLowerCase();
  if (path !== under && !path.startsWith(`${under}/`)) return null;
  const rest = path.slice(under.length);
  return ADMIN_PATHS.includes(rest) ? `${prefix}${rest}` : null;
}
