/**
 * @module
 * Lengths and cuts of text in characters (Unicode code points), as the docs
 * count them: an emoji is one character, not two UTF-16 units, and a cut
 * never leaves half of one.
 */

/** A text's length in characters (code points). */
export const charactersIn = (text: string): number => {
  let n = 0;
  for (const _ of text) n++;
  return n;
};

/** Whether a text is at most `max` characters, without counting a text that is surely within or beyond it. */
export const atMostCharacters = (text: string, max: number): boolean =>
  text.length <= max || (text.length <= 2 * max && charactersIn(text) <= max);

/** The first `n` characters of a text: the whole text when it is no longer; never half a surrogate pair. */
export function firstCharacters(text: string, n: number): string {
  if (text.length <= n) return text;
  let end = 0;
  for (let i = 0; i < n && end < text.length; i++) {
    const code = text.charCodeAt(end);
    const pair = code >= 0xd800 && code <= 0xdbff && end + 1 < text.length;
    const next = pair ? text.charCodeAt(end + 1) : 0;
    end += pair && next >= 0xdc00 && next <= 0xdfff ? 2 : 1;
  }
  return text.slice(0, end);
}
