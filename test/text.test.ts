/**
 * Text counted and cut in characters (code points), as the docs count them:
 * an emoji is one character, and no cut leaves half of one. Each place that
 * bounds a client's text by its characters: a verified token's claim as a
 * key (1024), and a raw key's values in the statistics (100 each, 512 a key).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { claimAt, MAX_CLAIM_LENGTH } from "../src/core/claims.ts";
import { atMostCharacters, charactersIn, firstCharacters } from "../src/core/text.ts";
import { asWritten, MAX_VALUE_CHARS } from "../src/isolate/tally.ts";

const EMOJI = "\u{1F600}"; // two UTF-16 units, one character

describe("text in characters", () => {
  it("counts an emoji as one character", () => {
    expect(charactersIn(EMOJI.repeat(3))).toBe(3);
    expect(atMostCharacters(EMOJI.repeat(3), 3)).toBe(true);
    expect(atMostCharacters(EMOJI.repeat(4), 3)).toBe(false);
    expect(atMostCharacters("abcd", 3)).toBe(false);
  });

  it("cuts after whole characters: the first n, never half of a pair", () => {
    expect(firstCharacters(`ab${EMOJI}cd`, 3)).toBe(`ab${EMOJI}`);
    expect(firstCharacters(`ab${EMOJI}cd`, 2)).toBe("ab");
    expect(firstCharacters("abc", 5)).toBe("abc");
    expect(firstCharacters("\uD800x", 1)).toBe("\uD800"); // a lone surrogate is a character of its own
  });

  it("cuts any text as its first n code points, for any n", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), fc.nat(40), (text, n) => {
        // As JSON, which writes a lone surrogate as an escape (a failure's message must stay well-formed UTF-8).
        expect(JSON.stringify(firstCharacters(text, n))).toBe(JSON.stringify([...text].slice(0, n).join("")));
        expect(atMostCharacters(text, n)).toBe([...text].length <= n);
      }),
    );
  });
});

describe("a client's text bounded in characters", () => {
  it(`takes a claim of ${MAX_CLAIM_LENGTH} emoji as a key's value, and one more is missing`, () => {
    const at = EMOJI.repeat(MAX_CLAIM_LENGTH);
    expect(claimAt({ sub: at }, "sub") === at).toBe(true);
    expect(claimAt({ sub: `${at}${EMOJI}` }, "sub")).toBeNull();
    expect(claimAt({ sub: "a".repeat(MAX_CLAIM_LENGTH + 1) }, "sub")).toBeNull();
  });

  it("shows a raw key's long value by its first 100 characters, an emoji at the cut whole", () => {
    const value = `${"w".repeat(MAX_VALUE_CHARS - 1)}${EMOJI}yy`;
    const shown = JSON.stringify(asWritten(JSON.stringify([["query:k", value]])));
    expect(shown).toBe(JSON.stringify(`query:k=${"w".repeat(MAX_VALUE_CHARS - 1)}${EMOJI}…`));
  });
});
