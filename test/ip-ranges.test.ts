/**
 * IP ranges in rules: `ips` (the rule applies only to clients in them) and
 * `exclude_ips` (the rule skips clients in them). IPv4 and IPv6, with an
 * IPv4-mapped IPv6 client matched as IPv4.
 */
import { describe, expect, it } from "vitest";
import { parseAddress } from "../src/core/ip.ts";
import { inAnyRange, parseRange, parseRanges } from "../src/core/ip-ranges.ts";
import { parseRules } from "../src/core/rules.ts";
import { from, limiter, statuses, uniqueIp } from "./support/limiter.ts";

const range = (text: string) => {
  const parsed = parseRange(text);
  if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
  return parsed.value;
};
const within = (address: string, ...ranges: string[]) => inAnyRange(parseAddress(address)!, ranges.map(range));

describe("an address in a range", () => {
  it.each([
    ["203.0.113.7", "203.0.113.0/24", true],
    ["203.0.114.0", "203.0.113.0/24", false],
    ["203.0.113.255", "203.0.113.0/24", true],
    ["203.0.113.7", "203.0.113.7", true],
    ["203.0.113.8", "203.0.113.7", false],
    ["10.1.2.3", "0.0.0.0/0", true],
    ["::ffff:203.0.113.7", "203.0.113.0/24", true],
    ["203.0.113.7:443", "203.0.113.0/24", true],
    ["2001:db8:0:ab12::1", "2001:db8::/32", true],
    ["2001:db9::1", "2001:db8::/32", false],
    ["2001:db8::1", "203.0.113.0/24", false],
    ["203.0.113.7", "::/0", false],
    ["2001:db8:0:ab12::1", "2001:db8:0:ab00::/56", true],
    ["2001:db8:0:ac00::1", "2001:db8:0:ab00::/56", false],
  ])("%s in %s: %s", (address, cidr, expected) => {
    expect(within(address, cidr)).toBe(expected);
  });

  it("is linear in the ranges: 1,000 ranges, and the address in the last", () => {
    const ranges = Array.from({ length: 1_000 }, (_, i) => `10.${i >> 8}.${i & 255}.0/24`);
    expect(within("10.3.231.9", ...ranges)).toBe(true);
    expect(within("10.4.0.9", ...ranges)).toBe(false);
  });
});

describe("a range as written", () => {
  it.each([
    ["203.0.113.0/33", "the prefix must be from 0 to 32"],
    ["2001:db8::/129", "the prefix must be from 0 to 128"],
    ["203.0.113.7/24", "has bits set past its /24; the range starts at 203.0.113.0/24"],
    ["203.0.113/24", "is not an IP address or a CIDR"],
    ["example.com", "is not an IP address or a CIDR"],
    ["203.0.113.0/24/8", "is not an IP address or a CIDR"],
    ["203.0.113.0/x", "the prefix must be from 0 to 32"],
    ["10.0.0.0:8080/8", "is not an IP address or a CIDR"],
    ["fe80::%eth0/64", "is not an IP address or a CIDR"],
    ["[2001:db8::]/32", "is not an IP address or a CIDR"],
    ["2001:db8::1/32", "has bits set past its /32; the range starts at 2001:db8::/32"],
  ])("rejects %s: %s", (text, message) => {
    const parsed = parseRange(text);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.errors[0]).toContain(message);
  });

  it("rejects ranges that overlap, naming both", () => {
    const parsed = parseRanges(["10.0.0.0/8", "192.0.2.0/24", "10.1.0.0/16"]);
    expect(parsed).toEqual({ ok: false, errors: ['"10.0.0.0/8" and "10.1.0.0/16" overlap; list each address once'] });
  });

  it("names the rule and the field", () => {
    const parsed = parseRules([{ id: "r", limit: 1, period: "1m", ips: [], exclude_ips: ["nope"] }]);
    expect(parsed.ok ? [] : parsed.errors).toEqual([
      'RULES[0] "r": field "ips": must name at least one range; leave it out for every client',
      'RULES[0] "r": field "exclude_ips": "nope" is not an IP address or a CIDR such as "203.0.113.0/24" or "2001:db8::/32"',
    ]);
  });
});

describe("rules with ranges, through the Worker", () => {
  let rules = 0;
  const id = () => `ranges-${++rules}`;

  it("exclude_ips: your monitoring range is never limited, everyone else is", async () => {
    const send = limiter([
      { id: id(), limit: 2, period: "1h", exclude_ips: ["198.51.100.0/24", "2001:db8:aaaa::/48"] },
    ]);
    const call = (ip: string) => () => send("/x", from(ip));
    expect(await statuses(5, call("198.51.100.20"))).toEqual([200, 200, 200, 200, 200]);
    expect(await statuses(5, call("2001:db8:aaaa:1::9"))).toEqual([200, 200, 200, 200, 200]);
    const other = uniqueIp();
    expect(await statuses(3, call(other))).toEqual([200, 200, 429]);
  });

  it("ips: a rule for one partner's range applies to it alone, and its mapped form is the same client", async () => {
    const partner = id();
    const send = limiter([
      { id: partner, limit: 2, period: "1h", ips: ["203.0.113.0/24"] },
      { id: id(), limit: 100, period: "1h" },
    ]);
    const a = await send("/x", from("203.0.113.50"));
    expect(a.headers.get("ratelimit-policy")).toContain(`"${partner}";q=2`);
    expect((await send("/x", from("::ffff:203.0.113.50"))).status).toBe(200);
    expect((await send("/x", from("203.0.113.50"))).status).toBe(429);
    const outsider = await send("/x", from(uniqueIp()));
    expect(outsider.status).toBe(200);
    expect(outsider.headers.get("ratelimit-policy")).not.toContain(partner);
  });

  it("ips: a request without any client IP is in no range", async () => {
    const rule = id();
    const send = limiter([{ id: rule, limit: 1, period: "1h", ips: ["0.0.0.0/0", "::/0"] }]);
    const res = await send("/x");
    expect(res.headers.get("ratelimit-policy")).toBeNull();
  });
});
