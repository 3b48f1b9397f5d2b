/**
 * @module
 * One request's decision: the rules that match, one Durable Object call per
 * distinct client key (none when the isolate already knows the key is
 * blocked, or holds a lease for it), and the answer: go on (with headers),
 * 429 or 503.
 */
import { type KeyCall, type KeyGroup, readCalls, refundAdmitted, takeBackLate } from "./answers.ts";
import { type BlockedCache, type BlockedEntry, blockedKeys } from "./blocked-cache.ts";
import type { Settings } from "./config.ts";
import { canonicalKey, hashKey } from "./core/keys.ts";
import { pathnameOf, requestPath } from "./core/paths.ts";
import { type Rule, ruleMatches } from "./core/rules.ts";
import { type Policy, type Reported, rateLimitHeaders } from "./headers.ts";
import { ruleUid } from "./isolate-cache.ts";
import { leases as isolateLeases, type LeaseCache, type Spent } from "./leases.ts";
import { checkKey, type LimiterNamespace } from "./limiter-client.ts";
import { ruleCheckOf } from "./limiter-protocol.ts";
import { send } from "./problem.ts";
import { limiterUnavailable, tooManyRequests, tooManyRequestsParts } from "./refusals.ts";
import { requestFacts } from "./request-facts.ts";

export type Outcome =
  /** Go on to the origin, then add these headers to its response. */
  | { kind: "allow"; headers: Record<string, string> }
  /** Answer this instead; the origin is not contacted. */
  | { kind: "refuse"; response: Response };

/** How a key group was settled: from a lease held here, or by its object. */
type Settled = { spent: Spent } | { call: KeyCall };

/** The isolate's memory of earlier answers. */
export type IsolateCaches = { blocked: BlockedCache; leases: LeaseCache };
const isolateCaches: IsolateCaches = { blocked: blockedKeys, leases: isolateLeases };

const NO_HEADERS: Outcome = { kind: "allow", headers: {} };

/**
 * Decides one request. `background` receives work that must not delay the
 * answer (refunds of counts taken by a key whose request another key refused).
 * When the isolate can decide alone (a known refusal, or leases for every
 * key) the answer is returned at once, not as a promise: those are the
 * paths every blocked and most allowed requests take.
 */
export function decide(
  request: Request,
  settings: Settings,
  ns: LimiterNamespace,
  background: (task: Promise<unknown>) => void,
  caches: IsolateCaches = isolateCaches,
): Outcome | Promise<Outcome> {
  const path = requestPath(pathnameOf(request.url));
  const matched = settings.rules.filter((rule) => ruleMatches(rule, request.method, path));
  if (matched.length === 0) return NO_HEADERS;

  const groups = groupByKey(matched, requestFacts(request, path, settings));
  const policies = matched.filter((rule) => rule.action === "block");
  const sentAtMs = Date.now();
  const leased = groups.map((group) => caches.leases.spend(group.canonical, group.rules, sentAtMs));
  const known = knownRefusals(
    groups.filter((_, i) => !leased[i]),
    caches.blocked,
    sentAtMs,
  );
  if (known.length > 0) {
    for (const spent of leased) if (spent) caches.leases.unspend(spent);
    return { kind: "refuse", response: knownRefusal(policies, known, sentAtMs) };
  }

  if (leased.every((spent) => spent !== undefined)) {
    return {
      kind: "allow",
      headers: rateLimitHeaders(
        policies,
        leasedReports(
          groups,
          leased.map((spent) => ({ spent })),
          sentAtMs,
        ),
      ),
    };
  }
  return settleAll(groups, leased, policies, sentAtMs, settings, ns, background, caches);
}

/** Settles the key groups no lease covered, with their objects, and reads the answers. */
async function settleAll(
  groups: KeyGroup[],
  leased: (Spent | undefined)[],
  policies: Policy[],
  sentAtMs: number,
  settings: Settings,
  ns: LimiterNamespace,
  background: (task: Promise<unknown>) => void,
  caches: IsolateCaches,
): Promise<Outcome> {
  const settled = await Promise.all(
    groups.map((group, i): Settled | Promise<Settled> => {
      const spent = leased[i];
      return spent ? { spent } : settle(group, ns, settings.timeoutMs, caches.leases);
    }),
  );
  const calls = settled.flatMap((s) => ("call" in s ? [s.call] : []));
  const reports = leasedReports(groups, settled, sentAtMs);
  const { refused, closedBy } = readCalls(calls, caches.blocked, sentAtMs, reports);

  const turnedAway = refused || closedBy.length > 0;
  if (turnedAway) {
    refundAdmitted(calls, ns, background);
    for (const s of settled) if ("spent" in s) caches.leases.unspend(s.spent);
  }
  for (const call of calls) takeBackLate(call, ns, turnedAway, background);
  if (refused) return { kind: "refuse", response: tooManyRequests(policies, reports) };
  if (closedBy.length > 0) return { kind: "refuse", response: limiterUnavailable(closedBy, policies, reports) };
  return { kind: "allow", headers: rateLimitHeaders(policies, reports) };
}

