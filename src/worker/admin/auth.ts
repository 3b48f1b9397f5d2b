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
 * The user and password of every Basic credential in an `Authorization`
 * value (two headers arrive joined by a comma), which only decoding shows.
 */
function basicCredentials(authorization: string): string[] {
  const words = authorization.split(/[\s,]+/);
  const found: string[] = [];
  words.forEach((word, i) => {
    const next = words[i + 1];
    if (next === undefined || word.toLowerCase() !== "basic") return;
    try {
      found.push(atob(next));
    } catch {
      // Not base64: no credentials in it.
    }
  });
  return found;
}

/**
 * Whether `Authorization` may carry the token, in any form: the token
 * anywhere in it, or a Basic credential. Cheap; {@link carries} says
 * whether it does.
 */
export function mayCarry(authorization: string | null | undefined, token: string): boolean {
  if (authorization == null || authorization.length < token.length) return false;
  return authorization.includes(token) || BASIC.test(authorization);
}

const BASIC = /(^|[\s,])basic[\s]/i;

/**
 * Whether `Authorization` carries the token in any form: anywhere in its
 * value (as a Bearer credential, under another scheme or none, quoted, as
 * a parameter, with punctuation stuck to it; two headers arrive joined by
 * a comma), or in the user or password of a Basic credential. A request
 * that does is never forwarded to the origin with it. (Its answer says
 * only whether the whole token is there, so a search that stops at the
 * first difference tells nothing of it a guess could build on.)
 */
export async function carries(authorization: string | undefined, token: string): Promise<boolean> {
  if (authorization === undefined || authorization.length < token.length) return false;
  if (authorization.includes(token)) return true;
  return basicCredentials(authorization).some((credential) => credential.includes(token));
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
