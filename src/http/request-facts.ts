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

/**
 * What client keys are made of, read lazily from the request: most keys need
 * neither a URL parse nor an IP parse. One object per request, its readers
 * methods rather than closures made anew for each request.
 */
export const requestFacts = (
  request: Request,
  path: RequestPath,
  settings: Settings,
  claims: Claims | null = null,
  method: string = request.method,
): RequestFacts => new FactsOf(request, method, path, settings, claims);

class FactsOf implements RequestFacts {
  readonly method: string;
  readonly path: string;
  private readonly request: Request;
  private readonly requestPath: RequestPath;
  private readonly settings: Settings;
  private readonly claims: Claims | null;
  private headers: Headers | undefined;
  private clientIp: string | undefined;
  private url: URL | undefined;

  constructor(request: Request, method: string, path: RequestPath, settings: Settings, claims: Claims | null) {
    this.request = request;
    this.method = method;
    this.path = path.written;
    this.requestPath = path;
    this.settings = settings;
    this.claims = claims;
  }

  private headerList(): Headers {
    this.headers ??= this.request.headers;
    return this.headers;
  }

  private parsed(): URL {
    this.url ??= new URL(this.request.url);
    return this.url;
  }

  matchingPath(caseSensitive: boolean): string {
    return this.requestPath.matching(caseSensitive);
  }

  host(): string {
    return this.parsed().host.toLowerCase();
  }

  ip(): string {
    this.clientIp ??= ipKey(
      clientAddress(this.headerList(), this.settings.trustedIpHeader),
      this.settings.ipv6PrefixBits,
    );
    return this.clientIp;
  }

  header(name: string): string | null {
    return this.headerList().get(name);
  }

  cookie(name: string): string | null {
    return readCookie(this.headerList().get("cookie"), name);
  }

  query(name: string): string | null {
    return this.parsed().searchParams.get(name);
  }

  network(fact: NetworkFact): string | null {
    return networkFact(this.request, fact);
  }

  claim(path: string): string | null {
    return this.claims === null ? null : claimAt(this.claims, path);
  }
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
