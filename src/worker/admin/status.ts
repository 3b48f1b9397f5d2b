/**
 * @module
 * `GET` and `DELETE {prefix}/status?rule=<id>&key=<client>`: one client's
 * count under one rule (and its penalty, while one lasts), read without
 * counting, or reset to unblock it (a reset lifts the penalty too). Under a
 * concurrency rule, `GET` reads its places: held, free, and requests waiting.
 *
 * `hash=<64 lowercase hex digits>` names the client in place of `key=`: its
 * object's name, the SHA-256 of its canonical key, as the statistics show a
 * top offender (`topRefused[].hash`). So a client known only by its hash can
 * be read and reset. A reset by hash reaches the object as one by key does;
 * this isolate, which knows its clients by a keyed digest of the canonical
 * key, not by the hash, forgets the client's cached refusal and lease at
 * once only when it holds a live refusal of it (a refusal records the
 * object's name, so the digest is found through it): the answer's
 * `forgotten` says whether it did. When it did not, this isolate held no
 * refusal of the client (or it had lapsed), so none can answer for it;
 * a refusal of a call sent before the reset that answers after it is then
 * remembered, as every other isolate's is, for at most `maxRefusalMs`
 * (10 s by default), and a lease it holds for the client is spent until
 * it ends rather than written off.
 */
import type { Settings } from "../../config/settings.ts";
import { hashKey } from "../../core/keys.ts";
import { fail, ok, type Result } from "../../core/result.ts";
import { isCounted, type PlacedRule, quotaUnder, type Rule } from "../../core/rules.ts";
import { show } from "../../core/show.ts";
import { LIMITER_UNAVAILABLE, type Problem, problemResponse } from "../../http/problem.ts";
import { forgetClient, forgetClientNamed, type Isolate } from "../../isolate/isolate.ts";
import { type LimiterNamespace, withDeadline } from "../../object/client.ts";
import { toPlaceRequest, toRuleCheck } from "../../object/protocol.ts";
import { keyHashPrefix, logEvent } from "../../observe/log.ts";
import { adminKey } from "./key.ts";
import { json } from "./views.ts";

export const UNKNOWN_RULE = "urn:edge-rate-limiter:unknown-rule";
export const MALFORMED_KEY = "urn:edge-rate-limiter:malformed-key";

/** What a status request needs besides its URL. */
export type StatusContext = {
  /** `GET` reads the count; `DELETE` resets it. */
  method: string;
  settings: Settings;
  ns: LimiterNamespace;
  /** The isolate whose refusal and lease for the client a reset forgets at once. */
  isolate: Isolate;
};

/** An object's name: the SHA-256 of a canonical key, in lowercase hex. */
const OBJECT_NAME = /^[0-9a-f]{64}$/;

/** Answers a status request: the client's count, or its reset. */
export async function clientStatus(url: URL, context: StatusContext): Promise<Response> {
  const { settings } = context;
  const ruleId = url.searchParams.get("rule");
  const rule = settings.rules.find((r) => r.id === ruleId);
  if (rule === undefined) return unknownRule(ruleId, settings.rules);
  const named = await clientNamed(url, rule, settings);
  if (!named.ok) return badRequest(MALFORMED_KEY, "Malformed key", { detail: named.errors.join(" ") });
  const { name, canonical } = named.value;
  const client: Client = {
    rule,
    name,
    canonical,
    stub: context.ns.get(context.ns.idFromName(name)),
    about:
      canonical === null
        ? { rule: rule.id, hash: name, keyHash: keyHashPrefix(name) }
        : { rule: rule.id, key: JSON.parse(canonical) as unknown, keyHash: keyHashPrefix(name) },
  };
  return context.method === "DELETE" ? reset(client, context) : peek(client, settings.timeoutMs);
}

/** The client's object name, from `key=` (with its canonical key) or `hash=` (the name itself). */
export async function clientNamed(
  url: URL,
  rule: Rule,
  settings: Settings,
): Promise<Result<{ name: string; canonical: string | null }>> {
  const hashes = url.searchParams.getAll("hash");
  if (hashes.length === 0) {
    const key = adminKey(rule, url.searchParams.getAll("key"), settings.ipv6PrefixBits);
    return key.ok ? ok({ name: await hashKey(key.value), canonical: key.value }) : key;
  }
  if (url.searchParams.has("key")) return fail('Give the "key" or the "hash" query parameter, not both.');
  if (hashes.length > 1) return fail(`The "hash" query parameter is given ${hashes.length} times; give it once.`);
  const hash = hashes[0]!;
  if (!OBJECT_NAME.test(hash)) {
    return fail(
      `The "hash" query parameter must be 64 lowercase hexadecimal digits (a client's hash, as the statistics show it); got ${show(hash)}.`,
    );
  }
  return ok({ name: hash, canonical: null });
}

/** One client under one rule, as a status request names it. */
export type Client = {
  rule: Rule;
  /** Its object's name. */
  name: string;
  /** Its canonical key; null when named by `hash=`. */
  canonical: string | null;
  stub: ReturnType<LimiterNamespace["get"]>;
  /** What every answer about the client starts with: the key as named, or the hash. */
  about: { rule: string; key: unknown; keyHash: string } | { rule: string; hash: string; keyHash: string };
};

