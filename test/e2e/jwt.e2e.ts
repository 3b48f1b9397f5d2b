/**
 * Per-user limits from verified bearer tokens, over real HTTP through
 * `wrangler dev`: rule "e2e-user" allows 3 requests a day under /user/, keyed
 * on `jwt:sub|ip`. A token the Worker can verify against JWT_JWKS counts for
 * its `sub`; a request without one, or with one that does not verify (signed
 * by another key, or expired), counts for its client IP instead.
 *
 * The global setup makes a fresh ES256 key pair per run: the Worker has the
 * public half, these tests sign with the private half. Every test uses its own
 * IP and subjects, so reruns and other tests never meet.
 */
import { readFileSync } from "node:fs";
import { generateKeyPair, importJWK, type JWTPayload, SignJWT } from "jose";
import { describe, expect, inject, it } from "vitest";
import { originHits, send, uniqueIp, uniqueTag } from "./support/client.ts";

const RULE = "e2e-user";
const LIMIT = 3;
const LIMITED = [200, 200, 200, 429];

type SigningKey = Awaited<ReturnType<typeof generateKeyPair>>["privateKey"];

/** The key the Worker trusts: the private half of the JWK in its JWT_JWKS. */
const trusted = inject("jwtPrivateJwk");
const trustedKey = (await importJWK(trusted, "ES256")) as SigningKey;

/** A token for `sub`, signed with `key` under the trusted key's `kid`, valid for an hour unless `claims` say otherwise. */
function token(sub: string, key: SigningKey = trustedKey, claims: JWTPayload = {}): Promise<string> {
  const nowS = Math.floor(Date.now() / 1000);
  return new SignJWT({ iat: nowS, exp: nowS + 3600, ...claims })
    .setProtectedHeader({ alg: "ES256", kid: trusted.kid! })
    .setSubject(sub)
    .sign(key);
}

/** GET /user/profile from `ip`, tagged `tag` for the origin's count, with `Authorization: Bearer <bearer>` if given. */
async function get(ip: string, tag: string, bearer?: string): Promise<number> {
  const headers: Record<string, string> = { "cf-connecting-ip": ip, "x-test-tag": tag };
  if (bearer !== undefined) headers.authorization = `Bearer ${bearer}`;
  return (await send("/user/profile", { headers })).status;
}

describe('a rule keyed on "jwt:sub|ip"', () => {
  it("gives each user with a valid token their own 3 requests, even from one IP", async () => {
    const ip = uniqueIp();
    const alice = { sub: uniqueTag("alice"), tag: uniqueTag("jwt-alice") };
    const bob = { sub: uniqueTag("bob"), tag: uniqueTag("jwt-bob") };
    const aliceToken = await token(alice.sub);
    const bobToken = await token(bob.sub);

    // Turn by turn, so a shared count would refuse someone after 3 requests in all.
    const statuses = { alice: [] as number[], bob: [] as number[] };
    for (let i = 0; i <= LIMIT; i++) {
      statuses.alice.push(await get(ip, alice.tag, aliceToken));
      statuses.bob.push(await get(ip, bob.tag, bobToken));
    }
    expect(statuses).toEqual({ alice: LIMITED, bob: LIMITED });
    expect(await originHits(alice.tag)).toBe(LIMIT);
    expect(await originHits(bob.tag)).toBe(LIMIT);

    // Their 6 admitted requests were not the IP's: a request from it without a token still goes through.
    const anonymousTag = uniqueTag("jwt-anonymous");
    expect(await get(ip, anonymousTag)).toBe(200);
    expect(await originHits(anonymousTag)).toBe(1);

    // Tokens are credentials: the Worker's logs never show one.
    const log = readFileSync(inject("wranglerLogFile"), "utf8");
    expect(log).not.toContain(aliceToken);
    expect(log).not.toContain(bobToken);
  });

  it("answers the refused user with the rule's 429", async () => {
    const ip = uniqueIp();
    const bearer = await token(uniqueTag("carol"));
    const headers = { "cf-connecting-ip": ip, authorization: `Bearer ${bearer}` };
    for (let i = 0; i < LIMIT; i++) expect((await send("/user/settings", { headers })).status).toBe(200);

    const refused = await send("/user/settings", { headers });
    expect(refused.status).toBe(429);
    expect(refused.headers["ratelimit-policy"]).toContain(`"${RULE}";q=${LIMIT};w=86400`);
    expect(refused.json()).toMatchObject({ status: 429, "violated-policies": [RULE] });
  });

  it("counts a forged token (another key, same kid and alg) for the IP, with the requests that have no token", async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("jwt-forged");
    const { privateKey: forger } = await generateKeyPair("ES256");
    // It claims to be a user who has used nothing, and it names the trusted key's kid.
    const forged = await token(uniqueTag("mallory"), forger);

    const statuses = [
      await get(ip, tag),
      await get(ip, tag),
      await get(ip, tag, forged),
      await get(ip, tag, forged),
      await get(ip, tag),
    ];
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    expect(await originHits(tag)).toBe(LIMIT);

    // A valid token from the same IP has a count of its own.
    const userTag = uniqueTag("jwt-honest");
    expect(await get(ip, userTag, await token(uniqueTag("dave")))).toBe(200);
    expect(await originHits(userTag)).toBe(1);
  });

  it("counts an expired token for the IP, not for its subject", async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("jwt-expired");
    const erin = uniqueTag("erin");
    const nowS = Math.floor(Date.now() / 1000);
    // Expired an hour ago: far beyond the 30 s of clock skew allowed.
    const expired = await token(erin, trustedKey, { iat: nowS - 7200, exp: nowS - 3600 });

    const statuses = [
      await get(ip, tag, expired),
      await get(ip, tag),
      await get(ip, tag, expired),
      await get(ip, tag, expired),
      await get(ip, tag),
    ];
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    expect(await originHits(tag)).toBe(LIMIT);

    // The subject's own count was never touched: a fresh token for erin gets through.
    const renewedTag = uniqueTag("jwt-renewed");
    expect(await get(ip, renewedTag, await token(erin))).toBe(200);
    expect(await originHits(renewedTag)).toBe(1);
  });
});
