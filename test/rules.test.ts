import { describe, expect, it } from "vitest";
import { parseSettings } from "../src/config.ts";
import { parseDurationMs } from "../src/core/duration.ts";
import { compileGlob, normalizePath, pathnameOf } from "../src/core/paths.ts";
import { parseRules, type RuleInput, ruleMatches } from "../src/core/rules.ts";

const base = { id: "api", limit: 10, period: "1m" };

describe("a valid rule", () => {
  it("gets the documented defaults", () => {
    const parsed = parseRules([base]);
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    const [rule] = parsed.rules;
    expect(rule).toMatchObject({
      id: "api",
      limit: 10,
      periodMs: 60_000,
      precision: 1,
      strict: false,
      methods: null,
      action: "block",
      onError: "open",
      key: [[{ kind: "ip" }]],
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
      },
    ]);
    expect(parsed.ok && parsed.rules[0]).toMatchObject({
      periodMs: 90_000,
      methods: new Set(["POST"]),
      action: "log",
      onError: "closed",
      precision: 6,
      strict: true,
      key: [
        [{ kind: "header", name: "x-api-key" }, { kind: "cookie", name: "sid" }, { kind: "ip" }],
        [{ kind: "method" }],
      ],
    });
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
      'RULES[0] "api": field "key": "user": unknown characteristic "user"; use ip, path, method, host, header:<name>, cookie:<name> or query:<name>',
    ],
    [
      "a header without a name",
      { ...base, key: ["header:"] },
      'RULES[0] "api": field "key": "header:": header: needs a name, as in "header:x-api-key"',
    ],
    [
      "a bad fallback",
      { ...base, key: ["header:x-api-key|"] },
      'RULES[0] "api": field "key": "header:x-api-key|": unknown characteristic ""; use ip, path, method, host, header:<name>, cookie:<name> or query:<name>',
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
      "a misspelt field",
      { ...base, limt: 5 },
      'RULES[0] "api": field "limt": is not a rule field; known fields are id, path, methods, exclude, limit, period, key, action, on_error, precision, strict',
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
    expect(parseDurationMs(period)).toEqual({ ms });
  });
});

describe("matching", () => {
  const rule = (input: Partial<RuleInput>) => {
    const parsed = parseRules([{ ...base, ...input }]);
    if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
    return parsed.rules[0]!;
  };

  it.each([
    ["/api/*", "/api/users/7", true],
    ["/api/*", "/api/", true],
    ["/api/*", "/api", false],
    ["/api/*", "/apix", false],
    ["/login", "/login", true],
    ["/login", "/login/", false],
    ["/*.json", "/a/b.json", true],
    ["/v(1)/*", "/v(1)/x", true],
  ])("glob %s on %s: %s", (glob, path, expected) => {
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
    ["/api%2Fx", "/api%2Fx"],
    ["/%7Euser", "/~user"],
  ])("matches %s as %s, so spelling a path differently escapes nothing", (raw, normalized) => {
    expect(normalizePath(raw)).toBe(normalized);
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
