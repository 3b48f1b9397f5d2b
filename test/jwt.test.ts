/**
 * Clients as the API knows them: `jwt:<claim>` keys from verified bearer
 * tokens. A token counts only once its signature, `exp`, `nbf`, `iss` and
 * `aud` are checked against keys from `JWT_JWKS` or `JWT_JWKS_URL`; one that
 * proves nothing makes the claim absent, so `jwt:sub|ip` falls back to the
 * IP. The keys are made when the tests run, and a URL's key set is served
 * by the real test origin.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { parseSettings, type Settings, type SettingsInput } from "../src/config/settings.ts";
import { decide } from "../src/isolate/decide.ts";
import { createIsolate } from "../src/isolate/isolate.ts";
import { env } from "./support/env.ts";
import { decider, requestFrom, statusOf } from "./support/isolate.ts";
import { limiter, originUrl, uniqueIp } from "./support/limiter.ts";
import {
  type Algorithm,
  bearer,
  keySet,
  type SigningKey,
  signingKey,
  tokenFor,
  unsignedToken,
} from "./support/tokens.ts";

const ISSUER = "https://auth.example.test/";
const AUDIENCE = "api";
const perUser = (id: string, limit = 2) => ({ id, limit, period: "1h", key: ["jwt:sub|ip"] });

function settingsOf(rules: unknown[], vars: Omit<SettingsInput, "RULES">): Settings {
  const parsed = parseSettings({ RULES: rules, ...vars });
  if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
  return parsed.value;
}

/** Decides requests in a fresh isolate with a clock the test moves, collecting background work. */
function isolateAt(settings: Settings, startMs = Date.now()) {
  const clock = { nowMs: startMs };
  const isolate = createIsolate({ clock: () => clock.nowMs });
  const { run, background } = decider(settings, env.RATE_LIMITER, isolate);
  const status = async (ip: string, headers: Record<string, string> = {}) =>
    statusOf(await run(requestFrom(ip, "/api", headers)));
  return { clock, isolate, run, background, status };
}

/** What a key set endpoint of the test origin serves, under a name of the test's own. */
async function serveKeySet(name: string, set: { body: unknown; status?: number; delayMs?: number }): Promise<string> {
  await fetch(`${originUrl()}/__jwks/${name}`, { method: "PUT", body: JSON.stringify(set) });
  return `${originUrl()}/jwks/${name}`;
}
async function fetchesOf(name: string): Promise<number> {
  const res = await fetch(`${originUrl()}/__jwks/${name}`);
  return ((await res.json()) as { fetches: number }).fetches;
}

const user = () => `user-${crypto.randomUUID()}`;
const ALGORITHMS: Algorithm[] = ["RS256", "ES256", "EdDSA", "HS256"];
let keys: Record<Algorithm, SigningKey>;
beforeAll(async () => {
  const made = await Promise.all(ALGORITHMS.map((alg) => signingKey(alg)));
  keys = Object.fromEntries(made.map((key) => [key.alg, key])) as Record<Algorithm, SigningKey>;
});
const inline = () => ({
  JWT_JWKS: JSON.stringify(keySet(...Object.values(keys))),
  JWT: { issuer: ISSUER, audience: AUDIENCE },
});
const valid = (key: SigningKey, sub: string, claims: Record<string, unknown> = {}) =>
  tokenFor(key, { sub, iss: ISSUER, aud: AUDIENCE, ...claims });

