/**
 * What passes through the limiter arrives as it was sent: redirects
 * unfollowed, every Set-Cookie, large headers and odd request targets.
 */
import { describe, expect, it } from "vitest";
import { send, uniqueIp } from "./support/client.ts";
import type { Echo } from "./support/origin.ts";

/** The values of header `name` as the origin received them, in order; names compare case-insensitively. */
function receivedHeader(echo: Echo, name: string): string[] {
  const values: string[] = [];
  for (let i = 0; i < echo.rawHeaders.length; i += 2) {
    if (echo.rawHeaders[i]!.toLowerCase() === name) values.push(echo.rawHeaders[i + 1]!);
  }
  return values;
}

describe("passing requests and responses through unchanged", () => {
  it("returns a 302 unfollowed, with Location and every Set-Cookie intact", async () => {
    const reply = await send("/redirect", { headers: { "cf-connecting-ip": uniqueIp() } });
    expect(reply.status).toBe(302);
    expect(reply.headers.location).toBe("/elsewhere?from=redirect&x=%2F");
    expect(reply.headers["set-cookie"]).toEqual([
      "session=abc; Path=/; HttpOnly",
      "theme=dark; Max-Age=3600",
      "consent=yes; SameSite=Lax",
    ]);
    expect(reply.headers["ratelimit-policy"]).toBe('"e2e";q=50;w=86400');
  });

  it.each([
    ["an encoded slash", "/api/%2F..%2Fsecret"],
    ["a double slash", "/api//items//7"],
    ["a leading double slash", "//api/items"],
    ["UTF-8 escapes and a reserved character in the query", "/api/caf%C3%A9?q=%E2%9C%93&a=b%26c&empty="],
    ["an 8 000-character query", `/api/search?q=${"x".repeat(8000)}&page=2`],
  ])("keeps a request target with %s byte for byte", async (_, target) => {
    const reply = await send(target, { headers: { "cf-connecting-ip": uniqueIp() } });
    expect(reply.status).toBe(200);
    expect(reply.json<Echo>().target).toBe(target);
  });

  it("keeps a 16 KB header value and its neighbours byte for byte", async () => {
    // Printable ASCII with the characters proxies tend to trip over: quotes, commas, semicolons, spaces.
    const printable = Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)).join("");
    const big = `start:${printable.repeat(Math.ceil(16_384 / printable.length))}`.slice(0, 16_383).concat("!");
    const reply = await send("/api/headers", {
      headers: {
        "cf-connecting-ip": uniqueIp(),
        "x-big": big,
        "x-quoted": 'a="b, c"; d=e',
        cookie: "a=1; b=2",
        authorization: "Bearer abc.def.ghi",
      },
    });
    expect(reply.status).toBe(200);
    const echo = reply.json<Echo>();
    expect(big).toHaveLength(16_384);
    expect(receivedHeader(echo, "x-big")).toEqual([big]);
    expect(receivedHeader(echo, "x-quoted")).toEqual(['a="b, c"; d=e']);
    expect(receivedHeader(echo, "cookie")).toEqual(["a=1; b=2"]);
    expect(receivedHeader(echo, "authorization")).toEqual(["Bearer abc.def.ghi"]);
  });

  it("lets through a header named by Connection: wrangler dev's proxy drops Connection before the Worker runs", async () => {
    // Under `workerd serve`, as on Cloudflare, the Worker sees Connection and removes the headers it names,
    // except those a rule keys on (test/edge/connection.edge.ts). wrangler dev's local proxy strips the
    // Connection header itself, so here the Worker cannot know which headers it named.
    const reply = await send("/api/headers", {
      headers: { "cf-connecting-ip": uniqueIp(), connection: "keep-alive, x-hop-token", "x-hop-token": "named" },
    });
    expect(reply.status).toBe(200);
    const echo = reply.json<Echo>();
    expect(receivedHeader(echo, "x-hop-token")).toEqual(["named"]);
    expect(receivedHeader(echo, "connection")).not.toContain("keep-alive, x-hop-token");
  });
});

/**
 * A request target with `.` or `..` segments, or a backslash, reaches the
 * origin resolved, as the URL standard resolves it when the Worker forwards
 * the request: a rule counts it by the path the origin gets, so no spelling
 * of that kind walks around a rule. The e2e rule "e2e-per-key" admits 3
 * requests a day per API key under /keyed/.
 */
describe("a path with dot segments or a backslash", () => {
  it.each([
    ["a .. segment", "/x/../keyed/a"],
    ["a . segment", "/./keyed/a"],
    ["an encoded .. segment", "/x/%2e%2e/keyed/a"],
    ["a backslash", "/keyed\\a"],
    ["a .. segment at the end", "/keyed/a/b/.."],
  ])("%s is counted under the rule of the path the origin receives", async (_, target) => {
    const key = `dots-${Math.random().toString(36).slice(2)}`;
    const headers = { "cf-connecting-ip": uniqueIp(), "x-api-key": key };
    const got: number[] = [];
    for (let i = 0; i < 3; i++) got.push((await send("/keyed/a", { headers })).status);
    const spelled = await send(target, { headers });
    got.push(spelled.status);
    expect(got).toEqual([200, 200, 200, 429]);
  });
});
