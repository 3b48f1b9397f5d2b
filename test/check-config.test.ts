/// <reference types="vite/client" />
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type CheckReport,
  checkConfig,
  type Finding,
  formatReport,
  globCovers,
  WORKER_METHODS,
  type WranglerConfig,
} from "../src/config/check.ts";
import { parseSettings } from "../src/config/settings.ts";
import { unknownRules } from "../src/config/tiers.ts";
import { compileGlob, normalizePath } from "../src/core/paths.ts";
import { parseRules, ruleMatches } from "../src/core/rules.ts";
import shipped from "../wrangler.toml?raw";
import broken from "./fixtures/broken-wrangler.json";
import jwtSecretFixture from "./fixtures/jwt-secret-wrangler.json";
import jwtFixture from "./fixtures/jwt-wrangler.json";
import overrides from "./fixtures/overrides-wrangler.json";
import { env } from "./support/env.ts";

const rule = (fields: Record<string, unknown>) => ({ id: "r", limit: 10, period: "1m", ...fields });
const findings = (vars: Record<string, unknown>): Finding[] => checkConfig({ vars }).findings;
const warning = (message: string): Finding => ({ level: "warning", message });
const error = (message: string): Finding => ({ level: "error", message });
const danger = (message: string): Finding => ({ level: "danger", message });

/**
 * The `[[name]]` tables of a TOML text, each `key = value` read as JSON: enough
 * for wrangler.toml's Durable Object bindings and migrations (strings and
 * lists of strings). Anything else throws, so the test never passes on a
 * table it could not read.
 */
function tomlTables(text: string, name: string): Record<string, unknown>[] {
  const tables: Record<string, unknown>[] = [];
  let table: Record<string, unknown> | undefined;
  for (const line of text.split("\n").map((l) => l.trim())) {
    if (line.startsWith("[")) {
      table = line === `[[${name}]]` ? {} : undefined;
      if (table !== undefined) tables.push(table);
    } else if (table !== undefined && line !== "" && !line.startsWith("#")) {
      const [, key, value] = /^([\w-]+)\s*=\s*(.+)$/.exec(line) ?? [];
      if (key === undefined || value === undefined) throw new Error(`wrangler.toml [[${name}]]: cannot read ${line}`);
      table[key] = JSON.parse(value);
    }
  }
  return tables;
}

describe("npm run check-config", () => {
  it("passes the shipped wrangler.toml, as the Worker reads it, with no finding at all", () => {
    const { RULES, IPV6_PREFIX, LIMITER_TIMEOUT_MS, TRUSTED_IP_HEADER, ORIGIN_URL, TIERS } = env;
    const bindings = tomlTables(shipped, "durable_objects.bindings") as { name: string; class_name: string }[];
    // The bindings read from the file are the ones the Worker runs with.
    expect(bindings.map((b) => b.name)).toEqual(["RATE_LIMITER", "OVERRIDES", "STATS"]);
    for (const { name } of bindings) expect(env[name as "RATE_LIMITER" | "OVERRIDES"]).toBeDefined();
    expect(TIERS).toBeDefined();
    const flags = /^compatibility_flags = (\[.*\])$/m.exec(shipped)?.[1];
    const report = checkConfig({
      vars: { RULES, IPV6_PREFIX, LIMITER_TIMEOUT_MS, TRUSTED_IP_HEADER, ORIGIN_URL, TIERS },
      durable_objects: { bindings },
      migrations: tomlTables(shipped, "migrations"),
      compatibility_flags: JSON.parse(flags ?? "[]") as string[],
    });
    expect(report).toEqual({ rules: 3, findings: [] } satisfies CheckReport);
    expect(formatReport(report, "wrangler.toml").at(-1)).toBe("wrangler.toml: 3 rules, 0 errors, 0 warnings - OK");
  });

  it("warns when the compatibility flag that tells the Worker a client hung up is missing", () => {
    const flagFindings = (flags: string[]) =>
      checkConfig({ compatibility_flags: flags }).findings.filter((f) => f.message.startsWith("compatibility_flags"));
    expect(flagFindings(["nodejs_compat"])).toEqual([
      {
        level: "warning",
        message: expect.stringMatching(/^compatibility_flags: "enable_request_signal" is missing/),
      },
    ]);
    expect(flagFindings(["nodejs_compat", "enable_request_signal"])).toEqual([]);
  });

  it("prints every error of the broken fixture, naming the rule and field, then every warning", () => {
    expect(formatReport(checkConfig(broken as WranglerConfig), "broken-wrangler.json")).toEqual([
      'error: RULES[0] "API": field "id": must be 1–64 characters of [a-z0-9_-]; got "API"',
      'error: RULES[0] "API": field "limit": must be an integer from 1 to 1000000000; got 0',
      'error: RULES[0] "API": field "period": must be seconds as a number or a string like "10s", "1m", "1h", "1d"; got "1 minute"',
      'error: RULES[0] "API": field "key": "ip4": unknown characteristic "ip4"; use ip, path, method, host, asn, country, continent, ja4, header:<name>, cookie:<name>, query:<name> or jwt:<claim>',
      'error: RULES[2] "login": field "id": duplicates RULES[1]; ids must be unique',
      'error: RULES[3] "typo": field "metods": is not a rule field; known fields are id, path, methods, exclude, case_sensitive, key, action, on_error, ips, exclude_ips, max_delay, max_held, adaptive, limit, period, precision, strict, count, cost, cost_header, keep_cost_header, block_for, concurrency, place_timeout, burst, quota, per, timezone, anchor, reset, retry_jitter',
      "error: LIMITER_TIMEOUT_MS: must be an integer from 1 to 60000; got 0",
      'error: ORIGIN_URL: must be only a scheme, host and port, such as "https://origin.example.com"; got "https://origin.example.com/api"',
      'error: ADMIN_PREFIX: must be a path such as "/__ratelimit": segments of [A-Za-z0-9._~-], no trailing slash; got "/admin/"',
      'error: durable_objects.bindings: no binding named "RATE_LIMITER" (found: LIMITER); the Worker cannot reach its counters. Add [[durable_objects.bindings]] name = "RATE_LIMITER", class_name = "RateLimiter"',
      'error: migrations: "RateLimiter" is created with new_classes (key-value storage); it keeps its counters in SQL and needs new_sqlite_classes = ["RateLimiter"]',
      'DANGER: TRUSTED_IP_HEADER: "X-Forwarded-For" is a list that clients write themselves, and the limiter trusts its rightmost entry. That entry is the client only when a proxy of yours in front of Cloudflare appends it; otherwise a client can choose the address it is counted by, and walk around every "ip" rule. With Cloudflare as the first hop, leave TRUSTED_IP_HEADER unset: CF-Connecting-IP is already the client',
      "DANGER: ADMIN_TOKEN: is in [vars], so the admin API's token is in plain text in wrangler.toml and in your repository. Remove it and run `wrangler secret put ADMIN_TOKEN`; and use at least 32 random characters (this one has 7)",
      'warning: durable_objects.bindings: no binding named "OVERRIDES" (found: LIMITER), so there is no overrides API: the admin API\'s /overrides routes answer 501, and no client can be given its own limit or a tier. Add [[durable_objects.bindings]] name = "OVERRIDES", class_name = "OverrideRegistry", and [[migrations]] tag = "v2", new_sqlite_classes = ["OverrideRegistry"]',
      'warning: IPV6_PREFIX: /128 is longer than /64, but one subscriber holds at least a /64 (usually a /56 or /48), so a client can rotate addresses and walk around its "ip" limits',
      'warning: RULES[4] "health": counts only other spellings of the paths it excludes (path "/api/health" by exclude "/api/*"): exclude matches the path as written only, so "/API/HEALTH" is counted',
      'warning: RULES[5] "tunnel": never matches: Workers never receive CONNECT requests (the runtime cannot carry them)',
      'warning: RULES[6] "search": field "period": 0.5 is under 1 second (a number is seconds): every request costs a Durable Object round trip, and clock and network jitter are a large share of so short a window; use a longer period with a proportionally larger limit',
      'warning: RULES[6] "search": field "path": "/search?q=*" never matches: globs match the path only, never the query or fragment',
      'warning: RULES[6] "search": field "exclude": "//search/health" never excludes anything: paths are matched as the origin receives them, dot segments resolved and backslashes read as slashes, after decoding unreserved characters and collapsing repeated slashes (write "/search/health")',
      'warning: RULES[7] "per-ip": field "period": 60000 is seconds, that is 1000 minutes; if you meant milliseconds, write "60s"',
      'warning: RULES[10] "shadow": field "on_error": "closed" has no effect on a shadow rule (action = "log"), which never refuses a request',
      'warning: RULES[8] "reports-a" and RULES[9] "reports-b": count the same requests with the same key and period, so RULES[9] "reports-b", the looser, never refuses anything; remove it, or give the two different periods for a burst and a sustained limit',
      "broken-wrangler.json: 11 rules, 11 errors, 12 warnings (2 DANGER)",
    ]);
  });

  it("prints the overrides fixture's registry error, then its tiers' warnings", () => {
    expect(formatReport(checkConfig(overrides as WranglerConfig), "overrides-wrangler.json")).toEqual([
      'error: migrations: "OverrideRegistry" is created with new_classes (key-value storage); it keeps its index of overrides in SQL and needs new_sqlite_classes = ["OverrideRegistry"]',
      'warning: TIERS.pro: names "logn" and "search", which no rule has; they are ignored (the rules are "api" and "login")',
      'warning: TIERS.partner.login: 5 is already the limit of RULES[1] "login", so the tier changes nothing for it',
      "warning: TIERS.free: names no rule, so a client put in this tier keeps every rule's own limit; add rule ids and limits, such as login = 20, or remove it",
      "overrides-wrangler.json: 2 rules, 1 error, 3 warnings",
    ]);
  });
  it("prints the token fixture's dangers and warnings, naming each key by index and kid, never its material", () => {
    const lines = formatReport(checkConfig(jwtFixture as WranglerConfig), "jwt-wrangler.json");
    expect(lines).toEqual([
      `DANGER: JWT_JWKS.keys[0] (kid "signing-2026"): holds private key material ("d"), in plain text in wrangler.toml and in your repository: verifying tokens needs only the public key, and whoever has this one can sign tokens with any claims. Keep only the public members, and replace the key pair: this one is in your repository's history`,
      'DANGER: JWT_JWKS.keys[1] (kid "legacy"): is an "oct" (HS256) key, a shared secret, and JWT_JWKS is in [vars], so it is in plain text in wrangler.toml and in your repository: whoever reads it can sign tokens with any claims. Remove JWT_JWKS from [vars], run `wrangler secret put JWT_JWKS` with a new key, and declare it with [secrets] required = ["JWT_JWKS"]',
      `warning: ${CLAIM_ONLY('RULES[0] "per-user"', "jwt:sub")}`,
      'warning: RULES[1] "per-fingerprint": field "key": "ja4" is present only with Cloudflare Bot Management (Enterprise); without it, every request shares one key; add a fallback, such as "ja4|ip"',
      `warning: ${UNKEYED_TIERS('RULES[2] "per-ip"', '["ip"]')}`,
      "jwt-wrangler.json: 3 rules, 0 errors, 5 warnings (2 DANGER) - OK",
    ]);
    expect(lines.join("\n")).not.toMatch(/NOT-A-REAL-KEY/);
  });

  it("passes the fixture whose key set is a secret declared in [secrets], and warns of it undeclared", () => {
    const declared = jwtSecretFixture as WranglerConfig;
    expect(checkConfig(declared).findings).toEqual([]);
    expect(checkConfig({ ...declared, secrets: undefined }).findings).toEqual([
      warning(unseenKeys('rules "per-user" and "per-org" key on a token\'s claims')),
    ]);
  });
});

