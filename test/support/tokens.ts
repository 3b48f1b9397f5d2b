/**
 * Signing keys and bearer tokens for the token tests, made when a test runs:
 * no key material is checked in.
 */
import { exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from "jose";

export type Algorithm = "RS256" | "ES256" | "EdDSA" | "HS256";

/** A key that signs tokens, and the public half (or, for HS256, the secret) as a key set lists it. */
export type SigningKey = { alg: Algorithm; kid: string; signWith: CryptoKey | Uint8Array; jwk: JWK };

const base64url = (bytes: Uint8Array): string =>
  btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");

export async function signingKey(
  alg: Algorithm,
  kid = `${alg.toLowerCase()}-${crypto.randomUUID()}`,
): Promise<SigningKey> {
  if (alg === "HS256") {
    const secret = crypto.getRandomValues(new Uint8Array(32));
    return { alg, kid, signWith: secret, jwk: { kty: "oct", k: base64url(secret), kid } };
  }
  const pair = await generateKeyPair(alg, { extractable: true, ...(alg === "EdDSA" ? { crv: "Ed25519" } : {}) });
  return { alg, kid, signWith: pair.privateKey, jwk: { ...(await exportJWK(pair.publicKey)), kid } };
}

/** A key set of these keys, as `JWT_JWKS` or a JWKS endpoint holds it. */
export const keySet = (...keys: SigningKey[]): { keys: JWK[] } => ({ keys: keys.map((key) => key.jwk) });

export type TokenOptions = {
  /** Seconds from now; negative for a token that has expired. @default 3600 */
  expiresIn?: number;
  /** Header fields to put in place of the key's own (`kid`, `alg`). */
  header?: Record<string, unknown>;
  /** Seconds from now before which the token is not valid. */
  notBefore?: number;
};

/** A token with these claims, signed by `key` and naming its `kid`. */
export function tokenFor(key: SigningKey, claims: JWTPayload, options: TokenOptions = {}): Promise<string> {
  const nowSeconds = Math.floor(Date.now() / 1000);
  const jwt = new SignJWT(claims)
    .setProtectedHeader({ alg: key.alg, kid: key.kid, ...options.header } as { alg: string })
    .setIssuedAt(nowSeconds)
    .setExpirationTime(nowSeconds + (options.expiresIn ?? 3600));
  if (options.notBefore !== undefined) jwt.setNotBefore(nowSeconds + options.notBefore);
  return jwt.sign(key.signWith);
}

/** An unsigned token (`alg: none`), which no verifier may accept. */
export function unsignedToken(claims: JWTPayload): string {
  const part = (value: unknown) => base64url(new TextEncoder().encode(JSON.stringify(value)));
  const exp = Math.floor(Date.now() / 1000) + 3600;
  return `${part({ alg: "none", typ: "JWT" })}.${part({ ...claims, exp })}.`;
}

export const bearer = (token: string): Record<string, string> => ({ authorization: `Bearer ${token}` });
