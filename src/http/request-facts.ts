/**
 * @module
 * Who is calling: the facts a client key is made of, read from a request.
 */
import type { Settings } from "../config/settings.ts";
import { type Claims, claimAt } from "../core/claims.ts";
import { ipKey } from "../core/ip.ts";
import { type RequestFacts, readCookie } from "../core/keys.ts";
import type { RequestPath } from "../core/paths.ts";
import type { NetworkFact } from "../core/rules.ts";

/** What client keys are made of, read lazily from the request: most keys need neither a URL parse nor an IP parse. */
export function requestFacts(
  request: Request,
  path: RequestPath,
  settings: Settings,
  claims: Claims | null = null,
): RequestFacts {
  const headers = request.headers;
  let ip: string | undefined;
  let url: URL | undefined;
  const parsed = () => {
    url ??= new URL(request.url);
    return url;
  };
  return {
    method: request.method,
    path: path.written,
    matchingPath: path.matching,
    host: () => parsed().host.toLowerCase(),
    ip: () => {
      ip ??= ipKey(clientAddress(headers, settings.trustedIpHeader), settings.ipv6PrefixBits);
      return ip;
    },
    header: (name) => headers.get(name),
    cookie: (name) => readCookie(headers.get("cookie"), name),
    query: (name) => parsed().searchParams.get(name),
    network: (fact) => networkFact(request, fact),
    claim: (path) => (claims === null ? null : claimAt(claims, path)),
  };
}

/** What `request.cf` says of the client's network; null where the runtime says nothing. */
function networkFact(request: Request, fact: NetworkFact): string | null {
  const cf = (request as { cf?: Record<string, unknown> }).cf;
  if (cf === undefined) return null;
  const value = fact === "ja4" ? (cf.botManagement as { ja4?: unknown } | undefined)?.ja4 : cf[fact];
  if (typeof value === "number") return Number.isSafeInteger(value) ? String(value) : null;
  return typeof value === "string" && value.length <= 256 ? value : null;
}

/**
 * The client's address: `CF-Connecting-IP`, which Cloudflare's edge sets, or
 * the operator's trusted header when configured and present (its rightmost
 * entry, the one the nearest proxy wrote).
 */
export function clientAddress(headers: Headers, trustedHeader: string | null): string | null {
  const trusted = trustedHeader === null ? null : headers.get(trustedHeader);
  if (trusted === null || trusted.trim() === "") return headers.get("cf-connecting-ip");
  const last = trusted.split(",").at(-1)?.trim() ?? "";
  if (trustedHeader !== "forwarded") return last;
  const forParam = last.split(";").find((p) => p.trim().toLowerCase().startsWith("for="));
  return forParam?.trim().slice(4).replace(/^"|"$/g, "") ?? null;
}
