/**
 * @module
 * `ORIGIN_URL`: where allowed requests are proxied to; `ORIGIN_SECRET` and
 * `ORIGIN_SECRET_HEADER`: what the origin knows them by.
 *
 * src/config/ is the Worker's variables, validated; pure, so the offline
 * checker (tools/check-config.ts) runs the same code.
 */
import { fail, ok, type Result } from "../core/result.ts";
import { show } from "../core/show.ts";

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

/** The header a forwarded request carries the marks of the deployments it passed through in, comma-separated. */
export const HOP_HEADER = "x-edge-rate-limiter-hop";

/** The secret the proxy adds to every forwarded request, in the header the operator named. */
export type OriginSecret = { header: string; value: string };

export const DEFAULT_ORIGIN_SECRET_HEADER = "X-Origin-Secret";
export const MIN_ORIGIN_SECRET_CHARS = 16;

/** A header name (RFC 9110 token). */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Visible ASCII and spaces within: a value every HTTP stack passes on unchanged. */
const VISIBLE = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/;
/**
 * `X-` headers that requests carry in common use, lower-case: the secret may
 * not replace them. The proxies' own (`X-Forwarded-*`, matched as a prefix,
 * and `X-Real-IP`), those that change a request's method or target
 * (`X-HTTP-Method-Override`, `X-Original-URL`, …), tokens and ids that an
 * origin checks or echoes back, the common non-standard request fields of
 * carriers, and this limiter's own hop header.
 */
export const COMMON_X_HEADERS: ReadonlySet<string> = new Set([
  "x-real-ip",
  "x-requested-with",
  "x-http-method-override",
  "x-http-method",
  "x-method-override",
  "x-original-url",
  "x-rewrite-url",
  "x-csrf-token",
  "x-xsrf-token",
  "x-request-id",
  "x-correlation-id",
  "x-api-key",
  "x-att-deviceid",
  "x-wap-profile",
  "x-uidh",
  HOP_HEADER,
]);

/**
 * `ORIGIN_SECRET` (a secret) and `ORIGIN_SECRET_HEADER` (the header it goes
 * in, default `X-Origin-Secret`): null when no secret is set. The header is
 * an `X-` name of the operator's own: not one of {@link COMMON_X_HEADERS}
 * nor `X-Forwarded-*`, and not one a rule counts clients by (`keyHeaders`): the client's
 * value of it is replaced on the way, and the origin must see what the
 * limiter counted.
 */
export function parseOriginSecret(
  secret: unknown,
  headerName: unknown,
  keyHeaders: ReadonlySet<string>,
): Result<OriginSecret | null> {
  const header = headerName === undefined || headerName === "" ? DEFAULT_ORIGIN_SECRET_HEADER : headerName;
  const errors: string[] = [];
  if (typeof header !== "string" || !TOKEN.test(header)) {
    errors.push(`ORIGIN_SECRET_HEADER: must be a header name such as "X-Origin-Secret"; got ${show(header)}`);
  } else {
    const lower = header.toLowerCase();
    if (keyHeaders.has(lower)) {
      errors.push(
        `ORIGIN_SECRET_HEADER: ${show(header)} is a header a rule counts clients by; the secret would replace what the limiter counted`,
      );
    } else if (!lower.startsWith("x-") || lower === "x-") {
      // Every standard header has a name outside X-, and any such name may be one that requests or origins use
      // (an origin that reflects `Origin` for CORS would hand the secret to every client).
      errors.push(
        `ORIGIN_SECRET_HEADER: must be an X- header of your own, such as "${DEFAULT_ORIGIN_SECRET_HEADER}"; got ${show(header)}: a header of any other name may be one that requests or origins use, and the secret replaces the client's value of it`,
      );
    } else if (lower.startsWith("x-forwarded-") || COMMON_X_HEADERS.has(lower)) {
      errors.push(
        `ORIGIN_SECRET_HEADER: ${show(header)} is an X- header that requests carry in common use, and the secret replaces the client's value of it; name one of your own, such as "${DEFAULT_ORIGIN_SECRET_HEADER}"`,
      );
    }
  }
  if (secret === undefined || secret === "") return errors.length > 0 ? fail(...errors) : ok(null);
  if (typeof secret !== "string" || !VISIBLE.test(secret)) {
    errors.push("ORIGIN_SECRET: must be printable ASCII with no line breaks (its value is not shown)");
  } else if (secret.length < MIN_ORIGIN_SECRET_CHARS) {
    errors.push(
      `ORIGIN_SECRET: must be at least ${MIN_ORIGIN_SECRET_CHARS} characters; got ${secret.length} (try: openssl rand -hex 32)`,
    );
  }
  if (errors.length > 0 || typeof secret !== "string") return fail(...errors);
  return ok({ header: String(header).toLowerCase(), value: secret });
}
