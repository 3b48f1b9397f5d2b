import { describe, expect, it, vi } from "vitest";
import type { Echo } from "./support/echo.ts";
import { downOriginUrl, from, limiter, originUrl, uniqueIp } from "./support/limiter.ts";
import { expectErrorLogs, expectOriginDownReports } from "./support/logs.ts";

const rules = [{ id: "api", path: "/api/*", limit: 1000, period: "1m" }];
const headerNames = (echo: Echo) => echo.headers.map(([name]) => name);
const header = (echo: Echo, name: string) => echo.headers.find(([n]) => n === name)?.[1];

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
}

describe("proxying to the real origin", () => {
  it("preserves method, path, query and body", async () => {
    const send = limiter(rules);
    const body = new Uint8Array(200_000);
    for (let i = 0; i < body.length; i += 65_536) crypto.getRandomValues(body.subarray(i, i + 65_536));
    const res = await send("/api/items/7?sort=desc&filter=a%2Fb&empty=", {
      ...from(uniqueIp(), { "content-type": "application/octet-stream", "x-custom": "kept" }),
      method: "PUT",
      body,
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-origin")).toBe("test-origin");
    expect(res.headers.get("ratelimit-policy")).toBe('"api";q=1000;w=60');
    const echo = (await res.json()) as Echo;
    expect(echo.method).toBe("PUT");
    expect(echo.url).toBe("/api/items/7?sort=desc&filter=a%2Fb&empty=");
    expect(echo.bodyBytes).toBe(body.length);
    expect(echo.bodySha256).toBe(await sha256Hex(body));
    expect(header(echo, "x-custom")).toBe("kept");
    expect(header(echo, "content-type")).toBe("application/octet-stream");
  });

  it.each([
    ["a double slash", "/api/a//b"],
    ["an encoded slash", "/api/%2F..%2Fsecret"],
    ["UTF-8 escapes", "/api/caf%C3%A9?q=%E2%9C%93"],
    ["a 4 000-character query", `/api/x?long=${"q".repeat(4000)}`],
  ])("keeps a path with %s as it was sent", async (_, path) => {
    const echo = (await (await limiter(rules)(path, from(uniqueIp()))).json()) as Echo;
    expect(echo.url).toBe(path);
  });

  it("returns a 3xx as it is, unfollowed, with Location and every Set-Cookie", async () => {
    const res = await limiter(rules)("/redirect", from(uniqueIp()));
    expect(res.status).toBe(302);
    expect(res.headers.get("location")).toBe("/elsewhere?from=redirect");
    expect(res.headers.getSetCookie()).toEqual(["session=abc; Path=/; HttpOnly", "theme=dark"]);
  });

  it("removes hop-by-hop request headers, and the headers Connection names", async () => {
    const res = await limiter(rules)("/api/echo", {
      headers: {
        "cf-connecting-ip": uniqueIp(),
        connection: "keep-alive, x-hop-token",
        "x-hop-token": "dropped",
        "keep-alive": "timeout=5",
        te: "trailers",
        "proxy-authorization": "Basic Zm9vOmJhcg==",
        "proxy-connection": "keep-alive",
        "x-end-to-end": "kept",
      },
    });
    const names = headerNames((await res.json()) as Echo);
    for (const gone of ["x-hop-token", "keep-alive", "te", "proxy-authorization", "proxy-connection"]) {
      expect(names).not.toContain(gone);
    }
    expect(names).toContain("x-end-to-end");
  });

  it("does not let Connection strip headers the origin relies on", async () => {
    const res = await limiter(rules)("/api/echo", {
      headers: {
        "cf-connecting-ip": uniqueIp(),
        connection: "authorization, x-forwarded-for, cookie",
        authorization: "Bearer token",
        "x-forwarded-for": "203.0.113.9",
        cookie: "sid=1",
      },
    });
    const echo = (await res.json()) as Echo;
    expect(header(echo, "authorization")).toBe("Bearer token");
    expect(header(echo, "cookie")).toBe("sid=1");
    expect(header(echo, "x-forwarded-for")).toBe("203.0.113.9");
  });

  it.each([
    ["a rule's key header", { key: ["header:x-api-key|ip"] }, {}],
    ["the trusted IP header", { key: ["ip"] }, { TRUSTED_IP_HEADER: "x-api-key" }],
  ])("does not let Connection strip %s: the origin sees what the limiter counted", async (_, rule, vars) => {
    const send = limiter([{ id: "keyed", limit: 2, period: "1h", ...rule }], vars);
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 1; i <= 3; i++) {
      // Without the fix each junk key got its own bucket, and the origin saw an anonymous request.
      const res = await send("/echo", from(ip, { connection: "x-api-key", "x-api-key": "203.0.113.77" }));
      statuses.push(res.status);
      if (res.status === 200) expect(header((await res.json()) as Echo, "x-api-key")).toBe("203.0.113.77");
      else await res.arrayBuffer();
    }
    expect(statuses).toEqual([200, 200, 429]);
  });

  it("removes hop-by-hop response headers", async () => {
    const res = await limiter(rules)("/hop-by-hop", from(uniqueIp()));
    expect(res.headers.get("x-end-to-end")).toBe("kept");
    for (const gone of ["x-origin-hop", "keep-alive", "proxy-authenticate"]) expect(res.headers.has(gone)).toBe(false);
  });

  it.each([404, 500, 503])("passes the origin's own %i through, body and headers", async (status) => {
    const res = await limiter(rules)(`/api/../status/${status}`, from(uniqueIp()));
    expect(res.status).toBe(status);
    expect(res.headers.get("retry-after")).toBe("7");
    expect(await res.json()).toEqual({ from: "origin", status });
  });

  it("keeps the origin's own 429 distinguishable from the limiter's", async () => {
    const res = await limiter(rules)("/api/x/../../status/429", from(uniqueIp()));
    expect(res.status).toBe(429);
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(await res.json()).toEqual({ from: "origin", status: 429 });
  });

  it("answers 502 problem+json when the origin is down, and logs it", async () => {
    const res = await limiter(rules, { ORIGIN_URL: downOriginUrl() })("/api/x", from(uniqueIp()));
    expect(res.status).toBe(502);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(await res.json()).toEqual({
      type: "urn:edge-rate-limiter:origin-unreachable",
      title: "Bad Gateway",
      status: 502,
      detail: "The origin could not be reached.",
    });
    expect(expectErrorLogs("origin_unreachable")).toEqual([
      expect.objectContaining({ url: `${downOriginUrl()}/api/x` }),
    ]);
    await expectOriginDownReports(1);
  });

  it("forwards to the request's own URL when ORIGIN_URL is unset (a route on the origin's zone)", async () => {
    const send = limiter(rules, { ORIGIN_URL: undefined });
    const echo = (await (await send(`${originUrl()}/api/direct?x=1`, from(uniqueIp()))).json()) as Echo;
    expect(echo.url).toBe("/api/direct?x=1");
  });

  it("answers 500 for an ORIGIN_URL with a path, which would be ambiguous", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const res = await limiter(rules, { ORIGIN_URL: `${originUrl()}/base` })("/api/x", from(uniqueIp()));
      expect(res.status).toBe(500);
      expect(JSON.parse(String(error.mock.calls[0]![0])).errors[0]).toMatch(/^ORIGIN_URL: must be only a scheme/);
    } finally {
      error.mockRestore();
    }
  });
});