async function reset({ rule, name, canonical, stub, about }: Client, { settings, isolate }: StatusContext) {
  const done = await withDeadline(stub.reset([rule.id]), settings.timeoutMs);
  if (!done.ok) return unavailable(about, done.message);
  // Under a rule that gives places: how many of the client's places were freed (its requests in flight are not stopped).
  const freed = isCounted(rule) ? {} : { freed: done.value.freed };
  logEvent({ event: "admin_reset", rule: rule.id, key: about.keyHash, ...freed }, "info");
  if (canonical !== null) {
    // This isolate forgets its refusal and its lease at once; other isolates' refusals lapse within maxRefusalMs.
    forgetClient(isolate, rule, canonical);
    return json({ ...about, reset: true, ...freed });
  }
  return json({ ...about, reset: true, ...freed, forgotten: forgetClientNamed(isolate, rule, name) });
}

async function peek(client: Client, timeoutMs: number): Promise<Response> {
  const { rule, stub, about } = client;
  if (!isCounted(rule)) return peekPlaces(client, rule, timeoutMs);
  const peeked = await withDeadline(stub.peek([toRuleCheck(rule)], { lastTier: true }), timeoutMs);
  if (!peeked.ok) return unavailable(about, peeked.message);
  const verdict = peeked.value.verdicts[0]!;
  // The limit this client has: the rule's, an override's or a tier's; null when an override lifts or denies.
  const limit = verdict.limit ?? (verdict.override !== undefined ? null : tierLimit(rule, verdict.tier));
  return json({
    ...about,
    limit,
    ...(verdict.override ? { override: verdict.override } : {}),
    ...(verdict.tier ? { tier: verdict.tier } : {}),
    // What the limit is per: the period this client is in, where its kind's is not the same at every instant (a
    // calendar month); a token bucket's period (its rate is `limit` per `periodMs`), its burst and depth beside it.
    periodMs: verdict.windowMs ?? rule.quota.periodMs ?? rule.quota.windowMs,
    ...(limit === null ? {} : (verdict.own === undefined ? rule.quota : quotaUnder(rule, verdict.own)).shown?.(limit)),
    weighted: verdict.weighted,
    allowed: verdict.ruleAllows,
    // While the rule's penalty (block_for) lasts: when it ends, by the object's clock.
    ...(verdict.penaltyMs ? { blockedUntil: new Date(peeked.value.nowMs + verdict.penaltyMs).toISOString() } : {}),
    remaining: verdict.remaining,
    // No wait admits it (a cost above a token bucket's burst, a lasting deny): no wait is named.
    ...(verdict.never
      ? { never: true, retryAfterSeconds: null, retryAfterMs: null, resetSeconds: null, resetMs: null }
      : {
          retryAfterSeconds: Math.ceil(verdict.retryAfterMs / 1000),
          retryAfterMs: verdict.retryAfterMs,
          resetSeconds: Math.ceil(verdict.resetMs / 1000),
          resetMs: verdict.resetMs,
        }),
  });
}

/** The limit a rule gives a client in `tier` (the one its last request's token claimed), or its own. */
const tierLimit = (rule: Rule, tier: string | undefined): number =>
  (tier === undefined ? undefined : rule.tiers?.[tier]) ?? rule.limit;

/** A concurrency rule's places for the client: how many it has, how many are held, how many requests wait. */
async function peekPlaces({ stub, about }: Client, rule: PlacedRule, timeoutMs: number): Promise<Response> {
  const peeked = await withDeadline(stub.peekPlaces(rule.id, toPlaceRequest(rule), { lastTier: true }), timeoutMs);
  if (!peeked.ok) return unavailable(about, peeked.message);
  const { limit, inUse, waiting, override, tier, never } = peeked.value;
  return json({
    ...about,
    limit,
    ...(override ? { override } : {}),
    ...(tier ? { tier } : {}),
    ...(never ? { never } : {}),
    placeTimeoutMs: rule.placeTimeoutMs,
    inUse,
    free: limit === null ? null : Math.max(0, limit - inUse),
    waiting,
  });
}

export function unknownRule(ruleId: string | null, rules: Rule[]): Response {
  const known = rules.map((r) => r.id);
  return badRequest(UNKNOWN_RULE, "Unknown rule", {
    detail:
      ruleId === null
        ? `The "rule" query parameter is required; rules: ${known.join(", ")}.`
        : `No rule ${show(ruleId)}; rules: ${known.join(", ")}.`,
    rules: known,
  });
}

export function unavailable(about: Client["about"], message: string): Response {
  logEvent({ event: "admin_unavailable", rule: about.rule, key: about.keyHash, message }, "error");
  return problemResponse({
    type: LIMITER_UNAVAILABLE,
    title: "Service Unavailable",
    status: 503,
    detail: `The client's Durable Object did not answer: ${message}`,
  });
}

export function badRequest(
  type: string,
  title: string,
  fields: { detail: string } & Record<string, unknown>,
): Response {
  const problem: Problem = { type, title, status: 400, ...fields };
  return problemResponse(problem);
}