/** The warning for a characteristic made only of claims. */
const CLAIM_ONLY = (label: string, key: string, per = "") =>
  `${label}: field "key": "${key}" is only a token's claim, with no fallback, so every request without a valid token (none, expired, or signed with a key the limiter lacks) shares one key${per}, and one client can use up its limit for all of them; add a fallback, such as "${key}|ip"`;

/** The warning for a tiered rule, with tier_claim "plan", keyed on no claim. */
const UNKEYED_TIERS = (label: string, key: string) =>
  `${label}: field "key": ${key} has no "jwt:" source, but TIERS gives the rule a limit per tier and JWT.tier_claim "plan" picks each request's tier from its token, so clients with different plans behind one key share one count, checked against a limit that changes with each request's token; key it on the token, such as "jwt:sub|ip"`;

/** The warning for token keys neither in [vars] nor declared in [secrets]. */
const unseenKeys = (reason: string) =>
  `JWT_JWKS: ${reason}, and neither JWT_JWKS nor JWT_JWKS_URL is in [vars], so until JWT_JWKS is set as a secret (\`wrangler secret put JWT_JWKS\`) the Worker logs an error and runs without token settings: rules keyed on a token's claims limit nothing, and no token picks a tier. Declare it with [secrets] required = ["JWT_JWKS"], so that wrangler deploy refuses to deploy without it (wrangler dev then reads only the secrets listed there from .dev.vars: list your others, such as ADMIN_TOKEN, too)`;

describe("a trusted forwarding header, on a Worker behind Cloudflare", () => {
  it.each([
    ["X-Forwarded-For", "danger"],
    ["Forwarded", "danger"],
    ["True-Client-IP", "warning"],
    ["X-Real-IP", "warning"],
    ["CF-Connecting-IP", "warning"],
  ])("%s gets a %s", (header, level) => {
    const found = findings({ RULES: [rule({})], TRUSTED_IP_HEADER: header });
    expect(found.map((f) => f.level)).toEqual([level]);
    expect(found[0]!.message).toMatch(new RegExp(`^TRUSTED_IP_HEADER: "${header}"`));
  });

  it("unset gets nothing", () => {
    expect(findings({ RULES: [rule({})] })).toEqual([]);
  });
});

describe("suspicious periods", () => {
  it.each([
    ["500ms", 1],
    [0.25, 1],
    ["999ms", 1],
    ["1000ms", 0],
    [1, 0],
    [3600, 0],
    [60_000, 1],
    ["60000s", 0],
  ])("period %j gets %i warning(s)", (period, count) => {
    expect(findings({ RULES: [rule({ period })] })).toHaveLength(count);
  });
});

describe("a path glob with characters a request's path arrives percent-encoded in", () => {
  it("gets no warning that matching ignores case: its escapes are matched in either case", () => {
    expect(findings({ RULES: [rule({ path: "/café/*" }), rule({ id: "s", path: "/my docs/*" })] })).toEqual([]);
  });
});

describe("a penalty (block_for)", () => {
  it("is an error out of range, naming the rule and the field", () => {
    expect(findings({ RULES: [rule({ block_for: "500ms" }), rule({ id: "s", block_for: "2y" })] })).toEqual([
      error('RULES[0] "r": field "block_for": must be at least 1s, or 0 for no penalty; got "500ms"'),
      error(
        'RULES[1] "s": field "block_for": must be seconds as a number or a string like "10s", "1m", "1h", "1d"; got "2y"',
      ),
    ]);
  });

  it("longer than the period, on an enforcing rule, gets nothing; nor does 0", () => {
    expect(findings({ RULES: [rule({ block_for: "15m" }), rule({ id: "s", path: "/s", block_for: 0 })] })).toEqual([]);
  });

  it("shorter than the period gets a warning: the window alone refuses about as long", () => {
    expect(findings({ RULES: [rule({ period: "1h", block_for: "10m" })] })).toEqual([
      warning(
        'RULES[0] "r": field "block_for": "10m" is shorter than the period (1h), and the window alone refuses a client at its limit for up to a period, so the penalty changes little; make it longer than the period',
      ),
    ]);
  });

  it("a number of seconds that looks like milliseconds gets a warning, as a period does", () => {
    expect(findings({ RULES: [rule({ block_for: 900_000 })] })).toEqual([
      warning(
        'RULES[0] "r": field "block_for": 900000 is seconds, that is 250 hours; if you meant milliseconds, write "900s"',
      ),
    ]);
  });

  it("on a shadow rule gets a warning: it never refuses, so never starts a penalty", () => {
    expect(findings({ RULES: [rule({ action: "log", block_for: 900 })] })).toEqual([
      warning(
        'RULES[0] "r": field "block_for": 900 has no effect on a shadow rule (action = "log"), which never refuses a request and so never starts a penalty',
      ),
    ]);
  });
});

describe("what counts: count, cost and cost_header", () => {
  it("a cost above the limit is an error, naming the rule and the field", () => {
    expect(findings({ RULES: [rule({ limit: 5, cost: 6 })] })).toEqual([
      error('RULES[0] "r": field "cost": must be an integer from 1 to the rule\'s limit (5); got 6'),
    ]);
  });

  it('a penalty that falls on successes gets a warning: count = "successful" with block_for', () => {
    expect(findings({ RULES: [rule({ count: "successful", block_for: "15m" })] })).toEqual([
      warning(
        'RULES[0] "r": field "block_for": with count = "successful", the penalty falls on clients whose requests succeed: a login rule wants count = "failed" (or [401, 403])',
      ),
    ]);
  });

  it('a penalty on failures gets nothing: count = "failed" with block_for is the login rule', () => {
    expect(findings({ RULES: [rule({ count: "failed", block_for: "15m" })] })).toEqual([]);
  });

  it("a cost_header on a shadow rule gets a warning: its charges never refuse anything", () => {
    expect(findings({ RULES: [rule({ action: "log", cost_header: "x-tokens-used" })] })).toEqual([
      warning(
        'RULES[0] "r": field "cost_header": "x-tokens-used" on a shadow rule (action = "log") charges counts that never refuse anything; drop it, or enforce the rule',
      ),
    ]);
  });
});

