import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ipKey } from "../src/core/ip.ts";
import { canonicalKey, hashKey, type RequestFacts, readCookie } from "../src/core/keys.ts";
import { parseRules } from "../src/core/rules.ts";
import { clientAddress } from "../src/http/request-facts.ts";

describe("client IP keys", () => {
  it.each([
    ["203.0.113.7", "203.0.113.7"],
    [" 203.0.113.7 ", "203.0.113.7"],
    ["203.0.113.7:51234", "203.0.113.7"],
    ["::ffff:203.0.113.7", "203.0.113.7"],
    ["::ffff:cb00:7107", "203.0.113.7"],
    ["[2001:db8::1]:443", "2001:db8::/56"],
    ["2001:db8:0:12ff:aaaa::1", "2001:db8:0:1200::/56"],
    ["2001:DB8:0:12AB:ffff:ffff:ffff:ffff", "2001:db8:0:1200::/56"],
    ["fe80::1%eth0", "fe80::/56"],
    [null, "unknown"],
    ["", "unknown"],
    ["999.1.1.1", "invalid:999.1.1.1"],
    // IPv4 is read a character at a time: leading zeros are the same address, anything else is not one.
    ["010.000.000.001", "10.0.0.1"],
    ["0.0.0.0", "0.0.0.0"],
    ["255.255.255.255", "255.255.255.255"],
    ["1.2.3.256", "invalid:1.2.3.256"],
    ["0001.2.3.4", "invalid:0001.2.3.4"],
    ["1.2.3", "invalid:1.2.3"],
    ["1.2.3.4.5", "invalid:1.2.3.4.5"],
    ["1..2.3", "invalid:1..2.3"],
    [".1.2.3", "invalid:.1.2.3"],
    ["+1.2.3.4", "invalid:+1.2.3.4"],
    ["1.2.3.4a", "invalid:1.2.3.4a"],
    ["١.٢.٣.٤", "invalid:١.٢.٣.٤"],
    ["not-an-ip", "invalid:not-an-ip"],
    ["1:2:3:4:5:6:7:8:9", "invalid:1:2:3:4:5:6:7:8:9"],
  ])("%o is %o", (raw, key) => {
    expect(ipKey(raw)).toBe(key);
  });

  it("groups every address of one /56 into one key, and separates the next /56", () => {
    const keys = new Set(
      Array.from({ length: 256 }, (_, i) => ipKey(`2001:db8:1:${(0xab00 + i).toString(16)}::${i.toString(16)}`)),
    );
    expect([...keys]).toEqual(["2001:db8:1:ab00::/56"]);
    expect(ipKey("2001:db8:1:ac00::1")).not.toBe("2001:db8:1:ab00::/56");
  });

  it("takes the prefix length from config", () => {
    expect(ipKey("2001:db8:1:ab12::1", 64)).toBe("2001:db8:1:ab12::/64");
    expect(ipKey("2001:db8:1:ab12::1", 48)).toBe("2001:db8:1::/48");
  });
});

describe("the client's address", () => {
  const headers = new Headers({
    "cf-connecting-ip": "198.51.100.1",
    "x-forwarded-for": "10.0.0.1, 10.0.0.2",
    "x-real-ip": "10.0.0.3",
    "true-client-ip": "10.0.0.4",
    forwarded: 'for="10.0.0.5";proto=https',
  });

  it("is CF-Connecting-IP; forwarding headers are not trusted by default", () => {
    expect(clientAddress(headers, null)).toBe("198.51.100.1");
  });

  it.each([
    ["x-forwarded-for", "10.0.0.2"],
    ["true-client-ip", "10.0.0.4"],
    ["forwarded", "10.0.0.5"],
  ])("is the trusted header %s when the operator names it (its rightmost entry)", (name, ip) => {
    expect(clientAddress(headers, name)).toBe(ip);
  });

  it("falls back to CF-Connecting-IP when the trusted header is absent", () => {
    expect(clientAddress(new Headers({ "cf-connecting-ip": "198.51.100.1" }), "true-client-ip")).toBe("198.51.100.1");
  });
});

