/**
 * @module
 * The client's IP as a rate-limit key: canonical IPv4, or an IPv6 prefix,
 * because one subscriber holds a whole IPv6 prefix and could rotate through it.
 */

/** The default IPv6 prefix length that counts as one client. */
export const DEFAULT_IPV6_PREFIX = 56;

/** The key used when no IP is known: every such request shares it. */
export const UNKNOWN_IP = "unknown";

/**
 * The key for a raw IP header value.
 * - `1.2.3.4`, `1.2.3.4:5678` and `::ffff:1.2.3.4` give `1.2.3.4`;
 * - IPv6 gives its first `ipv6PrefixBits` bits, as `2001:db8:0:ab00::/56`;
 * - a missing value gives {@link UNKNOWN_IP}; a malformed one gives `invalid:<value>`.
 */
export function ipKey(raw: string | null | undefined, ipv6PrefixBits = DEFAULT_IPV6_PREFIX): string {
  const value = raw?.trim();
  if (!value) return UNKNOWN_IP;
  const host = stripPort(value);
  const v4 = parseIPv4(host);
  // Written without leading zeros, the address is its own key: no new string is made.
  if (v4 !== null) return host.length === dottedLength(v4) ? host : v4.join(".");
  const v6 = parseIPv6(host);
  if (v6 === null) return `invalid:${value}`;
  if (isIPv4Mapped(v6)) return [v6[6]! >> 8, v6[6]! & 0xff, v6[7]! >> 8, v6[7]! & 0xff].join(".");
  return `${formatIPv6(maskIPv6(v6, ipv6PrefixBits))}/${ipv6PrefixBits}`;
}

/** An address as 16-bit groups: 2 for IPv4 (an IPv4-mapped IPv6 address is IPv4), 8 for IPv6. */
export type Address = { v4: boolean; groups: number[] };

/** A raw IP header value as an {@link Address} (a port or zone ignored), or null when it is missing or malformed. */
export function parseAddress(raw: string | null | undefined): Address | null {
  const value = raw?.trim();
  return value ? addressOf(stripPort(value)) : null;
}

/** An address as a config writes it: no port, no brackets, no zone; or null. */
export const parseIp = (text: string): Address | null => (/[[\]%]/.test(text) ? null : addressOf(text));

function addressOf(host: string): Address | null {
  const v4 = parseIPv4(host);
  if (v4 !== null) return { v4: true, groups: [(v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!] };
  const v6 = parseIPv6(host);
  if (v6 === null) return null;
  return isIPv4Mapped(v6) ? { v4: true, groups: [v6[6]!, v6[7]!] } : { v4: false, groups: v6 };
}

function stripPort(value: string): string {
  if (value.startsWith("[")) {
    const end = value.indexOf("]");
    return end > 0 ? value.slice(1, end) : value;
  }
  const colon = value.indexOf(":");
  // Exactly one colon: IPv4 with a port. IPv6 has at least two.
  if (colon > 0 && value.indexOf(":", colon + 1) < 0) return value.slice(0, colon);
  return value;
}

const DOT = 46;
const ZERO = 48;
const NINE = 57;

/**
 * The four octets of a dotted-quad IPv4 address, each 1 to 3 decimal digits
 * (leading zeros allowed) of at most 255; or null. Read a character at a
 * time: it runs on every request keyed by IP, so it splits nothing and runs
 * no regular expression.
 */
function parseIPv4(text: string): number[] | null {
  const octets: number[] = [];
  let value = 0;
  let digits = 0;
  // One past the end reads as a dot, which ends the last octet.
  for (let i = 0; i <= text.length; i++) {
    const c = i < text.length ? text.charCodeAt(i) : DOT;
    if (c === DOT) {
      if (digits === 0 || value > 255 || octets.length === 4) return null;
      octets.push(value);
      value = 0;
      digits = 0;
    } else if (c >= ZERO && c <= NINE && digits < 3) {
      value = value * 10 + (c - ZERO);
      digits++;
    } else {
      return null;
    }
  }
  return octets.length === 4 ? octets : null;
}

/** The length of the octets written as `a.b.c.d`, without leading zeros. */
function dottedLength(octets: number[]): number {
  let length = 3;
  for (const octet of octets) length += octet >= 100 ? 3 : octet >= 10 ? 2 : 1;
  return length;
}

/** Eight 16-bit groups, or null. Accepts `::` compression, an IPv4 tail and a zone (`%eth0`, ignored). */
function parseIPv6(text: string): number[] | null {
  const address = text.split("%", 1)[0] ?? "";
  if (!/^[0-9a-fA-F:.]+$/.test(address) || address.length > 45) return null;
  const halves = address.split("::");
  if (halves.length > 2) return null;
  const toGroups = (half: string): number[] | null => {
    if (half === "") return [];
    const out: number[] = [];
    const pieces = half.split(":");
    for (const [i, piece] of pieces.entries()) {
      if (i === pieces.length - 1 && piece.includes(".")) {
        const v4 = parseIPv4(piece);
        if (v4 === null) return null;
        out.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(piece)) out.push(Number.parseInt(piece, 16));
      else return null;
    }
    return out;
  };
  const head = toGroups(halves[0] ?? "");
  const tail = halves.length === 2 ? toGroups(halves[1] ?? "") : [];
  if (head === null || tail === null) return null;
  if (halves.length === 1) return head.length === 8 ? head : null;
  const missing = 8 - head.length - tail.length;
  if (missing < 1) return null;
  return [...head, ...new Array<number>(missing).fill(0), ...tail];
}

const isIPv4Mapped = (g: number[]): boolean => g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff;

/** The groups with every bit past the first `bits` cleared. */
export function maskIPv6(groups: number[], bits: number): number[] {
  return groups.map((group, i) => {
    const keep = Math.min(16, Math.max(0, bits - i * 16));
    return keep === 0 ? 0 : group & ((0xffff << (16 - keep)) & 0xffff);
  });
}

/** Lower-case hex with the longest run of zero groups compressed (RFC 5952). */
export function formatIPv6(groups: number[]): string {
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) [bestStart, bestLength] = [i, j - i];
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(":");
  return `${hex.slice(0, bestStart).join(":")}::${hex.slice(bestStart + bestLength).join(":")}`;
}
