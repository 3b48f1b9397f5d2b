import { describe, expect, it } from "vitest";
import type { Echo } from "./support/echo.ts";
import { limiter, originUrl } from "./support/limiter.ts";

/**
 * Hostile and malformed input. Every case has a defined answer, and none is
 * a crash or a 500. Each rule here admits 2 requests an hour, so the
 * statuses show which requests share a bucket: [200, 200, 429] is one
 * client, [200, 200, 200] is more than one.
 */

type Sent = { path: string; init: RequestInit };
const get = (headers: Record<string, string> = {}, path = "/x"): Sent => ({ path, init: { headers } });
const withMethod = (method: string, headers: Record<string, string> = {}): Sent => ({
  path: "/x",
  init: { method, headers },
});
const ip = (address: string, headers: Record<string, string> = {}) => get({ "cf-connecting-ip": address, ...headers });
const apiKey = (value: string) => get({ "cf-connecting-ip": "192.0.2.1", "x-api-key": value });

const KB = 1024;
const big = (bytes: number, last = "k") => `${"k".repeat(bytes - 1)}${last}`;

type IdentityCase = {
  case: string;
  answer: string;
  key: string[];
  path?: string;
  methods?: string[];
  requests: Sent[];
  statuses: number[];
};

const identityCases: IdentityCase[] = [
  {
    case: "a 0-byte API key",
    answer: "is an absent key: counted with the requests that send none",
    key: ["header:x-api-key"],
    requests: [get({ "cf-connecting-ip": "192.0.2.1" }), apiKey(""), apiKey("")],
    statuses: [200, 200, 429],
  },
  {
    case: "a 10 KB API key",
    answer: "is hashed into the object's name and counted like any key",
    key: ["header:x-api-key"],
    requests: [apiKey(big(10 * KB)), apiKey(big(10 * KB)), apiKey(big(10 * KB))],
    statuses: [200, 200, 429],
  },
  {
    case: "a 100 KB API key",
    answer: "is hashed into the object's name and counted like any key",
    key: ["header:x-api-key"],
    requests: [apiKey(big(100 * KB)), apiKey(big(100 * KB)), apiKey(big(100 * KB))],
    statuses: [200, 200, 429],
  },
  {
    case: "two 100 KB API keys that differ in their last byte",
    answer: "are two clients: the whole value is hashed, not a prefix",
    key: ["header:x-api-key"],
    requests: [apiKey(big(100 * KB, "a")), apiKey(big(100 * KB, "a")), apiKey(big(100 * KB, "b"))],
    statuses: [200, 200, 200],
  },
  {
    case: "a non-ASCII (Latin-1) header value",
    answer: "is counted by its bytes like any value",
    key: ["header:x-api-key"],
    requests: [apiKey("café"), apiKey("café"), apiKey("café")],
    statuses: [200, 200, 429],
  },
  {
    case: "UTF-8 bytes in a header value (a ByteString) next to the Latin-1 spelling",
    answer: "are two different values, so two clients",
    key: ["header:x-api-key"],
    requests: [apiKey("caf\u00c3\u00a9"), apiKey("caf\u00c3\u00a9"), apiKey("café")],
    statuses: [200, 200, 200],
  },
  {
    case: "UTF-8 in a query key value, percent-encoded or raw",
    answer: "is one client however it is spelled: the value is decoded first",
    key: ["query:token"],
    requests: [get({}, "/x?token=caf%C3%A9"), get({}, "/x?token=café"), get({}, "/x?token=caf%c3%a9")],
    statuses: [200, 200, 429],
  },
  {
    case: "invalid UTF-8 in a query key value",
    answer: "decodes to U+FFFD: all such values share one bucket, never a free one",
    key: ["query:token"],
    requests: [get({}, "/x?token=%FF"), get({}, "/x?token=%FE"), get({}, "/x?token=%C3")],
    statuses: [200, 200, 429],
  },
  {
    case: "UTF-8 bytes in a cookie value",
    answer: "is counted by its bytes like any value",
    key: ["cookie:sid"],
    requests: Array(3).fill(get({ cookie: "theme=dark; sid=caf\u00c3\u00a9" })),
    statuses: [200, 200, 429],
  },
  {
    case: "a missing or empty CF-Connecting-IP",
    answer: "is the one shared client `unknown`, never a free pass",
    key: ["ip"],
    requests: [get(), ip(""), ip("   ")],
    statuses: [200, 200, 429],
  },
  {
    case: "an IP with a port",
    answer: "is the client without the port",
    key: ["ip"],
    requests: [ip("198.51.100.20"), ip("198.51.100.20:4711"), ip("198.51.100.20:1")],
    statuses: [200, 200, 429],
  },
  {
    case: "an IPv6 address in brackets with a port",
    answer: "is the client without the brackets and port",
    key: ["ip"],
    requests: [ip("2001:db8:7::1"), ip("[2001:db8:7::1]:443"), ip("[2001:db8:7::1]")],
    statuses: [200, 200, 429],
  },
  {
    case: "a malformed IP",
    answer: "is counted under its own `invalid:` key (Cloudflare's edge never sends one)",
    key: ["ip"],
    requests: [ip("not-an-ip"), ip("not-an-ip"), ip("not-an-ip")],
    statuses: [200, 200, 429],
  },
  {
    case: "a 10 KB malformed IP",
    answer: "is hashed and counted, like a long key",
    key: ["ip"],
    requests: Array(3).fill(ip("9".repeat(10 * KB))),
    statuses: [200, 200, 429],
  },
  {
    case: "::ffff:1.2.3.4 and 1.2.3.4",
    answer: "are the same client",
    key: ["ip"],
    requests: [ip("198.51.100.30"), ip("::ffff:198.51.100.30"), ip("::FFFF:198.51.100.30")],
    statuses: [200, 200, 429],
  },
  ...(["x-forwarded-for", "x-real-ip", "true-client-ip", "forwarded"] as const).map(
    (header): IdentityCase => ({
      case: `a rotating ${header} with one CF-Connecting-IP`,
      answer: "is one client: the header is not trusted unless TRUSTED_IP_HEADER names it",
      key: ["ip"],
      requests: [1, 2, 3].map((n) =>
        ip("198.51.100.40", { [header]: header === "forwarded" ? `for=203.0.113.${n}` : `203.0.113.${n}` }),
      ),
      statuses: [200, 200, 429],
    }),
  ),
  {
    case: "rotating IPv6 addresses within one /56",
    answer: "are one client",
    key: ["ip"],
    requests: [ip("2001:db8:aa:bb00::1"), ip("2001:db8:aa:bb17:1234::9"), ip("2001:db8:aa:bbff:ffff:ffff:ffff:ffff")],
    statuses: [200, 200, 429],
  },
  {
    case: "IPv6 addresses in two different /56s",
    answer: "are two clients",
    key: ["ip"],
    requests: [ip("2001:db8:aa:cc00::1"), ip("2001:db8:aa:cc00::2"), ip("2001:db8:aa:cd00::1")],
    statuses: [200, 200, 200],
  },
  {
    case: "a header value that spells out another characteristic",
    answer: "cannot forge that key: values are JSON-escaped in the canonical key",
    key: ["header:a", "header:b"],
    requests: [get({ a: 'x"],["header:b","y' }), get({ a: 'x"],["header:b","y' }), get({ a: "x", b: "y" })],
    statuses: [200, 200, 200],
  },
  {
    case: "a path to /login through dot segments: /x/../login, /x/%2e%2e/login, /x\\..\\login",
    answer: "is /login: the URL parser resolves them before any rule sees the path",
    key: ["ip"],
    path: "/login",
    requests: ["/x/../login", "/x/%2e%2e/login", "/x\\%2E.\\login"].map((path) => ({
      path,
      init: { headers: { "cf-connecting-ip": "198.51.100.50" } },
    })),
    statuses: [200, 200, 429],
  },
  {
    case: "a method in lower case",
    answer: "is the upper-case method: the runtime normalises it, so it matches the rule",
    key: ["ip"],
    methods: ["POST", "PATCH"],
    requests: [withMethod("post"), withMethod("POST"), withMethod("patch")],
    statuses: [200, 200, 429],
  },
];

