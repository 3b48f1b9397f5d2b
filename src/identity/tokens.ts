/**
 * @module
 * A request's bearer token, verified: read from the header (or cookie) the
 * settings name, checked for its signature, `exp`, `nbf`, `iss` and `aud`,
 * and its claims remembered for the token's lifetime, so a client's next
 * requests cost a digest and a map lookup. A token that is missing,
 * malformed, expired or unverifiable gives no claims: it is counted and
 * logged, never thrown at the client, and the key falls back to its next
 * source.
 */
import { decodeProtectedHeader, jwtVerify } from "jose";
import type { JwtSettings } from "../config/jwt.ts";
import type { Claims } from "../core/claims.ts";
import { readCookie } from "../core/keys.ts";
import { LruMap } from "../core/lru.ts";
import { logEvent } from "../observe/log.ts";
import { KeyRing, type KeySetOptions, RemoteKeySet } from "./key-sets.ts";

/** Why a token gave no claims. */
export type TokenFailure =
  | "too large"
  | "malformed"
  | "algorithm not allowed"
  | "no keys"
  | "unknown key"
  | "bad signature"
  | "expired"
  | "not yet valid"
  | "wrong issuer"
  | "wrong audience";

/** The longest token read; a longer one is not parsed at all. */
export const MAX_TOKEN_LENGTH = 8 * 1024;
/** How long a verdict on a token is kept at most, whatever its `exp`: a key dropped from the set stops working within this. */
export const MAX_VERDICT_MS = 5 * 60_000;
/** Failures whose verdict can change without the token changing: never remembered. */
const TRANSIENT: ReadonlySet<TokenFailure> = new Set(["no keys", "unknown key", "not yet valid"]);
/** At most one log line per failure reason per this many milliseconds. */
const LOG_EVERY_MS = 10_000;

export type TokensOptions = KeySetOptions & {
  /** Tokens remembered at most, per set of settings. */
  maxTokens: number;
  /** The digest a token is remembered by (the isolate's keyed SipHash), so a huge token is never a map key. */
  digest: (text: string) => string;
};

/** What the isolate knows of one token: its claims or why it has none, under which keys, until when. */
type Verdict = { claims: Claims | null; failure?: TokenFailure; generation: number; untilMs: number };

/** One set of settings' keys and verdicts. */
type Verifier = {
  keys: KeyRing | RemoteKeySet;
  verdicts: LruMap<string, Verdict>;
  /** Verifications under way, by digest: a burst of requests with one new token verifies it once. */
  pending: Map<string, Promise<Verdict>>;
};

/** Whom to tell about background work, and how long a request may wait for keys. */
export type WaitOptions = { waitMs: number; background: (task: Promise<unknown>) => void };

export class Tokens {
  /** Requests whose token gave no claims, by reason. */
  readonly failures: Record<TokenFailure, number> = {
    "too large": 0,
    malformed: 0,
    "algorithm not allowed": 0,
    "no keys": 0,
    "unknown key": 0,
    "bad signature": 0,
    expired: 0,
    "not yet valid": 0,
    "wrong issuer": 0,
    "wrong audience": 0,
  };
  /** Verifications run (cache misses), for the tests and the bench. */
  verifications = 0;
  private readonly verifiers = new WeakMap<JwtSettings, Verifier>();
  private readonly lastLogged = new Map<TokenFailure, { atMs: number; since: number }>();

  private readonly options: TokensOptions;

  constructor(options: TokensOptions) {
    this.options = options;
  }

  /**
   * The verified claims of the request's token: null at once when it has
   * none, or a known bad one; the claims at once when the token was
   * verified before; otherwise a promise of either.
   */
  claimsOf(headers: Headers, jwt: JwtSettings, wait: WaitOptions): Claims | null | Promise<Claims | null> {
    const token = tokenOf(headers, jwt);
    if (token === null) return null;
    if (token.length > MAX_TOKEN_LENGTH) return this.failed("too large");
    const verifier = this.verifierOf(jwt);
    const digest = this.options.digest(token);
    const nowMs = this.options.clock();
    const known = verifier.verdicts.get(digest);
    if (known !== undefined && known.untilMs > nowMs && known.generation === generationOf(verifier.keys)) {
      return known.failure === undefined ? known.claims : this.failed(known.failure);
    }
    let verifying = verifier.pending.get(digest);
    if (verifying === undefined) {
      verifying = this.verify(token, jwt, verifier, wait).finally(() => verifier.pending.delete(digest));
      verifier.pending.set(digest, verifying);
    }
    return verifying.then((verdict) => {
      if (verdict.failure !== undefined && !TRANSIENT.has(verdict.failure)) verifier.verdicts.set(digest, verdict);
      if (verdict.failure === undefined) verifier.verdicts.set(digest, verdict);
      return verdict.failure === undefined ? verdict.claims : this.failed(verdict.failure);
    });
  }

  /** What the set of keys at a URL reports, or null for an inline set. */
  keySetStats(jwt: JwtSettings): RemoteKeySet["stats"] | null {
    const keys = this.verifierOf(jwt).keys;
    return keys instanceof RemoteKeySet ? keys.stats : null;
  }

  private verifierOf(jwt: JwtSettings): Verifier {
    let verifier = this.verifiers.get(jwt);
    if (verifier === undefined) {
      const source = jwt.keys;
      verifier = {
        keys: source.kind === "inline" ? new KeyRing(source.jwks.keys, 1) : new RemoteKeySet(source, this.options),
        verdicts: new LruMap(this.options.maxTokens),
        pending: new Map(),
      };
      this.verifiers.set(jwt, verifier);
    }
    return verifier;
  }

