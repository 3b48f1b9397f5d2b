/**
 * @module
 * `{prefix}/credits?rule=<id>&key=<client>`: a client's usage of a quota
 * (a rule whose kind keeps periods: "100000 per month"), and credits, what
 * a support team gives a client that ran out.
 *
 * - `GET`: what it used and was credited this period, what it has left of
 *   the limit that applies to it (its tier's or override's), when the
 *   period ends, and the earlier periods its object keeps (12);
 * - `POST` with `{"add": 5000}`, `{"take": 100}` or `{"set": 20000}` (what
 *   it has left), and optionally a `"note"`: changes what it has left for
 *   this period only. Its next request is decided on it, in every isolate
 *   (a quota's refusals are never answered by an isolate alone). Logged at
 *   info level with who made it (`quota_credited`).
 *
 * `hash=` names the client in place of `key=`, as for `/status`.
 */
import { MAX_LIMIT } from "../../core/kinds/window.ts";
import { MAX_NOTE_CHARS } from "../../core/overrides.ts";
import { fail, ok, type Result } from "../../core/result.ts";
import { isCounted, type Rule } from "../../core/rules.ts";
import { show } from "../../core/show.ts";
import { charactersIn } from "../../core/text.ts";
import { textUpTo } from "../../http/body-text.ts";
import { withDeadline } from "../../object/client.ts";
import type { Credit, PeriodUsage, Usage } from "../../object/kinds/counter.ts";
import { toRuleCheck } from "../../object/protocol.ts";
import { logEvent } from "../../observe/log.ts";
import {
  badRequest,
  type Client,
  clientNamed,
  MALFORMED_KEY,
  type StatusContext,
  unavailable,
  unknownRule,
} from "./status.ts";
import { json } from "./views.ts";

export const INVALID_CREDIT = "urn:edge-rate-limiter:invalid-credit";
export const NOT_A_QUOTA = "urn:edge-rate-limiter:not-a-quota";

/** The fields a credit's body may have. */
export const CREDIT_FIELDS = ["add", "take", "set", "note"] as const;
/**
 * A credit's body is a few fields and a note: the longest valid one spells
 * each of the note's {@link MAX_NOTE_CHARS} characters as a JSON escaped
 * surrogate pair (12 bytes each), 12 000 bytes; anything longer is not one.
 */
const MAX_BODY_BYTES = 16_384;

/** What a credits request needs besides its URL: a status request's, and who is asking. */
export type CreditsContext = Omit<StatusContext, "method"> & {
  method: string;
  request: Request;
  /** Who is asking, for the log: a prefix of the admin token's hash. */
  by: string;
};

/** Answers `{prefix}/credits`: a client's usage of a quota, or a credit. */
export async function credits(url: URL, context: CreditsContext): Promise<Response> {
  const { settings } = context;
  const ruleId = url.searchParams.get("rule");
  const rule = settings.rules.find((r) => r.id === ruleId);
  if (rule === undefined) return unknownRule(ruleId, settings.rules);
  if (!isCounted(rule)) return notAQuota(rule);
  const named = await clientNamed(url, rule, settings);
  if (!named.ok) return badRequest(MALFORMED_KEY, "Malformed key", { detail: named.errors.join(" ") });
  const { name, canonical } = named.value;
  const stub = context.ns.get(context.ns.idFromName(name));
  const about: Client["about"] =
    canonical === null
      ? { rule: rule.id, hash: name, keyHash: name.slice(0, 12) }
      : { rule: rule.id, key: JSON.parse(canonical) as unknown, keyHash: name.slice(0, 12) };
  const check = toRuleCheck(rule);
  if (context.method === "GET") {
    const read = await withDeadline(stub.usage(check), settings.timeoutMs);
    if (!read.ok) return unavailable(about, read.message);
    const { usage, override, tier } = read.value;
    if (usage === null) return notAQuota(rule);
    return json({ ...about, ...usageView(rule, usage, override, tier) });
  }
  const body = await bodyOf(context.request);
  const change = body.ok ? creditOf(body.value) : body;
  if (!change.ok) {
    return badRequest(INVALID_CREDIT, "Invalid credit", { detail: change.errors.join(" "), errors: change.errors });
  }
  const { credit, note } = change.value;
  const done = await withDeadline(stub.credit(check, credit), settings.timeoutMs);
  if (!done.ok) return unavailable(about, done.message);
  const { before, after, override, tier } = done.value;
  if (before === null || after === null) return notAQuota(rule);
  logEvent(
    {
      event: "quota_credited",
      by: context.by,
      rule: rule.id,
      key: about.keyHash,
      change: credit,
      ...(note === "" ? {} : { note }),
      before: countsOf(before),
      after: countsOf(after),
    },
    "info",
  );
  return json({
    ...about,
    change: credit,
    ...(note === "" ? {} : { note }),
    before: countsOf(before),
    ...usageView(rule, after, override, tier),
  });
}

