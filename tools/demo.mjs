/**
 * `npm run demo`: ten seconds of scripted traffic against the limiter that
 * `npm run dev` serves, under the rules in wrangler.toml, with a live table
 * per client: requests sent, allowed, blocked, and the last RateLimit header.
 *
 *   npm run demo                         # http://127.0.0.1:8787 (or $DEMO_URL, or $PORT)
 *   npm run demo -- http://127.0.0.1:9000
 *   DEMO_SECONDS=70 npm run demo         # long enough to always cross a one-minute window boundary
 *
 * It prints the URL of the dashboard (`{ADMIN_PREFIX}/`, on while `.dev.vars`
 * sets ADMIN_TOKEN), where the same traffic shows up live, per rule.
 */
import { readFileSync } from "node:fs";

const target = (process.argv[2] ?? process.env.DEMO_URL ?? `http://127.0.0.1:${process.env.PORT ?? "8787"}`).replace(
  /\/+$/,
  "",
);
const durationMs = Math.max(1, Number(process.env.DEMO_SECONDS ?? "10")) * 1000;
/** The shipped rule "api-per-ip": 100 requests a minute per client IP on /api/*. */
const QUOTA = 100;
const REDRAW_MS = 200;

// A fresh last octet each run, so a second run does not start with the first run's counts; from
// 200–249, which no example in the docs uses (test/docs.test.ts), so an override set by following
// them never meets the demo's clients.
const octet = 200 + Math.floor(Math.random() * 50);

/**
 * @typedef {{ label: string; sent: number; allowed: number }} Burst
 * @typedef {{ name: string; ip: string; plan: string; sent: number; allowed: number; blocked: number;
 *   failed: number; failures: Map<string, number>; lastRateLimit: string; bursts: Burst[]; spoofed: Set<string> }} Client
 */

/** @returns {Client} */
const client = (name, ip, plan) => ({
  name,
  ip,
  plan,
  sent: 0,
  allowed: 0,
  blocked: 0,
  failed: 0,
  failures: new Map(),
  lastRateLimit: "",
  bursts: [],
  spoofed: new Set(),
});

const wellBehaved = client(
  "well-behaved",
  `203.0.113.${octet}`,
  "one request every 750 ms: 80 a minute, under the 100 allowed",
);
const boundary = client(
  "boundary-burst",
  `198.51.100.${octet}`,
  "its whole quota at once, then again right after the window boundary",
);
const abuser = client(
  "abuser",
  `192.0.2.${octet}`,
  "floods from 4 connections, with a new X-Forwarded-For on every request",
);
const clients = [wellBehaved, boundary, abuser];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// Set when the traffic starts, after the limiter has answered.
let startedAt = 0;
let endsAt = 0;
const running = () => Date.now() < endsAt;
const elapsed = (at = Date.now()) => `${((at - startedAt) / 1000).toFixed(1)} s`;

/** A short reason for a failed fetch: its cause's code, such as ECONNREFUSED, where there is one. */
const reasonOf = (error) => error?.cause?.code ?? error?.cause?.message ?? error?.message ?? String(error);

/** Sends one request as `c` (its fixed CF-Connecting-IP, as Cloudflare's edge would set it) and counts the answer. */
async function send(c, path, headers = {}) {
  c.sent++;
  try {
    const res = await fetch(`${target}${path}`, {
      headers: { "cf-connecting-ip": c.ip, ...headers },
      signal: AbortSignal.timeout(10_000),
    });
    await res.arrayBuffer();
    c.lastRateLimit = res.headers.get("ratelimit") ?? c.lastRateLimit;
    const refused = res.status === 429 && res.headers.get("content-type") === "application/problem+json";
    if (refused) c.blocked++;
    else if (res.status < 400) c.allowed++;
    else fail(c, `HTTP ${res.status}`);
    return res;
  } catch (error) {
    fail(c, reasonOf(error));
    return null;
  }
}

function fail(c, reason) {
  c.failed++;
  c.failures.set(reason, (c.failures.get(reason) ?? 0) + 1);
}

/** `count` requests at once; how many of them were allowed. */
async function burst(c, label, count, path) {
  const before = c.allowed;
  const replies = await Promise.all(Array.from({ length: count }, () => send(c, path)));
  c.bursts.push({ label, sent: count, allowed: c.allowed - before });
  return replies;
}

