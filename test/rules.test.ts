import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import { parseSettings } from "../src/config/settings.ts";
import { parseDurationMs } from "../src/core/duration.ts";
import { compileGlob, matchingPath, normalizePath, pathnameOf, requestPath } from "../src/core/paths.ts";
import { parseRules, type RuleInput, ruleMatches } from "../src/core/rules.ts";

const base = { id: "api", limit: 10, period: "1m" };

describe("a valid rule", () => {
  it("gets the documented defaults", () => {
    const parsed = parseRules([base]);
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    const [rule] = parsed.value;
    expect(rule).toMatchObject({
      id: "api",
      limit: 10,
      periodMs: 60_000,
      precision: 1,
      strict: false,
      methods: null,
      action: "block",
      onError: "open",
      caseSensitive: false,
      key: [[{ kind: "ip" }]],
      blockForMs: 0,
    });
    expect(rule!.paths.map((g) => g.source)).toEqual(["/*"]);
  });

  it("reads every field", () => {
    const parsed = parseRules([
      {
        id: "login-2",
        path: ["/login", "/signin"],
        methods: ["post"],
        exclude: "/login/health",
        limit: 5,
        period: 90,
        key: ["header:X-Api-Key|cookie:sid|ip", "method"],
        action: "log",
        on_error: "closed",
        precision: 6,
        strict: true,
        case_sensitive: true,
        block_for: "15m",
      },
    ]);
    expect(parsed.ok && parsed.value[0]).toMatchObject({
      periodMs: 90_000,
      blockForMs: 900_000,
      methods: new Set(["POST"]),
      action: "log",
      onError: "closed",
      precision: 6,
      strict: true,
      caseSensitive: true,
      key: [
        [{ kind: "header", name: "x-api-key" }, { kind: "cookie", name: "sid" }, { kind: "ip" }],
        [{ kind: "method" }],
      ],
    });
  });

  it.each([
    [undefined, 0],
    [0, 0],
    ["0s", 0],
    [1, 1_000],
    [900, 900_000],
    ["15m", 900_000],
    ["365d", 365 * 86_400_000],
  ])("reads block_for %o as a penalty of %i ms (0: none)", (blockFor, ms) => {
    const parsed = parseRules([{ ...base, ...(blockFor === undefined ? {} : { block_for: blockFor }) }]);
    expect(parsed.ok && parsed.value[0]!.kind === "window" && parsed.value[0]!.blockForMs).toBe(ms);
  });

  it("can come as a JSON string (a secret or .dev.vars)", () => {
    const parsed = parseSettings({ RULES: JSON.stringify([base]) });
    expect(parsed.ok && parsed.value.rules.map((r) => r.id)).toEqual(["api"]);
  });
});