describe("who the client is, for hostile input", () => {
  it.each(identityCases.map((c, i) => ({ ...c, index: i })))("$case $answer", async (c) => {
    const send = limiter([
      { id: `hostile-${c.index}`, limit: 2, period: "1h", key: c.key, methods: c.methods, path: c.path },
    ]);
    const got: number[] = [];
    for (const { path, init } of c.requests) {
      const res = await send(path, init);
      await res.arrayBuffer();
      got.push(res.status);
    }
    expect(got).toEqual(c.statuses);
  });
});

const header = (echo: Echo, name: string) => echo.headers.find(([n]) => n === name)?.[1];
const manyHeaders = (count: number, bytes: number) =>
  Object.fromEntries(Array.from({ length: count }, (_, i) => [`x-filler-${i}`, big(bytes, String(i % 10))]));

type ProxyCase = {
  case: string;
  answer: string;
  sent: Sent;
  status: number;
  check?: (echo: Echo) => void;
};

const proxyCases: ProxyCase[] = [
  {
    case: "Connection: authorization, x-forwarded-for",
    answer: "cannot strip headers the origin relies on",
    sent: get({
      connection: "authorization, x-forwarded-for, cookie, content-type, host",
      authorization: "Bearer t",
      "x-forwarded-for": "203.0.113.9",
      cookie: "sid=1",
    }),
    status: 200,
    check: (echo) => {
      expect(header(echo, "authorization")).toBe("Bearer t");
      expect(header(echo, "cookie")).toBe("sid=1");
      expect(header(echo, "x-forwarded-for")).toBe("203.0.113.9");
      // The origin's own host and port: the Worker fetches the origin's URL, and naming Host in Connection cannot remove it.
      expect(header(echo, "host")).toBe(new URL(originUrl()).host);
    },
  },
  {
    case: "request headers of 120 KB in all, near Cloudflare's 128 KB limit",
    answer: "are forwarded whole",
    sent: get(manyHeaders(30, 4 * KB)),
    status: 200,
    check: (echo) => {
      const fillers = echo.headers.filter(([name]) => name.startsWith("x-filler-"));
      expect(fillers).toHaveLength(30);
      expect(fillers.every(([, value]) => value.length === 4 * KB)).toBe(true);
    },
  },
  {
    case: "a single 100 KB header",
    answer: "is forwarded whole",
    sent: apiKey(big(100 * KB, "z")),
    status: 200,
    check: (echo) => expect(header(echo, "x-api-key")).toBe(big(100 * KB, "z")),
  },
  {
    case: "request headers of 280 KB, more than the origin takes",
    answer: "get the origin's own 431, passed through (Cloudflare refuses over 128 KB before the Worker runs)",
    sent: get(manyHeaders(70, 4 * KB)),
    status: 431,
  },
  {
    case: "a non-ASCII header value",
    answer: "is forwarded, not refused",
    sent: apiKey("café ✓"),
    status: 200,
    // The runtime sends the value as its UTF-8 bytes (63 61 66 c3 a9 20 e2 9c 93), and the origin's Node HTTP
    // parser reads header bytes as Latin-1, one character per byte: this string is those 9 bytes, intact.
    check: (echo) => expect(header(echo, "x-api-key")).toBe("caf\u00c3\u00a9 \u00e2\u009c\u0093"),
  },
];

describe("what reaches the origin, for hostile input", () => {
  it.each(proxyCases)("$case $answer", async (c) => {
    const send = limiter([{ id: "hostile-proxy", limit: 1000, period: "1h", key: ["header:x-api-key|ip"] }]);
    const res = await send(c.sent.path, c.sent.init);
    expect(res.status).toBe(c.status);
    if (c.check) c.check((await res.json()) as Echo);
    else await res.arrayBuffer();
  });
});
