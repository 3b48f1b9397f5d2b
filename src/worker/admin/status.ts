/**
 * @module
 * `GET` and `DELETE {prefix}/status?rule=<id>&key=<client>`: one client's
 * count under one rule (and its penalty, while one lasts), read without
 * counting, or reset to unblock it (a reset lifts the penalty too).
 */
import type { Settings } from "../../config/settings.ts";
import { hashKey } from "../../core/keys.ts";
import type { Rule } from "../../core/rules.ts";
import { show } from "../../core/show.ts";
import { LIMITER_UNAVAILABLE, type Problem, problemResponse } from "../../http/problem.ts";
import { forgetClient, type Isolate } from "../../isolate/isolate.ts";
import { type LimiterNamespace, withDeadline } from "../../object/client.ts";
import { toRuleCheck } from "../../object/protocol.ts";
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

/** Answers a status request: the client's count, or its reset. */
export async function clientStatus(url: URL, context: StatusContext): Promise<Response> {
  const { settings } = context;
  const ruleId = url.searchParams.get("rule");
  const rule = settings.rules.find((r) => r.id === ruleId);
  if (rule === undefined) return unknownRule(ruleId, settings.rules);
  const key = adminKey(rule, url.searchParams.getAll("key"), settings.ipv6PrefixBits);
  if (!key.ok) return badRequest(MALFORMED_KEY, "Malformed key", { detail: key.errors.join(" ") });

  const name = await hashKey(key.value);
  const client: Client = {
    rule,
    canonical: key.value,
    stub: context.ns.get(context.ns.idFromName(name)),
    about: { rule: rule.id, key: JSON.parse(key.value) as unknown, keyHash: keyHashPrefix(name) },
  };
  return context.method === "DELETE" ? reset(client, context) : peek(client, settings.timeoutMs);
}

/** One client under one rule, as a status request names it. */
type Client = {
  rule: Rule;
  canonical: string;
  stub: ReturnType<LimiterNamespace["get"]>;
  /** What every answer about the client starts with. */
  about: { rule: string; key: unknown; keyHash: string };
};

async function reset({ rule, canonical, stub, about }: Client, { settings, isolate }: StatusContext) {
  const done = await withDeadline(stub.reset([rule.id]), settings.timeoutMs);
  if (!done.ok) return unavailable(about, done.message);
  // This isolate forgets its refusal and its lease at once; other isolates' refusals lapse within maxRefusalMs.
  forgetClient(isolate, rule, canonical);
  logEvent({ event: "admin_reset", rule: rule.id, key: about.keyHash }, "warn");
  return json({ ...about, reset: true });
}

async function peek({ rule, stub, about }: Client, timeoutMs: number): Promise<Response> {
  const peeked = await withDeadline(stub.peek([toRuleCheck(rule)]), timeoutMs);
  if (!peeked.ok) return unavailable(about, peeked.message);
  const verdict = peeked.value.verdicts[0]!;
  return json({
    ...about,
    // The limit this client has: the rule's, an override's or a tier's; null when an override lifts or denies.
    limit: verdict.limit ?? (verdict.override === undefined ? rule.limit : null),
    ...(verdict.override ? { override: verdict.override } : {}),
    ...(verdict.tier ? { tier: verdict.tier } : {}),
    periodMs: rule.periodMs,
    weighted: verdict.weighted,
    allowed: verdict.ruleAllows,
    // While the rule's penalty (block_for) lasts: when it ends, by the object's clock.
    ...(verdict.penaltyMs ? { blockedUntil: new Date(peeked.value.nowMs + verdict.penaltyMs).toISOString() } : {}),
    remaining: verdict.remaining,
    retryAfterSeconds: Math.ceil(verdict.retryAfterMs / 1000),
    retryAfterMs: verdict.retryAfterMs,
    resetSeconds: Math.ceil(verdict.resetMs / 1000),
    resetMs: verdict.resetMs,
  });
}

function unknownRule(ruleId: string | null, rules: Rule[]): Response {
  const known = rules.map((r) => r.id);
  return badRequest(UNKNOWN_RULE, "Unknown rule", {
    detail:
      ruleId === null
        ? `The "rule" query parameter is required; rules: ${known.join(", ")}.`
        : `No rule ${show(ruleId)}; rules: ${known.join(", ")}.`,
    rules: known,
  });
}

function unavailable(about: Client["about"], message: string): Response {
  logEvent({ event: "admin_unavailable", rule: about.rule, key: about.keyHash, message }, "error");
  return problemResponse({
    type: LIMITER_UNAVAILABLE,
    title: "Service Unavailable",
    status: 503,
    detail: `The client's Durable Object did not answer: ${message}`,
  });
}

function badRequest(type: string, title: string, fields: { detail: string } & Record<string, unknown>): Response {
  const problem: Problem = { type, title, status: 400, ...fields };
  return problemResponse(problem);
}