describe("IP ranges", () => {
  it("overlapping or malformed ranges are errors, naming the rule and the field", () => {
    expect(findings({ RULES: [rule({ ips: ["10.0.0.0/8", "10.2.0.0/16"], exclude_ips: ["10.0.0.1/8"] })] })).toEqual([
      error('RULES[0] "r": field "ips": "10.0.0.0/8" and "10.2.0.0/16" overlap; list each address once'),
      error('RULES[0] "r": field "exclude_ips": "10.0.0.1/8" has bits set past its /8; the range starts at 10.0.0.0/8'),
    ]);
  });

  it("a range wider than /8 (IPv4) or /32 (IPv6) gets a warning; /8 and /32 do not", () => {
    expect(findings({ RULES: [rule({ ips: ["10.0.0.0/8", "2001:db8::/32"] })] })).toEqual([]);
    expect(findings({ RULES: [rule({ ips: ["64.0.0.0/2"], exclude_ips: ["2000::/3"] })] })).toEqual([
      warning(
        'RULES[0] "r": field "ips": "64.0.0.0/2" is wider than /8: more than 1/256 of every IPv4 address; is that meant?',
      ),
      warning(
        'RULES[0] "r": field "exclude_ips": "2000::/3" is wider than /32: more than the /32 a regional registry allocates to one network; is that meant?',
      ),
    ]);
  });
});

describe("rules that can never match", () => {
  it.each([
    [{ path: "/api/*", exclude: "/*" }, 'never matches: every path is excluded (path "/api/*" by exclude "/*")'],
    [
      { path: ["/login", "/signin"], exclude: ["/x", "/*"] },
      'never matches: every path is excluded (path "/login" by exclude "/*"; path "/signin" by exclude "/*")',
    ],
    [
      // Written under the exclude, matched elsewhere (nginx resolves the `..` behind an encoded slash): counted.
      { path: ["/a/*", "/b/*"], exclude: "/*a*", case_sensitive: true },
      'field "path": "/a/*" is excluded by exclude "/*a*" as written, so it counts only other spellings, such as "/a/x/..%2F..%2Fz"',
    ],
    [{ methods: ["CONNECT"] }, "never matches: Workers never receive CONNECT requests (the runtime cannot carry them)"],
    [
      { methods: ["CONNECT", "TRACK"] },
      "never matches: Workers never receive CONNECT or TRACK requests (the runtime cannot carry them)",
    ],
    [
      { methods: ["GET", "TRACK"] },
      'field "methods": Workers never receive TRACK requests (the runtime cannot carry them)',
    ],
    [
      { path: "/%61pi/*" },
      'field "path": "/%61pi/*" never matches: paths are matched as the origin receives them, dot segments resolved and backslashes read as slashes, after decoding unreserved characters and collapsing repeated slashes (write "/api/*")',
    ],
  ])("%j: %s", (fields, message) => {
    expect(findings({ RULES: [rule(fields)] })).toContainEqual(warning(`RULES[0] "r": ${message}`));
  });

  it.each([
    { path: "/api/*", exclude: "/api/v1/*" },
    { path: "/a*", exclude: "/a/*" },
    { path: "/api/*", exclude: "/api/health" },
    { methods: ["PURGE", "PROPFIND"] },
  ])("%j is fine", (fields) => {
    expect(findings({ RULES: [rule(fields)] })).toEqual([]);
  });

  it("knows exactly the methods the Workers runtime can carry", () => {
    for (const method of WORKER_METHODS) expect(new Request("http://x/", { method }).method).toBe(method);
    for (const method of ["CONNECT", "TRACK", "M-SEARCH", "FOO"]) {
      expect(() => new Request("http://x/", { method })).toThrow(TypeError);
    }
  });

  it("judges coverage exactly: a glob covered by an exclude has no path the exclude misses", () => {
    const glob = fc.stringMatching(/^\/[ab/*]{0,6}$/).map(compileGlob);
    const fill = fc.array(fc.stringMatching(/^[ab/]{0,3}$/), { minLength: 7, maxLength: 7 });
    fc.assert(
      fc.property(glob, glob, fill, (cover, path, fills) => {
        let i = 0;
        const instance = path.source.replace(/\*/g, () => fills[i++ % fills.length]!);
        // Sound: every instance of a covered glob is excluded.
        if (globCovers(cover, path)) expect(cover.test(instance)).toBe(true);
        // Complete: an uncovered glob has an instance the exclude misses (each * as a character the exclude never names).
        else expect(cover.test(path.source.replace(/\*/g, "#"))).toBe(false);
      }),
      { numRuns: 2_000, seed: 6 },
    );
  });
});

describe("what matching ignores", () => {
  it.each([
    [{ path: "/api/" }, 'field "path": "/api/" is the same as "/api": matching ignores a trailing slash'],
    [
      { path: "/login;jsessionid=*" },
      'field "path": "/login;jsessionid=*" is the same as "/login": matching ignores ;parameters',
    ],
    [
      { path: "/API/*" },
      'field "path": "/API/*" is the same as "/api/*": matching ignores case (unless case_sensitive = true)',
    ],
    [
      { path: "/Login/;a=b" },
      'field "path": "/Login/;a=b" is the same as "/login": matching ignores ;parameters, a trailing slash and case (unless case_sensitive = true)',
    ],
    [
      { path: "/API/", case_sensitive: true },
      'field "path": "/API/" is the same as "/API": matching ignores a trailing slash',
    ],
    [
      { path: "/api/*", exclude: "/API/Health" },
      'field "exclude": "/API/Health" matches the path as written only, so the rule still counts other spellings such as "/api/health"',
    ],
    [
      { path: "/api/*", exclude: "/api/health/" },
      'field "exclude": "/api/health/" matches the path as written only, so the rule still counts other spellings such as "/api/health"',
    ],
    [
      { path: "/api/*", exclude: "/api/health;v=1", case_sensitive: true },
      'field "exclude": "/api/health;v=1" matches the path as written only, so the rule still counts other spellings such as "/api/health"',
    ],
    [
      { path: "/api/*", exclude: "/api/*" },
      'counts only other spellings of the paths it excludes (path "/api/*" by exclude "/api/*"): exclude matches the path as written only, so "/API/X" is counted',
    ],
    [
      { path: "/api/v1/*", exclude: "/api/*" },
      'counts only other spellings of the paths it excludes (path "/api/v1/*" by exclude "/api/*"): exclude matches the path as written only, so "/API/V1/X" is counted',
    ],
    [
      { path: "/api/*", exclude: "/api/*", case_sensitive: true },
      'counts only other spellings of the paths it excludes (path "/api/*" by exclude "/api/*"): exclude matches the path as written only, so "/api;x/x" is counted',
    ],
    [
      { path: "/login", exclude: ["/x", "/log*"], case_sensitive: true },
      'counts only other spellings of the paths it excludes (path "/login" by exclude "/log*"): exclude matches the path as written only, so "/;x/login" is counted',
    ],
    [
      { path: ["/a/*", "/b/*"], exclude: "/a/*" },
      'field "path": "/a/*" is excluded by exclude "/a/*" as written, so it counts only other spellings, such as "/A/X"',
    ],
  ])("%j: %s", (fields, message) => {
    expect(findings({ RULES: [rule(fields)] })).toContainEqual(warning(`RULES[0] "r": ${message}`));
  });

  it("calls a rule never-matching only when it counts no spelling of any path", () => {
    const glob = fc.stringMatching(/^\/[aAb/;*.]{0,6}$/);
    // Excludes near the path, so that the claim comes up often.
    const exclude = (path: string) =>
      fc.oneof(glob, fc.constantFrom(path, `${path}*`, `/*${path.slice(1)}`, "/*", "/*a*", "/*;*"));
    const paths = fc.array(fc.stringMatching(/^\/[aAbx/;.]{0,8}$/), { minLength: 50, maxLength: 50 });
    fc.assert(
      fc.property(
        glob.chain((path) => fc.tuple(fc.constant(path), exclude(path))),
        fc.boolean(),
        paths,
        ([path, excluded], caseSensitive, requests) => {
          const fields = rule({ path, exclude: excluded, case_sensitive: caseSensitive });
          const claimed = findings({ RULES: [fields] }).some((f) => f.message.includes("never matches: every path"));
          const parsed = parseRules([fields]);
          if (!claimed || !parsed.ok) return;
          for (const request of requests)
            expect(ruleMatches(parsed.value[0]!, "GET", normalizePath(request))).toBe(false);
        },
      ),
      { numRuns: 3_000, seed: 15 },
    );
  });

  it.each([
    { path: "/api/*", exclude: "/api/health" },
    { path: "/api/*", exclude: "/API/Health", case_sensitive: true },
    { path: "/login", methods: ["GET"] },
    { path: "/" },
    { path: "/*" },
    { path: "/api/v1/*", exclude: "/api/*/health" },
  ])("%j is fine", (fields) => {
    expect(findings({ RULES: [rule(fields)] })).toEqual([]);
  });
});

