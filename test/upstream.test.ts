/**
 * What the proxy adds to a request it forwards: this deployment's mark, so a
 * request that comes back is answered 508 rather than forwarded again; and
 * the origin's secret, by which the origin refuses requests that went
 * around the limiter.
 */
/// <reference types="vite/client" />
import { describe, expect, it, vi } from "vitest";
import configurationPage from "../docs/configuration.md?raw";
import { checkConfig } from "../src/config/check.ts";
import { COMMON_X_HEADERS, parseOriginSecret } from "../src/config/origin.ts";
import { HOP_HEADER } from "../src/http/upstream.ts";
import type { Echo } from "./support/echo.ts";
import { env } from "./support/env.ts";
import { from, limiter, originHits, uniqueIp, uniqueTag } from "./support/limiter.ts";
import { codeSpans, referenceTable } from "./support/markdown.ts";

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
      'ORIGIN_SECRET_HEADER: must be an X- header of your own, such as "X-Origin-Secret"; got "Host"',
    ],
    [
      "a CF- header",
      { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: "CF-Connecting-IP" },
      'ORIGIN_SECRET_HEADER: must be an X- header of your own, such as "X-Origin-Secret"; got "CF-Connecting-IP"',
    ],
    [
      "the hop header",
      { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: HOP_HEADER },
      `ORIGIN_SECRET_HEADER: "${HOP_HEADER}" is an X- header that requests carry in common use`,
    ],
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

/**
 * The secret's header replaces whatever value a client sent in it, so it
 * must be a name no request, proxy or origin gives a meaning to: with
 * `Origin`, an origin that reflects it for CORS hands the secret to every
 * client; with `Range` or `If-None-Match`, every request changes meaning.
 * The rule: an `X-` name, and not one of the `X-` headers requests carry in
 * common use. Every other name is refused, whatever it is: every standard
 * header is one.
 */
