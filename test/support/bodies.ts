/**
 * Request bodies the admin API's tests send: a body streamed without a
 * Content-Length that says how much of it was read, and text spelt as JSON
 * escapes.
 */

/**
 * A body with no Content-Length (sent chunked): `count` chunks of `chunk`,
 * each made only when the reader asks for it; `pulled()` says how many were.
 */
export function chunked(chunk: string, count: number) {
  const bytes = new TextEncoder().encode(chunk);
  let pulled = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (pulled === count) return controller.close();
      pulled++;
      controller.enqueue(bytes);
    },
  });
  return { body, pulled: () => pulled };
}

/** `text` with each UTF-16 unit spelt as a JSON escape (`\uXXXX`): 6 bytes each, 12 for an emoji. */
export const escapedJson = (text: string): string =>
  text
    .split("")
    .map((unit) => `\\u${unit.charCodeAt(0).toString(16).padStart(4, "0")}`)
    .join("");
