/**
 * @module
 * The benchmark's origin: a constant 200 with a small JSON body, served in
 * the same workerd as the variants, which reach it as their `globalOutbound`.
 * It does next to nothing, so the allowed variants measure their Worker, not
 * the origin (a Node server on the same two cores was the bottleneck).
 */
const body = JSON.stringify({ ok: true, from: "bench-origin" });

export default {
  fetch(): Response {
    return new Response(body, { headers: { "content-type": "application/json" } });
  },
};
