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
