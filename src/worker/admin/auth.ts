/**
 * @module
 * Who may use the admin API: the bearer token, compared in constant time,
 * and the 401 for everyone else.
 */
import { hashKey } from "../../core/keys.ts";
import { problemResponse } from "../../http/problem.ts";
import { keyHashPrefix } from "../../observe/log.ts";

const encoder = new TextEncoder();
const sha256 = (text: string) => crypto.subtle.digest("SHA-256", encoder.encode(text));

/**
 * Whether `Authorization` carries `Bearer <token>`. Both sides are hashed
 * first, so the comparison takes the same time whatever the length or the
 * first differing byte of a guess.
 */
export async function bearerMatches(authorization: string | undefined, token: string): Promise<boolean> {
  const given = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization ?? "")?.[1];
  if (given === undefined) return false;
  const [a, b] = await Promise.all([sha256(given), sha256(token)]);
  return crypto.subtle.timingSafeEqual(a, b);
}

/**
 * The parts of an `Authorization` value that could be the token, in any
 * form a client might send it: every word of every credential (two headers
 * arrive joined by a comma; a scheme other than Bearer, or none), and the
 * user and password of a Basic one.
 */
function candidates(authorization: string): string[] {
  const words = authorization.split(/[\s,]+/).filter((word) => word !== "");
  const found = [...words];
  words.forEach((word, i) => {
    const next = words[i + 1];
    if (next === undefined || word.toLowerCase() !== "basic") return;
    try {
      found.push(...atob(next).split(":"));
    } catch {
      // Not base64: no credentials in it.
    }
  });
  return found;
}

/**
 * Whether `Authorization` may carry the token, in any form: a word of it as
 * long as the token, or a Basic credential. Cheap, and it tells nothing of
 * the token but its length; {@link carries} says whether it does.
 */
export function mayCarry(authorization: string | null | undefined, token: string): boolean {
  if (authorization == null || authorization.length < token.length) return false;
  // Scanned in place (most requests with an Authorization carry an API key, not the token): a word as long as
  // the token, or a Basic credential, whose user and password only decoding shows.
  WORD.lastIndex = 0;
  for (let word = WORD.exec(authorization); word !== null; word = WORD.exec(authorization)) {
    if (word[0].length === token.length || word[0].toLowerCase() === "basic") return true;
  }
  return false;
}

const WORD = /[^\s,]+/g;

/** The token's digest, made once per isolate (and again if the token changes). */
let tokenDigest: { token: string; digest: ArrayBuffer } | undefined;

/**
 * Whether `Authorization` carries the token in any form (see
 * {@link candidates}), each part compared in constant time: a request that
 * does is never forwarded to the origin with it.
 */
export async function carries(authorization: string | undefined, token: string): Promise<boolean> {
  if (authorization === undefined) return false;
  if (tokenDigest?.token !== token) tokenDigest = { token, digest: await sha256(token) };
  const wanted = tokenDigest.digest;
  for (const part of candidates(authorization)) {
    if (part.length === token.length && crypto.subtle.timingSafeEqual(await sha256(part), wanted)) return true;
  }
  return false;
}

/** The answer to a request outside the admin API that carries its token: never forwarded to the origin with it. */
export const tokenNotForwarded = (prefix: string): Response =>
  problemResponse({
    type: "about:blank",
    title: "Forbidden",
    status: 403,
    detail: `This request carries the admin token, which is never forwarded to the origin: send it only to the admin API, under ${prefix}.`,
  });

/** How the log names who used a token: `token:` and the first 12 hex digits of its SHA-256, never the token. */
export const tokenName = async (token: string): Promise<string> => `token:${keyHashPrefix(await hashKey(token))}`;

/** The 401 with its challenge; `tokenSent` says whether a wrong token came, or none. */
export function unauthorized(tokenSent: boolean): Response {
  // RFC 6750 §3: no error code when no credentials came; invalid_token when a wrong one did.
  const challenge = tokenSent ? 'Bearer realm="admin", error="invalid_token"' : 'Bearer realm="admin"';
  return problemResponse(
    {
      type: "about:blank",
      title: "Unauthorized",
      status: 401,
      detail: "Send the admin token: Authorization: Bearer <token>.",
    },
    { "WWW-Authenticate": challenge },
  );
}