describe("a verified token's claim is the client", () => {
  it.each(ALGORITHMS)("%s: two users behind one IP have a limit each, and a user keeps it from any IP", async (alg) => {
    const { status } = isolateAt(settingsOf([perUser("per-user")], inline()));
    const [alice, bob] = [await valid(keys[alg], user()), await valid(keys[alg], user())];
    const ip = uniqueIp();
    const trace = [
      await status(ip, bearer(alice)),
      await status(ip, bearer(bob)),
      await status(ip, bearer(alice)),
      await status(ip, bearer(bob)),
      await status(ip, bearer(alice)),
      await status(uniqueIp(), bearer(alice)),
      await status(ip, bearer(bob)),
    ];
    expect(trace).toEqual([200, 200, 200, 200, 429, 429, 429]);
    // The IP itself was never counted: a request without a token still has its own 2.
    expect([await status(ip), await status(ip), await status(ip)]).toEqual([200, 200, 429]);
  });

  it("a nested claim, jwt:org.id, names the key; a number is its decimal text", async () => {
    const rule = { id: "per-org", limit: 3, period: "1h", key: ["jwt:org.id|ip"] };
    const { status } = isolateAt(settingsOf([rule], inline()));
    const org = Math.floor(Math.random() * 1e12);
    const [ann, ben] = [
      await valid(keys.ES256, user(), { org: { id: org } }),
      await valid(keys.ES256, user(), { org: { id: org } }),
    ];
    const trace = [];
    for (const token of [ann, ben, ann, ben]) trace.push(await status(uniqueIp(), bearer(token)));
    expect(trace).toEqual([200, 200, 200, 429]);
  });

  it("is read from the header or cookie JWT names, with or without Bearer", async () => {
    const settings = settingsOf([perUser("elsewhere", 1)], {
      ...inline(),
      JWT: { issuer: ISSUER, audience: AUDIENCE, header: "X-Session-Token", cookie: "session" },
    });
    const { status } = isolateAt(settings);
    const [a, b, c] = [user(), user(), user()];
    const ta = await valid(keys.EdDSA, a);
    const tb = await valid(keys.EdDSA, b);
    const tc = await valid(keys.EdDSA, c);
    const ip = uniqueIp();
    expect([
      await status(ip, { "x-session-token": ta }),
      await status(uniqueIp(), { "x-session-token": `Bearer ${ta}` }),
      await status(ip, { cookie: `theme=dark; session=${tb}` }),
      await status(uniqueIp(), { cookie: `session=${tb}` }),
      // Authorization is not read when JWT names another header: this is the IP's first request.
      await status(ip, bearer(tc)),
      await status(ip, { "x-session-token": tc }),
    ]).toEqual([200, 429, 200, 429, 200, 200]);
  });
});

describe("a token that proves nothing falls back to the IP, and is counted and logged, never an error", () => {
  const other = () => signingKey("ES256", keys.ES256.kid);
  const cases: [string, () => Promise<string>, string | null][] = [
    ["a forged signature (another key, the same kid)", async () => valid(await other(), user()), "bad signature"],
    ["alg: none", async () => unsignedToken({ sub: user(), iss: ISSUER, aud: AUDIENCE }), "algorithm not allowed"],
    [
      "an expired token",
      () => tokenFor(keys.RS256, { sub: user(), iss: ISSUER, aud: AUDIENCE }, { expiresIn: -120 }),
      "expired",
    ],
    [
      "a token not valid yet",
      () => tokenFor(keys.RS256, { sub: user(), iss: ISSUER, aud: AUDIENCE }, { notBefore: 600 }),
      "not yet valid",
    ],
    [
      "the wrong audience",
      () => tokenFor(keys.ES256, { sub: user(), iss: ISSUER, aud: "other-api" }),
      "wrong audience",
    ],
    [
      "the wrong issuer",
      () => tokenFor(keys.ES256, { sub: user(), iss: "https://evil.test/", aud: AUDIENCE }),
      "wrong issuer",
    ],
    [
      "an unknown kid",
      () =>
        valid(keys.ES256, user()).then(() =>
          tokenFor({ ...keys.ES256, kid: "nobody" }, { sub: user(), iss: ISSUER, aud: AUDIENCE }),
        ),
      "unknown key",
    ],
    ["a 100 KB token", async () => `${await valid(keys.HS256, user())}${"A".repeat(100_000)}`, "too large"],
    ["three parts that are not a token", async () => "abc.def.ghi", "malformed"],
    [
      "a non-string claim (sub is an object)",
      () => tokenFor(keys.EdDSA, { sub: { id: 1 } as unknown as string, iss: ISSUER, aud: AUDIENCE }),
      null,
    ],
    [
      "a claim that is true",
      () => tokenFor(keys.EdDSA, { sub: true as unknown as string, iss: ISSUER, aud: AUDIENCE }),
      null,
    ],
  ];

  it.each(cases)("%s", async (_, make, reason) => {
    const { status, isolate } = isolateAt(settingsOf([perUser("fallback")], inline()));
    const token = await make();
    const ip = uniqueIp();
    expect([await status(ip, bearer(token)), await status(ip), await status(ip, bearer(token))]).toEqual([
      200, 200, 429,
    ]);
    const failures = Object.entries(isolate.tokens.failures).filter(([, n]) => n > 0);
    expect(failures).toEqual(reason === null ? [] : [[reason, 2]]);
  });

  it("an HS256 token signed with a public key as its secret (algorithm confusion) proves nothing", async () => {
    const { status, isolate } = isolateAt(settingsOf([perUser("confusion", 1)], inline()));
    const publicAsSecret = new TextEncoder().encode(JSON.stringify(keys.RS256.jwk));
    const forged = await tokenFor(
      { alg: "HS256", kid: keys.RS256.kid, signWith: publicAsSecret, jwk: {} },
      { sub: user(), iss: ISSUER, aud: AUDIENCE },
    );
    const ip = uniqueIp();
    expect([await status(ip, bearer(forged)), await status(ip)]).toEqual([200, 429]);
    expect(isolate.tokens.failures["unknown key"]).toBe(1);
  });
});

