/**
 * @module
 * The dashboard: a page the Worker serves itself at `GET {prefix}/` (and
 * `{prefix}`), with its script, styles and icon beside it. These few paths,
 * listed in {@link DASHBOARD_PATHS}, are the only ones under the prefix that
 * answer without the token: they hold no data. The page asks the operator
 * for the token and reads everything through the admin API with it.
 *
 * Nothing is fetched from anywhere else: uPlot, the chart library, is
 * embedded in the Worker (dashboard/assets.ts, written by dashboard/bundle.mjs).
 */
import { DASHBOARD_PATHS } from "../../config/admin-prefix.ts";
import { DASHBOARD_CSS, DASHBOARD_JS, UPLOT_CSS, UPLOT_JS } from "./dashboard/assets.ts";

const PUBLIC = new Set<string>(DASHBOARD_PATHS);

/** Whether `route` (the path after the prefix) is one of the dashboard's public files. */
export const isDashboardPath = (route: string): boolean => PUBLIC.has(route);

/**
 * No script but this origin's files, nothing inline, no plugins, no frames;
 * data only from this origin (the admin API), forms posted nowhere (the
 * token form is handled by the script, so a page without it cannot send the
 * token in a URL). uPlot's sizes and colours are set through the CSSOM, which
 * `style-src 'self'` allows.
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** Sent with every dashboard file. */
const SECURITY_HEADERS = {
  "Content-Security-Policy": CONTENT_SECURITY_POLICY,
  "Cache-Control": "no-store",
  "X-Content-Type-Options": "nosniff",
  "Referrer-Policy": "no-referrer",
  "X-Frame-Options": "DENY",
};

const FAVICON =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#3556c9"/>' +
  '<rect x="7" y="17" width="4" height="8" rx="1" fill="#fff"/><rect x="14" y="11" width="4" height="14" rx="1" fill="#fff"/>' +
  '<rect x="21" y="6" width="4" height="19" rx="1" fill="#f2a7a7"/></svg>';

/** Only `&<>"` matter in the attribute and text the prefix goes in; ADMIN_PREFIX allows none of them anyway. */
const escapeHtml = (text: string): string =>
  text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);

/** The page shell: no data, and no script but the two files it names. */
export function dashboardPage(prefix: string): string {
  const p = escapeHtml(prefix);
  return `<!doctype html>
<html lang="en" data-prefix="${p}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Rate limiter dashboard</title>
<link rel="icon" type="image/svg+xml" href="${p}/favicon.svg">
<link rel="stylesheet" href="${p}/uplot.css">
<link rel="stylesheet" href="${p}/dashboard.css">
<script defer src="${p}/uplot.js"></script>
<script defer src="${p}/dashboard.js"></script>
</head>
<body>
<header class="topbar">
  <div class="brand"><h1>Edge rate limiter</h1><span class="prefix">${p}</span></div>
  <div class="controls" id="controls" hidden>
    <label class="hint" for="range">Period</label>
    <select id="range">
      <option value="fit" selected>Fit the data</option>
      <option value="15">15 min</option>
      <option value="60">1 hour</option>
      <option value="360">6 hours</option>
      <option value="1440">24 hours</option>
    </select>
    <span class="live" id="live" role="status">Connecting…</span>
    <button type="button" id="signout">Sign out</button>
  </div>
</header>
<main>
  <section class="login" id="login" hidden>
    <form id="token-form" method="post" action="#" autocomplete="off">
      <h2>Admin token</h2>
      <p>Enter the Worker's <code>ADMIN_TOKEN</code>. This tab keeps it until you close it or sign out.</p>
      <label for="token">Token</label>
      <input id="token" name="token" type="password" autocomplete="off" spellcheck="false" required>
      <button type="submit" class="primary" id="token-submit">Open the dashboard</button>
      <p class="error" id="token-error" role="alert" hidden></p>
    </form>
  </section>
  <div class="dashboard" id="dashboard" hidden></div>
  <noscript><p class="login">The dashboard needs JavaScript.</p></noscript>
</main>
<div class="toasts" id="toasts" aria-live="polite"></div>
</body>
</html>
`;
}

const FILES: Record<string, { type: string; body: string }> = {
  "/dashboard.js": { type: "text/javascript; charset=utf-8", body: DASHBOARD_JS },
  "/dashboard.css": { type: "text/css; charset=utf-8", body: DASHBOARD_CSS },
  "/uplot.js": { type: "text/javascript; charset=utf-8", body: UPLOT_JS },
  "/uplot.css": { type: "text/css; charset=utf-8", body: UPLOT_CSS },
  "/favicon.svg": { type: "image/svg+xml", body: FAVICON },
};

/**
 * Answers a request for one of {@link DASHBOARD_PATHS}, token or not:
 * `GET` and `HEAD` get the file, any other method a 405.
 */
export function dashboard(method: string, route: string, prefix: string): Response {
  if (method !== "GET" && method !== "HEAD") {
    return new Response(null, { status: 405, headers: { ...SECURITY_HEADERS, Allow: "GET, HEAD" } });
  }
  const file =
    route === "" || route === "/" ? { type: "text/html; charset=utf-8", body: dashboardPage(prefix) } : FILES[route];
  if (file === undefined) return new Response(null, { status: 404, headers: SECURITY_HEADERS });
  return new Response(method === "HEAD" ? null : file.body, {
    headers: { ...SECURITY_HEADERS, "Content-Type": file.type },
  });
}
