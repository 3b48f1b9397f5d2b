/**
 * @module
 * Reading a verified token's claims: a dot path (`org.id`) into its payload,
 * and what counts as a value there.
 */

import { atMostCharacters } from "./text.ts";

/** A verified token's payload. */
export type Claims = Readonly<Record<string, unknown>>;

/** The longest claim value a key takes, in characters (code points: an emoji is one); a longer one is treated as missing rather than hashed into a key. */
export const MAX_CLAIM_LENGTH = 1024;

/**
 * The value at `path` in `claims`, as a key's value: a string, or an integer
 * written in decimal (`"org": {"id": 42}` gives `"42"`). Anything else (an
 * object, a list, a boolean, null, a fraction, a string over
 * {@link MAX_CLAIM_LENGTH}) is missing, so a client cannot pick an odd
 * value to escape a limit, only fall back to the next source.
 */
export function claimAt(claims: Claims, path: string): string | null {
  let value: unknown = claims;
  for (const name of path.split(".")) {
    if (typeof value !== "object" || value === null || Array.isArray(value) || !Object.hasOwn(value, name)) return null;
    value = (value as Record<string, unknown>)[name];
  }
  if (typeof value === "string") return atMostCharacters(value, MAX_CLAIM_LENGTH) ? value : null;
  return Number.isSafeInteger(value) ? String(value) : null;
}