/** What a period's counts are, as the log and the answer's `before` show them. */
const countsOf = (usage: Usage) => ({
  limit: usage.limit,
  used: usage.used,
  credit: usage.credit,
  remaining: usage.remaining,
});

const periodView = (p: PeriodUsage) => ({
  start: new Date(p.startMs).toISOString(),
  end: new Date(p.endMs).toISOString(),
  used: p.used,
  credit: p.credit,
});

/** A client's usage as the API shows it: the limit that applies, this period's counts, and the periods before. */
function usageView(rule: Rule, usage: Usage, override: string | undefined, tier: string | undefined) {
  const lifted = override === "unlimited" || override === "deny";
  return {
    limit: lifted ? null : usage.limit,
    ...(override === undefined ? {} : { override }),
    ...(tier === undefined ? {} : { tier }),
    // In the rule's own words and time zone: "100000 per month, resets 2031-12-01T00:00:00-05:00".
    quota: rule.quota.words(usage.limit, usage.pending ? undefined : usage.endMs),
    // Periods from a first request, before it: the first starts with the client's next request, not yet known.
    period: usage.pending
      ? null
      : { start: new Date(usage.startMs).toISOString(), end: new Date(usage.endMs).toISOString() },
    used: usage.used,
    credit: usage.credit,
    remaining: lifted ? null : usage.remaining,
    past: usage.past.map(periodView),
  };
}

function notAQuota(rule: Rule): Response {
  return badRequest(NOT_A_QUOTA, "Not a quota", {
    detail: `Rule ${show(rule.id)} keeps no periods: usage and credits are a quota rule's (one with "quota" and "per").`,
  });
}

/** The body as JSON, at most {@link MAX_BODY_BYTES}, read no further. */
async function bodyOf(request: Request): Promise<Result<unknown>> {
  const text = await textUpTo(request, MAX_BODY_BYTES);
  if (text === null) {
    return fail(
      `the body is over ${MAX_BODY_BYTES} bytes: a credit is a few fields and a note of at most ${MAX_NOTE_CHARS} characters`,
    );
  }
  try {
    return ok(JSON.parse(text) as unknown);
  } catch {
    return fail(`the body must be JSON such as {"add": 5000}; got ${show(text.slice(0, 100))}`);
  }
}

/** A credit's body: exactly one of `add`, `take` (1 to 10⁹) and `set` (0 to 10⁹), and a `note`. */
export function creditOf(body: unknown): Result<{ credit: Credit; note: string }> {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    return fail(`the body must be an object such as {"add": 5000}; got ${show(body)}`);
  }
  const fields = body as Record<string, unknown>;
  const errors: string[] = [];
  for (const name of Object.keys(fields)) {
    if (!(CREDIT_FIELDS as readonly string[]).includes(name)) {
      errors.push(`${name}: not a field of a credit; its fields are ${CREDIT_FIELDS.join(", ")}`);
    }
  }
  const given = (["add", "take", "set"] as const).filter((name) => fields[name] !== undefined);
  if (given.length !== 1) {
    errors.push(`give exactly one of add, take and set${given.length > 1 ? `; got ${given.join(" and ")}` : ""}`);
  }
  for (const name of given) {
    const value = fields[name];
    const min = name === "set" ? 0 : 1;
    if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > MAX_LIMIT) {
      errors.push(`${name}: must be an integer from ${min} to ${MAX_LIMIT}; got ${show(value)}`);
    }
  }
  const note = fields.note ?? "";
  if (typeof note !== "string") errors.push(`note: must be a string; got ${show(note)}`);
  else if (charactersIn(note) > MAX_NOTE_CHARS) {
    errors.push(`note: must be at most ${MAX_NOTE_CHARS} characters; got ${charactersIn(note)}`);
  }
  if (errors.length > 0) return fail(...errors);
  const name = given[0]!;
  return ok({ credit: { [name]: fields[name] } as Credit, note: note as string });
}