  private async verify(token: string, jwt: JwtSettings, verifier: Verifier, wait: WaitOptions): Promise<Verdict> {
    this.verifications++;
    const nowMs = this.options.clock();
    const failed = (failure: TokenFailure, generation = 0): Verdict => ({
      claims: null,
      failure,
      generation,
      untilMs: nowMs + MAX_VERDICT_MS,
    });
    const header = protectedHeader(token);
    if (header === null) return failed("malformed");
    if (!(jwt.algorithms as string[]).includes(header.alg)) return failed("algorithm not allowed");
    const found = await keysFor(header, verifier.keys, wait);
    if (found.ring === null) return failed("no keys");
    if (found.candidates.length === 0) return failed("unknown key", found.ring.generation);
    let failure: TokenFailure = "bad signature";
    for (const jwk of found.candidates) {
      const key = await found.ring.cryptoKey(jwk, header.alg);
      if (key === null) continue;
      try {
        const { payload } = await jwtVerify(token, key, {
          algorithms: [header.alg],
          clockTolerance: jwt.clockSkewMs / 1000,
          currentDate: new Date(nowMs),
          ...(jwt.issuer ? { issuer: jwt.issuer } : {}),
          ...(jwt.audience ? { audience: jwt.audience } : {}),
        });
        const expiresAtMs = typeof payload.exp === "number" ? payload.exp * 1000 + jwt.clockSkewMs : Infinity;
        const untilMs = Math.min(expiresAtMs, nowMs + MAX_VERDICT_MS);
        return { claims: payload, generation: found.ring.generation, untilMs };
      } catch (error) {
        failure = failureOf(error);
        // Another key may still verify the signature; any other failure is the token's own.
        if (failure !== "bad signature") break;
      }
    }
    return failed(failure, found.ring.generation);
  }

  /** Counts a failure, logs it at most once per reason per 10 s, and gives no claims. */
  private failed(failure: TokenFailure): null {
    this.failures[failure]++;
    const nowMs = this.options.clock();
    const last = this.lastLogged.get(failure);
    if (last === undefined || nowMs - last.atMs >= LOG_EVERY_MS) {
      const since = last === undefined ? 1 : this.failures[failure] - last.since;
      logEvent({ event: "token_rejected", reason: failure, requests: since }, "warn");
      this.lastLogged.set(failure, { atMs: nowMs, since: this.failures[failure] });
    }
    return null;
  }
}

/**
 * The token in the request: `Authorization: Bearer <token>` by default, or
 * the named header's value (with or without `Bearer `), then the named
 * cookie. Null when there is none.
 */
export function tokenOf(headers: Headers, jwt: JwtSettings): string | null {
  const value = headers.get(jwt.header)?.trim();
  if (value) {
    const bearer = /^bearer[ \t]+/i.exec(value);
    if (bearer) return value.slice(bearer[0].length).trim() || null;
    if (jwt.header !== "authorization") return value;
  }
  if (jwt.cookie === null) return null;
  return readCookie(headers.get("cookie"), jwt.cookie) || null;
}

function protectedHeader(token: string): { alg: string; kid?: string } | null {
  try {
    const header = decodeProtectedHeader(token);
    if (typeof header.alg !== "string") return null;
    return typeof header.kid === "string" ? { alg: header.alg, kid: header.kid } : { alg: header.alg };
  } catch {
    return null;
  }
}

const generationOf = (keys: KeyRing | RemoteKeySet): number =>
  keys instanceof KeyRing ? keys.generation : keys.stats.generation;

/** The keys a token may be verified with: from the keys held, or, when they have none for it, from a fetch. */
async function keysFor(
  header: { alg: string; kid?: string },
  keys: KeyRing | RemoteKeySet,
  wait: WaitOptions,
): Promise<{ ring: KeyRing | null; candidates: JsonWebKey[] }> {
  if (keys instanceof KeyRing) return { ring: keys, candidates: keys.candidates(header.alg, header.kid) };
  let ring = await keys.current(wait.waitMs, wait.background);
  let candidates = ring?.candidates(header.alg, header.kid) ?? [];
  if (ring !== null && candidates.length === 0) {
    ring = await keys.lacking(wait.waitMs, wait.background);
    candidates = ring?.candidates(header.alg, header.kid) ?? [];
  }
  return { ring, candidates };
}

/** The reason behind one of jose's errors. */
function failureOf(error: unknown): TokenFailure {
  const { code, claim } = error as { code?: string; claim?: string };
  switch (code) {
    case "ERR_JWT_EXPIRED":
      return "expired";
    case "ERR_JWT_CLAIM_VALIDATION_FAILED":
      return claim === "nbf"
        ? "not yet valid"
        : claim === "iss"
          ? "wrong issuer"
          : claim === "aud"
            ? "wrong audience"
            : "malformed";
    case "ERR_JWS_SIGNATURE_VERIFICATION_FAILED":
      return "bad signature";
    case "ERR_JOSE_ALG_NOT_ALLOWED":
      return "algorithm not allowed";
    default:
      // A key of the wrong kind for the algorithm is a TypeError: the token is not signed by it.
      return error instanceof TypeError ? "bad signature" : "malformed";
  }
}
