/**
 * @module
 * Hop-by-hop headers in the runtime Cloudflare runs: `workerd serve` hands
 * the Worker the client's `Connection` header (wrangler dev's proxy does not:
 * test/e2e/passthrough.e2e.ts), so the proxy removes the headers it names,
 * except a header a rule counts clients by. Otherwise a client could send
 * `x-api-key: junk-N` with `Connection: x-api-key`: a bucket per request,
 * and an anonymous request at the origin that the per-IP fallback never counted.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Edge, startEdge } from "./support/harness.ts";

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({
    isolates: 1,
    rules: [{ id: "per-key", path: "/*", limit: 2, period: "1h", key: ["header:x-api-key|ip"] }],
  });
});
afterAll(async () => {
  await edge?.stop();
});

describe("a header named by Connection, in workerd", () => {
  it("is removed on the way to the origin", async () => {
    const driver = edge.driver();
    const record = await driver.send(0, "10.40.0.1", {
      headers: { connection: "x-hop-token", "x-hop-token": "named", "x-api-key": "kept-1" },
    }).done;
    expect(record.status).toBe(200);
    const seen = edge.origin.headers(record.tag)!;
    expect(seen["x-hop-token"]).toBeUndefined();
    expect(seen["x-api-key"]).toBe("kept-1");
  });

  it("is kept when a rule keys on it: the origin sees what the limiter counted", async () => {
    const driver = edge.driver();
    const statuses: (number | null)[] = [];
    for (let i = 0; i < 3; i++) {
      const record = await driver.send(0, "10.40.0.2", {
        headers: { connection: "x-api-key", "x-api-key": "counted-key" },
      }).done;
      statuses.push(record.status);
      if (record.status === 200) expect(edge.origin.headers(record.tag)!["x-api-key"]).toBe("counted-key");
    }
    expect(statuses).toEqual([200, 200, 429]);
  });
});
