/**
 * `npm run bench:hot-path`: where an isolate's time goes on one request,
 * step by step, in Node's V8 (the engine workerd runs too). Inside workerd
 * the clock only moves on I/O, so these steps cannot be timed there.
 *
 * Each step runs in a loop for about half a second; the figure is the mean
 * time per call. Compare them with the Durable Object figures in the README.
 *
 * It runs in Node but is typechecked as Worker code (tsconfig.json): it runs
 * the Worker's own decision, and uses nothing Node lacks.
 */
import { parseSettings } from "../../src/config/settings.ts";
import { ipKey } from "../../src/core/ip.ts";
import { canonicalKey, hashKey, type RequestFacts } from "../../src/core/keys.ts";
import { normalizePath, requestPath } from "../../src/core/paths.ts";
import { ruleMatches } from "../../src/core/rules.ts";
import { type Reported, rateLimitHeaders } from "../../src/http/rate-limit-headers.ts";
import { tooManyRequests } from "../../src/http/refusals.ts";
import { decide } from "../../src/isolate/decide.ts";
import { createIsolate } from "../../src/isolate/isolate.ts";
import type { LimiterNamespace } from "../../src/object/client.ts";
import { type RuleVerdict, ruleCheckOf } from "../../src/object/protocol.ts";

const shippedRules = [
  { id: "api-per-ip", path: "/api/*", exclude: ["/api/health"], limit: 100, period: "1m", key: ["ip"] },
  { id: "login", path: "/login", methods: ["POST"], limit: 5, period: "1m", key: ["ip"], on_error: "closed" },
  { id: "api-per-key", path: "/api/*", limit: 1000, period: "1h", key: ["header:x-api-key|ip"] },
];
const parsed = parseSettings({ RULES: shippedRules });
if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
const settings = parsed.value;
const url = "https://api.example.com/api/users/42?expand=orders";
const headers = new Headers({ "cf-connecting-ip": "203.0.113.7", "user-agent": "bench" });
const facts: RequestFacts = {
  method: "GET",
  path: "/api/users/42",
  host: () => "api.example.com",
  ip: () => ipKey(headers.get("cf-connecting-ip")),
  header: (name) => headers.get(name),
  cookie: () => null,
  query: () => null,
  network: () => null,
  claim: () => null,
};
const path = requestPath("/api/users/42");
const matched = settings.rules.filter((rule) => ruleMatches(rule, "GET", path));
const canonical = canonicalKey(matched[0]!.key, facts);
const verdict: RuleVerdict = {
  allowed: true,
  ruleAllows: true,
  weighted: 41.5,
  remaining: 57,
  retryAfterMs: 0,
  resetMs: 17_000,
  counted: { row: "api-per-ip|60000|1", epoch: 1, bucket: 29_000_000 },
  holdsForMs: 0,
};
const reports: Reported[] = matched.map((rule) => ({ ...rule, verdict, nowMs: Date.now() }));
const refused: Reported[] = reports.map((r) => ({
  ...r,
  verdict: { ...r.verdict, allowed: false, ruleAllows: false, remaining: 0, retryAfterMs: 16_001 },
}));
/** An isolate holding a lease for the client that never runs out, so every spend in the loop finds a unit. */
function leasing(granted: RuleVerdict) {
  const iso = createIsolate();
  iso.leases.keep(iso.digest(canonical), {
    name: "0".repeat(64),
    rules: matched,
    verdicts: matched.map(() => granted),
    lease: { units: 1e9, receipts: matched.map(() => verdict.counted!), expiresInMs: 3_600_000 },
    sentAtMs: Date.now(),
    asked: true,
  });
  return iso;
}
const isolate = leasing(verdict);
const digest = isolate.digest(canonical);
// The same client with an override (a limit of 5000 under every matched rule), from the object's verdicts.
const withOverride: RuleVerdict = { ...verdict, limit: 5_000, override: "limit" };
const overridden = leasing(withOverride);

// Whole decisions the isolate makes alone: no object is ever called, and background work is dropped.
const request = new Request(url, { headers });
const noObjects = {} as LimiterNamespace;
const decideIn = (iso: typeof isolate) => () =>
  decide(request, { settings, ns: noObjects, isolate: iso, background: () => {} });