describe("client keys", () => {
  const facts = (over: Partial<RequestFacts> = {}): RequestFacts => ({
    method: "GET",
    path: "/api/x",
    host: () => "api.example.com",
    ip: () => "198.51.100.1",
    header: () => null,
    cookie: () => null,
    query: () => null,
    network: () => null,
    claim: () => null,
    ...over,
  });
  const keyOf = (key: string[]) => {
    const parsed = parseRules([{ id: "r", limit: 1, period: 1, key }]);
    if (!parsed.ok) throw new Error(parsed.errors.join());
    return parsed.value[0]!.key;
  };

  it("uses the first source present in a fallback", () => {
    const key = keyOf(["header:x-api-key|ip"]);
    expect(canonicalKey(key, facts({ header: (n) => (n === "x-api-key" ? "k1" : null) }))).toBe(
      '[["header:x-api-key","k1"]]',
    );
    expect(canonicalKey(key, facts())).toBe('[["ip","198.51.100.1"]]');
  });

  it("puts every request without the header into one shared key, so leaving it out escapes nothing", () => {
    const key = keyOf(["header:x-api-key"]);
    expect(canonicalKey(key, facts())).toBe('[["header:x-api-key",null]]');
    expect(canonicalKey(key, facts({ header: () => "" }))).toBe('[["header:x-api-key",null]]');
  });

  it("combines characteristics", () => {
    const key = keyOf(["ip", "method", "path", "host", "query:tenant", "cookie:sid"]);
    const f = facts({ query: () => "t1", cookie: () => "s1" });
    expect(JSON.parse(canonicalKey(key, f))).toEqual([
      ["ip", "198.51.100.1"],
      ["method", "GET"],
      ["path", "/api/x"],
      ["host", "api.example.com"],
      ["query:tenant", "t1"],
      ["cookie:sid", "s1"],
    ]);
  });

  it("cannot be confused by values that look like separators", () => {
    const key = keyOf(["header:a", "header:b"]);
    const one = canonicalKey(key, facts({ header: (n) => (n === "a" ? 'x","y' : "z") }));
    const two = canonicalKey(key, facts({ header: (n) => (n === "a" ? "x" : '"y","z') }));
    expect(one).not.toBe(two);
  });

  it("is JSON.stringify of its parts, character for character, for any values (object names are its hash)", () => {
    const key = keyOf(["header:x-api-key|ip", "header:b", "query:q|cookie:c"]);
    fc.assert(
      fc.property(fc.option(fc.string()), fc.option(fc.string()), fc.option(fc.string()), (a, b, q) => {
        const f = facts({ header: (n) => (n === "x-api-key" ? a : b), query: () => q, cookie: () => null });
        const part = (labels: string[], values: (string | null)[]): [string, string | null] => {
          const i = values.findIndex((v) => v !== null && v !== "");
          return i < 0 ? [labels.join("|"), null] : [labels[i]!, values[i]!];
        };
        const reference = JSON.stringify([
          part(["header:x-api-key", "ip"], [a, "198.51.100.1"]),
          part(["header:b"], [b]),
          part(["query:q", "cookie:c"], [q, null]),
        ]);
        expect(canonicalKey(key, f)).toBe(reference);
      }),
    );
  });

  it("hashes to 64 hex digits whatever the size of the value", async () => {
    expect(await hashKey("a")).toMatch(/^[0-9a-f]{64}$/);
    expect(await hashKey("x".repeat(100_000))).toMatch(/^[0-9a-f]{64}$/);
    expect(await hashKey("a")).not.toBe(await hashKey("b"));
  });

  it.each([
    ["sid=abc; theme=dark", "sid", "abc"],
    ["theme=dark;sid=abc", "sid", "abc"],
    ['sid="quoted"', "sid", "quoted"],
    ["sid=%61bc", "sid", "abc"],
    ['sid="%61b%63"', "sid", "abc"],
    ["sid=caf%C3%A9%20au%20lait", "sid", "café au lait"],
    ["sid=100%25", "sid", "100%"],
    ["sid=50%", "sid", "50%"], // not an escape: as it is, as the origin's parser leaves it
    ["sid=%FF", "sid", "%FF"], // not UTF-8: the same
    ["xsid=abc", "sid", null],
    [null, "sid", null],
  ])("reads cookie from %o", (header, name, value) => {
    expect(readCookie(header, name)).toBe(value);
  });
});
