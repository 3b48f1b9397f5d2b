/**
 * @module
 * The checker's findings about verified tokens: where the keys are, what they
 * hold, and what `JWT` and `tier_claim` do with the rules.
 */
import type { Result } from "../core/result.ts";
import { isClaim, type Rule } from "../core/rules.ts";
import { show } from "../core/show.ts";
import {
  characteristicLabel,
  danger,
  type Finding,
  listed,
  type ValidRule,
  type WranglerConfig,
  warning,
} from "./findings.ts";
import { type JwtSettings, parseJwt, parseKeySet } from "./jwt.ts";
import type { Tiers } from "./tiers.ts";

/**
 * Where the keys that verify tokens come from: `JWT_JWKS` or `JWT_JWKS_URL`
 * in [vars]; `JWT_JWKS` as a secret declared in [secrets], which `wrangler
 * deploy` refuses to deploy without; a secret the checker cannot see, when
 * something reads tokens and neither is in the file; or nowhere, when
 * nothing does.
 */
export type KeysFrom = "vars" | "secret" | "unseen" | "none";

/** Stands for the key set of a secret, which the checker never sees. */
export const SECRET_KEY_SET = { keys: [{ kty: "EC" }] };

const isSet = (value: unknown): boolean => value !== undefined && value !== "";

/** The ids of the rules keyed on a token's claims. */
const claimRules = (valid: ValidRule[]): string[] =>
  valid.filter(({ rule }) => rule.key.flat().some(isClaim)).map(({ rule }) => rule.id);

export function keysFrom(config: WranglerConfig, valid: ValidRule[]): KeysFrom {
  const vars = config.vars ?? {};
  if (isSet(vars.JWT_JWKS)) return "vars";
  if (config.secrets?.required?.includes("JWT_JWKS")) return "secret";
  if (isSet(vars.JWT_JWKS_URL)) return "vars";
  return claimRules(valid).length > 0 || vars.JWT !== undefined ? "unseen" : "none";
}

/** The token settings, checked with the rules that parse; null when they are invalid (parseSettings reports why) or unset. */
export function jwtSettings(input: Record<string, unknown>, valid: ValidRule[]): JwtSettings | null {
  const parsed = parseJwt(
    input,
    valid.map(({ rule }) => rule),
  );
  return parsed.ok ? parsed.value : null;
}

/** Warnings about verified tokens: where their keys are, what the keys hold, and the settings in `JWT`. */
export function jwtWarnings(
  input: Record<string, unknown>,
  keys: KeysFrom,
  jwt: JwtSettings | null,
  valid: ValidRule[],
  tiers: Result<Tiers>,
): Finding[] {
  return [
    ...(keys === "unseen" ? [unseenKeys(valid)] : []),
    ...(keys === "vars" ? keySetWarnings(input.JWT_JWKS) : []),
    ...jwksUrlWarnings(input.JWT_JWKS_URL),
    ...(jwt === null ? [] : hs256FromUrlWarnings(jwt)),
    ...(jwt === null || !tiers.ok ? [] : tierClaimWarnings(jwt, valid, tiers.value)),
  ];
}

/**
 * Something reads tokens, and neither key variable is in the file. `JWT_JWKS`
 * is a secret, so that is how it should be; but only [secrets] tells the
 * checker (and `wrangler deploy`) that it is set.
 */
function unseenKeys(valid: ValidRule[]): Finding {
  const ids = claimRules(valid).map((id) => show(id));
  const reason =
    ids.length === 0
      ? "JWT is set"
      : `${ids.length === 1 ? "rule" : "rules"} ${listed(ids)} ${ids.length === 1 ? "keys" : "key"} on a token's claims`;
  return warning(
    `JWT_JWKS: ${reason}, and neither JWT_JWKS nor JWT_JWKS_URL is in [vars], so until JWT_JWKS is set as a secret (\`wrangler secret put JWT_JWKS\`) the Worker logs an error and runs without token settings: rules keyed on a token's claims limit nothing, and no token picks a tier. Declare it with [secrets] required = ["JWT_JWKS"], so that wrangler deploy refuses to deploy without it (wrangler dev then reads only the secrets listed there from .dev.vars: list your others, such as ADMIN_TOKEN, too)`,
  );
}

/** The members of a JSON Web Key that only a private key has. */
const PRIVATE_MEMBERS = ["d", "p", "q", "dp", "dq", "qi", "oth"];

/** What the keys in `JWT_JWKS`, in [vars] and so in plain text, hold. Each is named by index and kid; its material, never. */
function keySetWarnings(raw: unknown): Finding[] {
  const set = parseKeySet(raw, "JWT_JWKS");
  if (!set.ok) return []; // parseSettings has reported it
  return set.value.keys.flatMap((key, i) => {
    const kid = (key as { kid?: unknown }).kid;
    const label = `JWT_JWKS.keys[${i}]${typeof kid === "string" ? ` (kid ${show(kid)})` : ""}`;
    if (key.kty === "oct") return [sharedSecretInVars(label)];
    const members = PRIVATE_MEMBERS.filter((name) => Object.hasOwn(key, name));
    return members.length === 0 ? [] : [privateKeyInVars(label, members)];
  });
}

