/**
 * @module
 * `ORIGIN_URL`: where allowed requests are proxied to.
 *
 * src/config/ is the Worker's variables, validated; pure, so the offline
 * checker (tools/check-config.ts) runs the same code.
 */
import { fail, ok, type Result } from "../core/result.ts";

/** Where requests go: a base URL whose scheme, host and port replace the request's, or null to keep the request's own URL. */
export type Origin = URL | null;

/**
 * Parses `ORIGIN_URL`. Only a scheme, host and port are allowed: the path and
 * query always come from the request.
 */
export function parseOrigin(raw: string | undefined): Result<Origin> {
  if (raw === undefined || raw === "") return ok(null);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return fail(`ORIGIN_URL: is not a URL; got ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return fail(`ORIGIN_URL: must be http: or https:; got ${JSON.stringify(raw)}`);
  }
  if (url.pathname !== "/" || url.search !== "" || url.hash !== "" || url.username !== "") {
    return fail(
      `ORIGIN_URL: must be only a scheme, host and port, such as "https://origin.example.com"; got ${JSON.stringify(raw)}`,
    );
  }
  return ok(url);
}
