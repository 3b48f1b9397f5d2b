import { describe, expect, it } from "vitest";
import type { Echo } from "./support/echo.ts";
import { from, limiter, statuses, uniqueIp, uniqueTag } from "./support/limiter.ts";

const perIp = [{ id: "per-ip", limit: 5, period: "1m", key: ["ip"] }];

describe("a client cannot walk around its limit", () => {
  it.each(["x-forwarded-for", "x-real-ip", "true-client-ip", "forwarded"])(
    "rotating %s with the same CF-Connecting-IP stays in one bucket",
    async (name) => {
      const send = limiter(perIp);
      const ip = uniqueIp();
      let n = 0;
      const result = await statuses(8, () => {
        n++;
        const value = name === "forwarded" ? `for=192.0.2.${n}` : `192.0.2.${n}`;
        return send("/x", from(ip, { [name]: value }));
      });
      expect(result).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
    },
  );

  it("rotating IPv6 addresses within one /56 stays in one bucket", async () => {
    const send = limiter(perIp);
    const prefix = `2001:db8:${Math.floor(Math.random() * 0xffff).toString(16)}:ab`;
    let n = 0;
    const result = await statuses(8, () => {
      n++;
      return send("/x", from(`${prefix}${(n * 17).toString(16).padStart(2, "0")}:${n.toString(16)}::${n}`));
    });
    expect(result).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
  });

  it("::ffff:1.2.3.4 is the same client as 1.2.3.4", async () => {
    const send = limiter(perIp);
    const ip = uniqueIp();
    // Both forms, alternating, and each form both admitted and refused: counted apart, neither form would
    // reach the limit of 5 (4 and 3 requests), and all 7 would be admitted.
    const forms = [ip, `::ffff:${ip}`, ip, `::ffff:${ip}`, ip, `::ffff:${ip}`, ip];
    const result = await statuses(forms.length, () => send("/x", from(forms.shift()!)));
    expect(result).toEqual([200, 200, 200, 200, 200, 429, 429]);
  });

  it("leaving out the API key header puts the request in one shared bucket, not a free one", async () => {
    const rule = [{ id: "per-key", limit: 3, period: "1m", key: ["header:x-api-key"] }];
    const send = limiter(rule);
    const result = await statuses(4, () => send("/x", from(uniqueIp())));
    expect(result).toEqual([200, 200, 200, 429]);
  });

  it('"header:x-api-key|ip" counts a client without a key by its IP', async () => {
    const send = limiter([{ id: "key-or-ip", limit: 2, period: "1m", key: ["header:x-api-key|ip"] }]);
    const [a, b] = [uniqueIp(), uniqueIp()];
    expect(await statuses(3, () => send("/x", from(a)))).toEqual([200, 200, 429]);
    expect(await statuses(1, () => send("/x", from(b)))).toEqual([200]);
    expect(await statuses(1, () => send("/x", from(a, { "x-api-key": uniqueTag("k") })))).toEqual([200]);
  });

  it("spelling the path differently does not escape a path rule", async () => {
    const send = limiter([{ id: "api", path: "/api/*", limit: 2, period: "1m" }]);
    const ip = uniqueIp();
    const spellings = ["/%61pi/x", "//api//x", "/api/x", "/%61%70%69/x"];
    const result = await statuses(4, () => send(spellings.shift()!, from(ip)));
    expect(result).toEqual([200, 200, 429, 429]);
  });

  // An origin reads a cookie's value percent-decoded (the `cookie` package, which Express's cookie-parser uses, and
  // most frameworks), and a query parameter's too: so does the key, or each spelling would be a fresh count.
  it.each([
    ["a cookie", "cookie:sid", (v: string) => ({ cookie: `theme=dark; sid=${v}` }), ""],
    ["a query parameter", "query:k", () => ({}), "?k="],
  ])("spelling %s's value with percent-escapes does not escape its count", async (_, source, headers, query) => {
    const send = limiter([{ id: "spelled", limit: 2, period: "1m", key: [source] }]);
    const value = uniqueTag("abc");
    const at = (i: number) => `%${value.charCodeAt(i).toString(16).toUpperCase()}`;
    const spellings = [value, value, `${at(0)}${value.slice(1)}`, `${value.slice(0, 2)}${at(2)}${value.slice(3)}`];
    const result = await statuses(4, () => {
      const spelled = spellings.shift()!;
      return send(`/x${query}${query ? spelled : ""}`, from(uniqueIp(), headers(spelled)));
    });
    expect(result).toEqual([200, 200, 429, 429]);
  });

  it("a 100 KB header value as the key is hashed, not refused, and still counted", async () => {
    const send = limiter([{ id: "huge", limit: 1, period: "1m", key: ["header:x-api-key"] }]);
    const key = `${uniqueTag("huge")}${"k".repeat(100_000)}`;
    expect(await statuses(2, () => send("/x", from(uniqueIp(), { "x-api-key": key })))).toEqual([200, 429]);
  });
});

/**
 * Spellings an origin routes to the same handler: Express and Spring ignore a
 * trailing slash, Tomcat and Spring strip `;parameters`, Express ignores case,
 * nginx decodes `%2F` before routing,
 * and every server answers HEAD with its GET handler. Each rule admits 2
 * requests an hour: a request is 429 when two before it were counted in its
 * bucket, 200 when they were not.
 */
