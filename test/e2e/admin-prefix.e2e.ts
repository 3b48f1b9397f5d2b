/**
 * The admin API's prefix over real HTTP, each request target sent as
 * written (as `curl --path-as-is` does): a spelling the API reads as its own
 * is answered by it, one only a more lenient server would read so is
 * refused, and no request that carries the admin token reaches the origin.
 */
import { describe, expect, inject, it } from "vitest";
import { originHits, send, uniqueIp, uniqueTag } from "./support/client.ts";

const withToken = (tag: string) => ({
  headers: { authorization: `Bearer ${inject("adminToken")}`, "cf-connecting-ip": uniqueIp(), "x-test-tag": tag },
});

describe("the admin API's prefix, however a request target spells it", () => {
  it.each([
    ["/__ratelimit/rules", 200],
    ["//__ratelimit/rules", 200],
    ["/%5f_ratelimit/rules", 200],
    ["/x/../__ratelimit/rules", 200],
    ["/__RATELIMIT/rules", 404],
    ["/__ratelimit;x=1/rules", 404],
    ["/x/..;/__ratelimit/rules", 404],
    ["/__ratelimit%2frules", 404],
    ["/__ratelimit%252frules", 404],
    ["/api/orders", 403],
  ])("%s with the admin token: %i, and nothing reaches the origin", async (target, status) => {
    const tag = uniqueTag("e2e-admin-prefix");
    const reply = await send(target, withToken(tag));
    expect(reply.status).toBe(status);
    if (status !== 200) expect(reply.headers["content-type"]).toBe("application/problem+json");
    expect(await originHits(tag)).toBe(0);
  });
});