describe("verifying costs one check per token, not one per request", () => {
  it("a token verified once answers from the isolate's memory: the decision is synchronous again", async () => {
    const settings = settingsOf([perUser("warm", 100)], inline());
    const { isolate, run } = isolateAt(settings);
    const headers = bearer(await valid(keys.RS256, user()));
    const ip = uniqueIp();
    // A few requests, so that the isolate holds a lease for the client, as it does for a busy one.
    for (let i = 0; i < 5; i++) await run(requestFrom(ip, "/api", headers));
    expect(isolate.tokens.claimsOf(new Headers(headers), settings.jwt!, { waitMs: 0, background: () => {} })).toEqual(
      expect.objectContaining({ aud: AUDIENCE }),
    );
    const again = decide(requestFrom(ip, "/api", headers), { settings, ns: env.RATE_LIMITER, isolate });
    expect(again instanceof Promise).toBe(false);
    expect(isolate.tokens.verifications).toBe(1);
  });

  it("a burst of requests with one new token verifies it once", async () => {
    const { isolate, status } = isolateAt(settingsOf([perUser("burst", 100)], inline()));
    const headers = bearer(await valid(keys.EdDSA, user()));
    const ip = uniqueIp();
    const all = await Promise.all(Array.from({ length: 20 }, () => status(ip, headers)));
    expect(all).toEqual(Array(20).fill(200));
    expect(isolate.tokens.verifications).toBe(1);
  });

  it("a verdict is kept no longer than the token lives: after exp, the same token is verified again and fails", async () => {
    const settings = settingsOf([perUser("lifetime", 100)], {
      ...inline(),
      JWT: { audience: AUDIENCE, clock_skew: "0s" },
    });
    const { clock, isolate, status } = isolateAt(settings);
    const token = await tokenFor(keys.ES256, { sub: user(), aud: AUDIENCE }, { expiresIn: 30 });
    const ip = uniqueIp();
    expect(await status(ip, bearer(token))).toBe(200);
    clock.nowMs += 31_000;
    expect(await status(ip, bearer(token))).toBe(200);
    expect([isolate.tokens.verifications, isolate.tokens.failures.expired]).toEqual([2, 1]);
  });
});

