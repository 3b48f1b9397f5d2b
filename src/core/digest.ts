/**
 * @module
 * A keyed 64-bit digest of a string (SipHash-2-4), by which the isolate
 * remembers a client key. It is 16 hex characters whatever the key's length,
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

// v0 … v3 as (high, low) pairs of unsigned 32-bit words. Shared scratch: the digest is synchronous.
const v = new Uint32Array(8);
const [V0H, V0L, V1H, V1L, V2H, V2L, V3H, V3L] = [0, 1, 2, 3, 4, 5, 6, 7] as const;

/** `v[ah:al] += v[bh:bl]`, modulo 2⁶⁴. */
function add(ah: number, al: number, bh: number, bl: number): void {
  const low = (v[al]! + v[bl]!) >>> 0;
  v[ah] = (v[ah]! + v[bh]! + (low < v[al]! ? 1 : 0)) >>> 0;
  v[al] = low;
}

/** `v[h:l] = rotl(v[h:l], bits)`, for 0 < bits < 32. */
function rotl(h: number, l: number, bits: number): void {
  const high = v[h]!;
  const low = v[l]!;
  v[h] = ((high << bits) | (low >>> (32 - bits))) >>> 0;
  v[l] = ((low << bits) | (high >>> (32 - bits))) >>> 0;
}

/** `v[h:l] = rotl(v[h:l], 32)`: the halves swap. */
function swap(h: number, l: number): void {
  const high = v[h]!;
  v[h] = v[l]!;
  v[l] = high;
}

/** `v[ah:al] ^= v[bh:bl]`. */
function xor(ah: number, al: number, bh: number, bl: number): void {
  v[ah] = (v[ah]! ^ v[bh]!) >>> 0;
  v[al] = (v[al]! ^ v[bl]!) >>> 0;
}

function sipRound(): void {
  add(V0H, V0L, V1H, V1L);
  rotl(V1H, V1L, 13);
  xor(V1H, V1L, V0H, V0L);
  swap(V0H, V0L);
  add(V2H, V2L, V3H, V3L);
  rotl(V3H, V3L, 16);
  xor(V3H, V3L, V2H, V2L);
  add(V0H, V0L, V3H, V3L);
  rotl(V3H, V3L, 21);
  xor(V3H, V3L, V0H, V0L);
  add(V2H, V2L, V1H, V1L);
  rotl(V1H, V1L, 17);
  xor(V1H, V1L, V2H, V2L);
  swap(V2H, V2L);
}

/** Absorbs one 64-bit message word: two compression rounds. */
function absorb(high: number, low: number): void {
  v[V3H] = (v[V3H]! ^ high) >>> 0;
  v[V3L] = (v[V3L]! ^ low) >>> 0;
  sipRound();
  sipRound();
  v[V0H] = (v[V0H]! ^ high) >>> 0;
  v[V0L] = (v[V0L]! ^ low) >>> 0;
}

const hex = (word: number): string => word.toString(16).padStart(8, "0");

/** SipHash-2-4 of `text` (as UTF-16LE bytes) under `key`, as 16 hex characters. */
export function sipHash24(key: DigestKey, text: string): string {
  const [k0low, k0high, k1low, k1high] = key;
  // "somepseudorandomlygeneratedbytes"
  v[V0H] = (k0high ^ 0x736f6d65) >>> 0;
  v[V0L] = (k0low ^ 0x70736575) >>> 0;
  v[V1H] = (k1high ^ 0x646f7261) >>> 0;
  v[V1L] = (k1low ^ 0x6e646f6d) >>> 0;
  v[V2H] = (k0high ^ 0x6c796765) >>> 0;
  v[V2L] = (k0low ^ 0x6e657261) >>> 0;
  v[V3H] = (k1high ^ 0x74656462) >>> 0;
  v[V3L] = (k1low ^ 0x79746573) >>> 0;

  const units = text.length;
  const whole = units - (units % 4);
  for (let i = 0; i < whole; i += 4) {
    const low = (text.charCodeAt(i) | (text.charCodeAt(i + 1) << 16)) >>> 0;
    const high = (text.charCodeAt(i + 2) | (text.charCodeAt(i + 3) << 16)) >>> 0;
    absorb(high, low);
  }
  // The last word: the remaining 0–3 code units, and the length in bytes (mod 256) in the top byte.
  let low = 0;
  let high = 0;
  for (let i = whole; i < units; i++) {
    const unit = text.charCodeAt(i);
    const at = i - whole;
    if (at === 0) low = unit;
    else if (at === 1) low |= unit << 16;
    else high = unit;
  }
  high |= ((units * 2) & 0xff) << 24;
  absorb(high >>> 0, low >>> 0);

  v[V2L] = (v[V2L]! ^ 0xff) >>> 0;
  for (let i = 0; i < 4; i++) sipRound();
  return hex((v[V0H]! ^ v[V1H]! ^ v[V2H]! ^ v[V3H]!) >>> 0) + hex((v[V0L]! ^ v[V1L]! ^ v[V2L]! ^ v[V3L]!) >>> 0);
}

/** A random digest key, for one isolate. */
export function randomDigestKey(): DigestKey {
  const words = crypto.getRandomValues(new Uint32Array(4));
  return [words[0]!, words[1]!, words[2]!, words[3]!];
}
