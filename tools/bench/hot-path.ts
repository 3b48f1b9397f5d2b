/**
 * `npm run bench:hot-path`: where an isolate's time goes on one request,
 * step by step, in Node's V8 (the engine workerd runs too). Inside workerd
 * the clock only moves on I/O, so these steps cannot be timed there.
 *
 * Each step runs in a loop for about half a second; the figure is the mean
 * time per call. Compare them with the Durable Object figures in the README.
 * Verifying a bearer token that is not in the isolate's cache is timed over
 * a pool of distinct tokens signed beforehand, one verification per token,
 * so every one misses. The signing keys are made at each run, never kept.
 *
 * It runs in Node but is typechecked as Worker code (tsconfig.json): it runs
 * the Worker's own decision, and uses nothing Node lacks.
 */
import { exportJWK, generateKeyPair, generateSecret, type JWK, SignJWT } from "jose";
import { JWT_ALGORITHMS, type JwtAlgorithm } from "../../src/config/jwt.ts";
import { parseSettings } from "../../src/config/settings.ts";
import { ipKey } from "../../src/core/ip.ts";
import { canonicalKey, hashKey, type RequestFacts } from "../../src/core/keys.ts";
import { normalizePath, requestPath } from "../../src/core/paths.ts";
import { type CountedRule, isCounted, ruleMatches } from "../../src/core/rules.ts";
import { type Reported, rateLimitHeaders } from "../../src/http/rate-limit-headers.ts";
import { tooManyRequests } from "../../src/http/refusals.ts";
import { requestFacts } from "../../src/http/request-facts.ts";
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
const matched = settings.rules.filter((rule) => ruleMatches(rule, "GET", path)).filter(isCounted);
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
/**
 * An isolate holding, for each of the client's keys (its canonical key and
 * the matched rules that make it), a lease that never runs out, so every
 * spend in the loop finds a unit.
 */