describe("keys from JWT_JWKS_URL", () => {
  const urlSettings = (url: string, rules = [perUser("remote", 100)], jwt: Record<string, unknown> = {}) =>
    settingsOf(rules, { JWT_JWKS_URL: url, JWT: { audience: AUDIENCE, ...jwt }, LIMITER_TIMEOUT_MS: 1000 });
  const claimOf = async (run: ReturnType<typeof isolateAt>["run"], ip: string, token: string) => {
    const outcome = await run(requestFrom(ip, "/api", bearer(token)));
    return outcome.kind === "allow" ? outcome.headers.RateLimit : outcome.response.status;
  };

  it("are fetched once per isolate; after a rotation, a token with the new kid fetches them again", async () => {
    const name = `rotate-${crypto.randomUUID()}`;
    const [k1, k2] = [await signingKey("ES256"), await signingKey("ES256")];
    const url = await serveKeySet(name, { body: keySet(k1) });
    const { clock, status, isolate, background } = isolateAt(urlSettings(url, [perUser("rotate", 1)]));
    const [alice, bob] = [user(), user()];
    const ip = uniqueIp();
    expect([
      await status(ip, bearer(await valid(k1, alice))),
      await status(ip, bearer(await valid(k1, alice))),
    ]).toEqual([200, 429]);
    expect(await fetchesOf(name)).toBe(1);
    await serveKeySet(name, { body: keySet(k1, k2) });
    clock.nowMs += 60_000;
    expect([await status(ip, bearer(await valid(k2, bob))), await status(ip, bearer(await valid(k2, bob)))]).toEqual([
      200, 429,
    ]);
    await background.settled();
    expect([await fetchesOf(name), isolate.tokens.failures["unknown key"]]).toEqual([2, 0]);
  });

  it("tokens naming random kids fetch the set at most once a minute", async () => {
    const name = `flood-${crypto.randomUUID()}`;
    const real = await signingKey("ES256");
    const url = await serveKeySet(name, { body: keySet(real) });
    const { clock, status, isolate, background } = isolateAt(urlSettings(url, [perUser("flood", 1000)]));
    const attacker = await signingKey("ES256");
    const flood = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const token = await tokenFor({ ...attacker, kid: crypto.randomUUID() }, { sub: user(), aud: AUDIENCE });
        await status("198.51.100.77", bearer(token));
      }
      await background.settled();
    };
    await flood(50);
    expect(await fetchesOf(name)).toBe(1);
    clock.nowMs += 59_000;
    await flood(50);
    expect(await fetchesOf(name)).toBe(1);
    clock.nowMs += 1_000;
    await flood(50);
    expect(await fetchesOf(name)).toBe(2);
    expect(isolate.tokens.failures["unknown key"]).toBe(150);
  });

  it("a slow endpoint holds a request at most half of LIMITER_TIMEOUT_MS; it falls back to the IP, and the keys serve the next one", async () => {
    const name = `slow-${crypto.randomUUID()}`;
    const key = await signingKey("EdDSA");
    const url = await serveKeySet(name, { body: keySet(key), delayMs: 1500 });
    const isolate = createIsolate();
    const { run, background } = decider(urlSettings(url, [perUser("slow", 1)]), env.RATE_LIMITER, isolate);
    const token = await valid(key, user());
    const ip = uniqueIp();
    const started = Date.now();
    const first = await run(requestFrom(ip, "/api", bearer(token)));
    const tookMs = Date.now() - started;
    expect([statusOf(first), isolate.tokens.failures["no keys"]]).toEqual([200, 1]);
    expect(tookMs).toBeGreaterThanOrEqual(495);
    expect(tookMs).toBeLessThan(1000);
    await background.settled();
    // The IP's one is spent, the user's is not.
    expect(statusOf(await run(requestFrom(ip, "/api", bearer(token))))).toBe(200);
    expect(statusOf(await run(requestFrom(ip, "/api", bearer(token))))).toBe(429);
    expect(statusOf(await run(requestFrom(ip, "/api")))).toBe(429);
  });

  it("an endpoint that goes down: the keys held go on verifying tokens, and it is asked again at most every 5 s", async () => {
    const name = `down-${crypto.randomUUID()}`;
    const key = await signingKey("RS256");
    const url = await serveKeySet(name, { body: keySet(key) });
    const settings = urlSettings(url, [perUser("down", 100)], { jwks_ttl: "1m" });
    const { clock, isolate, background, run } = isolateAt(settings);
    const ip = uniqueIp();
    expect(await claimOf(run, ip, await valid(key, user()))).toMatch(/^"down";r=99;t=/);
    await serveKeySet(name, { body: { error: "down" }, status: 503 });
    clock.nowMs += 61_000;
    for (let i = 0; i < 5; i++) expect(await claimOf(run, ip, await valid(key, user()))).toMatch(/^"down";r=99;t=/);
    await background.settled();
    clock.nowMs += 4_000;
    expect(await claimOf(run, ip, await valid(key, user()))).toMatch(/^"down";r=99;t=/);
    clock.nowMs += 1_000;
    expect(await claimOf(run, ip, await valid(key, user()))).toMatch(/^"down";r=99;t=/);
    await background.settled();
    expect(await fetchesOf(name)).toBe(3);
    expect(isolate.tokens.keySetStats(settings.jwt!)).toEqual({ fetches: 3, failures: 2, generation: 1 });
  });

  it("an endpoint down from the start: every token falls back to the IP at once, and it is asked at most every 5 s", async () => {
    const name = `never-${crypto.randomUUID()}`;
    const url = await serveKeySet(name, { body: "nope", status: 500 });
    const { clock, status, isolate, background } = isolateAt(urlSettings(url, [perUser("never", 2)]));
    const token = await valid(keys.ES256, user());
    const ip = uniqueIp();
    const trace = [await status(ip, bearer(token))];
    await background.settled();
    trace.push(await status(ip, bearer(token)), await status(ip));
    expect(trace).toEqual([200, 200, 429]);
    expect(await fetchesOf(name)).toBe(1);
    clock.nowMs += 5_000;
    await status(uniqueIp(), bearer(token));
    await background.settled();
    expect([await fetchesOf(name), isolate.tokens.failures["no keys"]]).toEqual([2, 3]);
  });
});