async function runWellBehaved() {
  for (let i = 1; running(); i++) {
    const next = Date.now() + 750;
    await send(wellBehaved, `/api/orders/${i}`);
    await sleep(next - Date.now());
  }
}

/** When the boundary client's current window ends (Unix ms), and whether it has burst after it. */
const boundaryWindow = { endsAtMs: null, crossed: false };

/**
 * A fixed-window limiter resets its count at the boundary, so a client that
 * bursts just before and just after it gets twice its quota. The sliding
 * window still weighs the previous minute's burst after the boundary.
 */
async function runBoundaryBurst() {
  const replies = await burst(boundary, "at the start", QUOTA, "/api/export");
  // X-RateLimit-Reset on an admitted reply: when the current window ends, in Unix seconds.
  const resets = replies.filter((r) => r?.ok).map((r) => Number(r.headers.get("x-ratelimit-reset")));
  boundaryWindow.endsAtMs = resets.length > 0 ? Math.min(...resets) * 1000 : null;
  while (running()) {
    const { endsAtMs } = boundaryWindow;
    if (endsAtMs !== null && !boundaryWindow.crossed && Date.now() >= endsAtMs + 200) {
      boundaryWindow.crossed = true;
      await burst(boundary, `after the window boundary at +${elapsed(endsAtMs)}`, QUOTA, "/api/export");
    } else {
      await Promise.all(Array.from({ length: 5 }, () => send(boundary, "/api/export")));
      await sleep(500);
    }
  }
}

const randomIp = () => Array.from({ length: 4 }, () => Math.floor(Math.random() * 256)).join(".");

