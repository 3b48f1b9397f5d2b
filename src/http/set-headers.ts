/**
 * @module
 * Headers set on, or taken off, a response the limiter passes on: in place
 * when its headers are mutable (the proxy's are), else on one copy (a
 * response straight from `fetch()` has immutable headers).
 */

/** `response` with `headers` set on it; `Server-Timing` is appended, so that the origin's own entries stay. */
export function withHeaders(response: Response, headers: Record<string, string>): Response {
  const entries = Object.entries(headers);
  if (entries.length === 0) return response;
  try {
    for (const [name, value] of entries) setHeader(response.headers, name, value);
    return response;
  } catch {
    const copy = new Response(response.body, response);
    for (const [name, value] of entries) setHeader(copy.headers, name, value);
    return copy;
  }
}

/** `response` without the headers `names`. */
export function withoutHeaders(response: Response, names: string[]): Response {
  try {
    for (const name of names) response.headers.delete(name);
    return response;
  } catch {
    const copy = new Response(response.body, response);
    for (const name of names) copy.headers.delete(name);
    return copy;
  }
}

function setHeader(headers: Headers, name: string, value: string): void {
  if (name === "Server-Timing") headers.append(name, value);
  else headers.set(name, value);
}
