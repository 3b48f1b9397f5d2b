/**
 * @module
 * A keyed 64-bit digest of a string (SipHash-2-4), by which the isolate
 * remembers a client key. It is 4 UTF-16 code units whatever the key's length,
 * so a 100 KB header value costs its memory once, while the request lasts.
 * With a secret key chosen per isolate, nobody can craft two client keys
 * that share a digest: SipHash was designed against exactly that (hash
 * flooding), where a fast unkeyed hash such as MurmurHash is not.
 *
 * The input is the string's UTF-16 code units, two bytes each, little-endian:
 * an injective encoding, with no copy of the string.
 */

/** A 128-bit key as four unsigned 32-bit words: k0 = words 0 (low) and 1, k1 = words 2 (low) and 3. */
export type DigestKey = readonly [number, number, number, number];

/**
 * SipHash-2-4 of `text` (as UTF-16LE bytes) under `key`: the 64 bits as four
 * UTF-16 code units, most significant first. A Map key needs no more, and
 * formatting them as hex would cost more than the hash.
 *
 * Each 64-bit lane v0 … v3 is a pair of unsigned 32-bit locals (high, low),
 * and a SipRound is written out once, in a loop, over them: this runs on
 * every request that names a client, so it stays free of calls and
 * allocations (about 0.1 µs for a short key, against 1 µs written with a
 * function per operation). That is why it is one long function: a round
 * moved into a helper would have to take and hand back all eight halves on
 * every call, which is the cost this avoids (`npm run bench:hot-path`).
 */
export function sipHash24(key: DigestKey, text: string): string {
  const [k0l, k0h, k1l, k1h] = key;
  // "somepseudorandomlygeneratedbytes"
  let v0h = (k0h ^ 0x736f6d65) >>> 0;
  let v0l = (k0l ^ 0x70736575) >>> 0;
  let v1h = (k1h ^ 0x646f7261) >>> 0;
  let v1l = (k1l ^ 0x6e646f6d) >>> 0;
  let v2h = (k0h ^ 0x6c796765) >>> 0;
  let v2l = (k0l ^ 0x6e657261) >>> 0;
  let v3h = (k1h ^ 0x74656462) >>> 0;
  let v3l = (k1l ^ 0x79746573) >>> 0;

  const units = text.length;
  const whole = units - (units % 4);
  // Message words, then the last one (the remaining 0–3 code units, and the length in bytes mod 256
  // in its top byte), then the finalisation: 2 rounds per word, 4 at the end.
  for (let at = 0; at <= whole; at += 4) {
    let mh: number;
    let ml: number;
    let rounds = 2;
    if (at < whole) {
      ml = (text.charCodeAt(at) | (text.charCodeAt(at + 1) << 16)) >>> 0;
      mh = (text.charCodeAt(at + 2) | (text.charCodeAt(at + 3) << 16)) >>> 0;
    } else {
      const left = units - whole;
      ml = left > 0 ? text.charCodeAt(at) : 0;
      if (left > 1) ml = (ml | (text.charCodeAt(at + 1) << 16)) >>> 0;
      mh = ((left > 2 ? text.charCodeAt(at + 2) : 0) | (((units * 2) & 0xff) << 24)) >>> 0;
    }
    v3h = (v3h ^ mh) >>> 0;
    v3l = (v3l ^ ml) >>> 0;
    for (let pass = 0; pass < 2; pass++) {
      for (let r = 0; r < rounds; r++) {
        let lo: number;
        let hi: number;
        // v0 += v1; v1 = rotl(v1, 13) ^ v0; v0 = rotl(v0, 32)
        lo = (v0l + v1l) >>> 0;
        v0h = (v0h + v1h + (lo < v0l ? 1 : 0)) >>> 0;
        v0l = lo;
        hi = ((v1h << 13) | (v1l >>> 19)) >>> 0;
        lo = ((v1l << 13) | (v1h >>> 19)) >>> 0;
        v1h = (hi ^ v0h) >>> 0;
        v1l = (lo ^ v0l) >>> 0;
        hi = v0h;
        v0h = v0l;
        v0l = hi;
        // v2 += v3; v3 = rotl(v3, 16) ^ v2
        lo = (v2l + v3l) >>> 0;
        v2h = (v2h + v3h + (lo < v2l ? 1 : 0)) >>> 0;
        v2l = lo;
        hi = ((v3h << 16) | (v3l >>> 16)) >>> 0;
        lo = ((v3l << 16) | (v3h >>> 16)) >>> 0;
        v3h = (hi ^ v2h) >>> 0;
        v3l = (lo ^ v2l) >>> 0;
        // v0 += v3; v3 = rotl(v3, 21) ^ v0
        lo = (v0l + v3l) >>> 0;
        v0h = (v0h + v3h + (lo < v0l ? 1 : 0)) >>> 0;
        v0l = lo;
        hi = ((v3h << 21) | (v3l >>> 11)) >>> 0;
        lo = ((v3l << 21) | (v3h >>> 11)) >>> 0;
        v3h = (hi ^ v0h) >>> 0;
        v3l = (lo ^ v0l) >>> 0;
        // v2 += v1; v1 = rotl(v1, 17) ^ v2; v2 = rotl(v2, 32)
        lo = (v2l + v1l) >>> 0;
        v2h = (v2h + v1h + (lo < v2l ? 1 : 0)) >>> 0;
        v2l = lo;
        hi = ((v1h << 17) | (v1l >>> 15)) >>> 0;
        lo = ((v1l << 17) | (v1h >>> 15)) >>> 0;
        v1h = (hi ^ v2h) >>> 0;
        v1l = (lo ^ v2l) >>> 0;
        hi = v2h;
        v2h = v2l;
        v2l = hi;
      }
      if (pass === 1) break;
      v0h = (v0h ^ mh) >>> 0;
      v0l = (v0l ^ ml) >>> 0;
      if (at < whole) break;
      // After the last word: finalise with 4 more rounds.
      v2l = (v2l ^ 0xff) >>> 0;
      rounds = 4;
    }
  }
  const high = (v0h ^ v1h ^ v2h ^ v3h) >>> 0;
  const low = (v0l ^ v1l ^ v2l ^ v3l) >>> 0;
  return String.fromCharCode(high >>> 16, high & 0xffff, low >>> 16, low & 0xffff);
}

/** A digest as 16 hex characters, for people and test vectors. */
export function digestHex(digest: string): string {
  let hex = "";
  for (let i = 0; i < digest.length; i++) hex += digest.charCodeAt(i).toString(16).padStart(4, "0");
  return hex;
}

/** A random digest key, for one isolate. */
export function randomDigestKey(): DigestKey {
  const words = crypto.getRandomValues(new Uint32Array(4));
  return [words[0]!, words[1]!, words[2]!, words[3]!];
}