describe("tier_claim: a claim names the client's tier", () => {
  it("a pro user gets the pro limit; a plan that is no tier, or none, gets the rule's own", async () => {
    const rule = { id: "tiered", limit: 2, period: "1h", key: ["jwt:sub|ip"] };
    const settings = settingsOf([rule], {
      ...inline(),
      JWT: { issuer: ISSUER, audience: AUDIENCE, tier_claim: "plan" },
      TIERS: { pro: { tiered: 4 } },
    });
    const { run } = isolateAt(settings);
    const trace = async (plan: unknown) => {
      const token = await valid(keys.ES256, user(), plan === undefined ? {} : { plan });
      const seen: string[] = [];
      for (let i = 0; i < 5; i++) {
        const outcome = await run(requestFrom(uniqueIp(), "/api", bearer(token)));
        seen.push(outcome.kind === "allow" ? outcome.headers["RateLimit-Policy"]! : String(outcome.response.status));
      }
      return seen;
    };
    const pro = '"tiered";q=4;w=3600';
    const own = '"tiered";q=2;w=3600';
    expect(await trace("pro")).toEqual([pro, pro, pro, pro, "429"]);
    expect(await trace("gold")).toEqual([own, own, "429", "429", "429"]);
    expect(await trace(undefined)).toEqual([own, own, "429", "429", "429"]);
    expect(await trace({ name: "pro" })).toEqual([own, own, "429", "429", "429"]);
  });
});

describe("network facts from request.cf", () => {
  const cfRequest = (ip: string, cf: Record<string, unknown> | undefined) =>
    new Request("http://limiter.test/api", { headers: { "cf-connecting-ip": ip }, ...(cf ? { cf } : {}) });

  it("asn: clients of one network share a limit, another network has its own, and a request without one shares the absent key", async () => {
    const rule = { id: `per-asn-${crypto.randomUUID().slice(0, 8)}`, limit: 2, period: "1h", key: ["asn"] };
    const { run } = isolateAt(settingsOf([rule], {}));
    const asn = 64_512 + Math.floor(Math.random() * 1000);
    const status = async (cf?: Record<string, unknown>) => statusOf(await run(cfRequest(uniqueIp(), cf)));
    expect([
      await status({ asn }),
      await status({ asn, country: "DE" }),
      await status({ asn }),
      await status({ asn: asn + 1 }),
      await status(undefined),
      await status({ country: "DE" }),
      await status(undefined),
    ]).toEqual([200, 200, 429, 200, 200, 200, 429]);
  });

  it.each([
    ["country", { country: "DE" }, { country: "FR" }],
    ["continent", { continent: "EU" }, { continent: "AS" }],
    [
      "ja4",
      { botManagement: { ja4: "t13d1516h2_8daaf6152771_02713d6af862" } },
      { botManagement: { ja4: "t13d1517h2_8daaf6152771_b0da82dd1658" } },
    ],
  ])("%s is a key of its own", async (fact, one, another) => {
    const rule = { id: `per-${fact}-${crypto.randomUUID().slice(0, 8)}`, limit: 1, period: "1h", key: [fact] };
    const { run } = isolateAt(settingsOf([rule], {}));
    const status = async (cf: Record<string, unknown>) => statusOf(await run(cfRequest(uniqueIp(), cf)));
    expect([await status(one), await status(another), await status(one)]).toEqual([200, 200, 429]);
  });
});