describe("an invalid rule is a clear error naming the rule and the field", () => {
  const cases: [string, unknown, string][] = [
    [
      "a missing id",
      { limit: 1, period: 1 },
      'RULES[0]: field "id": must be 1–64 characters of [a-z0-9_-]; got undefined',
    ],
    [
      "an id with capitals",
      { ...base, id: "Api" },
      'RULES[0] "Api": field "id": must be 1–64 characters of [a-z0-9_-]; got "Api"',
    ],
    [
      "a zero limit",
      { ...base, limit: 0 },
      'RULES[0] "api": field "limit": must be an integer from 1 to 1000000000; got 0',
    ],
    [
      "a fractional limit",
      { ...base, limit: 2.5 },
      'RULES[0] "api": field "limit": must be an integer from 1 to 1000000000; got 2.5',
    ],
    [
      "a limit as a string",
      { ...base, limit: "100" },
      'RULES[0] "api": field "limit": must be an integer from 1 to 1000000000; got "100"',
    ],
    [
      "a missing period",
      { id: "api", limit: 1 },
      'RULES[0] "api": field "period": is required: seconds, or a string like "10s", "1m", "1h", "1d"',
    ],
    [
      "a period with an unknown unit",
      { ...base, period: "1w" },
      'RULES[0] "api": field "period": must be seconds as a number or a string like "10s", "1m", "1h", "1d"; got "1w"',
    ],
    ["a zero period", { ...base, period: 0 }, 'RULES[0] "api": field "period": must be at least 1ms; got 0'],
    [
      "a period over a year",
      { ...base, period: "366d" },
      'RULES[0] "api": field "period": must be at most 365d; got "366d"',
    ],
    [
      "a path without a leading slash",
      { ...base, path: "api/*" },
      'RULES[0] "api": field "path": "api/*" is not a path glob starting with "/"',
    ],
    ["an empty path list", { ...base, path: [] }, 'RULES[0] "api": field "path": must name at least one path glob'],
    [
      "an exclude that is a number",
      { ...base, exclude: 5 },
      'RULES[0] "api": field "exclude": must be a path glob or a list of them, such as "/api/*"; got 5',
    ],
    [
      "an empty methods list",
      { ...base, methods: [] },
      'RULES[0] "api": field "methods": must be a non-empty list of HTTP methods such as ["GET", "POST"]; got []',
    ],
    [
      "a method with a space",
      { ...base, methods: ["GE T"] },
      'RULES[0] "api": field "methods": "GE T" is not an HTTP method',
    ],
    [
      "an unknown key characteristic",
      { ...base, key: ["user"] },
      'RULES[0] "api": field "key": "user": unknown characteristic "user"; use ip, path, method, host, asn, country, continent, ja4, header:<name>, cookie:<name>, query:<name> or jwt:<claim>',
    ],
    [
      "a header without a name",
      { ...base, key: ["header:"] },
      'RULES[0] "api": field "key": "header:": header: needs a name, as in "header:x-api-key"',
    ],
    [
      "a bad fallback",
      { ...base, key: ["header:x-api-key|"] },
      'RULES[0] "api": field "key": "header:x-api-key|": unknown characteristic ""; use ip, path, method, host, asn, country, continent, ja4, header:<name>, cookie:<name>, query:<name> or jwt:<claim>',
    ],
    [
      "an empty key",
      { ...base, key: [] },
      'RULES[0] "api": field "key": must be a non-empty list of characteristics such as ["ip"]; got []',
    ],
    [
      "an unknown action",
      { ...base, action: "deny" },
      'RULES[0] "api": field "action": must be "block" or "log"; got "deny"',
    ],
    [
      "an unknown on_error",
      { ...base, on_error: "fail" },
      'RULES[0] "api": field "on_error": must be "open" or "closed"; got "fail"',
    ],
    [
      "a precision of 0",
      { ...base, precision: 0 },
      'RULES[0] "api": field "precision": must be an integer from 1 to 60; got 0',
    ],
    [
      "strict as a string",
      { ...base, strict: "yes" },
      'RULES[0] "api": field "strict": must be true or false; got "yes"',
    ],
    [
      "case_sensitive as a string",
      { ...base, case_sensitive: "yes" },
      'RULES[0] "api": field "case_sensitive": must be true or false; got "yes"',
    ],
    [
      "a misspelt field",
      { ...base, limt: 5 },
      'RULES[0] "api": field "limt": is not a rule field; known fields are id, path, methods, exclude, case_sensitive, key, action, on_error, ips, exclude_ips, max_delay, max_held, adaptive, limit, period, precision, strict, count, cost, cost_header, keep_cost_header, block_for, concurrency, place_timeout, burst, quota, per, timezone, anchor, reset, retry_jitter',
    ],
    [
      "a block_for under a second",
      { ...base, block_for: "500ms" },
      'RULES[0] "api": field "block_for": must be at least 1s, or 0 for no penalty; got "500ms"',
    ],
    [
      "a block_for over a year",
      { ...base, block_for: "366d" },
      'RULES[0] "api": field "block_for": must be at most 365d; got "366d"',
    ],
    [
      "a block_for with an unknown unit",
      { ...base, block_for: "1w" },
      'RULES[0] "api": field "block_for": must be seconds as a number or a string like "10s", "1m", "1h", "1d"; got "1w"',
    ],
    [
      "a negative block_for",
      { ...base, block_for: -60 },
      'RULES[0] "api": field "block_for": must be at least 1s, or 0 for no penalty; got -60',
    ],
    ["a rule that is not a table", "api", 'RULES[0]: must be a table of fields; got "api"'],
  ];

  it.each(cases)("%s", (_, rule, message) => {
    const parsed = parseRules([rule]);
    expect(parsed.ok).toBe(false);
    expect(!parsed.ok && parsed.errors).toEqual([message]);
  });

  it("reports a duplicate id, naming both positions", () => {
    const parsed = parseRules([base, { ...base, limit: 5 }]);
    expect(!parsed.ok && parsed.errors).toEqual([
      'RULES[1] "api": field "id": duplicates RULES[0]; ids must be unique',
    ]);
  });

  it("reports every problem at once", () => {
    const parsed = parseRules([
      { ...base, limit: -1, action: "x" },
      { id: "ok", limit: 1 },
    ]);
    expect(!parsed.ok && parsed.errors).toHaveLength(3);
  });

  it("reports RULES that is not a list", () => {
    const parsed = parseRules({ id: "api" });
    expect(!parsed.ok && parsed.errors).toEqual(['RULES: must be a list of rules ([[vars.RULES]]); got {"id":"api"}']);
  });

  it("reports RULES that is a string but not JSON", () => {
    const parsed = parseSettings({ RULES: "[{" });
    expect(parsed.ok).toBe(false);
    expect(!parsed.ok && parsed.errors).toHaveLength(1);
    expect(!parsed.ok && parsed.errors[0]).toMatch(/^RULES: is a string but not valid JSON/);
  });

  it.each([
    [{ IPV6_PREFIX: "200" }, 'IPV6_PREFIX: must be an integer from 1 to 128; got "200"'],
    [{ LIMITER_TIMEOUT_MS: "fast" }, 'LIMITER_TIMEOUT_MS: must be an integer from 1 to 60000; got "fast"'],
    [{ TRUSTED_IP_HEADER: "x forwarded" }, 'TRUSTED_IP_HEADER: must be a header name; got "x forwarded"'],
  ])("reports a bad variable: %o", (vars, message) => {
    const parsed = parseSettings({ RULES: [base], ...vars });
    expect(!parsed.ok && parsed.errors).toEqual([message]);
  });
});

