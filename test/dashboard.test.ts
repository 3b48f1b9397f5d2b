/**
 * The dashboard's files are the only admin paths that answer without the
 * token, and they answer with a strict Content-Security-Policy and no data.
 * The page itself, in a browser, is test/e2e/dashboard.e2e.ts.
 */
import { describe, expect, it } from "vitest";
import { CONTENT_SECURITY_POLICY, DASHBOARD_PATHS } from "../src/worker/admin/dashboard.ts";
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