describe("two rules counting the same requests", () => {
  const pair = (a: Record<string, unknown>, b: Record<string, unknown>) =>
    findings({ RULES: [rule({ id: "a", ...a }), rule({ id: "b", ...b })] });

  it("reports the looser one of two limits on the same paths, methods, key and period", () => {
    expect(pair({ limit: 5, key: ["ip", "path"] }, { limit: 50, key: ["path", "ip"] })).toEqual([
      warning(
        'RULES[0] "a" and RULES[1] "b": count the same requests with the same key and period, so RULES[1] "b", the looser, never refuses anything; remove it, or give the two different periods for a burst and a sustained limit',
      ),
    ]);
  });

  it.each([
    ["/login and /Login/", { path: "/login" }, { path: "/Login/" }],
    ["methods [GET] and [GET, HEAD]", { methods: ["GET"] }, { methods: ["HEAD", "GET"] }],
  ])("knows that %s count the same requests", (_, a, b) => {
    expect(pair(a, b).map((f) => f.message)).toContainEqual(
      'RULES[0] "a" and RULES[1] "b": are the same limit on the same requests, key and period; remove one',
    );
  });

  it("reports an exact duplicate", () => {
    expect(pair({}, {})).toEqual([
      warning('RULES[0] "a" and RULES[1] "b": are the same limit on the same requests, key and period; remove one'),
    ]);
  });

  it.each([
    ["a burst and a sustained limit (different periods)", { period: "1s", limit: 5 }, { period: "1h" }],
    ["a shadow rule trying out a new limit", { action: "log", limit: 5 }, {}],
    ["different keys", { key: "ip" }, { key: "header:x-api-key|ip" }],
    ["different methods", { methods: ["POST"] }, { methods: ["GET"] }],
    ["different paths", { path: "/a/*" }, { path: "/b/*" }],
    ["different case sensitivity", { path: "/login" }, { path: "/login", case_sensitive: true }],
  ])("leaves %s alone", (_, a, b) => {
    expect(pair(a, b)).toEqual([]);
  });
});

describe("held requests and concurrency limits", () => {
  const concurrent = (fields: Record<string, unknown>) => ({ id: "c", concurrency: 2, ...fields });

  it("validates the new fields through the Worker's parser, naming the rule and the field", () => {
    expect(
      findings({
        RULES: [
          rule({ max_delay: "2m" }),
          rule({ id: "s", path: "/s", max_held: 5 }),
          concurrent({ limit: 5, period: "1m", place_timeout: "1s" }),
        ],
      }),
    ).toEqual([
      error('RULES[0] "r": field "max_delay": must be more than 0 and at most 60s; got "2m"'),
      error(
        'RULES[1] "s": field "max_held": needs "max_delay": it bounds how many requests are held, and without max_delay none is',
      ),
      error(
        'RULES[2] "c": field "limit": a rule has either "limit" and "period" (requests per period) or "concurrency" (requests in flight at once), not both',
      ),
      error(
        'RULES[2] "c": field "period": a rule has either "limit" and "period" (requests per period) or "concurrency" (requests in flight at once), not both',
      ),
      error('RULES[2] "c": field "place_timeout": must be from 5s to 1h; got "1s"'),
    ]);
  });

  it.each([
    ["a delay within the period", rule({ period: "10s", max_delay: "2s" })],
    ["a delay as long as the period", rule({ period: "1s", limit: 10, max_delay: 1 })],
    ["a concurrency rule", concurrent({})],
    ["a concurrency rule whose requests may wait for a place", concurrent({ max_delay: "30s", max_held: 10 })],
    ["a place timeout shorter than a long request: the Worker renews the place", concurrent({ place_timeout: "5s" })],
    [
      "a shadow concurrency rule: it logs who would be over, and counts like the real one",
      concurrent({ action: "log" }),
    ],
  ])("passes %s with no finding", (_, input) => {
    expect(findings({ RULES: [input] })).toEqual([]);
  });

  it("warns of a delay longer than the period: the rule queues a sustained overload instead of refusing it", () => {
    expect(findings({ RULES: [rule({ limit: 10, period: "1s", max_delay: "5s" })] })).toEqual([
      warning(
        'RULES[0] "r": field "max_delay": "5s" is longer than the period (1s), so a client keeps about 5 periods\' worth of requests held (up to 50 at this limit) with their connections open, and a sustained overload is queued rather than refused; make it at most the period, unless that is meant',
      ),
    ]);
  });

  it.each([
    ["a rate rule", rule({ action: "log", max_delay: "2s" }), '"2s"'],
    ["a concurrency rule", concurrent({ action: "log", max_delay: 10 }), "10"],
  ])("warns of a delay on a shadow rule (%s): it never refuses, so never holds a request", (_, input, written) => {
    const label = input.id === "r" ? 'RULES[0] "r"' : 'RULES[0] "c"';
    expect(findings({ RULES: [input] })).toEqual([
      warning(
        `${label}: field "max_delay": ${written} has no effect on a shadow rule (action = "log"), which never refuses a request and so never holds one`,
      ),
    ]);
  });

  it("does not take a rate rule and a concurrency rule on the same requests for one limit twice", () => {
    expect(findings({ RULES: [rule({ id: "a" }), concurrent({ id: "b", place_timeout: "1m" })] })).toEqual([]);
  });

  it("reports the looser of two concurrency rules on the same requests and key", () => {
    expect(
      findings({ RULES: [concurrent({ id: "a" }), concurrent({ id: "b", concurrency: 5, place_timeout: "5m" })] }),
    ).toEqual([
      warning(
        'RULES[0] "a" and RULES[1] "b": limit the same requests in flight with the same key, so RULES[1] "b", the looser, never refuses anything; remove it',
      ),
    ]);
  });
});

describe("adaptive rules", () => {
  it("passes a rule with a health target, and one without (off unless asked)", () => {
    expect(
      findings({
        RULES: [rule({ adaptive: { latency: "250ms", errors: "2%", floor: 2 } }), rule({ id: "s", path: "/s" })],
      }),
    ).toEqual([]);
  });

  it.each<[string, Record<string, unknown>, string]>([
    ["no latency", { floor: 2 }, 'field "adaptive.latency": is required'],
    ["a latency of 0", { latency: 0 }, 'field "adaptive.latency": must be at least 1ms; got 0'],
    [
      "a percentile of 100",
      { latency: "1s", percentile: 100 },
      'field "adaptive.percentile": must be a number from 50 to 99.9',
    ],
    [
      "errors as a fraction",
      { latency: "1s", errors: 0.05 },
      'field "adaptive.errors": must be a share written with "%"',
    ],
    [
      "a floor above the limit",
      { latency: "1s", floor: 11 },
      'field "adaptive.floor": must be an integer from 1 to the rule\'s limit (10); got 11',
    ],
    ["a misspelt field", { latency: "1s", p99: "1s" }, 'field "adaptive.p99": is not a field of "adaptive"'],
  ])("a bad health target is an error: %s", (_, adaptive, message) => {
    const found = findings({ RULES: [rule({ adaptive })] });
    expect(found).toHaveLength(1);
    expect(found[0]!.level).toBe("error");
    expect(found[0]!.message).toContain(`RULES[0] "r": ${message}`);
  });

  it("reports a floor below the rule's cost as an error, as the Worker does: the limit never goes below one request's cost", () => {
    expect(findings({ RULES: [rule({ cost: 5, adaptive: { latency: "1s", floor: 2 } })] })).toEqual([
      error(
        'RULES[0] "r": field "adaptive.floor": must be at least the rule\'s cost (5): its limit never goes below one request\'s cost; got 2',
      ),
    ]);
  });

  it.each([
    ["a rate rule", rule({ action: "log", adaptive: { latency: "1s", floor: 2 } }), 'RULES[0] "r"'],
    ["a concurrency rule", { id: "c", concurrency: 4, action: "log", adaptive: { latency: "1s" } }, 'RULES[0] "c"'],
  ])(
    "warns of adaptive on a shadow rule (%s): it never reports the origin's health, so its limit never moves",
    (_, input, label) => {
      expect(findings({ RULES: [input] })).toEqual([
        warning(
          `${label}: field "adaptive": has no effect on a shadow rule (action = "log"), which never reports the origin's health, so its limit never moves; enforce the rule, or remove "adaptive"`,
        ),
      ]);
    },
  );

  it("warns of critical requests marked by a header: any client can send it, and take the share kept for critical ones", () => {
    const adaptive = { latency: "1s", critical: ["header:x-priority=critical", "jwt:plan=enterprise"], reserve: "20%" };
    expect(findings({ RULES: [rule({ adaptive })] })).toEqual([
      warning(
        'RULES[0] "r": field "adaptive.critical": "header:x-priority=critical" is a header the client sends: any client can mark its requests critical and take the share kept for them; mark them by a verified claim ("jwt:…"), a tier or a path, or have something you trust in front of the Worker set the header',
      ),
    ]);
  });

  it("takes sheddable requests marked by a header without a warning: a client can only lower its own priority", () => {
    expect(findings({ RULES: [rule({ adaptive: { latency: "1s", sheddable: ["header:x-priority=low"] } })] })).toEqual(
      [],
    );
  });

  it.each([
    [
      "an unknown matcher",
      { critical: ["cookie:vip"] },
      'field "adaptive.critical": item 1: unknown matcher "cookie:vip"',
    ],
    [
      "a reserve without critical requests",
      { reserve: "20%" },
      'field "adaptive.reserve": keeps a share for critical requests',
    ],
  ])("a bad priority is an error naming its field: %s", (_, fields, message) => {
    const found = findings({ RULES: [rule({ adaptive: { latency: "1s", ...fields } })] });
    expect(found).toHaveLength(1);
    expect(found[0]!.level).toBe("error");
    expect(found[0]!.message).toContain(`RULES[0] "r": ${message}`);
  });

  it("warns of a floor at the limit: the limit can never move", () => {
    expect(findings({ RULES: [rule({ adaptive: { latency: "1s", floor: 10 } })] })).toEqual([
      warning(
        'RULES[0] "r": field "adaptive.floor": 10 is the rule\'s limit, so the limit never moves and the rule is not adaptive at all; lower the floor, or remove "adaptive"',
      ),
    ]);
  });

  it("does not take a fixed rule and an adaptive one on the same requests for one limit twice: the adaptive one may fall below", () => {
    expect(
      findings({
        RULES: [rule({ limit: 100 }), rule({ id: "s", limit: 1000, adaptive: { latency: "1s", floor: 10 } })],
      }),
    ).toEqual([]);
  });
});