describe("ORIGIN_SECRET_HEADER: only an X- header of the operator's own", () => {
  const secret = "s3cret-value-that-is-long-enough";
  /** Request headers of the standards (IANA's field name registry, Fetch, CORS, client hints, WebSocket, WebDAV, tracing) and Cloudflare's. */
  const STANDARD = [
    // RFC 9110, 9111, 9112
    ...["Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges", "Authorization"],
    ...["Cache-Control", "Connection", "Content-Encoding", "Content-Language", "Content-Length", "Content-Location"],
    ...["Content-Range", "Content-Type", "Date", "Expect", "From", "Host", "If-Match", "If-Modified-Since"],
    ...["If-None-Match", "If-Range", "If-Unmodified-Since", "Keep-Alive", "Max-Forwards", "Pragma"],
    ...["Proxy-Authorization", "Proxy-Connection", "Range", "Referer", "TE", "Trailer", "Transfer-Encoding"],
    ...["Upgrade", "User-Agent", "Via", "Warning", "Close"],
    // Cookies, origins, forwarding, early data, priorities, HTTP/2, digests, signatures, preferences
    ...["Cookie", "Origin", "Forwarded", "Early-Data", "Priority", "HTTP2-Settings", "Alt-Used", "CDN-Loop"],
    ...["Content-Digest", "Repr-Digest", "Want-Content-Digest", "Want-Repr-Digest", "Digest", "Want-Digest"],
    ...["Signature", "Signature-Input", "Accept-Signature", "Prefer", "Accept-Datetime", "Accept-Patch", "Link"],
    // Fetch, CORS and the browser's own
    ...["Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Fetch-User", "Sec-Purpose", "Purpose"],
    ...["Access-Control-Request-Method", "Access-Control-Request-Headers", "Upgrade-Insecure-Requests", "DNT"],
    ...["Sec-GPC", "Service-Worker", "Service-Worker-Navigation-Preload", "Last-Event-ID", "Save-Data"],
    ...["Sec-CH-UA", "Sec-CH-UA-Mobile", "Sec-CH-UA-Platform", "Device-Memory", "Downlink", "ECT", "RTT", "DPR"],
    ...["Viewport-Width", "Width"],
    // WebSocket
    ...["Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Protocol", "Sec-WebSocket-Extensions"],
    // WebDAV
    ...["Depth", "Destination", "If", "Lock-Token", "Overwrite", "Timeout"],
    // Tracing (W3C Trace Context, Baggage)
    ...["traceparent", "tracestate", "baggage"],
    // Cloudflare's, and the client address others set
    ...["CF-Connecting-IP", "CF-Connecting-IPv6", "CF-IPCountry", "CF-Ray", "CF-Visitor", "CF-Worker", "CF-EW-Via"],
    ...["True-Client-IP"],
  ];
  /** `X-` headers that requests carry in common use, which the rule refuses by name. */
  const COMMON_X = [
    ...["X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Prefix"],
    ...["X-Forwarded-Server", "X-Forwarded-Ssl", "X-Forwarded-Anything", "X-Real-IP", "X-Requested-With"],
    ...["X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "X-Original-URL", "X-Rewrite-URL"],
    ...["X-CSRF-Token", "X-XSRF-Token", "X-Request-ID", "X-Correlation-ID", "X-API-Key", "X-ATT-DeviceId"],
    ...["X-Wap-Profile", "X-UIDH", HOP_HEADER],
  ];
  /** The list, each reproduced as accepted before. */
  const REPORTED = [
    ...["Origin", "Range", "Content-Range", "Content-Language", "If-None-Match", "Sec-WebSocket-Key"],
    ...["X-Forwarded-Host", "X-Forwarded-Proto", "Expect", "Accept-Encoding"],
  ];
  const ACCEPTED = ["X-Origin-Secret", "x-origin-secret", "X-Limiter-Secret", "X-From-Limiter", "X-Shared_Secret.2"];

  /** The errors about the header, from the Worker's own parse and from check-config. */
  const workerErrors = (name: string) => {
    const parsed = parseOriginSecret(secret, name, new Set());
    return parsed.ok ? [] : parsed.errors;
  };
  const checkerErrors = (name: string) =>
    checkConfig({ vars: { RULES: rules, ORIGIN_URL: "https://origin.example.com", ORIGIN_SECRET_HEADER: name } })
      .findings.filter((f) => f.level === "error")
      .map((f) => f.message);

  it.each([...STANDARD, ...STANDARD.map((name) => name.toUpperCase())])(
    "refuses %s, a standard header: the Worker and check-config name the variable",
    (name) => {
      const errors = workerErrors(name);
      expect(errors).toEqual([
        `ORIGIN_SECRET_HEADER: must be an X- header of your own, such as "X-Origin-Secret"; got ${JSON.stringify(name)}: a header of any other name may be one that requests or origins use, and the secret replaces the client's value of it`,
      ]);
      expect(checkerErrors(name)).toEqual(errors);
    },
  );

  it.each([...COMMON_X, ...COMMON_X.map((name) => name.toLowerCase())])(
    "refuses %s, an X- header requests carry in common use: the Worker and check-config name the variable",
    (name) => {
      const errors = workerErrors(name);
      expect(errors).toEqual([
        `ORIGIN_SECRET_HEADER: ${JSON.stringify(name)} is an X- header that requests carry in common use, and the secret replaces the client's value of it; name one of your own, such as "X-Origin-Secret"`,
      ]);
      expect(checkerErrors(name)).toEqual(errors);
    },
  );

  it("refuses by name exactly the X- headers this table and the reference list", () => {
    const named = (names: string[]) =>
      [...new Set(names.map((name) => name.toLowerCase()))].filter((name) => !name.startsWith("x-forwarded-")).sort();
    expect(named(COMMON_X)).toEqual([...COMMON_X_HEADERS].sort());
    const [row] = referenceTable(configurationPage, "variables").filter(([name]) => name === "`ORIGIN_SECRET_HEADER`");
    const refused = codeSpans(row![4]!).filter((span) => /^x-./i.test(span) && span !== "X-Forwarded-*");
    expect(named(refused)).toEqual([...COMMON_X_HEADERS].sort());
    expect(codeSpans(row![4]!)).toContain("X-Forwarded-*");
  });

  it.each(ACCEPTED)(
    "accepts %s: the origin receives the secret in it, in place of the client's value",
    async (name) => {
      expect(workerErrors(name)).toEqual([]);
      expect(checkerErrors(name)).toEqual([]);
      const send = limiter(rules, { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: name });
      const echo = (await (await send("/echo", from(uniqueIp(), { [name]: "forged" }))).json()) as Echo;
      expect(echo.headers.filter(([n]) => n === name.toLowerCase())).toEqual([[name.toLowerCase(), secret]]);
    },
  );

  it.each(REPORTED)(
    "sends no request on to the origin with the secret in %s: the Worker answers 500 and logs why",
    async (name) => {
      const tag = uniqueTag("secret-header");
      const logs = await errorLogs(async () => {
        const res = await limiter(rules, { ORIGIN_SECRET: secret, ORIGIN_SECRET_HEADER: name })(
          "/echo",
          from(uniqueIp(), { "x-test-tag": tag }),
        );
        expect(res.status).toBe(500);
      });
      expect(await originHits(tag)).toBe(0);
      const errors: string[] = logs.flatMap((line) => JSON.parse(line).errors ?? []);
      expect(errors).toEqual(workerErrors(name));
      expect(logs.join("\n")).not.toContain(secret);
    },
  );
});