async function runAbuser() {
  const worker = async () => {
    for (let i = 0; running(); i++) {
      const spoofed = randomIp();
      abuser.spoofed.add(spoofed);
      await send(abuser, `/api/search?q=${i}`, { "x-forwarded-for": spoofed });
      await sleep(40);
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
}

// ---- the table ----

const COLUMNS = [
  ["client", 15, (c) => c.name],
  ["CF-Connecting-IP", 17, (c) => c.ip],
  ["sent", 6, (c) => c.sent],
  ["allowed", 8, (c) => c.allowed],
  ["blocked", 8, (c) => c.blocked],
  ["failed", 7, (c) => c.failed],
  ["last RateLimit header", 0, (c) => c.lastRateLimit || "-"],
];
const cell = (value, width, numeric) =>
  width === 0
    ? String(value)
    : numeric
      ? String(value)
          .padStart(width - 1)
          .padEnd(width)
      : String(value).padEnd(width);
const row = (values) => COLUMNS.map(([, width], i) => cell(values[i], width, i >= 2 && i <= 5)).join(" ");

function table() {
  const progress = `${elapsed(Math.min(Date.now(), endsAt))} of ${durationMs / 1000} s`;
  return [
    `Edge rate limiter demo against ${target} (rules from wrangler.toml): ${progress}`,
    row(COLUMNS.map(([title]) => title)),
    ...clients.map((c) => row(COLUMNS.map(([, , value]) => value(c)))),
  ];
}

const live = process.stdout.isTTY === true;
let drawnLines = 0;
function draw() {
  const lines = table();
  // Move to the first line drawn last time and overwrite in place.
  const up = drawnLines > 0 ? `\x1b[${drawnLines}F` : "";
  process.stdout.write(`${up}${lines.map((line) => `\x1b[2K${line}\n`).join("")}`);
  drawnLines = lines.length;
}

function summary() {
  const lines = ["", "What happened:"];
  lines.push(
    `  ${wellBehaved.name.padEnd(15)} ${wellBehaved.plan}: ${wellBehaved.allowed} of ${wellBehaved.sent} allowed.`,
  );
  const bursts = boundary.bursts.map((b) => `${QUOTA} at once ${b.label}: ${b.allowed} allowed`);
  const steady = boundary.sent - boundary.bursts.reduce((n, b) => n + b.sent, 0);
  lines.push(`  ${boundary.name.padEnd(15)} ${bursts.join("; ")}; ${steady} more in between.`);
  if (!boundaryWindow.crossed) {
    const { endsAtMs } = boundaryWindow;
    const inSeconds = endsAtMs === null ? "?" : Math.max(0, Math.round((endsAtMs - Date.now()) / 1000));
    lines.push(
      `  ${"".padEnd(15)} No window boundary fell inside this run (the next one is in ${inSeconds} s); DEMO_SECONDS=70 always crosses one.`,
    );
  } else {
    lines.push(
      `  ${"".padEnd(15)} A fixed window would have allowed the second ${QUOTA} too; the sliding window still counts the first.`,
    );
  }
  lines.push(
    `  ${abuser.name.padEnd(15)} rotated X-Forwarded-For through ${abuser.spoofed.size} addresses, yet is one client ` +
      `by CF-Connecting-IP: ${abuser.allowed} of ${abuser.sent} allowed.`,
  );
  for (const c of clients) {
    for (const [reason, count] of c.failures) lines.push(`  ${c.name}: ${count} request(s) failed: ${reason}`);
  }
  return lines.join("\n");
}

// ---- the dashboard ----

const dashboardUrl = `${target}${(process.env.ADMIN_PREFIX ?? "/__ratelimit").replace(/\/+$/, "")}/`;

/** Whether .dev.vars has an ADMIN_TOKEN line (its value is never printed). */
function devVarsHasToken() {
  try {
    return /^\s*ADMIN_TOKEN\s*=\s*\S/m.test(readFileSync(".dev.vars", "utf8"));
  } catch {
    return false;
  }
}

/** Where the dashboard is and how to sign in; or, when the Worker does not serve it, how to turn it on. */
async function dashboardNote() {
  let served = false;
  try {
    const res = await fetch(dashboardUrl, { signal: AbortSignal.timeout(5_000) });
    await res.arrayBuffer();
    // The page is the Worker's own only while the admin API is on; else the path goes to the origin.
    served = res.ok && (res.headers.get("content-security-policy") ?? "").includes("frame-ancestors 'none'");
  } catch {
    // Unreachable: checkReachable() already said so.
  }
  if (served) {
    const where = devVarsHasToken() ? "the ADMIN_TOKEN in .dev.vars" : "the Worker's ADMIN_TOKEN";
    return [`Dashboard: ${dashboardUrl}`, `  sign in with ${where}; it shows this traffic live, per rule.`];
  }
  return [
    `Dashboard: off at ${dashboardUrl} (the admin API is on only while ADMIN_TOKEN is set).`,
    '  Turn it on: echo "ADMIN_TOKEN=$(openssl rand -hex 32)" >> .dev.vars (npm run dev restarts wrangler), then run the demo again.',
  ];
}

// ---- main ----

/** Checks that the limiter answers before sending any traffic. */
async function checkReachable() {
  let res;
  try {
    res = await fetch(`${target}/api/health`, {
      headers: { "cf-connecting-ip": "198.18.0.1" },
      signal: AbortSignal.timeout(5_000),
    });
    await res.arrayBuffer();
  } catch (error) {
    console.error(`Cannot reach the limiter at ${target} (${reasonOf(error)}).`);
    console.error(
      'Start it first with `npm run dev` in another terminal, wait for "Ready on", then run `npm run demo`.',
    );
    process.exit(1);
  }
  if (!res.headers.has("ratelimit-policy")) {
    console.error(`${target} answered ${res.status}, but without a RateLimit-Policy header: is it the limiter?`);
    console.error("Start the limiter with `npm run dev`, or pass its URL: `npm run demo -- http://127.0.0.1:8787`.");
    process.exit(1);
  }
}

await checkReachable();
const dashboard = await dashboardNote();
for (const line of dashboard) console.log(line);
console.log("");
console.log("Three clients, each with its own CF-Connecting-IP (the address Cloudflare's edge sets):");
for (const c of clients) console.log(`  ${c.name.padEnd(15)} ${c.plan}`);
console.log("");
startedAt = Date.now();
endsAt = startedAt + durationMs;
const timer = live ? setInterval(draw, REDRAW_MS) : null;
if (live) draw();
await Promise.all([runWellBehaved(), runBoundaryBurst(), runAbuser()]);
if (timer) clearInterval(timer);
if (live) draw();
else console.log(table().join("\n"));
console.log(summary());
console.log(`\n${dashboard[0]}`);

const answered = clients.reduce((n, c) => n + c.allowed + c.blocked, 0);
if (answered === 0) {
  console.error(`\nNo request got an answer from the limiter at ${target}: is \`npm run dev\` still running?`);
  process.exit(1);
}