function leasing(granted: RuleVerdict, groups: [string, CountedRule[]][] = [[canonical, matched]]) {
  const iso = createIsolate();
  for (const [key, rules] of groups) {
    iso.keys.use(iso.digest(key), Date.now()).keep({
      name: "0".repeat(64),
      rules,
      verdicts: rules.map(() => granted),
      lease: { units: 1e9, receipts: rules.map(() => verdict.counted!), expiresInMs: 3_600_000 },
      sentAtMs: Date.now(),
      sent: iso.keys.stamp(),
      asked: true,
    });
  }
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
const decideIn = (iso: typeof isolate) => () => decide(request, { settings, ns: noObjects, isolate: iso });
/** An isolate that knows of a refusal for the client, held for the whole run (the shipped cap is 10 s). */
function refusingWith(base: RuleVerdict) {
  const iso = createIsolate({ maxRefusalMs: 3_600_000 });
  const held = { ...base, allowed: false, ruleAllows: false, remaining: 0, retryAfterMs: 3_000_000 };
  for (const rule of matched) {
    iso.keys.remember(iso.digest(canonical), rule, "0".repeat(64), Date.now(), iso.keys.stamp(), {
      ...held,
      counted: null,
      holdsForMs: 3_000_000,
    });
  }
  return iso;
}
const refusing = refusingWith(verdict);
const refusingOverridden = refusingWith(withOverride);

// Bearer tokens: one signing key per algorithm the limiter verifies, made now (none is checked in), all in one
// key set, as `JWT_JWKS` holds it, and the shipped rules plus one keyed on the token's subject.
type Signer = { alg: JwtAlgorithm; kid: string; key: CryptoKey; jwk: JWK };
async function signer(alg: JwtAlgorithm): Promise<Signer> {
  const kid = `bench-${alg.toLowerCase()}`;
  if (alg === "HS256") {
    const secret = await generateSecret(alg, { extractable: true });
    const { k } = await exportJWK(secret);
    return { alg, kid, key: secret, jwk: { kty: "oct", k, kid } };
  }
  const pair = await generateKeyPair(
    alg,
    alg === "RS256" ? { modulusLength: 2048 } : alg === "EdDSA" ? { crv: "Ed25519" } : {},
  );
  return { alg, kid, key: pair.privateKey, jwk: { ...(await exportJWK(pair.publicKey)), kid, alg, use: "sig" } };
}
const signers = await Promise.all(JWT_ALGORITHMS.map(signer));
const signerOf = (alg: JwtAlgorithm) => signers.find((s) => s.alg === alg)!;
const ISSUER = "https://auth.example.com/";
const AUDIENCE = "api";
const issuedAt = Math.floor(Date.now() / 1000);
/** A token such as an identity provider issues, told apart from the others by its `jti`. */
const tokenBy = (s: Signer, jti: string) =>
  new SignJWT({ sub: "user-42", scope: "read write" })
    .setProtectedHeader({ alg: s.alg, kid: s.kid, typ: "JWT" })
    .setIssuer(ISSUER)
    .setAudience(AUDIENCE)
    .setIssuedAt(issuedAt)
    .setExpirationTime(issuedAt + 3600)
    .setJti(jti)
    .sign(s.key);
const bearer = (token: string) => new Headers({ ...Object.fromEntries(headers), authorization: `Bearer ${token}` });
const jwtParsed = parseSettings({
  RULES: [...shippedRules, { id: "api-per-user", path: "/api/*", limit: 1000, period: "1h", key: ["jwt:sub|ip"] }],
  JWT_JWKS: JSON.stringify({ keys: signers.map((s) => s.jwk) }),
  JWT: { issuer: ISSUER, audience: AUDIENCE },
});
if (!jwtParsed.ok) throw new Error(jwtParsed.errors.join("\n"));
const jwtSettings = jwtParsed.value;
const jwt = jwtSettings.jwt!;
const wait = { waitMs: jwtSettings.timeoutMs / 2, background: () => {} };

/** `claimsOf` for a token the isolate verified before: the header read, its SipHash digest and an LRU lookup. */
async function cachedClaims(alg: JwtAlgorithm): Promise<Step> {
  const iso = createIsolate();
  const withToken = bearer(await tokenBy(signerOf(alg), "cached"));
  const claims = await iso.tokens.claimsOf(withToken, jwt, wait);
  if (claims === null || iso.tokens.claimsOf(withToken, jwt, wait) instanceof Promise) {
    throw new Error(`an ${alg} token, verified once, is not answered from the cache`);
  }
  const length = withToken.get("authorization")!.length - "Bearer ".length;
  return {
    name: `read a verified ${alg} token's claims from the cache (${length} chars; header, SipHash, LRU)`,
    run: () => iso.tokens.claimsOf(withToken, jwt, wait),
  };
}
const cachedClaimSteps = await Promise.all(JWT_ALGORITHMS.map(cachedClaims));

// A whole decision with the token rule: the client's RS256 token verified before, a lease for each of its two keys
// (its IP, for the shipped rules; its subject, for the token rule).
const jwtRequest = new Request(url, { headers: bearer(await tokenBy(signerOf("RS256"), "decide")) });
const jwtMatched = jwtSettings.rules.filter((rule) => ruleMatches(rule, "GET", path)).filter(isCounted);
const jwtFacts = requestFacts(jwtRequest, path, jwtSettings, { sub: "user-42" });
const jwtGroups = new Map<string, CountedRule[]>();
for (const rule of jwtMatched) {
  const key = canonicalKey(rule.key, jwtFacts);
  jwtGroups.set(key, [...(jwtGroups.get(key) ?? []), rule]);
}
const jwtIsolate = leasing(verdict, [...jwtGroups]);
const decideWithToken = () => decide(jwtRequest, { settings: jwtSettings, ns: noObjects, isolate: jwtIsolate });
const first = await decideWithToken();
if (jwtGroups.size !== 2 || first.kind !== "allow" || decideWithToken() instanceof Promise) {
  throw new Error("the decision with a token rule is not made from leases and the token cache alone");
}
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
  { name: "spend a lease unit", run: () => isolate.keys.peek(digest)!.leases.spend(matched, Date.now()) },
  ...cachedClaimSteps,
  { name: "build the RateLimit headers", run: () => rateLimitHeaders(matched, reports) },
  { name: "build a 429 problem response", run: () => tooManyRequests(matched, refused) },
  { name: "copy the RPC payload (structuredClone)", run: () => structuredClone(matched.map(ruleCheckOf)) },
  { name: "decide a request from leases (all of the above that applies)", run: decideIn(isolate) },
  { name: "decide a request from a known refusal, 429 and all", run: decideIn(refusing) },
  { name: "… from leases, the client with an override", run: decideIn(overridden) },
  { name: "… from a known refusal, the client with an override", run: decideIn(refusingOverridden) },
  { name: "… from leases, the shipped rules + one keyed on jwt:sub\\|ip, token cached", run: decideWithToken },
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

/**
 * The mean time of an async call that needs a new input each time: `run` is
 * awaited on each input in turn, the first `warmUp` of them untimed.
 */
async function timeEachAsync<T>(inputs: readonly T[], warmUp: number, run: (input: T) => Promise<unknown>) {
  for (let i = 0; i < warmUp; i++) await run(inputs[i]!);
  const started = performance.now();
  for (let i = warmUp; i < inputs.length; i++) await run(inputs[i]!);
  return ((performance.now() - started) * 1_000) / (inputs.length - warmUp);
}

const COLD_WARM_UP = 1_000;
const COLD_TIMED = 3_000;
/**
 * Verifying a token the isolate has not seen (its key imported already, as the key set's first token leaves it):
 * `claimsOf` awaited once for each of a pool of distinct tokens, signed before the clock starts.
 */
async function verifyCold(alg: JwtAlgorithm): Promise<number> {
  const pool: Headers[] = [];
  while (pool.length < COLD_WARM_UP + COLD_TIMED) {
    const batch = Array.from({ length: 500 }, (_, i) => tokenBy(signerOf(alg), `cold-${pool.length + i}`));
    pool.push(...(await Promise.all(batch)).map(bearer));
  }
  const iso = createIsolate();
  await iso.tokens.claimsOf(bearer(await tokenBy(signerOf(alg), "import")), jwt, wait);
  const us = await timeEachAsync(pool, COLD_WARM_UP, async (h) => iso.tokens.claimsOf(h, jwt, wait));
  const failed = Object.values(iso.tokens.failures).reduce((a, b) => a + b, 0);
  if (iso.tokens.verifications !== pool.length + 1 || failed > 0) {
    throw new Error(
      `${alg}: ${iso.tokens.verifications} verifications for ${pool.length + 1} tokens, ${failed} failed`,
    );
  }
  return us;
}
const keySizes: Record<JwtAlgorithm, string> = {
  RS256: "RS256, 2048-bit",
  ES256: "ES256, P-256",
  EdDSA: "EdDSA, Ed25519",
  HS256: "HS256",
};

const rows = steps.map((step) => [step.name, time(step.run)] as const);
rows.push(["hash the key (SHA-256, crypto.subtle)", await timeAsync(() => hashKey(canonical))]);
for (const alg of JWT_ALGORITHMS) {
  rows.push([`verify a token not in the cache (${keySizes[alg]}), per verification`, await verifyCold(alg)]);
}
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
  });
  overshoots.push(performance.now() - started - DEADLINE_MS);
}
overshoots.sort((a, b) => a - b);
print(
  `\nA decision whose object hangs, ${DEADLINE_MS} ms deadline, 20 decisions: ` +
    `${overshoots[10]!.toFixed(1)} ms past it at the median, ${overshoots[19]!.toFixed(1)} ms at most.`,
);