describe("held requests (max_delay, max_held) and concurrency limits (concurrency, place_timeout)", () => {
  const parsedRule = (input: Record<string, unknown>) => {
    const parsed = parseRules([input]);
    if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
    return parsed.value[0]!;
  };
  const errorsOf = (input: Record<string, unknown>) => {
    const parsed = parseRules([input]);
    return parsed.ok ? [] : parsed.errors;
  };
  const concurrent = { id: "ai", concurrency: 2 };

  it.each([
    ["2s", 2_000],
    [0.5, 500],
    ["60s", 60_000],
    ["1m", 60_000],
    ["1ms", 1],
  ])("holds a request for at most max_delay = %o (%i ms), up to 1000 held by default", (maxDelay, ms) => {
    expect(parsedRule({ ...base, max_delay: maxDelay })).toMatchObject({ maxDelayMs: ms, maxHeld: 1_000 });
  });

  it("holds none without max_delay: a rule without it has neither field", () => {
    const rule = parsedRule(base);
    expect("maxDelayMs" in rule || "maxHeld" in rule || "concurrency" in rule || "placeTimeoutMs" in rule).toBe(false);
  });

  it("reads max_held", () => {
    expect(parsedRule({ ...base, max_delay: "2s", max_held: 50 })).toMatchObject({ maxDelayMs: 2_000, maxHeld: 50 });
  });

  it("reads a concurrency rule: its places as its limit (tiers and overrides give other numbers), its place timeout", () => {
    const rule = parsedRule(concurrent);
    expect(rule).toMatchObject({ kind: "concurrency", limit: 2, placeTimeoutMs: 60_000 });
    // None of a rate's fields: a concurrency rule is a kind of its own, not a window with its places as a limit.
    for (const field of ["periodMs", "precision", "strict", "count", "blockForMs", "concurrency"]) {
      expect(rule).not.toHaveProperty(field);
    }
    expect(parsedRule({ ...concurrent, place_timeout: "30s", max_delay: "10s", max_held: 20 })).toMatchObject({
      kind: "concurrency",
      limit: 2,
      placeTimeoutMs: 30_000,
      maxDelayMs: 10_000,
      maxHeld: 20,
    });
  });

  const cases: [string, Record<string, unknown>, string[]][] = [
    [
      "a max_delay of 0",
      { ...base, max_delay: 0 },
      ['RULES[0] "api": field "max_delay": must be more than 0 and at most 60s; got 0'],
    ],
    [
      "a max_delay over a minute",
      { ...base, max_delay: "61s" },
      ['RULES[0] "api": field "max_delay": must be more than 0 and at most 60s; got "61s"'],
    ],
    [
      "a max_delay with an unknown unit",
      { ...base, max_delay: "2w" },
      [
        'RULES[0] "api": field "max_delay": must be seconds as a number or a string like "10s", "1m", "1h", "1d"; got "2w"',
      ],
    ],
    [
      "a max_held of 0",
      { ...base, max_delay: "1s", max_held: 0 },
      ['RULES[0] "api": field "max_held": must be an integer from 1 to 10000; got 0'],
    ],
    [
      "a max_held over 10000",
      { ...base, max_delay: "1s", max_held: 10_001 },
      ['RULES[0] "api": field "max_held": must be an integer from 1 to 10000; got 10001'],
    ],
    [
      "a max_held without max_delay",
      { ...base, max_held: 10 },
      [
        'RULES[0] "api": field "max_held": needs "max_delay": it bounds how many requests are held, and without max_delay none is',
      ],
    ],
    [
      "a concurrency of 0",
      { ...concurrent, concurrency: 0 },
      ['RULES[0] "ai": field "concurrency": must be an integer from 1 to 10000; got 0'],
    ],
    [
      "a concurrency as a string",
      { ...concurrent, concurrency: "2" },
      ['RULES[0] "ai": field "concurrency": must be an integer from 1 to 10000; got "2"'],
    ],
    [
      "a concurrency rule with a limit and a period",
      { ...concurrent, limit: 10, period: "1m" },
      [
        'RULES[0] "ai": field "limit": a rule has either "limit" and "period" (requests per period) or "concurrency" (requests in flight at once), not both',
        'RULES[0] "ai": field "period": a rule has either "limit" and "period" (requests per period) or "concurrency" (requests in flight at once), not both',
      ],
    ],
    ...(["precision", "strict", "cost", "cost_header", "count", "block_for"] as const).map(
      (field): [string, Record<string, unknown>, string[]] => [
        `a concurrency rule with ${field}`,
        {
          ...concurrent,
          [field]: { precision: 10, strict: true, cost: 1, cost_header: "x-cost", count: "failed", block_for: "1m" }[
            field
          ],
        },
        [
          `RULES[0] "ai": field "${field}": does not apply to a concurrency rule, which counts requests in flight, each holding one place until it ends; remove it`,
        ],
      ],
    ),
    [
      "a place_timeout under 5 s",
      { ...concurrent, place_timeout: "4s" },
      ['RULES[0] "ai": field "place_timeout": must be from 5s to 1h; got "4s"'],
    ],
    [
      "a place_timeout over an hour",
      { ...concurrent, place_timeout: "61m" },
      ['RULES[0] "ai": field "place_timeout": must be from 5s to 1h; got "61m"'],
    ],
    [
      "a place_timeout on a rate rule",
      { ...base, place_timeout: "30s" },
      [
        'RULES[0] "api": field "place_timeout": only a concurrency rule has places; add "concurrency" (and remove "limit" and "period"), or remove it',
      ],
    ],
  ];

  it.each(cases)("is a clear error: %s", (_, input, messages) => {
    expect(errorsOf(input)).toEqual(messages);
  });
});