describe("the admin API names a client by its claim", () => {
  it("reads the client under the tier its last request's token claimed, as that request was decided", async () => {
    const ADMIN = "admin-token-jwt-test-51c9";
    const window = { id: `tiered-${crypto.randomUUID().slice(0, 8)}`, limit: 2, period: "1h", key: ["jwt:sub|ip"] };
    const places = { id: `${window.id}-c`, concurrency: 1, key: ["jwt:sub|ip"] };
    const send = limiter([window, places], {
      ...inline(),
      ADMIN_TOKEN: ADMIN,
      JWT: { issuer: ISSUER, audience: AUDIENCE, tier_claim: "plan" },
      TIERS: { pro: { [window.id]: 4, [places.id]: 3 } },
    } as never);
    const sub = user();
    const call = async (plan?: string) => {
      const token = await valid(keys.RS256, sub, plan === undefined ? {} : { plan });
      const response = await send("/api", { headers: { "cf-connecting-ip": uniqueIp(), ...bearer(token) } });
      await response.arrayBuffer();
      return response.status;
    };
    const status = async (rule: string) => {
      const query = `rule=${rule}&key=${encodeURIComponent(`jwt:sub=${sub}`)}`;
      return (await (await send(`/__ratelimit/status?${query}`, { headers: bearer(ADMIN) })).json()) as Record<
        string,
        unknown
      >;
    };
    expect(await call("pro")).toBe(200);
    expect(await status(window.id)).toMatchObject({ limit: 4, tier: "pro", remaining: 3, allowed: true });
    expect(await status(places.id)).toMatchObject({ limit: 3, tier: "pro", inUse: 0, free: 3 });
    // A token without the claim: the rule's own limits, for that request and for the reads after it.
    expect(await call()).toBe(200);
    const own = await status(window.id);
    expect(own).toMatchObject({ limit: 2, remaining: 0, allowed: false });
    expect(own).not.toHaveProperty("tier");
    const ownPlaces = await status(places.id);
    expect(ownPlaces).toMatchObject({ limit: 1 });
    expect(ownPlaces).not.toHaveProperty("tier");
    // And the claim again: its tier's.
    expect(await call("pro")).toBe(200);
    expect(await status(window.id)).toMatchObject({ limit: 4, tier: "pro", remaining: 1, allowed: true });
  });

  it("status and reset with key=jwt:sub=<value> reach the user's own counter", async () => {
    const ADMIN = "admin-token-jwt-test-51c9";
    const rule = perUser(`admin-${crypto.randomUUID().slice(0, 8)}`, 2);
    const send = limiter([rule], { ...inline(), ADMIN_TOKEN: ADMIN } as never);
    const sub = user();
    const token = await valid(keys.RS256, sub);
    const ip = uniqueIp();
    const call = (headers: Record<string, string>) => send("/api", { headers: { "cf-connecting-ip": ip, ...headers } });
    expect([
      (await call(bearer(token))).status,
      (await call(bearer(token))).status,
      (await call(bearer(token))).status,
    ]).toEqual([200, 200, 429]);
    const query = `rule=${rule.id}&key=${encodeURIComponent(`jwt:sub=${sub}`)}`;
    const admin = (method: string) => send(`/__ratelimit/status?${query}`, { method, headers: bearer(ADMIN) });
    const status = (await (await admin("GET")).json()) as { remaining: number; allowed: boolean };
    expect([status.remaining, status.allowed]).toEqual([0, false]);
    expect((await admin("DELETE")).status).toBe(200);
    expect((await call(bearer(token))).status).toBe(200);
    const rules = (await (await send("/__ratelimit/rules", { headers: bearer(ADMIN) })).json()) as { jwt: unknown };
    expect(rules.jwt).toEqual({
      header: "authorization",
      cookie: null,
      issuer: [ISSUER],
      audience: [AUDIENCE],
      clockSkewMs: 30_000,
      algorithms: ["RS256", "ES256", "EdDSA", "HS256"],
      tierClaim: null,
      keys: { inline: ALGORITHMS.map((alg) => keys[alg].kid) },
    });
    // The IP was never the key: it still has its own 2.
    expect([(await call({})).status, (await call({})).status, (await call({})).status]).toEqual([200, 200, 429]);
  });
});
