/**
 * @module
 * Benchmark variant (e): a Worker that only answers a constant 429, the
 * physical limit for the blocked path.
 */
const body = JSON.stringify({ title: "Too Many Requests", status: 429 });

export default {
  fetch(): Response {
    return new Response(body, {
      status: 429,
      headers: { "content-type": "application/problem+json", "retry-after": "60" },
    });
  },
};