function sharedSecretInVars(label: string): Finding {
  return danger(
    `${label}: is an "oct" (HS256) key, a shared secret, and JWT_JWKS is in [vars], so it is in plain text in wrangler.toml and in your repository: whoever reads it can sign tokens with any claims. Remove JWT_JWKS from [vars], run \`wrangler secret put JWT_JWKS\` with a new key, and declare it with [secrets] required = ["JWT_JWKS"]`,
  );
}

function privateKeyInVars(label: string, members: string[]): Finding {
  return danger(
    `${label}: holds private key material (${listed(members.map((name) => show(name)))}), in plain text in wrangler.toml and in your repository: verifying tokens needs only the public key, and whoever has this one can sign tokens with any claims. Keep only the public members, and replace the key pair: this one is in your repository's history`,
  );
}

/** Loopback hosts, where a local issuer may well serve its keys over plain http. */
const isLoopback = (hostname: string): boolean =>
  hostname === "localhost" || hostname === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(hostname);

/** Keys fetched over plain http from another host: whoever is on the way can swap them. Only the origin is shown. */
function jwksUrlWarnings(raw: unknown): Finding[] {
  if (typeof raw !== "string" || !URL.canParse(raw)) return []; // parseSettings reports a bad one
  const url = new URL(raw);
  if (url.protocol !== "http:" || isLoopback(url.hostname)) return [];
  return [
    warning(
      `JWT_JWKS_URL: ${show(url.origin)} is plain http, so whoever is on the network between Cloudflare and that host can replace the keys and sign tokens with any claims; use https (plain http is for an issuer on localhost, 127.0.0.1 or ::1)`,
    ),
  ];
}

/** Only HS256 allowed, with keys from a URL: the limiter uses no "oct" key from a URL, so no token is ever verified. */
function hs256FromUrlWarnings(jwt: JwtSettings): Finding[] {
  if (jwt.keys.kind !== "url" || jwt.algorithms.some((alg) => alg !== "HS256")) return [];
  return [
    warning(
      `JWT.algorithms: allows only HS256, but the keys come from JWT_JWKS_URL, and the limiter never uses an "oct" (HS256) key from a URL (a shared secret is never published), so no token is ever verified and every "jwt:" source is missing; put the HS256 key in the secret JWT_JWKS instead, or allow RS256, ES256 or EdDSA`,
    ),
  ];
}

/** Whether a tier of `TIERS` gives the rule a limit. */
const tiered = (tiers: Tiers, rule: Rule): boolean => [...tiers.values()].some((limits) => limits.has(rule.id));

/** A `tier_claim` that changes no limit: no tier, or no tier that gives a rule a limit. */
function tierClaimWarnings(jwt: JwtSettings, valid: ValidRule[], tiers: Tiers): Finding[] {
  if (jwt.tierClaim === null) return [];
  const claim = `JWT.tier_claim: ${show(jwt.tierClaim)} names each request's tier`;
  if (tiers.size === 0) {
    return [
      warning(
        `${claim}, but TIERS defines no tier, so the claim changes no limit; add tiers, such as [vars.TIERS.pro] with api-per-key = 10000, or remove tier_claim`,
      ),
    ];
  }
  if (valid.some(({ rule }) => tiered(tiers, rule))) return [];
  return [
    warning(
      `${claim}, but no tier of TIERS gives a rule a limit, so the claim changes no limit; give rules limits in the tiers, such as api-per-key = 10000, or remove tier_claim`,
    ),
  ];
}

/**
 * A rule that `tier_claim` gives per-tier limits, keyed on no claim: clients
 * with different plans behind one key share one count, checked against
 * whichever tier the request at hand names.
 */
export function tierClaimKeyWarnings(jwt: JwtSettings, valid: ValidRule[], tiers: Tiers): Finding[] {
  if (jwt.tierClaim === null) return [];
  return valid
    .filter(({ rule }) => tiered(tiers, rule) && !rule.key.flat().some(isClaim))
    .map(({ rule, where }) =>
      warning(
        `${where} "${rule.id}": field "key": ${show(rule.key.map(characteristicLabel))} has no "jwt:" source, but TIERS gives the rule a limit per tier and JWT.tier_claim ${show(jwt.tierClaim)} picks each request's tier from its token, so clients with different plans behind one key share one count, checked against a limit that changes with each request's token; key it on the token, such as "jwt:sub|ip"`,
      ),
    );
}
