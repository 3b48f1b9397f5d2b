/**
 * What the proxy adds to a request it forwards: this deployment's mark, so a
 * request that comes back is answered 508 rather than forwarded again; and
 * the origin's secret, by which the origin refuses requests that went
 * around the limiter.
 */
import { describe, expect, it, vi } from "vitest";
import { HOP_HEADER } from "../src/http/upstream.ts";
import type { Echo } from "./support/echo.ts";
import { env } from "./support/env.ts";
import { from, limiter, originHits, uniqueIp, uniqueTag } from "./support/limiter.ts";

const rules = [{ id: "hop", path: "/*", limit: 1000, period: "1m" }];
/** A header's value as the origin received it: every line of it, joined as one (RFC 9110, 5.3). */
const header = (echo: Echo, name: string) =>
  echo.headers
    .filter(([n]) => n === name)
    .map(([, value]) => value)
    .join(", ") || undefined;
const mark = env.RATE_LIMITER.idFromName("edge-rate-limiter:hop").toString().slice(0, 16);

/** Runs `fn` with console.error captured; returns the lines logged. */
async function errorLogs(fn: () => Promise<void>): Promise<string[]> {
  const lines: string[] = [];
  const spy = vi.spyOn(console, "error").mockImplementation((line: unknown) => {
    lines.push(String(line));
  });
  try {
    await fn();
  } finally {
    spy.mockRestore();
  }
  return lines;
}

describe("a request that has passed through this deployment is never forwarded again", () => {
  it("marks every forwarded request with this deployment's mark", async () => {
    const echo = (await (await limiter(rules)("/echo", from(uniqueIp()))).json()) as Echo;
    expect(header(echo, HOP_HEADER)).toBe(mark);
  });

  it("answers one that carries the mark 508 problem+json, without counting it or contacting the origin", async () => {
    const tag = uniqueTag("loop");
    const ip = uniqueIp();
    const send = limiter([{ id: "hop-1", path: "/*", limit: 1, period: "1m" }]);
    const logs = await errorLogs(async () => {
      for (const hops of [mark, `${"a".repeat(16)}, ${mark}`, ` ${mark} ,x`]) {
        const res = await send("/anything", from(ip, { [HOP_HEADER]: hops, "x-test-tag": tag }));
        expect(res.status).toBe(508);
        expect(res.headers.get("content-type")).toBe("application/problem+json");
        expect(res.headers.has("ratelimit")).toBe(false);
        expect(await res.json()).toMatchObject({ type: "urn:edge-rate-limiter:loop-detected", status: 508 });
      }
    });
    expect(await originHits(tag)).toBe(0);
    // Nothing was counted: the client's one request of the minute is still there.
    expect((await send("/anything", from(ip))).status).toBe(200);
    // Logged at most once per 10 s per isolate, as an error naming the way out.
    expect(logs.length).toBeLessThanOrEqual(1);
    for (const line of logs) expect(JSON.parse(line)).toMatchObject({ level: "error", event: "loop_detected" });
  });

  it("forwards one that passed through other deployments, adding its own mark after theirs", async () => {
    const other = "b".repeat(16);
    const echo = (await (await limiter(rules)("/echo", from(uniqueIp(), { [HOP_HEADER]: other }))).json()) as Echo;
    expect(header(echo, HOP_HEADER)).toBe(`${other}, ${mark}`);
  });

  it("does not take a mark that only contains this one's as this one's", async () => {
    const res = await limiter(rules)("/echo", from(uniqueIp(), { [HOP_HEADER]: `x${mark}` }));
    expect(res.status).toBe(200);
  });
});

describe("the origin's secret", () => {
  const secret = "s3cret-value-that-is-long-enough";

  it("is set on every forwarded request, in X-Origin-Secret by default", async () => {
    const echo = (await (await limiter(rules, { ORIGIN_SECRET: secret })("/echo", from(uniqueIp()))).json()) as Echo;
    expect(header(echo, "x-origin-secret")).toBe(secret);
  });

  it("goes in the header the operator names, replacing whatever value the client sent, however spelled", async () => {
    const send = limiter(rules, { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: "X-From-Limiter" });
    for (const [name, value] of [
      ["x-from-limiter", "forged"],
      ["X-FROM-LIMITER", secret.toUpperCase()],
      ["connection", "x-from-limiter"],
    ] as const) {
      const echo = (await (await send("/echo", from(uniqueIp(), { [name]: value }))).json()) as Echo;
      expect(echo.headers.filter(([n]) => n === "x-from-limiter")).toEqual([["x-from-limiter", secret]]);
    }
  });

  it("is not added when no secret is set", async () => {
    const echo = (await (
      await limiter(rules)("/echo", from(uniqueIp(), { "x-origin-secret": "client" }))
    ).json()) as Echo;
    expect(header(echo, "x-origin-secret")).toBe("client");
  });

  it.each([
    [
      "a secret shorter than 16 characters",
      { ORIGIN_SECRET: "short" },
      "ORIGIN_SECRET: must be at least 16 characters; got 5",
    ],
    ["a secret with a line break", { ORIGIN_SECRET: `${secret}\nx` }, "ORIGIN_SECRET: must be printable ASCII"],
    [
      "a header name with a space",
      { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: "X Secret" },
      "ORIGIN_SECRET_HEADER: must be a header name",
    ],
    [
      "the Host header",
      { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: "Host" },
      'ORIGIN_SECRET_HEADER: "Host" is a header the request needs',
    ],
    [
      "a CF- header",
      { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: "CF-Connecting-IP" },
      "is a header the request needs",
    ],
    ["the hop header", { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: HOP_HEADER }, "is a header the request needs"],
  ])("refuses %s: every request gets 500 and the log names the problem, never the secret", async (_, vars, message) => {
    const tag = uniqueTag("bad-secret");
    const logs = await errorLogs(async () => {
      const res = await limiter(rules, vars)("/echo", from(uniqueIp(), { "x-test-tag": tag }));
      expect(res.status).toBe(500);
    });
    expect(await originHits(tag)).toBe(0);
    const errors: string[] = logs.flatMap((line) => JSON.parse(line).errors ?? []);
    expect(errors.some((error) => error.includes(message))).toBe(true);
    expect(logs.join("\n")).not.toContain(secret);
  });

  it("refuses a header a rule counts clients by: the origin must see what the limiter counted", async () => {
    const keyed = [{ id: "by-key", path: "/*", limit: 10, period: "1m", key: ["header:x-api-key"] }];
    const logs = await errorLogs(async () => {
      const res = await limiter(keyed, { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: "X-Api-Key" })(
        "/echo",
        from(uniqueIp(), { "x-api-key": "k" }),
      );
      expect(res.status).toBe(500);
    });
    expect(logs.join("\n")).toContain("is a header a rule counts clients by");
  });
});