/** An isolate that knows of a refusal for the client, held for the whole run (the shipped cap is 10 s). */
function refusingWith(base: RuleVerdict) {
  const iso = createIsolate({ maxRefusalMs: 3_600_000 });
  const held = { ...base, allowed: false, ruleAllows: false, remaining: 0, retryAfterMs: 3_000_000 };
  for (const rule of matched) {
    iso.refusals.remember(rule, iso.digest(canonical), "0".repeat(64), Date.now(), {
      ...held,
      counted: null,
      holdsForMs: 3_000_000,
    });
  }
  return iso;
}
const refusing = refusingWith(verdict);
const refusingOverridden = refusingWith(withOverride);
// The refusal's first log line would land in the table.
const print = console.log.bind(console);
console.log = () => {};

type Step = { name: string; run: () => unknown };
const steps: Step[] = [
  { name: "parse the URL (new URL)", run: () => new URL(url) },
  { name: "normalise the path", run: () => normalizePath("/api/users/42") },
  {
    name: "match the 3 shipped rules",
    run: () => settings.rules.filter((rule) => ruleMatches(rule, "GET", requestPath("/api/users/42"))),
  },
  { name: "parse the client IP", run: () => ipKey("2001:db8:1:ab12::7") },
  { name: "make the canonical key", run: () => canonicalKey(matched[0]!.key, facts) },
  { name: "digest the key (SipHash-2-4, for the isolate's caches)", run: () => isolate.digest(canonical) },
  { name: "spend a lease unit", run: () => isolate.leases.spend(digest, matched, Date.now()) },
  { name: "build the RateLimit headers", run: () => rateLimitHeaders(matched, reports) },
  { name: "build a 429 problem response", run: () => tooManyRequests(matched, refused) },
  { name: "copy the RPC payload (structuredClone)", run: () => structuredClone(matched.map(ruleCheckOf)) },
  { name: "decide a request from leases (all of the above that applies)", run: decideIn(isolate) },
  { name: "decide a request from a known refusal, 429 and all", run: decideIn(refusing) },
  { name: "… from leases, the client with an override", run: decideIn(overridden) },
  { name: "… from a known refusal, the client with an override", run: decideIn(refusingOverridden) },
];

function time(run: () => unknown): number {
  for (let i = 0; i < 5_000; i++) run(); // warm up the JIT
  let calls = 0;
  const started = performance.now();
  while (performance.now() - started < 500) {
    for (let i = 0; i < 1_000; i++) run();
    calls += 1_000;
  }
  return ((performance.now() - started) * 1_000) / calls;
}

async function timeAsync(run: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 2_000; i++) await run();
  let calls = 0;
  const started = performance.now();
  while (performance.now() - started < 500) {
    await run();
    calls++;
  }
  return ((performance.now() - started) * 1_000) / calls;
}

const rows = steps.map((step) => [step.name, time(step.run)] as const);
rows.push(["hash the key (SHA-256, crypto.subtle)", await timeAsync(() => hashKey(canonical))]);
print("| step | µs per call |\n| --- | ---: |");
for (const [name, us] of rows) print(`| ${name} | ${us.toFixed(2)} |`);

// A decision whose object never answers ends at its deadline: how far past it, on this machine's timers.
// (A measurement, not a test: the suite proves the deadline on a fake clock.)
const DEADLINE_MS = 200;
const hanging = {
  idFromName: (name: string) => name,
  get: () => ({ check: () => new Promise(() => {}) }),
} as unknown as LimiterNamespace;
const hangingSettings = { ...settings, timeoutMs: DEADLINE_MS };
const overshoots: number[] = [];
console.error = () => {}; // each timeout logs a limiter_unavailable line
for (let i = 0; i < 20; i++) {
  const started = performance.now();
  await decide(new Request(url, { headers }), {
    settings: hangingSettings,
    ns: hanging,
    isolate: createIsolate(),
    background: () => {},
  });
  overshoots.push(performance.now() - started - DEADLINE_MS);
}
overshoots.sort((a, b) => a - b);
print(
  `\nA decision whose object hangs, ${DEADLINE_MS} ms deadline, 20 decisions: ` +
    `${overshoots[10]!.toFixed(1)} ms past it at the median, ${overshoots[19]!.toFixed(1)} ms at most.`,
);