describe("periods", () => {
  it.each([
    [60, 60_000],
    [0.5, 500],
    [1.1, 1_100],
    ["500ms", 500],
    ["10s", 10_000],
    ["1m", 60_000],
    ["1.5h", 5_400_000],
    ["1d", 86_400_000],
  ])("%o is %i ms", (period, ms) => {
    expect(parseDurationMs(period)).toEqual({ ok: true, value: ms });
  });
});

const rule = (input: Partial<RuleInput>) => {
  const parsed = parseRules([{ ...base, ...input }]);
  if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
  return parsed.value[0]!;
};

describe("matching", () => {
  it.each([
    ["/api/*", "/api/users/7", true],
    ["/api/*", "/api/", true],
    ["/api/*", "/api", false],
    ["/api/*", "/apix", false],
    ["/login", "/login", true],
    ["/login", "/login/", false],
    ["/*.json", "/a/b.json", true],
    ["/v(1)/*", "/v(1)/x", true],
  ])("glob %s on %s as written: %s", (glob, path, expected) => {
    expect(compileGlob(glob).test(path)).toBe(expected);
  });

  it("applies methods and exclusions", () => {
    const r = rule({ path: "/api/*", methods: ["POST"], exclude: ["/api/health"] });
    expect(ruleMatches(r, "POST", "/api/x")).toBe(true);
    expect(ruleMatches(r, "GET", "/api/x")).toBe(false);
    expect(ruleMatches(r, "POST", "/api/health")).toBe(false);
  });

  it.each([
    ["/%61pi/x", "/api/x"],
    ["//api///x", "/api/x"],
    ["/%7Euser", "/~user"],
  ])("matches %s as %s, so spelling a path differently escapes nothing", (raw, normalized) => {
    expect(normalizePath(raw)).toBe(normalized);
    // The spelling is counted by a rule written for the path it spells, not only normalised to it.
    expect(ruleMatches(rule({ path: normalized }), "GET", requestPath(raw))).toBe(true);
  });

  it.each([
    ["/café/*", "https://x.test/café/menu", "/caf%C3%A9/*"],
    ["/my docs/*", "https://x.test/my docs/a", "/my%20docs/*"],
    ["/a{b}", "https://x.test/a{b}", "/a%7Bb%7D"],
    ["/uniçode", "https://x.test/uni%C3%A7ode", "/uni%C3%A7ode"],
  ])(
    "counts %s by the path a request for it arrives with, percent-encoded as the URL standard writes it",
    (glob, url, encoded) => {
      const written = rule({ path: glob });
      expect(written.paths[0]!.source).toBe(encoded);
      // The path a request for it arrives with: what the runtime's URL parser makes of it.
      const arrives = new URL(url).pathname;
      expect(ruleMatches(written, "GET", requestPath(arrives)), arrives).toBe(true);
      expect(ruleMatches(rule({ path: glob, case_sensitive: true }), "GET", requestPath(arrives)), arrives).toBe(true);
      // A glob written encoded is the same rule.
      expect(rule({ path: encoded }).paths[0]!.source).toBe(encoded);
    },
  );

  it("keeps %2F encoded in the path as written, but a rule for /api/* counts /api%2Fx: an origin may route it there", () => {
    // An encoded slash is data, not a separator (RFC 3986 §2.2), so `exclude` and the request forwarded keep it;
    // but nginx decodes it before routing, and would serve /api%2Fx as /api/x: a rule counts it as that path.
    expect(normalizePath("/api%2Fx")).toBe("/api%2Fx");
    for (const spelling of ["/api%2Fx", "/api%2fx", "/%2Fapi/x", "/%2fapi%2F%2Fx"]) {
      expect(ruleMatches(rule({ path: "/api/*" }), "GET", requestPath(spelling)), spelling).toBe(true);
    }
    expect(ruleMatches(rule({ path: "/login" }), "POST", requestPath("/login%2F"))).toBe(true);
    expect(ruleMatches(rule({ path: "/login" }), "POST", requestPath("/x%2F..%2Flogin"))).toBe(true);
  });
});

