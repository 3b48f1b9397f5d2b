/**
 * @module
 * A request's body as text, read no further than a cap: an admin route's
 * body is a few fields, and a client that sends gigabytes (or never stops)
 * must cost the isolate no more than the cap.
 */

/**
 * The body as UTF-8 text; null when it is over `maxBytes` bytes. A
 * declared Content-Length over it is refused unread; a body without one
 * (sent chunked) is read until it ends or passes the cap, and no further.
 */
export async function textUpTo(request: Request, maxBytes: number): Promise<string | null> {
  const declared = Number(request.headers.get("content-length") ?? "0");
  if (declared > maxBytes) return null;
  if (request.body === null) return "";
  const reader = request.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    bytes += value.byteLength;
    if (bytes > maxBytes) {
      await reader.cancel().catch(() => {});
      return null;
    }
    text += decoder.decode(value, { stream: true });
  }
}
