/**
 * @module
 * Which of a request's rules apply, and to which client keys: the rules
 * that match its method, path and address, the tier its token puts it in,
 * and the rules grouped by client key (one Durable Object each).
 */

import type { JwtSettings } from "../config/jwt.ts";
import type { Settings } from "../config/settings.ts";
import { type Claims, claimAt } from "../core/claims.ts";
import { type Address, parseAddress } from "../core/ip.ts";
import { canonicalKey, customCanonicalKey, type RequestFacts } from "../core/keys.ts";
import type { RequestPath } from "../core/paths.ts";
import { type PriorityFacts, priorityOf } from "../core/priorities.ts";
import { isCounted, type PlacedRule, type Rule, ruleCoversClient, ruleMatches } from "../core/rules.ts";
import { clientAddress, requestFacts } from "../http/request-facts.ts";
import type { Tokens } from "../identity/tokens.ts";
import { priorityVariant, tierVariant } from "./rule-ids.ts";
import type { KeyGroup } from "./vocabulary.ts";

/** The rules that match the request and cover its client's address. */
export function matchingRules(request: Request, settings: Settings, method: string, path: RequestPath): Rule[] {
  const address = clientAddressOf(request, settings);
  return settings.rules.filter((rule) => ruleMatches(rule, method, path) && ruleCoversClient(rule, address));
}

/** The client's address, parsed on first use (only rules with IP ranges need it). */
function clientAddressOf(request: Request, settings: Settings): () => Address | null {
  let address: Address | null | undefined;
  return () => {
    if (address === undefined) address = parseAddress(clientAddress(request.headers, settings.trustedIpHeader));
    return address;
  };
}

/** The request's verified claims, when a matched rule reads them; null at once when none does. */
export function claimsFor(
  request: Request,
  matched: Rule[],
  settings: Settings,
  tokens: Tokens,
  background: (task: Promise<unknown>) => void,
): Claims | null | Promise<Claims | null> {
  const jwt: JwtSettings | null = settings.jwt;
  if (jwt === null || !matched.some((rule) => settings.tokenRules.has(rule))) return null;
  // Half the decision's time at most goes to fetching keys; the counting call keeps the rest.
  return tokens.claimsOf(request.headers, jwt, { waitMs: settings.timeoutMs / 2, background });
}

/** The rules with the limits of the tier the token's `tier_claim` names, if it names one of `TIERS`. */
export function inClaimedTier(rules: Rule[], claims: Claims | null, settings: Settings): Rule[] {
  const claim = settings.jwt?.tierClaim;
  if (claims === null || claim == null) return rules;
  const tier = claimAt(claims, claim);
  return tier !== null && settings.tiers.has(tier) ? rules.map((rule) => tierVariant(rule, tier)) : rules;
}

/**
 * Under adaptive rules with priorities, each rule as the request's
 * priority's variant (its matchers read the method, the path, a header, a
 * verified claim or the token's tier); the rules as they are otherwise.
 */
export function inPriority(rules: Rule[], client: Client, settings: Settings): Rule[] {
  if (!rules.some((rule) => rule.adaptive?.priorities !== undefined)) return rules;
  const { request, claims } = client;
  const tierClaim = settings.jwt?.tierClaim;
  const tier = claims === null || tierClaim == null ? null : claimAt(claims, tierClaim);
  const facts: PriorityFacts = {
    method: client.method,
    path: client.path,
    header: (name) => request.headers.get(name),
    claim: (path) => (claims === null ? null : claimAt(claims, path)),
    tier: tier !== null && settings.tiers.has(tier) ? tier : null,
  };
  return rules.map((rule) => {
    const priorities = rule.adaptive?.priorities;
    return priorities === undefined ? rule : priorityVariant(rule, priorityOf(priorities, facts, rule.caseSensitive));
  });
}

/** A request whose rules are known: what its client keys are made of. */
export type Client = { request: Request; method: string; path: RequestPath; claims: Claims | null };

/**
 * The rules grouped by their client key, in the order they first appear;
 * digested by `digest`; in each group its rate rules apart from its
 * concurrency rules. `clientKey`, the key the caller named
 * (`rateLimit({ key })`), is every rule's key when given.
 */
export function keyGroups(
  rules: Rule[],
  client: Client,
  clientKey: string | undefined,
  settings: Settings,
  digest: (canonical: string) => string,
): KeyGroup[] {
  if (clientKey !== undefined) {
    const canonical = customCanonicalKey(clientKey);
    const counted = rules.filter(isCounted);
    const placed = counted.length === rules.length ? NO_PLACES : rules.filter(isPlaced);
    return [{ canonical, digest: digest(canonical), rules: counted, places: placed }];
  }
  const facts: RequestFacts = requestFacts(client.request, client.path, settings, client.claims, client.method);
  const groups: KeyGroup[] = [];
  for (const rule of rules) {
    const canonical = canonicalKey(rule.key, facts);
    let group = groups.find((g) => g.canonical === canonical);
    if (group === undefined) {
      group = { canonical, digest: digest(canonical), rules: [], places: NO_PLACES };
      groups.push(group);
    }
    if (isCounted(rule)) group.rules.push(rule);
    else if (group.places === NO_PLACES) group.places = [rule];
    else group.places.push(rule);
  }
  return groups;
}

/** Whether a rule's object gives places under it, rather than counting it. */
const isPlaced = (rule: Rule): rule is PlacedRule => !isCounted(rule);

/** A group's placed rules when it has none: shared, never written to. */
const NO_PLACES: PlacedRule[] = [];