/** The verdicts of the key groups settled from leases held here. */
function leasedReports(groups: KeyGroup[], settled: Settled[], nowMs: number): Reported[] {
  const reports: Reported[] = [];
  settled.forEach((s, i) => {
    if (!("spent" in s)) return;
    groups[i]!.rules.forEach((rule, j) => {
      const verdict = s.spent.verdicts[j]!;
      if (rule.action === "block")
        reports.push({ id: rule.id, limit: rule.limit, periodMs: rule.periodMs, verdict, nowMs });
    });
  });
  return reports;
}

/**
 * Settles a key group with its object. While another request's call for the
 * same key is in flight and may bring a lease, waits for it and spends from
 * that lease instead; if that call failed, this request fails with it.
 */
async function settle(group: KeyGroup, ns: LimiterNamespace, timeoutMs: number, leases: LeaseCache): Promise<Settled> {
  for (let pending = leases.pending(group.canonical, group.rules); pending; ) {
    const outcome = await pending;
    // The call that failed takes back what it may count late; this request only shares its failure.
    if (!outcome.ok)
      return { call: { ...group, name: await hashKey(group.canonical), outcome: { ...outcome, late: undefined } } };
    const spent = leases.spend(group.canonical, group.rules, Date.now());
    if (spent) return { spent };
    pending = leases.pending(group.canonical, group.rules);
  }
  // Registered as in flight before the first await, so that concurrent requests for this key wait for it.
  let name = "";
  const outcome = await leases.call(group.canonical, group.rules, Date.now(), async (returns) => {
    name = await hashKey(group.canonical);
    return checkKey(ns, name, group.rules.map(ruleCheckOf), timeoutMs, { leaseUnits: leases.unitsWanted, returns });
  });
  return { call: { ...group, name, outcome } };
}

/** Rules grouped by their canonical client key, in the order they first appear. */
function groupByKey(rules: Rule[], facts: Parameters<typeof canonicalKey>[1]): KeyGroup[] {
  const groups: KeyGroup[] = [];
  for (const rule of rules) {
    const canonical = canonicalKey(rule.key, facts);
    const group = groups.find((g) => g.canonical === canonical);
    if (group) group.rules.push(rule);
    else groups.push({ canonical, rules: [rule] });
  }
  return groups;
}

type Known = Reported & { entry: BlockedEntry; rule: Rule };

/**
 * The 429 for refusals the isolate knows of. Under attack one key is refused
 * over and over: while the wait reads the same whole seconds, and the same
 * rules matched, the answer is the same, so its parts are made once.
 */
function knownRefusal(policies: Rule[], known: Known[], nowMs: number): Response {
  const [only, ...others] = known;
  if (!only || others.length > 0) return tooManyRequests(policies, known);
  const key = `${Math.ceil((only.entry.retryAtMs - nowMs) / 1000)}|${policies.map(ruleUid).join(",")}`;
  if (only.entry.ready?.key !== key) only.entry.ready = { key, parts: tooManyRequestsParts(policies, known) };
  return send(only.entry.ready.parts);
}

/** Refusals the isolate already knows of: each counts as the object's answer, with the wait that is left. */
function knownRefusals(groups: KeyGroup[], cache: BlockedCache, nowMs: number): Known[] {
  const known: Known[] = [];
  for (const { canonical, rules } of groups) {
    for (const rule of rules) {
      if (rule.action !== "block") continue;
      const entry = cache.get(rule, canonical, nowMs);
      if (!entry) continue;
      entry.repeats++;
      const waitMs = entry.retryAtMs - nowMs;
      known.push({
        entry,
        rule,
        id: rule.id,
        limit: rule.limit,
        periodMs: rule.periodMs,
        nowMs,
        verdict: {
          allowed: false,
          ruleAllows: false,
          weighted: entry.weighted,
          remaining: 0,
          retryAfterMs: waitMs,
          resetMs: waitMs,
          bucket: -1,
        },
      });
    }
  }
  return known;
}