describe("spelling a request differently counts it all the same", () => {
  it.each([
    ["/login", "/login"],
    ["/login/", "/login"],
    ["/login;jsessionid=x", "/login"],
    ["/LOGIN", "/login"],
    ["/Login/;a=b", "/login"],
    ["/a;x=1/b;y", "/a/b"],
    ["/;x/login", "/login"],
    ["/x/..;/login", "/login"],
    ["/x/.;y/login", "/x/login"],
    ["/..;/..;/login", "/login"],
    ["/api/", "/api"],
    ["/", "/"],
    ["/;x", "/"],
    ["/a%2Fb", "/a/b"],
    ["/a%2f%2Fb%2F", "/a/b"],
    ["/x%2F..%2Flogin", "/login"],
  ])("a rule counts %s as %s", (written, matching) => {
    expect(matchingPath(written, false)).toBe(matching);
  });

  it("a case-sensitive rule keeps the case: /Login/;a=b is /Login", () => {
    expect(matchingPath("/Login/;a=b", true)).toBe("/Login");
  });

  const login = rule({ id: "login", path: "/login", methods: ["POST"] });
  it.each([
    ["POST /login", true],
    ["POST /login/", true],
    ["POST /login;jsessionid=x", true],
    ["POST /LOGIN", true],
    ["POST /Login/;a=b", true],
    ["POST /;x/login", true],
    ["POST /admin/..;/login", true],
    ["POST /login/x", false],
    ["POST /logins", false],
    ["GET /login", false],
    ["HEAD /login", false],
  ])("the login rule (POST /login) counts %s: %s", (request, counted) => {
    const [method, path] = request.split(" ") as [string, string];
    expect(ruleMatches(login, method, path)).toBe(counted);
  });

  const exact = rule({ id: "exact", path: "/login", methods: ["POST"], case_sensitive: true });
  it.each([
    ["/login", true],
    ["/login/", true],
    ["/login;jsessionid=x", true],
    ["/LOGIN", false],
    ["/Login/;a=b", false],
  ])("a case_sensitive rule for /login counts POST %s: %s", (path, counted) => {
    expect(ruleMatches(exact, "POST", path)).toBe(counted);
  });

  it.each([
    [["GET"], "HEAD", true],
    [["get"], "HEAD", true],
    [["GET"], "GET", true],
    [["HEAD"], "GET", false],
    [["POST"], "HEAD", false],
    [["GET"], "POST", false],
  ])("a rule for methods %j counts %s: %s", (methods, method, counted) => {
    expect(ruleMatches(rule({ methods }), method, "/x")).toBe(counted);
  });

  const api = rule({ id: "api", path: "/api/*", exclude: "/api/health" });
  it.each([
    ["/api/health", false],
    ["/API/HEALTH", true],
    ["/api/health/", true],
    ["/api/health;x", true],
    ["/Api/Health", true],
    ["/api/healthz", true],
  ])("exclude /api/health exempts only the path as written: /api/* counts %s: %s", (path, counted) => {
    expect(ruleMatches(api, "GET", path)).toBe(counted);
  });

  it.each([
    ["/api/*", "/api/", true],
    ["/api/*", "/api", true],
    ["/api/*", "/API;v=1", true],
    ["/api/*", "/apix", false],
    ["/api/*/", "/api/x", true],
    ["/Login/", "/login", true],
    ["/Login/", "/LOGIN/", true],
    ["/a;x=1/b", "/a/b", true],
    ["/a;x=1/b", "/a;y/B", true],
    ["/*.json", "/x;y.json", true],
    ["/*.json", "/x.json;y", true],
    ["/*.json", "/x.JSON/", true],
  ])("glob %s counts %s: %s", (path, written, counted) => {
    expect(ruleMatches(rule({ path }), "GET", written)).toBe(counted);
  });

  it("never counts less than the glob matches as written, and never exempts more than exclude matches as written and as matched", () => {
    const glob = fc.stringMatching(/^\/[aA/;*]{0,7}$/);
    const path = fc.stringMatching(/^\/[aAb/;]{0,10}$/);
    fc.assert(
      fc.property(glob, glob, path, fc.boolean(), (p, e, raw, caseSensitive) => {
        const written = normalizePath(raw);
        const counted = ruleMatches(rule({ path: p, exclude: e, case_sensitive: caseSensitive }), "GET", written);
        const excluded = ruleMatches(
          rule({ path: e, case_sensitive: caseSensitive }),
          "GET",
          matchingPath(written, caseSensitive),
        );
        if (compileGlob(p).test(written) && !counted) {
          // Exempt: the exclude matches the path as written, and the path as matched too.
          expect(compileGlob(e).test(written)).toBe(true);
          expect(excluded).toBe(true);
        }
      }),
      { numRuns: 5_000, seed: 13 },
    );
  });

  it("counts every spelling of a path it counts", () => {
    const glob = fc.stringMatching(/^\/[aA/;*]{0,7}$/);
    const path = fc.stringMatching(/^\/[aAb/;]{0,10}$/);
    fc.assert(
      fc.property(glob, path, fc.boolean(), (p, raw, caseSensitive) => {
        const written = normalizePath(raw);
        const r = rule({ path: p, case_sensitive: caseSensitive });
        if (ruleMatches(r, "GET", matchingPath(written, caseSensitive)))
          expect(ruleMatches(r, "GET", written)).toBe(true);
      }),
      { numRuns: 5_000, seed: 14 },
    );
  });
});