describe("tiers", () => {
  const tiered = (TIERS: unknown, rules = [rule({})]) => findings({ RULES: rules, TIERS });

  it.each([
    [{ pro: { r: 0 } }, "TIERS.pro.r: must be an integer from 1 to 1000000000; got 0"],
    [{ pro: { r: "20" } }, 'TIERS.pro.r: must be an integer from 1 to 1000000000; got "20"'],
    [{ pro: { r: 2.5 } }, "TIERS.pro.r: must be an integer from 1 to 1000000000; got 2.5"],
    [{ "pro tier": { r: 20 } }, 'TIERS: a tier\'s name must be 1 to 64 of [A-Za-z0-9_-]; got "pro tier"'],
    [{ pro: 20 }, "TIERS.pro: must be a table of rule ids and limits, such as login = 20; got 20"],
    [["pro"], 'TIERS: must be a table of tiers, such as [vars.TIERS.pro] with api-per-key = 10000; got ["pro"]'],
  ])("%j is an error: %s", (tiers, message) => {
    expect(tiered(tiers)).toEqual([error(message)]);
  });

  it("reports a TIERS string that is not JSON as an error", () => {
    const found = tiered("{pro");
    expect(found.map((f) => f.level)).toEqual(["error"]);
    expect(found[0]!.message).toMatch(/^TIERS: is a string but not valid JSON \(/);
  });

  it("reports TIERS' errors beside another variable's, which the Worker reports first", () => {
    expect(tiered({ pro: { r: 0 } }, [rule({ limit: 0 })])).toEqual([
      error('RULES[0] "r": field "limit": must be an integer from 1 to 1000000000; got 0'),
      error("TIERS.pro.r: must be an integer from 1 to 1000000000; got 0"),
    ]);
  });

  it.each([
    [
      "a rule id no rule has",
      { pro: { r: 20, logn: 20 } },
      'TIERS.pro: names "logn", which no rule has; it is ignored (the rules are "r")',
    ],
    [
      "rule ids no rule has",
      { pro: { logn: 20, "api-per-kye": 20 } },
      'TIERS.pro: names "logn" and "api-per-kye", which no rule has; they are ignored (the rules are "r")',
    ],
    [
      "no rule",
      { free: {} },
      "TIERS.free: names no rule, so a client put in this tier keeps every rule's own limit; add rule ids and limits, such as login = 20, or remove it",
    ],
    [
      "a rule's own limit",
      { pro: { r: 10 } },
      'TIERS.pro.r: 10 is already the limit of RULES[0] "r", so the tier changes nothing for it',
    ],
    [
      "a rule's own limit, in JSON",
      JSON.stringify({ pro: { r: 10 } }),
      'TIERS.pro.r: 10 is already the limit of RULES[0] "r", so the tier changes nothing for it',
    ],
  ])("warns of a tier that names %s", (_, tiers, message) => {
    expect(tiered(tiers)).toEqual([warning(message)]);
  });

  it("warns of unknown ids with no rules at all", () => {
    expect(tiered({ pro: { r: 20 } }, [])).toContainEqual(
      warning('TIERS.pro: names "r", which no rule has; it is ignored (there are no rules)'),
    );
  });

  it("lists ten of the rules' ids at most", () => {
    const rules = Array.from({ length: 12 }, (_, i) => rule({ id: `r${i}`, path: `/${i}` }));
    expect(tiered({ pro: { x: 20 } }, rules)).toEqual([
      warning(
        'TIERS.pro: names "x", which no rule has; it is ignored (the rules are "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9" and 2 more)',
      ),
    ]);
  });

  it("warns of the ids the Worker ignores, and of no other", () => {
    const rules = [rule({ id: "a" }), rule({ id: "b", path: "/b" })];
    const tiers = { pro: { a: 20, c: 20 }, team: { b: 30, d: 30, e: 30 } };
    const parsed = parseSettings({ RULES: rules, TIERS: tiers });
    if (!parsed.ok) throw new Error(parsed.errors.join("; "));
    expect(unknownRules(parsed.value.tiers, parsed.value.rules)).toEqual([
      { tier: "pro", rule: "c" },
      { tier: "team", rule: "d" },
      { tier: "team", rule: "e" },
    ]);
    expect(tiered(tiers, rules).map((f) => f.message)).toEqual([
      'TIERS.pro: names "c", which no rule has; it is ignored (the rules are "a" and "b")',
      'TIERS.team: names "d" and "e", which no rule has; they are ignored (the rules are "a" and "b")',
    ]);
  });

  it("leaves a tier naming an invalid rule to that rule's errors", () => {
    expect(tiered({ pro: { r: 20 } }, [rule({ limit: 0 })]).map((f) => f.level)).toEqual(["error"]);
  });

  it.each([
    ["a higher limit", { pro: { r: 20 } }],
    ["a lower limit", { pro: { r: 5 } }],
    ["several tiers", { pro: { r: 20 }, trial: { r: 2 } }],
    ["JSON", JSON.stringify({ pro: { r: 20 } })],
    ["no TIERS", undefined],
    ["an empty TIERS", ""],
  ])("%s is fine", (_, tiers) => {
    expect(tiered(tiers)).toEqual([]);
  });
});

describe("the Durable Object bindings", () => {
  type Binding = { name: string; class_name: string; script_name?: string };
  const LIMITER: Binding = { name: "RATE_LIMITER", class_name: "RateLimiter" };
  const REGISTRY: Binding = { name: "OVERRIDES", class_name: "OverrideRegistry" };
  const BOTH_SQLITE = [
    { tag: "v1", new_sqlite_classes: ["RateLimiter"] },
    { tag: "v2", new_sqlite_classes: ["OverrideRegistry"] },
  ];
  const objects = (bindings: Binding[], migrations: NonNullable<WranglerConfig["migrations"]>) =>
    checkConfig({ vars: { RULES: [rule({})] }, durable_objects: { bindings }, migrations }).findings;
  const NO_OVERRIDES =
    'durable_objects.bindings: no binding named "OVERRIDES" (found: RATE_LIMITER), so there is no overrides API: the admin API\'s /overrides routes answer 501, and no client can be given its own limit or a tier. Add [[durable_objects.bindings]] name = "OVERRIDES", class_name = "OverrideRegistry"';

  it("finds nothing with both bound and created with SQLite storage", () => {
    expect(objects([LIMITER, REGISTRY], BOTH_SQLITE)).toEqual([]);
  });

  it.each([
    ["whose class a migration creates", BOTH_SQLITE, NO_OVERRIDES],
    [
      "whose class no migration creates",
      [{ tag: "v1", new_sqlite_classes: ["RateLimiter"] }],
      `${NO_OVERRIDES}, and [[migrations]] tag = "v2", new_sqlite_classes = ["OverrideRegistry"]`,
    ],
  ])("warns that there is no overrides API without an OVERRIDES binding, %s", (_, migrations, message) => {
    expect(objects([LIMITER], migrations)).toEqual([warning(message)]);
  });

  it.each([
    [
      "binds another class",
      [LIMITER, { name: "OVERRIDES", class_name: "Registry" }],
      BOTH_SQLITE,
      ['durable_objects.bindings: "OVERRIDES" binds class "Registry"; the Worker exports "OverrideRegistry"'],
    ],
    [
      "is created with key-value storage",
      [LIMITER, REGISTRY],
      [
        { tag: "v1", new_sqlite_classes: ["RateLimiter"] },
        { tag: "v2", new_classes: ["OverrideRegistry"] },
      ],
      [
        'migrations: "OverrideRegistry" is created with new_classes (key-value storage); it keeps its index of overrides in SQL and needs new_sqlite_classes = ["OverrideRegistry"]',
      ],
    ],
    [
      "is created by no migration",
      [LIMITER, REGISTRY],
      [{ tag: "v1", new_sqlite_classes: ["RateLimiter"] }],
      [
        'migrations: no migration creates "OverrideRegistry"; add [[migrations]] tag = "v2", new_sqlite_classes = ["OverrideRegistry"]',
      ],
    ],
    [
      "is created by no migration, and v2 is taken",
      [LIMITER, REGISTRY],
      [
        { tag: "v1", new_sqlite_classes: ["RateLimiter"] },
        { tag: "v3", new_sqlite_classes: ["Other"] },
        { tag: "v4", deleted_classes: ["Other"] },
      ],
      [
        'migrations: no migration creates "OverrideRegistry"; add [[migrations]] tag = "v5", new_sqlite_classes = ["OverrideRegistry"]',
      ],
    ],
    [
      "is created by no migration, nor is RateLimiter",
      [LIMITER, REGISTRY],
      [],
      [
        'migrations: no migration creates "RateLimiter"; add [[migrations]] tag = "v1", new_sqlite_classes = ["RateLimiter"]',
        'migrations: no migration creates "OverrideRegistry"; add [[migrations]] tag = "v2", new_sqlite_classes = ["OverrideRegistry"]',
      ],
    ],
    [
      "is created by no migration, RateLimiter living in another Worker",
      [{ ...LIMITER, script_name: "limiter" }, REGISTRY],
      [],
      [
        'migrations: no migration creates "OverrideRegistry"; add [[migrations]] tag = "v1", new_sqlite_classes = ["OverrideRegistry"]',
      ],
    ],
    [
      "lives in another Worker, with its own migrations",
      [LIMITER, { ...REGISTRY, script_name: "registry" }],
      BOTH_SQLITE.slice(0, 1),
      [],
    ],
  ])("is an error when the OVERRIDES binding's class %s", (_, bindings, migrations, errors) => {
    const found = objects(bindings, migrations);
    expect(found.map((f) => f.message)).toEqual(errors);
    expect(found.every((f) => f.level === "error")).toBe(true);
  });
});

describe("other settings", () => {
  it.each([
    [{ IPV6_PREFIX: 64 }, []],
    [{ IPV6_PREFIX: "48" }, []],
    [{ IPV6_PREFIX: 72 }, ["warning"]],
    [{ IPV6_PREFIX: 24 }, ["warning"]],
    [{ LIMITER_TIMEOUT_MS: 5000 }, []],
    [{ LIMITER_TIMEOUT_MS: "10000" }, ["warning"]],
    [{ ADMIN_TOKEN: "" }, []],
    [{ ADMIN_TOKEN: "x".repeat(40) }, ["danger"]],
    [{ ADMIN_PREFIX: "/ops/limits" }, []],
    [{ ADMIN_PREFIX: "/" }, ["error"]],
    [{ ORIGIN_URL: "ftp://origin" }, ["error"]],
    [{ RULES: JSON.stringify([rule({ period: "100ms" })]) }, ["warning"]],
    // parseSettings reports both that the string is not JSON and that it is not a list.
    [{ RULES: "[{" }, ["error"]],
    [{ RULES: [] }, ["warning"]],
  ])("%j: %j", (vars, levels) => {
    expect(findings({ RULES: [rule({})], ...vars }).map((f) => f.level)).toEqual(levels);
  });

  // The overrides registry bound and created as it should be, so that only the counters' class is in question.
  const sqlite = (migrations: NonNullable<WranglerConfig["migrations"]>): WranglerConfig => ({
    vars: { RULES: [rule({})] },
    durable_objects: {
      bindings: [
        { name: "RATE_LIMITER", class_name: "RateLimiter" },
        { name: "OVERRIDES", class_name: "OverrideRegistry" },
      ],
    },
    migrations: [{ new_sqlite_classes: ["OverrideRegistry"] }, ...migrations],
  });

  it.each([
    ["created with new_sqlite_classes", [{ new_sqlite_classes: ["RateLimiter"] }], []],
    [
      "renamed into RateLimiter",
      [{ new_sqlite_classes: ["Limiter"] }, { renamed_classes: [{ from: "Limiter", to: "RateLimiter" }] }],
      [],
    ],
    [
      "deleted again",
      [{ new_sqlite_classes: ["RateLimiter"] }, { deleted_classes: ["RateLimiter"] }],
      [
        'migrations: no migration creates "RateLimiter"; add [[migrations]] tag = "v1", new_sqlite_classes = ["RateLimiter"]',
      ],
    ],
  ])("the Durable Object class, %s", (_, migrations, errors) => {
    expect(checkConfig(sqlite(migrations)).findings.map((f) => f.message)).toEqual(errors);
  });

  it("says OK when there are warnings and no errors (the command then exits 0)", () => {
    const lines = formatReport(checkConfig({ vars: { RULES: [rule({ period: "100ms" })] } }), "w.toml");
    expect(lines.at(-1)).toBe("w.toml: 1 rule, 0 errors, 1 warning - OK");
  });
});

describe("verified tokens: JWT, JWT_JWKS and JWT_JWKS_URL", () => {
  // Made-up key material: no message may ever show it.
  const MATERIAL = /MATERIAL/;
  const EC = { kty: "EC", crv: "P-256", kid: "ec1", x: "X-MATERIAL", y: "Y-MATERIAL" };
  const OKP = { kty: "OKP", crv: "Ed25519", x: "X-MATERIAL" };
  const RSA = { kty: "RSA", kid: "rsa1", n: "N-MATERIAL", e: "AQAB" };
  const OCT = { kty: "oct", kid: "hs1", k: "K-MATERIAL" };
  const JWKS = JSON.stringify({ keys: [EC] });
  const JWKS_URL = "https://auth.example.com/.well-known/jwks.json";
  const byToken = (fields: Record<string, unknown> = {}) => rule({ key: "jwt:sub|ip", ...fields });
  const messages = (found: Finding[]) => found.map((f) => f.message).join("\n");

  describe("errors, from the settings the Worker reads, each naming the variable", () => {
    it.each([
      [
        "an unknown JWT field",
        { JWT_JWKS: JWKS, JWT: { aud: "api" } },
        'JWT: unknown field "aud"; the fields are header, cookie, issuer, audience, clock_skew, algorithms, tier_claim, jwks_ttl',
      ],
      [
        "a JWT_JWKS that is not JSON",
        { JWT_JWKS: '{"keys": [{"kty": "oct", "k": "K-MATERIAL"}' },
        'JWT_JWKS: is not valid JSON; it must be a key set, {"keys": [...]}',
      ],
      [
        "a JWT_JWKS that is not a key set",
        { JWT_JWKS: JSON.stringify([OCT]) },
        'JWT_JWKS: must be a key set, {"keys": [...]}, with 1 to 100 keys',
      ],
      [
        "a key of an unknown type in JWT_JWKS",
        { JWT_JWKS: JSON.stringify({ keys: [EC, { ...OCT, kty: "OCT" }] }) },
        'JWT_JWKS.keys[1] (kid "hs1"): kty must be one of RSA, EC, OKP, oct; got "OCT"',
      ],
      [
        "both JWT_JWKS and JWT_JWKS_URL",
        { JWT_JWKS: JWKS, JWT_JWKS_URL: JWKS_URL },
        "JWT_JWKS and JWT_JWKS_URL: set one, not both",
      ],
      [
        "a JWT_JWKS_URL that is not http",
        { JWT_JWKS_URL: "ftp://auth.example.com/jwks" },
        'JWT_JWKS_URL: must be an http or https URL; got "ftp://auth.example.com/jwks"',
      ],
    ])("%s", (_, vars, message) => {
      const found = findings({ RULES: [byToken()], ...vars });
      expect(found).toEqual([error(message)]);
      expect(messages(found)).not.toMatch(MATERIAL);
    });

    it("a JWT field's error, with the key set in a secret declared in [secrets]", () => {
      const found = checkConfig({
        vars: { RULES: [byToken()], JWT: { algorithms: ["none"] } },
        secrets: { required: ["JWT_JWKS"] },
      }).findings;
      expect(found).toEqual([
        error('JWT.algorithms: must be a non-empty list of RS256, ES256, EdDSA, HS256; got ["none"]'),
      ]);
    });

    it("JWT_JWKS_URL beside a JWT_JWKS declared in [secrets] is both", () => {
      const found = checkConfig({
        vars: { RULES: [byToken()], JWT_JWKS_URL: JWKS_URL },
        secrets: { required: ["JWT_JWKS"] },
      }).findings;
      expect(found).toEqual([error("JWT_JWKS and JWT_JWKS_URL: set one, not both")]);
    });
  });

  describe("a key set in a secret, which the file never holds", () => {
    it("rules keyed on a claim with no key set in [vars] get a warning, not an error: JWT_JWKS is a secret", () => {
      const found = findings({ RULES: [byToken()] });
      expect(found).toEqual([warning(unseenKeys('rule "r" keys on a token\'s claims'))]);
      expect(formatReport({ rules: 1, findings: found }, "w.toml").at(-1)).toBe(
        "w.toml: 1 rule, 0 errors, 1 warning - OK",
      );
    });

    it("names every rule keyed on a claim", () => {
      const rules = [byToken({ id: "a" }), rule({ id: "b", path: "/b" }), byToken({ id: "c", key: "jwt:org.id|ip" })];
      expect(findings({ RULES: rules })).toEqual([warning(unseenKeys('rules "a" and "c" key on a token\'s claims'))]);
    });

    it("a JWT table with no key set in [vars] gets the same warning", () => {
      expect(findings({ RULES: [rule({})], JWT: { audience: "api" } })).toEqual([warning(unseenKeys("JWT is set"))]);
    });

    it("a JWT_JWKS declared in [secrets] is taken as set: wrangler deploy refuses to deploy without it", () => {
      const config = { vars: { RULES: [byToken()], JWT: { audience: "api" } }, secrets: { required: ["JWT_JWKS"] } };
      expect(checkConfig(config).findings).toEqual([]);
    });

    it("a key set in [vars] needs no declaration", () => {
      expect(findings({ RULES: [byToken()], JWT_JWKS: JWKS })).toEqual([]);
      expect(findings({ RULES: [byToken()], JWT_JWKS_URL: JWKS_URL })).toEqual([]);
    });

    it("nothing reading tokens needs no key set", () => {
      expect(findings({ RULES: [rule({ key: ["ip", "country"] })] })).toEqual([]);
    });
  });

  describe("a key with no fallback", () => {
    it.each([
      [["jwt:sub"], "jwt:sub", ""],
      ["jwt:org.id", "jwt:org.id", ""],
      [["jwt:sub", "path"], "jwt:sub", ' (one for each value of "path")'],
    ])("%j: only a claim, so requests without a valid token share one key", (key, label, per) => {
      expect(findings({ RULES: [rule({ key })], JWT_JWKS: JWKS })).toEqual([
        warning(CLAIM_ONLY('RULES[0] "r"', label, per)),
      ]);
    });

    it("several claims, none a fallback, are still only claims", () => {
      expect(findings({ RULES: [rule({ key: "jwt:sub|jwt:client_id" })], JWT_JWKS: JWKS })).toEqual([
        warning(CLAIM_ONLY('RULES[0] "r"', "jwt:sub|jwt:client_id").replace("a token's claim", "a token's claims")),
      ]);
    });

    it.each([
      ["ja4", '"ja4" is', "every request", "", "ja4|ip"],
      [
        "jwt:sub|ja4",
        '"jwt:sub|ja4" falls back to "ja4", which is',
        'every request that lacks "jwt:sub"',
        "",
        "jwt:sub|ja4|ip",
      ],
      [["ja4", "method"], '"ja4" is', "every request", ' (one for each value of "method")', "ja4|ip"],
    ])("%j: ja4 is present only with Bot Management", (key, which, lacking, per, fallback) => {
      expect(findings({ RULES: [rule({ key })], JWT_JWKS: JWKS })).toEqual([
        warning(
          `RULES[0] "r": field "key": ${which} present only with Cloudflare Bot Management (Enterprise); without it, ${lacking} shares one key${per}; add a fallback, such as "${fallback}"`,
        ),
      ]);
    });

    it.each([
      ["jwt:sub|ip"],
      [["jwt:sub", "ip"]],
      ["jwt:sub|header:x-api-key"],
      ["ja4|ip"],
      [["ja4", "ip"]],
      [["asn", "country", "continent"]],
    ])("%j is fine", (key) => {
      expect(findings({ RULES: [rule({ key })], JWT_JWKS: JWKS })).toEqual([]);
    });
  });

  describe("tier_claim", () => {
    const claimed = (TIERS: unknown, rules = [byToken()]) =>
      findings({ RULES: rules, TIERS, JWT_JWKS: JWKS, JWT: { tier_claim: "plan" } });

    it.each([undefined, "", {}])("with TIERS %j, which defines no tier, changes no limit", (tiers) => {
      expect(claimed(tiers)).toEqual([
        warning(
          'JWT.tier_claim: "plan" names each request\'s tier, but TIERS defines no tier, so the claim changes no limit; add tiers, such as [vars.TIERS.pro] with api-per-key = 10000, or remove tier_claim',
        ),
      ]);
    });

    it("with tiers that give no rule a limit changes no limit", () => {
      expect(claimed({ pro: { other: 20 } })).toContainEqual(
        warning(
          'JWT.tier_claim: "plan" names each request\'s tier, but no tier of TIERS gives a rule a limit, so the claim changes no limit; give rules limits in the tiers, such as api-per-key = 10000, or remove tier_claim',
        ),
      );
    });

    it("on a tiered rule keyed on no claim: clients with different plans behind one key share one count", () => {
      const rules = [rule({ key: ["ip", "path"] }), byToken({ id: "t", path: "/t" })];
      expect(claimed({ pro: { r: 20, t: 20 } }, rules)).toEqual([
        warning(UNKEYED_TIERS('RULES[0] "r"', '["ip","path"]')),
      ]);
    });

    it.each([
      ["a tiered rule keyed on a claim", { pro: { r: 20 } }, [byToken()]],
      ["a rule keyed on no claim that no tier names", { pro: { t: 20 } }, [rule({}), byToken({ id: "t", path: "/t" })]],
    ])("%s is fine", (_, tiers, rules) => {
      expect(claimed(tiers, rules)).toEqual([]);
    });

    it("without tier_claim, tiers come from overrides by key, and any key is fine", () => {
      expect(findings({ RULES: [rule({})], TIERS: { pro: { r: 20 } }, JWT_JWKS: JWKS })).toEqual([]);
    });
  });

  describe("JWT_JWKS_URL", () => {
    it("over plain http to another host: whoever is on the way can swap the keys; only the origin is shown", () => {
      const found = findings({ RULES: [byToken()], JWT_JWKS_URL: "http://user:pw@auth.example.com/jwks?t=MATERIAL" });
      expect(found).toEqual([
        warning(
          'JWT_JWKS_URL: "http://auth.example.com" is plain http, so whoever is on the network between Cloudflare and that host can replace the keys and sign tokens with any claims; use https (plain http is for an issuer on localhost, 127.0.0.1 or ::1)',
        ),
      ]);
    });

    it.each(["http://localhost:8788/jwks", "http://127.0.0.1/jwks", "http://[::1]:9000/jwks", JWKS_URL])(
      "%s is fine",
      (url) => {
        expect(findings({ RULES: [byToken()], JWT_JWKS_URL: url })).toEqual([]);
      },
    );

    it("with only HS256 allowed verifies no token: the limiter never uses an oct key from a URL", () => {
      expect(findings({ RULES: [byToken()], JWT_JWKS_URL: JWKS_URL, JWT: { algorithms: ["HS256"] } })).toEqual([
        warning(
          'JWT.algorithms: allows only HS256, but the keys come from JWT_JWKS_URL, and the limiter never uses an "oct" (HS256) key from a URL (a shared secret is never published), so no token is ever verified and every "jwt:" source is missing; put the HS256 key in the secret JWT_JWKS instead, or allow RS256, ES256 or EdDSA',
        ),
      ]);
    });

    it("HS256 beside another algorithm, from a URL, is fine", () => {
      const vars = { RULES: [byToken()], JWT_JWKS_URL: JWKS_URL, JWT: { algorithms: ["HS256", "RS256"] } };
      expect(findings(vars)).toEqual([]);
    });

    it("HS256 only, with the keys in a secret, is fine", () => {
      const vars = { RULES: [byToken()], JWT: { algorithms: ["HS256"] } };
      expect(checkConfig({ vars, secrets: { required: ["JWT_JWKS"] } }).findings).toEqual([]);
    });
  });

  describe("what the keys in JWT_JWKS hold, in [vars] and so in plain text", () => {
    const keyed = (...keys: unknown[]) => findings({ RULES: [byToken()], JWT_JWKS: { keys } });

    it.each([
      [
        "an RSA key",
        { ...RSA, d: "MATERIAL", p: "MATERIAL", q: "MATERIAL", dp: "MATERIAL", dq: "MATERIAL", qi: "MATERIAL" },
        ' (kid "rsa1")',
        '"d", "p", "q", "dp", "dq" and "qi"',
      ],
      ["an EC key", { ...EC, d: "D-MATERIAL" }, ' (kid "ec1")', '"d"'],
      ["an OKP key with no kid", { ...OKP, d: "D-MATERIAL" }, "", '"d"'],
    ])("a private key, %s, is a DANGER: only the public key is needed", (_, key, kid, members) => {
      const found = keyed(EC, key);
      expect(found).toEqual([
        danger(
          `JWT_JWKS.keys[1]${kid}: holds private key material (${members}), in plain text in wrangler.toml and in your repository: verifying tokens needs only the public key, and whoever has this one can sign tokens with any claims. Keep only the public members, and replace the key pair: this one is in your repository's history`,
        ),
      ]);
      expect(messages(found)).not.toMatch(MATERIAL);
    });

    it("an oct (HS256) key is a DANGER: a shared secret in plain text", () => {
      const found = findings({ RULES: [byToken()], JWT_JWKS: JSON.stringify({ keys: [OCT] }) });
      expect(found).toEqual([
        danger(
          'JWT_JWKS.keys[0] (kid "hs1"): is an "oct" (HS256) key, a shared secret, and JWT_JWKS is in [vars], so it is in plain text in wrangler.toml and in your repository: whoever reads it can sign tokens with any claims. Remove JWT_JWKS from [vars], run `wrangler secret put JWT_JWKS` with a new key, and declare it with [secrets] required = ["JWT_JWKS"]',
        ),
      ]);
      expect(messages(found)).not.toMatch(MATERIAL);
    });

    it("public keys are fine", () => {
      expect(keyed(EC, OKP, RSA)).toEqual([]);
    });
  });
});

describe("calendar quotas", () => {
  const quota = (fields: Record<string, unknown>) => ({ id: "q", quota: 1000, per: "month", ...fields });

  it("takes a quota with every field, and finds nothing", () => {
    expect(
      findings({
        RULES: [
          quota({
            timezone: "America/New_York",
            anchor: { day: 31, time: "09:30" },
            cost: 10,
            cost_header: "x-tokens-used",
            count: "successful",
            retry_jitter: "10m",
          }),
          quota({ id: "y", per: "year", anchor: { month: 4, day: 6 }, timezone: "Europe/London" }),
          quota({ id: "w", per: "week", anchor: { day: 7, time: "23:00:30" }, timezone: "Asia/Kathmandu" }),
          quota({ id: "f", per: "day", reset: "first-request", timezone: "Australia/Lord_Howe" }),
        ],
      }),
    ).toEqual([]);
  });

  it.each([
    ["no period", { per: undefined }, 'field "per": is required: "day", "week", "month", "year"'],
    ["a period of 30 days", { per: "30d" }, 'field "per": must be "day", "week", "month", "year"; got "30d"'],
    [
      "a zone the runtime does not know",
      { timezone: "America/Springfield" },
      'field "timezone": "America/Springfield" is not a time zone this runtime knows; use an IANA time zone name such as "America/New_York" or "UTC"',
    ],
    [
      "an offset for a zone",
      { timezone: "-05:00" },
      'field "timezone": must be an IANA time zone name such as "America/New_York" or "UTC", not an offset; got "-05:00"',
    ],
    ["a 32nd day", { anchor: { day: 32 } }, 'field "anchor.day": must be a day of the month from 1 to 31; got 32'],
    [
      "Sunday as 0",
      { per: "week", anchor: { day: 0 } },
      'field "anchor.day": must be a day of the week from 1 (Monday) to 7 (Sunday), as ISO 8601 numbers them (Sunday is 7); got 0',
    ],
    [
      "30 February",
      { per: "year", anchor: { month: 2, day: 30 } },
      'field "anchor.day": February has at most 29 days; got 30',
    ],
    [
      "a time past midnight",
      { anchor: { time: "24:00" } },
      'field "anchor.time": must be a time of day "HH:MM" or "HH:MM:SS", from "00:00" to "23:59:59"; got "24:00"',
    ],
    [
      "an anchor with periods from a first request",
      { reset: "first-request", anchor: { day: 5 } },
      'field "reset": takes no "anchor" when it is "first-request": each client\'s periods start at its first request; remove one of them',
    ],
    ["an unknown reset", { reset: "rolling" }, 'field "reset": must be "calendar" or "first-request"; got "rolling"'],
    [
      "a cost above the quota",
      { quota: 5, cost: 6 },
      'field "cost": must be an integer from 1 to the rule\'s limit (5); got 6',
    ],
    [
      "a jitter of a day",
      { retry_jitter: "1d" },
      'field "retry_jitter": must be from 1s to 1h, or 0 for none; got "1d"',
    ],
    [
      "a window's precision",
      { precision: 10 },
      'field "precision": does not apply to a quota rule, which counts units per calendar period; remove it',
    ],
    [
      "a fixed offset of the Etc/ area, whose sign reads backwards",
      { timezone: "Etc/GMT+5" },
      'field "timezone": "Etc/GMT+5" is not a time zone this runtime knows; use an IANA time zone name such as "America/New_York" or "UTC"',
    ],
    [
      "max_delay",
      { max_delay: "2s" },
      "field \"max_delay\": does not apply to a quota rule: a quota renews only at its period's end, so holding a request (60 s at most) could only help in a period's last minute, and would line every held client up on that second; hold requests with a window rule beside the quota",
    ],
    [
      "adaptive",
      { adaptive: { latency: "250ms", floor: 10 } },
      'field "adaptive": does not apply to a quota rule: a quota is an amount per period, not a rate, and lowered while the origin is slow it would refuse a client for the rest of its period for what it used before; make a window rule beside the quota adaptive',
    ],
  ])("is an error with %s, naming the rule and the field", (_, fields, message) => {
    expect(findings({ RULES: [quota(fields)] })).toEqual([error(`RULES[0] "q": ${message}`)]);
  });

  it("is an error with a limit and a period beside the quota, naming each", () => {
    const both =
      'a rule has either "limit" and "period" (requests per sliding window) or "quota" and "per" (units per calendar period), not both';
    expect(findings({ RULES: [quota({ limit: 5, period: "1m" })] })).toEqual([
      error(`RULES[0] "q": field "limit": ${both}`),
      error(`RULES[0] "q": field "period": ${both}`),
    ]);
  });

  it("knows a quota's own field on a window rule", () => {
    expect(findings({ RULES: [rule({ timezone: "UTC" })] })).toEqual([
      error('RULES[0] "r": field "timezone": only a quota rule (with "quota" and "per") has it; remove it'),
    ]);
  });

  it("warns of a quota whose cost does not divide it: what is left below the cost is never spent", () => {
    expect(findings({ RULES: [quota({ quota: 1000, cost: 300 })] })).toEqual([
      warning(
        'RULES[0] "q": field "cost": 300 does not divide the quota (1000), so the last 100 units of every period are below the cost and can never be spent; make the quota a multiple of the cost (900 or 1200)',
      ),
    ]);
  });

  it("warns of a tier that gives a quota less than its cost: an error, as for a window", () => {
    expect(findings({ RULES: [quota({ cost: 10 })], TIERS: { free: { q: 5 } } }).map((f) => f.message)).toEqual([
      'TIERS.free.q: 5 is below the cost of RULES[0] "q" (field "cost": 10), so no request of a client in tier "free" could ever be admitted; make it at least 10',
    ]);
  });

  it("warns of a cost_header and a jitter on a shadow quota", () => {
    expect(
      findings({ RULES: [quota({ action: "log", cost_header: "x-tokens-used", retry_jitter: "5m" })] }).map(
        (f) => f.message,
      ),
    ).toEqual([
      'RULES[0] "q": field "cost_header": "x-tokens-used" on a shadow rule (action = "log") charges counts that never refuse anything; drop it, or enforce the rule',
      'RULES[0] "q": field "retry_jitter": "5m" has no effect on a shadow rule (action = "log"), which never refuses a request',
    ]);
  });

  it("reports the looser of two quotas in the same calendar on the same requests and key", () => {
    const rules = (b: Record<string, unknown>) => findings({ RULES: [quota({ id: "a" }), quota({ id: "b", ...b })] });
    expect(rules({ quota: 2000 })).toEqual([
      warning(
        'RULES[0] "a" and RULES[1] "b": count the same requests with the same key in the same calendar periods, so RULES[1] "b", the looser, never refuses anything; remove it',
      ),
    ]);
    expect(rules({ timezone: "America/New_York" })).toEqual([]);
    expect(rules({ per: "day" })).toEqual([]);
  });

  it.each([
    ["UTC", "Etc/UTC"],
    ["Europe/Kyiv", "Europe/Kiev"],
    ["America/New_York", "US/Eastern"],
  ])("takes %s and %s for one calendar: two quotas in them are reported as in one", (a, b) => {
    const pair = findings({
      RULES: [quota({ id: "a", timezone: a }), quota({ id: "b", timezone: b, quota: 2000 })],
    });
    expect(pair).toEqual([
      warning(
        'RULES[0] "a" and RULES[1] "b": count the same requests with the same key in the same calendar periods, so RULES[1] "b", the looser, never refuses anything; remove it',
      ),
    ]);
  });

  it("leaves a quota beside a window alone", () => {
    expect(findings({ RULES: [quota({}), rule({ limit: 1000, period: "30d" })] })).toEqual([]);
  });
});
