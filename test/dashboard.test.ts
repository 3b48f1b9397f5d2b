/**
 * The dashboard's files are the only admin paths that answer without the
 * token, and they answer with a strict Content-Security-Policy and no data;
 * the latencies it shows are what the histogram supports. The page itself,
 * in a browser, is test/e2e/dashboard.e2e.ts.
 */
import { describe, expect, it } from "vitest";
import { DASHBOARD_PATHS } from "../src/config/admin-prefix.ts";
import { LATENCY_BOUNDS_MS } from "../src/object/stats-protocol.ts";
import { CONTENT_SECURITY_POLICY } from "../src/worker/admin/dashboard.ts";
import { latencyQuantile } from "../src/worker/admin/stats.ts";
import { from, limiter, originHits, uniqueIp, uniqueTag } from "./support/limiter.ts";

const TOKEN = "test-admin-token-dashboard-3b9e";
const RULES = [{ id: "r", limit: 10, period: "1m" }];

const SECURITY_HEADERS = {
  "content-security-policy": CONTENT_SECURITY_POLICY,
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
};

const headersOf = (res: Response, names: string[]) => Object.fromEntries(names.map((n) => [n, res.headers.get(n)]));

describe("the dashboard's public files", () => {
  const send = limiter(RULES, { ADMIN_TOKEN: TOKEN });

  it("lists exactly the page, its script, styles and icon", () => {
    expect([...DASHBOARD_PATHS]).toEqual([
      "",
      "/",
      "/dashboard.js",
      "/dashboard.css",
      "/uplot.js",
      "/uplot.css",
      "/favicon.svg",
    ]);
  });

  it.each([
    ["/__ratelimit", "text/html; charset=utf-8"],
    ["/__ratelimit/", "text/html; charset=utf-8"],
    ["/__ratelimit/dashboard.js", "text/javascript; charset=utf-8"],
    ["/__ratelimit/dashboard.css", "text/css; charset=utf-8"],
    ["/__ratelimit/uplot.js", "text/javascript; charset=utf-8"],
    ["/__ratelimit/uplot.css", "text/css; charset=utf-8"],
    ["/__ratelimit/favicon.svg", "image/svg+xml"],
  ])("serves %s without the token, with the security headers, never proxied", async (path, type) => {
    const tag = uniqueTag("dashboard-public");
    const res = await send(path, from(uniqueIp(), { "x-test-tag": tag }));
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe(type);
    expect(headersOf(res, Object.keys(SECURITY_HEADERS))).toEqual(SECURITY_HEADERS);
    expect(res.headers.get("ratelimit-policy")).toBeNull();
    expect((await res.text()).length).toBeGreaterThan(100);
    expect(await originHits(tag)).toBe(0);
  });

  it("serves the same with a wrong token: the files hold nothing a token guards", async () => {
    const res = await send("/__ratelimit/", { headers: { authorization: "Bearer wrong" } });
    expect(res.status).toBe(200);
  });

  it("has a strict policy: this origin's files only, nothing inline, no frames, forms posted nowhere", () => {
    const directives = Object.fromEntries(
      CONTENT_SECURITY_POLICY.split("; ").map((d) => [d.split(" ")[0], d.split(" ").slice(1).join(" ")]),
    );
    expect(directives).toEqual({
      "default-src": "'self'",
      "script-src": "'self'",
      "style-src": "'self'",
      "img-src": "'self'",
      "connect-src": "'self'",
      "object-src": "'none'",
      "base-uri": "'none'",
      "form-action": "'none'",
      "frame-ancestors": "'none'",
    });
    expect(CONTENT_SECURITY_POLICY).not.toMatch(/unsafe|data:|https?:|\*/);
  });

  it("has a page with no inline script or style, nothing from elsewhere, and no data", async () => {
    const html = await (await send("/__ratelimit/")).text();
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.map((m) => m[1]!.trim())).toEqual([
      'defer src="/__ratelimit/uplot.js"',
      'defer src="/__ratelimit/dashboard.js"',
    ]);
    expect(scripts.every((m) => m[2] === "")).toBe(true);
    expect(html).not.toMatch(/<style|\sstyle=|\son[a-z]+=|javascript:/i);
    expect(html).not.toMatch(/https?:\/\//);
    const linked = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    expect(linked.filter((url) => url !== "#")).toEqual([
      "/__ratelimit/favicon.svg",
      "/__ratelimit/uplot.css",
      "/__ratelimit/dashboard.css",
      "/__ratelimit/uplot.js",
      "/__ratelimit/dashboard.js",
    ]);
    // What the page shows before the token: the form; the dashboard is an empty, hidden element.
    expect(html).toContain('<form id="token-form"');
    expect(html).toContain('<div class="dashboard" id="dashboard" hidden></div>');
    expect(html).not.toContain(TOKEN);
    expect(html).not.toMatch(/"rules"|limit =/);
  });

  it("embeds uPlot with its licence, and the page script that uses it", async () => {
    const uplot = await (await send("/__ratelimit/uplot.js")).text();
    expect(uplot).toMatch(/^\/\*! uPlot 1\.\d+\.\d+ \(MIT\)/);
    expect(uplot).toContain("Permission is hereby granted, free of charge");
    expect(uplot).toContain("var uPlot=");
    const script = await (await send("/__ratelimit/dashboard.js")).text();
    expect(script).toContain("new uPlot(");
    expect(script).toContain("sessionStorage");
  });

  it("answers HEAD without a body, and other methods 405", async () => {
    const head = await send("/__ratelimit/", { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");
    for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
      const res = await send("/__ratelimit/dashboard.js", { method });
      expect([method, res.status, res.headers.get("allow")]).toEqual([method, 405, "GET, HEAD"]);
    }
  });

  it("uses ADMIN_PREFIX in the page, and is not served under the default prefix then", async () => {
    const moved = limiter(RULES, { ADMIN_TOKEN: TOKEN, ADMIN_PREFIX: "/ops/limits" });
    const html = await (await moved("/ops/limits")).text();
    expect(html).toContain('data-prefix="/ops/limits"');
    expect(html).toContain('src="/ops/limits/dashboard.js"');
    const tag = uniqueTag("dashboard-old-prefix");
    const res = await moved("/__ratelimit/", from(uniqueIp(), { "x-test-tag": tag }));
    expect(res.headers.get("x-origin")).toBe("test-origin");
    expect(await originHits(tag)).toBe(1);
  });

  it("is not there while the admin API is off", async () => {
    const off = limiter(RULES, {});
    const tag = uniqueTag("dashboard-off");
    const res = await off("/__ratelimit/", from(uniqueIp(), { "x-test-tag": tag }));
    expect(res.headers.get("x-origin")).toBe("test-origin");
    expect(await originHits(tag)).toBe(1);
  });
});

describe("every other admin path still needs the token", () => {
  const send = limiter(RULES, { ADMIN_TOKEN: TOKEN });
  const routes: [string, string][] = [
    ["GET", "/rules"],
    ["GET", "/status?rule=r&key=203.0.113.7"],
    ["DELETE", "/status?rule=r&key=203.0.113.7"],
    ["GET", `/status?rule=r&hash=${"a".repeat(64)}`],
    ["DELETE", `/status?rule=r&hash=${"a".repeat(64)}`],
    ["GET", "/overrides"],
    ["PUT", "/overrides?rule=r&key=203.0.113.7"],
    ["DELETE", "/overrides?rule=r&key=203.0.113.7"],
    ["POST", "/overrides/import"],
    ["GET", "/stats?minutes=60"],
    ["GET", "/metrics"],
    ["GET", "/nope"],
    ["GET", "/index.html"],
    ["GET", "/dashboard.js/"],
    ["GET", "/dashboard.js;x"],
    ["GET", "/Dashboard.js"],
    ["GET", "/dashboard.js/../rules"],
    ["GET", "/uplot.js.map"],
    ["GET", "/favicon.ico"],
    ["GET", "//rules"],
  ];

  it.each(routes)("%s %s answers 401 without the token, and proxies nothing", async (method, route) => {
    const tag = uniqueTag("dashboard-401");
    const res = await send(`/__ratelimit${route}`, { method, ...from(uniqueIp(), { "x-test-tag": tag }) });
    expect(res.status).toBe(401);
    expect(res.headers.get("www-authenticate")).toBe('Bearer realm="admin"');
    expect(await originHits(tag)).toBe(0);
  });
});

describe("the latency the dashboard shows: a quantile as the histogram supports it", () => {
  /** Counts per bucket, from a map of a bucket's upper bound ("open" for the last) to its count. */
  const histogram = (byBound: Record<string, number | undefined>) =>
    [...LATENCY_BOUNDS_MS.map(String), "open"].map((bound) => byBound[bound] ?? 0);

  it.each([
    // The case that read "50 ms" twice: every call in the 20–50 ms bucket.
    { name: "ten calls in (20, 50]", q: 0.5, byBound: { 50: 10 }, expected: { estimateMs: 35, lowMs: 20, highMs: 50 } },
    {
      name: "ten calls in (20, 50]",
      q: 0.99,
      byBound: { 50: 10 },
      expected: { estimateMs: 49.7, lowMs: 20, highMs: 50 },
    },
    { name: "four calls in [0, 1]", q: 0.5, byBound: { 1: 4 }, expected: { estimateMs: 0.5, lowMs: 0, highMs: 1 } },
    {
      name: "ten in (5, 10] and ten in (10, 20]: the median at the top of the first",
      q: 0.5,
      byBound: { 10: 10, 20: 10 },
      expected: { estimateMs: 10, lowMs: 5, highMs: 10 },
    },
    {
      name: "ten in (5, 10] and ten in (10, 20]",
      q: 0.99,
      byBound: { 10: 10, 20: 10 },
      expected: { estimateMs: 19.8, lowMs: 10, highMs: 20 },
    },
    {
      name: "empty buckets between, skipped",
      q: 0.99,
      byBound: { 1: 1, 10: 1 },
      expected: { estimateMs: 9.9, lowMs: 5, highMs: 10 },
    },
    {
      name: "1.97 ms, rounded to a tenth",
      q: 0.99,
      byBound: { 1: 2, 2: 1 },
      expected: { estimateMs: 2, lowMs: 1, highMs: 2 },
    },
    {
      name: "the last, open bucket: above 5 s, no estimate",
      q: 0.5,
      byBound: { 50: 1, open: 3 },
      expected: { estimateMs: null, lowMs: 5000, highMs: null },
    },
  ])("$name: quantile $q is $expected", ({ q, byBound, expected }) => {
    expect(latencyQuantile(histogram(byBound), LATENCY_BOUNDS_MS, q)).toEqual(expected);
  });

  it("has none without a decision", () => {
    expect(latencyQuantile(histogram({}), LATENCY_BOUNDS_MS, 0.5)).toBeNull();
  });

  it("always lies in the bucket where the bound the statistics give (p50Ms) lies, and never above it", () => {
    const counts = histogram({ 2: 3, 20: 40, 50: 17, 500: 2, open: 1 });
    const total = counts.reduce((a, b) => a + b, 0);
    for (const q of [0.01, 0.25, 0.5, 0.9, 0.99]) {
      const found = latencyQuantile(counts, LATENCY_BOUNDS_MS, q)!;
      let seen = 0;
      const bucket = counts.findIndex((n) => {
        seen += n;
        return seen >= q * total;
      });
      expect([q, found.highMs]).toEqual([q, LATENCY_BOUNDS_MS[bucket] ?? null]);
      if (found.estimateMs !== null) {
        expect(found.estimateMs).toBeGreaterThanOrEqual(found.lowMs);
        expect(found.estimateMs).toBeLessThanOrEqual(found.highMs!);
      }
    }
  });
});