describe("the path of a request URL", () => {
  it.each([
    "http://h/api/x?y=1",
    "https://h:8443/",
    "http://h",
    "http://h/a%2Fb//c?q=/x#frag",
    "http://h/a#f?g",
    "http://user:pw@h/p?x",
  ])("is what new URL(%s).pathname gives", (raw) => {
    const serialised = new URL(raw).href;
    expect(pathnameOf(serialised)).toBe(new URL(serialised).pathname);
  });
});

/** The obvious matcher, by recursion on the glob: what a compiled glob must agree with on small inputs. */
function referenceMatch(glob: string, path: string): boolean {
  if (glob === "") return path === "";
  if (glob[0] === "*") {
    for (let i = 0; i <= path.length; i++) if (referenceMatch(glob.slice(1), path.slice(i))) return true;
    return false;
  }
  return path[0] === glob[0] && referenceMatch(glob.slice(1), path.slice(1));
}

/** The literal parts between a glob's first and last: the ones a matcher has to search for. */
const middleParts = (glob: string): string[] => glob.split("*").slice(1, -1);

describe("a path glob takes time linear in the path", () => {
  it("agrees with the obvious matcher on small globs and paths", () => {
    const glob = fc.stringMatching(/^[ab/*]{0,8}$/);
    const text = fc.stringMatching(/^[ab/*]{0,10}$/);
    const fills = fc.array(fc.stringMatching(/^[ab/*]{0,3}$/), { minLength: 8, maxLength: 8 });
    fc.assert(
      fc.property(glob, text, fills, fc.boolean(), (g, random, fill, instance) => {
        // Half the paths are the glob with its stars filled in, so that matches are common too.
        let i = 0;
        const path = instance ? g.replace(/\*/g, () => fill[i++]!) : random;
        expect(compileGlob(g).test(path)).toBe(referenceMatch(g, path));
      }),
      { numRuns: 5_000, seed: 11 },
    );
  });

  const KB = 1024;
  const noB = "/a".repeat(8 * KB);
  const endsInB = `${"/a".repeat(8 * KB - 1)}/b`;
  const adversarial = [1, 2, 3, 4, 5, 6, 7, 8].flatMap((stars) => [
    { stars, glob: `${"/a*".repeat(stars)}/b`, path: noB, name: '16 KB of "/a" with no "/b"', matches: false },
    { stars, glob: `${"/a*".repeat(stars)}/b`, path: endsInB, name: '16 KB of "/a" ending in "/b"', matches: true },
    { stars, glob: `/${"*a/a/b".repeat(stars)}`, path: noB, name: '16 KB of "/a" with no "/b"', matches: false },
    {
      stars,
      glob: `/${"*a/a/b".repeat(stars)}`,
      path: `${noB}${"/a/a/b".repeat(stars)}`,
      name: '16 KB of "/a" then the parts',
      matches: true,
    },
  ]);

  it.each(adversarial)("$glob ($stars stars) on $name: $matches", ({ glob, path, matches }) => {
    expect(compileGlob(glob).test(path)).toBe(matches);
  });

  it("searches for each literal part at most once, and runs no regular expression, whatever the path", () => {
    const glob = fc.oneof(
      fc.stringMatching(/^\/[ab/*]{0,12}$/),
      fc.integer({ min: 1, max: 8 }).map((stars) => `${"/a*".repeat(stars)}/b`),
    );
    const path = fc.oneof(
      fc.stringMatching(/^\/[ab/]{0,64}$/),
      fc.integer({ min: 0, max: 2_000 }).map((n) => "/a".repeat(n)),
    );
    // A regular expression run on the path throws at once, rather than leave a backtracking one to run for hours.
    let matching = false;
    const refuse = <A extends unknown[], R>(original: (this: RegExp, ...args: A) => R) =>
      function (this: RegExp, ...args: A): R {
        if (matching) throw new Error(`a regular expression ran on the path: ${this}`);
        return original.apply(this, args);
      };
    const { test, exec } = RegExp.prototype;
    const regexTest = vi.spyOn(RegExp.prototype, "test").mockImplementation(refuse(test));
    const regexExec = vi.spyOn(RegExp.prototype, "exec").mockImplementation(refuse(exec));
    const indexOf = vi.spyOn(String.prototype, "indexOf");
    try {
      fc.assert(
        fc.property(glob, path, (g, p) => {
          const compiled = compileGlob(g);
          const searches = indexOf.mock.calls.length;
          matching = true;
          try {
            compiled.test(p);
          } finally {
            matching = false;
          }
          expect(indexOf.mock.calls.length - searches).toBeLessThanOrEqual(middleParts(g).length);

          // A rule tries three spellings at most: the path as written, the matching path, and it with a slash.
          const counting = rule({ path: g });
          const parts = new Set(middleParts(g));
          const before = indexOf.mock.calls.length;
          matching = true;
          try {
            ruleMatches(counting, "GET", p);
          } finally {
            matching = false;
          }
          const partSearches = indexOf.mock.calls.slice(before).filter(([part]) => parts.has(part));
          expect(partSearches.length).toBeLessThanOrEqual(3 * middleParts(g).length);
        }),
        { numRuns: 1_000, seed: 12 },
      );
    } finally {
      indexOf.mockRestore();
      regexTest.mockRestore();
      regexExec.mockRestore();
    }
  });
});

describe("adaptive rules (adaptive)", () => {
  const parsedRule = (input: Record<string, unknown>) => {
    const parsed = parseRules([input]);
    if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
    return parsed.value[0]!;
  };
  const errorsOf = (input: Record<string, unknown>) => {
    const parsed = parseRules([input]);
    return parsed.ok ? [] : parsed.errors;
  };

  it("is off unless a rule asks: a rule without the table has no health target", () => {
    expect(parsedRule(base)).not.toHaveProperty("adaptive");
  });

  it("gives a rate rule its health target and floor, with the defaults filled in", () => {
    expect(parsedRule({ ...base, limit: 100, adaptive: { latency: "250ms" } }).adaptive).toEqual({
      latencyMs: 250,
      percentile: 99,
      errorShare: 0.05,
      floor: 10,
    });
  });

  it("gives a rule whose requests cost more than a tenth of its limit a floor of one request's cost", () => {
    expect(parsedRule({ ...base, limit: 20, cost: 5, adaptive: { latency: "250ms" } }).adaptive?.floor).toBe(5);
    expect(parsedRule({ ...base, limit: 20, cost: 5, adaptive: { latency: "250ms", floor: 5 } }).adaptive?.floor).toBe(
      5,
    );
  });

  it("gives a concurrency rule one too, its floor in places", () => {
    expect(parsedRule({ id: "ai", concurrency: 8, adaptive: { latency: "2s", floor: 2 } }).adaptive).toEqual({
      latencyMs: 2_000,
      percentile: 99,
      errorShare: 0.05,
      floor: 2,
    });
  });

  it.each<[string, Record<string, unknown>, string[]]>([
    [
      "a table that is a string",
      { ...base, adaptive: "250ms" },
      [
        'RULES[0] "api": field "adaptive": must be a table such as { latency = "250ms", errors = "5%", floor = 10 }; got "250ms"',
      ],
    ],
    [
      "no latency",
      { ...base, adaptive: { floor: 2 } },
      [
        'RULES[0] "api": field "adaptive.latency": is required: the latency the origin should stay under, such as "250ms"',
      ],
    ],
    [
      "a floor above the limit",
      { ...base, adaptive: { latency: "1s", floor: 11 } },
      ['RULES[0] "api": field "adaptive.floor": must be an integer from 1 to the rule\'s limit (10); got 11'],
    ],
    [
      "a floor above a concurrency rule's places",
      { id: "ai", concurrency: 2, adaptive: { latency: "1s", floor: 3 } },
      ['RULES[0] "ai": field "adaptive.floor": must be an integer from 1 to the rule\'s limit (2); got 3'],
    ],
    [
      "a floor below the rule's cost",
      { ...base, limit: 100, cost: 5, adaptive: { latency: "1s", floor: 1 } },
      [
        'RULES[0] "api": field "adaptive.floor": must be at least the rule\'s cost (5): its limit never goes below one request\'s cost; got 1',
      ],
    ],
    [
      "an error share without %",
      { ...base, adaptive: { latency: "1s", errors: 5 } },
      [
        'RULES[0] "api": field "adaptive.errors": must be a share written with "%", from "0.1%" to "50%", such as "5%"; got 5',
      ],
    ],
    [
      "a percentile of 100",
      { ...base, adaptive: { latency: "1s", percentile: 100 } },
      [
        'RULES[0] "api": field "adaptive.percentile": must be a number from 50 to 99.9, with at most one decimal, such as 99; got 100',
      ],
    ],
    [
      "a misspelt field",
      { ...base, adaptive: { latency: "1s", flor: 2 } },
      [
        'RULES[0] "api": field "adaptive.flor": is not a field of "adaptive"; its fields are latency, percentile, errors, floor, critical, sheddable, reserve',
      ],
    ],
  ])("is a clear error: %s", (_, input, messages) => {
    expect(errorsOf(input)).toEqual(messages);
  });
});

describe("a number JSON cannot hold, in any numeric field", () => {
  // JSON.parse reads 1e400 as Infinity, which JSON.stringify writes as null: the message must say what was written.
  const huge = JSON.parse("1e400") as number;
  const cases: [string, Record<string, unknown>][] = [
    ["limit", { limit: huge, period: 60 }],
    ["period", { limit: 10, period: huge }],
    ["cost", { limit: 10, period: 60, cost: huge }],
    ["precision", { limit: 10, period: 60, precision: huge }],
    ["max_delay", { limit: 10, period: 60, max_delay: huge }],
    ["max_held", { limit: 10, period: 60, max_delay: "1s", max_held: huge }],
    ["concurrency", { concurrency: huge }],
    ["place_timeout", { concurrency: 2, place_timeout: huge }],
  ];
  it.each(cases)("%s: is an error that shows Infinity, not null", (field, fields) => {
    const parsed = parseRules([{ id: "big", path: "/*", key: ["ip"], ...fields }]);
    expect(parsed.ok).toBe(false);
    const message = parsed.ok ? "" : parsed.errors.join("\n");
    expect(message).toContain(`field "${field}"`);
    expect(message).toContain("Infinity");
    expect(message).not.toMatch(/got null/);
  });
});
