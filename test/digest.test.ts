import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type DigestKey, digestHex, randomDigestKey, sipHash24 } from "../src/core/digest.ts";

/** SipHash-2-4 over bytes, in BigInt, written from the paper: slow and plain, to check the fast one against. */
function referenceSipHash(key: Uint8Array, bytes: Uint8Array): bigint {
  const mask = (1n << 64n) - 1n;
  const rotl = (x: bigint, b: bigint) => ((x << b) | (x >> (64n - b))) & mask;
  const word = (b: Uint8Array, at: number) => {
    let w = 0n;
    for (let i = 7; i >= 0; i--) w = (w << 8n) | BigInt(b[at + i] ?? 0);
    return w;
  };
  const k0 = word(key, 0);
  const k1 = word(key, 8);
  let [v0, v1, v2, v3] = [
    k0 ^ 0x736f6d6570736575n,
    k1 ^ 0x646f72616e646f6dn,
    k0 ^ 0x6c7967656e657261n,
    k1 ^ 0x7465646279746573n,
  ];
  const round = () => {
    v0 = (v0 + v1) & mask;
    v1 = rotl(v1, 13n) ^ v0;
    v0 = rotl(v0, 32n);
    v2 = (v2 + v3) & mask;
    v3 = rotl(v3, 16n) ^ v2;
    v0 = (v0 + v3) & mask;
    v3 = rotl(v3, 21n) ^ v0;
    v2 = (v2 + v1) & mask;
    v1 = rotl(v1, 17n) ^ v2;
    v2 = rotl(v2, 32n);
  };
  const whole = bytes.length - (bytes.length % 8);
  const last = new Uint8Array(8);
  last.set(bytes.subarray(whole));
  last[7] = bytes.length & 0xff;
  const words = [...Array.from({ length: whole / 8 }, (_, i) => word(bytes, i * 8)), word(last, 0)];
  for (const m of words) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  v2 ^= 0xffn;
  for (let i = 0; i < 4; i++) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

const KEY_BYTES = Uint8Array.from({ length: 16 }, (_, i) => i); // 00 01 … 0f, the paper's key
const asWords = (bytes: Uint8Array): DigestKey => {
  const view = new DataView(bytes.buffer);
  return [view.getUint32(0, true), view.getUint32(4, true), view.getUint32(8, true), view.getUint32(12, true)];
};
const utf16le = (text: string) => {
  const bytes = new Uint8Array(text.length * 2);
  for (let i = 0; i < text.length; i++) {
    bytes[2 * i] = text.charCodeAt(i) & 0xff;
    bytes[2 * i + 1] = text.charCodeAt(i) >> 8;
  }
  return bytes;
};
const hex64 = (n: bigint) => n.toString(16).padStart(16, "0");

describe("the isolate's key digest (SipHash-2-4)", () => {
  it("gives the published test vectors, in the reference written from the paper", () => {
    const message = (length: number) => Uint8Array.from({ length }, (_, i) => i);
    expect(hex64(referenceSipHash(KEY_BYTES, message(0)))).toBe("726fdb47dd0e0e31");
    expect(hex64(referenceSipHash(KEY_BYTES, message(1)))).toBe("74f839c593dc67fd");
    expect(hex64(referenceSipHash(KEY_BYTES, message(2)))).toBe("0d6c8009d9a94f5a");
    expect(hex64(referenceSipHash(KEY_BYTES, message(15)))).toBe("a129ca6149be45e5");
  });

  it("gives a published vector for a string whose UTF-16LE bytes are 00 01", () => {
    expect(digestHex(sipHash24(asWords(KEY_BYTES), "\u0100"))).toBe("0d6c8009d9a94f5a");
    expect(digestHex(sipHash24(asWords(KEY_BYTES), ""))).toBe("726fdb47dd0e0e31");
  });

  it("agrees with the reference for any string and key", () => {
    fc.assert(
      fc.property(
        fc.string({ unit: "binary", maxLength: 70 }),
        fc.uint8Array({ minLength: 16, maxLength: 16 }),
        (text, key) => {
          expect(digestHex(sipHash24(asWords(key), text))).toBe(hex64(referenceSipHash(key, utf16le(text))));
        },
      ),
      { numRuns: 500 },
    );
  });

  it("is 4 code units (64 bits) whatever the length, and tells apart keys that differ in their last byte", () => {
    const key = randomDigestKey();
    const long = "k".repeat(100 * 1024);
    expect(sipHash24(key, `${long}a`)).toHaveLength(4);
    expect(sipHash24(key, `${long}a`)).not.toBe(sipHash24(key, `${long}b`));
  });

  it("differs between isolates: each chooses its own secret key", () => {
    expect(sipHash24(randomDigestKey(), "203.0.113.7")).not.toBe(sipHash24(randomDigestKey(), "203.0.113.7"));
  });
});