type SpellingCase = { case: string; rule: Record<string, unknown>; requests: string[]; statuses: number[] };

const login = { path: "/login", methods: ["POST"] };
const spellingCases: SpellingCase[] = [
  ...[
    "/login/",
    "/login;jsessionid=x",
    "/LOGIN",
    "/Login/;a=b",
    "/;x/login",
    "/x/..;/login",
    "/login%2F",
    "/%2Flogin",
    "/x%2F..%2Flogin",
  ].map(
    (spelling): SpellingCase => ({
      case: `POST ${spelling} is counted with POST /login under the login rule`,
      rule: login,
      requests: ["POST /login", "POST /login", `POST ${spelling}`],
      statuses: [200, 200, 429],
    }),
  ),
  {
    case: "HEAD is counted with GET under a rule for methods [GET]",
    rule: { path: "/x", methods: ["GET"] },
    requests: ["GET /x", "GET /x", "HEAD /x"],
    statuses: [200, 200, 429],
  },
  {
    case: "POST /LOGIN is not counted under a case_sensitive rule for /login",
    rule: { ...login, case_sensitive: true },
    requests: ["POST /login", "POST /login", "POST /LOGIN"],
    statuses: [200, 200, 200],
  },
  {
    case: "POST /login/ and /login;x are counted under a case_sensitive rule for /login",
    rule: { ...login, case_sensitive: true },
    requests: ["POST /login/", "POST /login;x", "POST /login"],
    statuses: [200, 200, 429],
  },
  ...["/API/HEALTH", "/api/health/", "/api/health;x"].map(
    (spelling): SpellingCase => ({
      case: `GET ${spelling} is counted under /api/* with exclude /api/health: exclude matches the path as written only`,
      rule: { path: "/api/*", exclude: "/api/health" },
      requests: ["GET /api/x", "GET /api/x", `GET ${spelling}`],
      statuses: [200, 200, 429],
    }),
  ),
  // An exclude exempts a request only when every reading of its path is excluded: nginx decodes %2F and resolves
  // the `..` it uncovers, Tomcat and Spring strip `;parameters`, so these reach the origin as /api/private.
  ...[
    "/api/public/..%2Fprivate",
    "/api/public/..%2fprivate",
    "/api/public/..;/private",
    "/api/public/x/..;/..;/private",
  ].map(
    (spelling): SpellingCase => ({
      case: `GET ${spelling} is counted under /api/* with exclude /api/public/*: it reads as /api/private`,
      rule: { path: "/api/*", exclude: "/api/public/*" },
      requests: ["GET /api/private", "GET /api/private", `GET ${spelling}`],
      statuses: [200, 200, 429],
    }),
  ),
  {
    case: "GET /api/public/x and /api/public/x/ are not counted under /api/* with exclude /api/public/*",
    rule: { path: "/api/*", exclude: "/api/public/*" },
    requests: ["GET /api/public/x", "GET /api/public/x/", "GET /api/public/x;v=1"],
    statuses: [200, 200, 200],
  },
  {
    case: "GET /api/health is not counted under /api/* with exclude /api/health",
    rule: { path: "/api/*", exclude: "/api/health" },
    requests: ["GET /api/health", "GET /api/health", "GET /api/health"],
    statuses: [200, 200, 200],
  },
  {
    case: "GET /api/ and GET /api are counted under /api/*",
    rule: { path: "/api/*" },
    requests: ["GET /api/", "GET /api", "GET /api/x"],
    statuses: [200, 200, 429],
  },
  {
    case: "/login, /LOGIN and /login/;x share one bucket under key [ip, path]",
    rule: { key: ["ip", "path"] },
    requests: ["GET /login", "GET /LOGIN", "GET /login/;x"],
    statuses: [200, 200, 429],
  },
  {
    case: "/login and /LOGIN are two buckets under key [ip, path] of a case_sensitive rule",
    rule: { key: ["ip", "path"], case_sensitive: true },
    requests: ["GET /login", "GET /login;x/", "GET /LOGIN", "GET /login/"],
    statuses: [200, 200, 200, 429],
  },
];

describe("spelling a request differently does not dodge a rule", () => {
  it.each(spellingCases.map((c, i) => [c.case, { ...c, index: i }] as const))("%s", async (_, c) => {
    const send = limiter([{ id: `spelling-${c.index}`, limit: 2, period: "1h", ...c.rule }]);
    const ip = uniqueIp();
    const got: number[] = [];
    for (const request of c.requests) {
      const [method, path] = request.split(" ") as [string, string];
      const res = await send(path, { ...from(ip), method });
      await res.arrayBuffer();
      got.push(res.status);
    }
    expect(got).toEqual(c.statuses);
  });

  it("forwards the request to the origin exactly as it was sent", async () => {
    const send = limiter([{ id: "spelling-forward", limit: 10, period: "1h", ...login }]);
    const res = await send("/Login/;jsessionid=x?next=%2F", { ...from(uniqueIp()), method: "POST" });
    expect(res.status).toBe(200);
    expect(((await res.json()) as Echo).url).toBe("/Login/;jsessionid=x?next=%2F");
  });
});
