/**
 * @module
 * Forwards a request to the origin: streaming both ways, redirects returned
 * as they are, hop-by-hop headers removed in both directions.
 */

import type { Origin, OriginSecret } from "../config/origin.ts";
import { logEvent } from "../observe/log.ts";
import { BODY_NOT_FORWARDED, ORIGIN_UNREACHABLE, problemResponse } from "./problem.ts";
import { clientClosedRequest } from "./refusals.ts";
import { HOP_HEADER } from "./upstream.ts";

const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "transfer-encoding",
  "upgrade",
  "proxy-authorization",
  "proxy-authenticate",
  "trailer",
];

/**
 * Headers a client may not have removed by naming them in `Connection`: the
 * origin relies on them to know who is calling and what is sent.
 */
const PROTECTED = new Set([
  "authorization",
  "cookie",
  "host",
  "content-length",
  "content-type",
  "content-encoding",
  "forwarded",
  "x-forwarded-for",
  "x-forwarded-proto",
  "x-forwarded-host",
  "x-real-ip",
  "true-client-ip",
]);

const isWebSocketUpgrade = (headers: Headers): boolean => headers.get("upgrade")?.toLowerCase() === "websocket";

const NONE: ReadonlySet<string> = new Set();

/**
 * A copy of `headers` without hop-by-hop headers; `keepUpgrade` keeps a
 * WebSocket handshake intact. `Connection` cannot remove a header in `keep`
 * (the headers the rules count clients by): the origin must see what the
 * limiter counted.
 */
export function stripHopByHop(headers: Headers, keepUpgrade = false, keep: ReadonlySet<string> = NONE): Headers {
  const out = new Headers(headers);
  const named = (headers.get("connection") ?? "")
    .split(",")
    .map((token) => token.trim().toLowerCase())
    .filter((token) => token !== "" && !PROTECTED.has(token) && !keep.has(token) && !token.startsWith("cf-"));
  for (const name of [...HOP_BY_HOP, ...named]) {
    if (keepUpgrade && (name === "upgrade" || name === "connection")) continue;
    out.delete(name);
  }
  if (keepUpgrade) {
    out.set("connection", "Upgrade");
    out.set("upgrade", "websocket");
  }
  return out;
}

/** The URL the origin is asked for: the request's path and query on the origin's scheme, host and port. */
export function originUrl(requestUrl: string, origin: Origin): string {
  if (origin === null) return requestUrl;
  const url = new URL(requestUrl);
  url.protocol = origin.protocol;
  url.hostname = origin.hostname;
  url.port = origin.port; // "" is the scheme's default; the host setter alone would keep the request's port
  return url.href;
}

/** Where and how a request is forwarded. */
export type Upstream = {
  origin: Origin;
  /** Headers the rules count clients by: never removed on the way. */
  keyHeaders?: ReadonlySet<string> | undefined;
  /** This deployment's mark, added to the request's hop header (see upstream.ts). */
  mark?: string | undefined;
  /** The origin's secret, set on every forwarded request in place of any value the client sent. */
  secret?: OriginSecret | null | undefined;
};

/** How a request is forwarded, beside where. */
export type ForwardOptions = {
  /** Aborting it closes the connection to the origin at once (the request, or its response's body, is then cut short). */
  signal?: AbortSignal | undefined;
  /** The body to send instead of the request's own (the same bytes, passed on as they arrive: see upload.ts). */
  body?: ReadableStream<Uint8Array> | null | undefined;
  /** Whether the client broke its body off: then a failed fetch is the client's doing, not an unreachable origin. */
  broke?: () => boolean;
};

/**
 * The answer to a GET or HEAD that carries a body, which a Worker's `fetch`
 * cannot send on: a 400 naming why, before any rule counts it (the request
 * is the client's to fix, and never reaches the origin); null for any other
 * request. Without it, the failed forward was a 502 "origin unreachable",
 * which an adaptive rule took for the origin failing.
 */
export function bodyNotForwarded(request: Request): Response | null {
  const { method } = request;
  if ((method !== "GET" && method !== "HEAD") || request.body === null) return null;
  // An empty body declared (`Content-Length: 0`, as some clients send on every request) is no body: forwarded without.
  if (request.headers.get("content-length")?.trim() === "0") return null;
  return problemResponse({
    type: BODY_NOT_FORWARDED,
    title: "Bad Request",
    status: 400,
    detail: `A ${method} request with a body cannot be forwarded to the origin: send the body with POST, or leave it out.`,
  });
}

/**
 * Forwards `request` upstream and returns its response, or a 502 problem
 * when it cannot be reached. When the client hangs up, or breaks its body
 * off, before the origin answers, the answer is the 499 nobody reads (it
 * is not the origin's failure, and is not logged as one).
 */
export async function forward(request: Request, upstream: Upstream, options: ForwardOptions = {}): Promise<Response> {
  const webSocket = isWebSocketUpgrade(request.headers);
  // A GET or HEAD goes without a body: fetch takes none (one that had bytes was answered 400, see bodyNotForwarded).
  const bodiless = request.method === "GET" || request.method === "HEAD";
  const target = originUrl(request.url, upstream.origin);
  const headers = stripHopByHop(request.headers, webSocket, upstream.keyHeaders ?? NONE);
  // Appended: after the marks of the deployments it passed through before, comma-separated.
  if (upstream.mark !== undefined) headers.append(HOP_HEADER, upstream.mark);
  if (upstream.secret) headers.set(upstream.secret.header, upstream.secret.value);
  let response: Response;
  try {
    response = await fetch(target, {
      method: request.method,
      headers,
      body: bodiless ? null : options.body === undefined ? request.body : options.body,
      redirect: "manual",
      signal: options.signal ?? null,
    });
  } catch (error) {
    if (options.broke?.() || (request.signal as AbortSignal | undefined)?.aborted) return clientClosedRequest();
    logEvent(
      { event: "origin_unreachable", url: target, message: String((error as Error)?.message ?? error) },
      "error",
    );
    return problemResponse({
      type: ORIGIN_UNREACHABLE,
      title: "Bad Gateway",
      status: 502,
      detail: "The origin could not be reached.",
    });
  }
  const back = stripHopByHop(response.headers);
  if (response.webSocket) return new Response(null, { status: 101, webSocket: response.webSocket, headers: back });
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers: back });
}
