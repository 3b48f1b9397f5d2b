/**
 * @module
 * IP ranges in rules (`ips`, `exclude_ips`): CIDRs such as `203.0.113.0/24`
 * or `2001:db8::/32`, or single addresses. IPv4-mapped IPv6 clients
 * (`::ffff:203.0.113.7`) are matched as IPv4. Matching is linear in the
 * number of ranges, a few integer operations each.
 */
import { type Address, formatIPv6, maskIPv6, parseIp } from "./ip.ts";
import { fail, mapAll, ok, type Result } from "./result.ts";
import { show } from "./show.ts";

/** A range: its family, its first address's 16-bit groups, and how many leading bits are fixed. */
export type IpRange = { v4: boolean; groups: number[]; prefix: number; source: string };

/** One range from `a.b.c.d/n`, `x:y::/n`, or an address alone (all its bits fixed). */
export function parseRange(text: unknown): Result<IpRange> {
  if (typeof text !== "string") return fail(`must be a CIDR such as "203.0.113.0/24"; got ${show(text)}`);
  const [address = "", bits, ...extra] = text.trim().split("/");
  const parsed = parseIp(address);
  if (parsed === null || extra.length > 0) {
    return fail(`${show(text)} is not an IP address or a CIDR such as "203.0.113.0/24" or "2001:db8::/32"`);
  }
  const max = parsed.v4 ? 32 : 128;
  const prefix = bits === undefined ? max : /^\d{1,3}$/.test(bits) ? Number(bits) : Number.NaN;
  if (!(prefix >= 0 && prefix <= max)) return fail(`${show(text)}: the prefix must be from 0 to ${max}`);
  const masked = mask(parsed, prefix);
  if (masked.some((group, i) => group !== parsed.groups[i])) {
    const first = format({ ...parsed, groups: masked });
    return fail(`${show(text)} has bits set past its /${prefix}; the range starts at ${first}/${prefix}`);
  }
  return ok({ v4: parsed.v4, groups: masked, prefix, source: text.trim() });
}

/** A list of ranges (or one), every bad one reported; ranges that overlap are an error, since one of them says nothing. */
export function parseRanges(list: unknown): Result<IpRange[]> {
  const parsed = mapAll(Array.isArray(list) ? list : [list], parseRange);
  if (!parsed.ok) return parsed;
  const ranges = parsed.value;
  const errors = ranges.flatMap((a, i) =>
    ranges
      .slice(i + 1)
      .flatMap((b) =>
        overlaps(a, b) ? [`${show(a.source)} and ${show(b.source)} overlap; list each address once`] : [],
      ),
  );
  return errors.length > 0 ? fail(...errors) : ok(ranges);
}

/** Whether the address is in the range. */
export const inRange = (address: Address, range: IpRange): boolean =>
  address.v4 === range.v4 && mask(address, range.prefix).every((group, i) => group === range.groups[i]);

/** Whether the address is in any of the ranges. */
export const inAnyRange = (address: Address, ranges: readonly IpRange[]): boolean =>
  ranges.some((range) => inRange(address, range));

/** Whether two ranges share an address: one contains the other's first address, prefixes compared. */
export function overlaps(a: IpRange, b: IpRange): boolean {
  if (a.v4 !== b.v4) return false;
  const [wide, narrow] = a.prefix <= b.prefix ? [a, b] : [b, a];
  return inRange({ v4: narrow.v4, groups: narrow.groups }, wide);
}

const mask = (address: Address, prefix: number): number[] => maskIPv6(address.groups, prefix);

function format({ v4, groups }: Address): string {
  if (v4) return [groups[0]! >> 8, groups[0]! & 0xff, groups[1]! >> 8, groups[1]! & 0xff].join(".");
  return formatIPv6(groups);
}
