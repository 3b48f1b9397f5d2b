/**
 * @module
 * The offline config checker: every error in the limiter's configuration,
 * each naming the variable (and the rule and field), and warnings for
 * settings that are valid but suspicious, in the spirit of express-rate-limit's
 * validations. Pure: it takes the configuration as wrangler reads it;
 * `tools/check-config.ts` reads the file and prints the findings.
 *
 * src/config/ is the Worker's variables, validated; pure, so the offline
 * checker runs the same code: the errors about variables here are the very
 * list the Worker logs and its admin API answers with (readConfiguration).
 */

import type { IpRange } from "../core/ip-ranges.ts";
import { sourceLabel } from "../core/keys.ts";
import { kindOf } from "../core/kinds/registry.ts";
import { canonicalGlob, normalizePath, type PathGlob } from "../core/paths.ts";
import { type Characteristic, isClaim, parseRule, type Rule, ruleMatches } from "../core/rules.ts";
import { show } from "../core/show.ts";
import { jwtSettings, jwtWarnings, keysFrom, SECRET_KEY_SET, tierClaimKeyWarnings } from "./check-tokens.ts";
import { type ConfigInput, readConfiguration } from "./configuration.ts";
import {
  characteristicLabel,
  danger,
  type Finding,
  listed,
  type ValidRule,
  type WranglerConfig,
  warning,
} from "./findings.ts";
import {
  environmentFindings,
  loopFindings,
  tableFindings,
  variableNameFindings,
  variableSizeFindings,
} from "./platform.ts";
import { ruleVariables } from "./settings.ts";
import { parseTiers, readTiers, type TierGiven, type Tiers, unknownRules } from "./tiers.ts";

export type { Finding, WranglerConfig } from "./findings.ts";

export type CheckReport = { rules: number; findings: Finding[] };

const BINDING = "RATE_LIMITER";
const CLASS = "RateLimiter";

/**
 * The methods the Workers runtime can carry. A request with any other method
 * (CONNECT, TRACK, a made-up one) never reaches a Worker, so a rule limited
 * to it never matches. test/check-config.test.ts checks this list against
 * the runtime itself.
 */
export const WORKER_METHODS: ReadonlySet<string> = new Set(
  "GET HEAD POST PUT DELETE PATCH PURGE OPTIONS TRACE COPY LOCK MKCOL MOVE PROPFIND PROPPATCH SEARCH UNLOCK ACL REPORT MKACTIVITY CHECKOUT MERGE NOTIFY SUBSCRIBE UNSUBSCRIBE QUERY BAN".split(
    " ",
  ),
);

/** Checks a configuration; the findings are in the order of the file, errors first. */
export function checkConfig(config: WranglerConfig, file?: FileFacts): CheckReport {
  const vars = config.vars ?? {};
  const raw = rawRuleLists(vars);
  const valid = validRules(raw);
  const tiers = parseTiers(vars.TIERS);
  const tierGiven = readTiers(vars.TIERS).given;
  const keys = keysFrom(config, valid);
  // A key set in a secret is checked as if it were there: the table in `JWT` is still checked, and "set one, not both".
  const input = keys === "secret" || keys === "unseen" ? { ...vars, JWT_JWKS: SECRET_KEY_SET } : vars;
  const jwt = jwtSettings(input, valid);
  const findings: Finding[] = [
    ...(file === undefined ? [] : fileFindings(file)),
    ...variableErrors(input),
    ...variableNameFindings(vars),
    ...variableSizeFindings(vars),
    // Where the Worker answers is known from a whole file only, not from variables alone.
    ...(file === undefined ? [] : loopFindings(vars, config)),
    ...durableObjectFindings(config),
    ...compatibilityFindings(config),
    ...varWarnings(vars),
    ...jwtWarnings(input, keys, jwt, valid, tiers),
    ...valid.flatMap(({ rule, where, input }) => ruleWarnings(rule, `${where} "${rule.id}"`, input)),
    ...(jwt !== null && tiers.ok ? tierClaimKeyWarnings(jwt, valid, tiers.value) : []),
    ...sameRequestsWarnings(valid),
    ...(tiers.ok ? tierWarnings(tiers.value, valid, writtenIds(raw), tierGiven) : []),
  ];
  const order = { error: 0, danger: 1, warning: 2 };
  findings.sort((a, b) => order[a.level] - order[b.level]);
  return { rules: raw.reduce((n, { list }) => n + (Array.isArray(list) ? list.length : 0), 0), findings };
}

const fileFindings = (file: FileFacts): Finding[] => [
  ...environmentFindings(file.env, file.environments),
  ...tableFindings(file.fields, file.knownFields),
];

/**
 * What only the file itself tells, beside the configuration wrangler reads
 * from it: its top-level fields, the ones wrangler knows, and the
 * environment asked for with the ones it defines.
 */
export type FileFacts = {
  fields: string[];
  knownFields: string[];
  env: string | undefined;
  environments: string[];
};

/**
 * Every variable's errors: the very list the Worker logs and its admin API
 * answers with (readConfiguration). The secret is never in the file (a
 * secret in [vars] is warned of apart): a stand-in takes its place.
 */
function variableErrors(vars: Record<string, unknown>): Finding[] {
  const input = { ...vars, ORIGIN_SECRET: vars.ORIGIN_SECRET ?? "a-stand-in-for-the-secret" } as ConfigInput;
  return readConfiguration(input).errors.map((message) => ({ level: "error", message }));
}

/** The flag that makes `request.signal` abort when a client hangs up (README, "What the isolate remembers"). */
const REQUEST_SIGNAL = "enable_request_signal";

/** A warning when the file's compatibility flags (unknown for a configuration given as vars alone) lack it. */
function compatibilityFindings(config: WranglerConfig): Finding[] {
  const flags = config.compatibility_flags;
  if (flags === undefined || flags.includes(REQUEST_SIGNAL)) return [];
  return [
    warning(
      `compatibility_flags: "${REQUEST_SIGNAL}" is missing, so the Worker never learns that a client hung up. A request that waits for another's call to its key's Durable Object is then woken anyway when it is gone (the runtime logs a warning each time), and near a limit it keeps its place in a batch, which the object counts. Add compatibility_flags = ["${REQUEST_SIGNAL}"]`,
    ),
  ];
}

/** A variable that holds rules (`RULES`, `RULES_<GROUP>`) and its list as written. */
type RawRules = { name: string; list: unknown };

/** The rules that parse: each is checked for warnings, even beside invalid ones. */
function validRules(raw: RawRules[]): ValidRule[] {
  return raw.flatMap(({ name, list }) =>
    Array.isArray(list)
      ? list.flatMap((input: unknown, index) => {
          const where = `${name}[${index}]`;
          const parsed = parseRule(input, where);
          return parsed.ok ? [{ rule: parsed.value, where, input: input as Record<string, unknown> }] : [];
        })
      : [],
  );
}

/** The ids written in the rule variables, valid or not, each once. */
function writtenIds(raw: RawRules[]): string[] {
  const ids = raw.flatMap(({ list }) =>
    Array.isArray(list) ? list.map((input: unknown) => (isTable(input) ? input.id : undefined)) : [],
  );
  return [...new Set(ids.filter((id): id is string => typeof id === "string"))];
}

const isTable = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** Each rule variable as the Worker reads it: a list, or the same list as a JSON string. */
function rawRuleLists(vars: Record<string, unknown>): RawRules[] {
  return ruleVariables(vars).map(([name, value]) => {
    if (typeof value !== "string") return { name, list: value ?? [] };
    try {
      return { name, list: JSON.parse(value) as unknown };
    } catch {
      return { name, list: [] }; // parseSettings has reported it
    }
  });
}

/** A Durable Object class the Worker exports: the binding it is reached by, what it keeps in SQL, the migration tag to suggest. */
type ObjectClass = { binding: string; className: string; keeps: string; tag: string };

type Migrations = NonNullable<WranglerConfig["migrations"]>;
type Binding = NonNullable<NonNullable<WranglerConfig["durable_objects"]>["bindings"]>[number];

const REGISTRY_BINDING = "OVERRIDES";
const REGISTRY_CLASS = "OverrideRegistry";
const STATS_BINDING = "STATS";
const STATS_CLASS = "StatsObject";

/** The counters' binding, which the Worker cannot run without, then the overrides registry's, which it can. */
function durableObjectFindings(config: WranglerConfig): Finding[] {
  if (config.durable_objects === undefined && config.migrations === undefined) return [];
  const bindings = config.durable_objects?.bindings ?? [];
  const migrations = config.migrations ?? [];
  const found = bindings.map((b) => b.name).join(", ") || "none";
  const limiterBinding = bindings.find((b) => b.name === BINDING);
  const registryBinding = bindings.find((b) => b.name === REGISTRY_BINDING);
  const limiter: ObjectClass = { binding: BINDING, className: CLASS, keeps: "its counters", tag: "v1" };
  const limiterUncreated = limiterBinding?.script_name === undefined && storageOf(CLASS, migrations) === undefined;
  const registry: ObjectClass = {
    binding: REGISTRY_BINDING,
    className: REGISTRY_CLASS,
    keeps: "its index of overrides",
    tag: nextTag(migrations, limiterUncreated),
  };
  // Statistics are optional: without the binding there are none, and nothing else changes.
  const statsBinding = bindings.find((b) => b.name === STATS_BINDING);
  const stats: ObjectClass = { binding: STATS_BINDING, className: STATS_CLASS, keeps: "its statistics", tag: "v3" };
  return [
    ...(limiterBinding === undefined ? [noLimiterBinding(found)] : []),
    ...classFindings(limiter, limiterBinding, migrations),
    ...(registryBinding === undefined
      ? [noRegistryBinding(found, registry, migrations)]
      : classFindings(registry, registryBinding, migrations)),
    ...(statsBinding === undefined ? [] : classFindings(stats, statsBinding, migrations)),
  ];
}

function noLimiterBinding(found: string): Finding {
  return {
    level: "error",
    message: `durable_objects.bindings: no binding named "${BINDING}" (found: ${found}); the Worker cannot reach its counters. Add [[durable_objects.bindings]] name = "${BINDING}", class_name = "${CLASS}"`,
  };
}

/** The Worker runs without the registry; only the admin API's overrides routes do not. */
function noRegistryBinding(found: string, registry: ObjectClass, migrations: Migrations): Finding {
  const migration =
    storageOf(REGISTRY_CLASS, migrations) === undefined
      ? `, and [[migrations]] tag = "${registry.tag}", new_sqlite_classes = ["${REGISTRY_CLASS}"]`
      : "";
  return warning(
    `durable_objects.bindings: no binding named "${REGISTRY_BINDING}" (found: ${found}), so there is no overrides API: the admin API's /overrides routes answer 501, and no client can be given its own limit or a tier. Add [[durable_objects.bindings]] name = "${REGISTRY_BINDING}", class_name = "${REGISTRY_CLASS}"${migration}`,
  );
}

/** The class a binding names, and the migration that creates it (checked even with no binding, whose absence is reported apart). */
function classFindings(spec: ObjectClass, binding: Binding | undefined, migrations: Migrations): Finding[] {
  if (binding?.script_name !== undefined) return []; // the class lives in another Worker, with its own migrations
  const out: Finding[] = [];
  const error = (message: string) => out.push({ level: "error", message });
  const { binding: name, className } = spec;
  if (binding !== undefined && binding.class_name !== className) {
    error(`durable_objects.bindings: "${name}" binds class "${binding.class_name}"; the Worker exports "${className}"`);
  }
  const kind = storageOf(className, migrations);
  if (kind === "kv") {
    error(
      `migrations: "${className}" is created with new_classes (key-value storage); it keeps ${spec.keeps} in SQL and needs new_sqlite_classes = ["${className}"]`,
    );
  } else if (kind === undefined) {
    error(
      `migrations: no migration creates "${className}"; add [[migrations]] tag = "${spec.tag}", new_sqlite_classes = ["${className}"]`,
    );
  }
  return out;
}

/**
 * A tag for a migration added after the others: "v<n>", n past their count,
 * that no migration has, nor the "v1" suggested for the counters' class when
 * no migration creates it.
 */
function nextTag(migrations: Migrations, limiterUncreated: boolean): string {
  const taken = new Set(migrations.map((m) => m.tag));
  if (limiterUncreated) taken.add("v1");
  let n = migrations.length + 1;
  while (taken.has(`v${n}`)) n++;
  return `v${n}`;
}

/** The storage a class ends up with once the migrations are replayed; undefined when none creates it or one deletes it. */
function storageOf(className: string, migrations: Migrations): "sqlite" | "kv" | undefined {
  const classes = new Map<string, "sqlite" | "kv">();
  for (const m of migrations) {
    for (const name of m.new_sqlite_classes ?? []) classes.set(name, "sqlite");
    for (const name of m.new_classes ?? []) classes.set(name, "kv");
    for (const { from, to } of m.renamed_classes ?? []) {
      const kind = classes.get(from);
      classes.delete(from);
      if (kind) classes.set(to, kind);
    }
    for (const name of m.deleted_classes ?? []) classes.delete(name);
  }
  return classes.get(className);
}

const IP_LISTS = new Set(["x-forwarded-for", "forwarded"]);

/** Warnings about the variables, apart from the rules in `RULES`. */
function varWarnings(vars: Record<string, unknown>): Finding[] {
  return [
    ...rulesWarnings(vars),
    ...trustedIpHeaderWarnings(vars.TRUSTED_IP_HEADER),
    ...adminTokenWarnings(vars.ADMIN_TOKEN),
    ...originSecretWarnings(vars.ORIGIN_SECRET),
    ...ipv6PrefixWarnings(vars.IPV6_PREFIX),
    ...timeoutWarnings(vars.LIMITER_TIMEOUT_MS),
  ];
}

function rulesWarnings(vars: Record<string, unknown>): Finding[] {
  const lists = ruleVariables(vars).map(([, value]) => value);
  if (lists.some((rules) => rules !== undefined && !(Array.isArray(rules) && rules.length === 0))) return [];
  return [warning("RULES: there are no rules, so every request is proxied without a limit")];
}

function trustedIpHeaderWarnings(value: unknown): Finding[] {
  const trusted = typeof value === "string" ? value : "";
  const header = trusted.toLowerCase();
  if (header === "") return [];
  if (header === "cf-connecting-ip") {
    return [warning('TRUSTED_IP_HEADER: "CF-Connecting-IP" is what the limiter uses anyway; remove the setting')];
  }
  if (IP_LISTS.has(header)) {
    return [
      danger(
        `TRUSTED_IP_HEADER: ${show(trusted)} is a list that clients write themselves, and the limiter trusts its rightmost entry. That entry is the client only when a proxy of yours in front of Cloudflare appends it; otherwise a client can choose the address it is counted by, and walk around every "ip" rule. With Cloudflare as the first hop, leave TRUSTED_IP_HEADER unset: CF-Connecting-IP is already the client`,
      ),
    ];
  }
  return [
    warning(
      `TRUSTED_IP_HEADER: ${show(trusted)} is trusted as the client's address. Set it only when your own proxy in front of Cloudflare overwrites it on every request; otherwise any client can send it and choose the address it is counted by`,
    ),
  ];
}

function adminTokenWarnings(token: unknown): Finding[] {
  if (token === undefined || token === "") return [];
  const short =
    typeof token === "string" && token.length < 32
      ? `; and use at least 32 random characters (this one has ${token.length})`
      : "";
  return [
    danger(
      `ADMIN_TOKEN: is in [vars], so the admin API's token is in plain text in wrangler.toml and in your repository. Remove it and run \`wrangler secret put ADMIN_TOKEN\`${short}`,
    ),
  ];
}

function originSecretWarnings(secret: unknown): Finding[] {
  if (secret === undefined || secret === "") return [];
  return [
    danger(
      "ORIGIN_SECRET: is in [vars], so the secret that locks the origin is in plain text in wrangler.toml and in your repository, and whoever reads it can go around the limiter. Remove it and run `wrangler secret put ORIGIN_SECRET`",
    ),
  ];
}

function ipv6PrefixWarnings(value: unknown): Finding[] {
  const bits = Number(value);
  if (value === undefined || !Number.isInteger(bits) || bits < 1 || bits > 128) return [];
  if (bits > 64) {
    return [
      warning(
        `IPV6_PREFIX: /${bits} is longer than /64, but one subscriber holds at least a /64 (usually a /56 or /48), so a client can rotate addresses and walk around its "ip" limits`,
      ),
    ];
  }
  if (bits < 32) {
    return [
      warning(
        `IPV6_PREFIX: /${bits} makes a whole provider's network one client, so unrelated users share each "ip" limit`,
      ),
    ];
  }
  return [];
}

function timeoutWarnings(value: unknown): Finding[] {
  const timeoutMs = Number(value);
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 5_000 || timeoutMs > 60_000) return [];
  return [
    warning(
      `LIMITER_TIMEOUT_MS: ${timeoutMs} ms: when a Durable Object is slow or down, every request waits this long before on_error applies`,
    ),
  ];
}

/**
 * Whether `cover` matches every path `glob` matches. Exact: `glob`'s own
 * text, its `*`s taken as literal characters, can only be matched by `cover`
 * with a `*` in the place of each, and a `*` matches whatever stands there.
 */
export const globCovers = (cover: PathGlob, glob: PathGlob): boolean => cover.test(glob.source);

/** Why a glob can never match a request's path, or null. */
function unmatchable(glob: string): string | null {
  if (/[?#]/.test(glob)) return "globs match the path only, never the query or fragment";
  const normal = normalizePath(glob);
  if (normal !== glob) {
    return `paths are matched as the origin receives them, dot segments resolved and backslashes read as slashes, after decoding unreserved characters and collapsing repeated slashes (write ${show(normal)})`;
  }
  return null;
}

/** A glob with its percent-escapes' hex digits in lower case. */
const lowerEscapes = (glob: string): string => glob.replace(/%[0-9A-Fa-f]{2}/g, (hex) => hex.toLowerCase());

/** What matching ignores in a `path` glob, which it is the same without. */
function ignoredParts(source: string, caseSensitive: boolean): string[] {
  const ignored: string[] = [];
  if (source.includes(";")) ignored.push(";parameters");
  if (/.\/$/.test(source.replace(/;[^/]*/g, ""))) ignored.push("a trailing slash");
  if (!caseSensitive && source !== source.toLowerCase()) ignored.push("case (unless case_sensitive = true)");
  return ignored;
}

/**
 * Other ways a client may spell the path `written`, each one a rule counts as
 * `written` itself: another case, a trailing slash added or taken away, a
 * `;parameter` in the last segment, in each other one, or as a segment of its own up front.
 */
function otherSpellings(written: string, caseSensitive: boolean): string[] {
  const out: string[] = [];
  if (!caseSensitive && written.toUpperCase() !== written) out.push(written.toUpperCase());
  if (written !== "/") out.push(written.endsWith("/") ? written.slice(0, -1) : `${written}/`);
  const segments = written.split("/");
  const withParameter = (i: number) => segments.map((segment, j) => (j === i ? `${segment};x` : segment)).join("/");
  out.push(withParameter(segments.length - 1));
  for (let i = 1; i < segments.length - 1; i++) out.push(withParameter(i));
  out.push(`/;x${written}`);
  // Its segments undone by `..` behind an encoded slash: written under the glob, matched elsewhere.
  out.push(`${written.endsWith("/") ? written : `${written}/`}${"..%2F".repeat(segments.length - 1)}z`);
  return out;
}

/** Warnings about one valid rule, each starting with `label`; `raw` is the rule as written. */
function ruleWarnings(rule: Rule, label: string, raw: Record<string, unknown>): Finding[] {
  const messages = [
    ...kindOf(rule).warnings(rule, raw),
    ...pathWarnings(rule),
    ...excludeWarnings(rule),
    ...excludedPathWarnings(rule),
    ...methodWarnings(rule),
    ...shadowWarnings(rule),
    ...delayWarnings(rule, raw.max_delay),
    ...adaptiveWarnings(rule),
    ...rangeWarnings(rule),
    ...claimKeyWarnings(rule),
    ...ja4KeyWarnings(rule),
  ];
  return messages.map((message) => warning(`${label}: ${message}`));
}

/** The rule's path globs that can match some request. */
const livePaths = (rule: Rule): PathGlob[] => rule.paths.filter((glob) => unmatchable(glob.source) === null);

/** Path globs that never match, then path globs written another way than they are matched. */
function pathWarnings(rule: Rule): string[] {
  const out: string[] = [];
  for (const glob of rule.paths) {
    const why = unmatchable(glob.source);
    if (why !== null) out.push(`field "path": ${show(glob.source)} never matches: ${why}`);
  }
  for (const glob of livePaths(rule)) {
    const canonical = canonicalGlob(glob.source, rule.caseSensitive);
    // Escapes (`%C3%A9`, as a glob with `é` is written to match) are matched in either case: not a difference.
    if (canonical !== glob.source && canonical !== lowerEscapes(glob.source)) {
      const ignored = listed(ignoredParts(glob.source, rule.caseSensitive));
      out.push(`field "path": ${show(glob.source)} is the same as ${show(canonical)}: matching ignores ${ignored}`);
    }
  }
  return out;
}

/** Whether the rule counts `path`, for any method it counts: the first one will do. */
function countsPath(rule: Rule): (path: string) => boolean {
  const method = rule.methods === null ? "GET" : [...rule.methods][0]!;
  return (path) => ruleMatches(rule, method, path);
}

/** Exclude globs that never match, and ones that leave other spellings of their paths counted. */
function excludeWarnings(rule: Rule): string[] {
  const counted = countsPath(rule);
  const out: string[] = [];
  for (const glob of rule.exclude) {
    const why = unmatchable(glob.source);
    if (why !== null) {
      out.push(`field "exclude": ${show(glob.source)} never excludes anything: ${why}`);
      continue;
    }
    // Exempting only the path as written is what keeps a spelling from buying an exemption; say so where it shows.
    const other = canonicalGlob(glob.source, rule.caseSensitive).replaceAll("*", "x");
    if (other !== glob.source.replaceAll("*", "x") && counted(other)) {
      out.push(
        `field "exclude": ${show(glob.source)} matches the path as written only, so the rule still counts other spellings such as ${show(other)}`,
      );
    }
  }
  return out;
}

/** A path glob, the exclude that covers it as written (if one does), and a spelling of its paths still counted. */
type Exclusion = { glob: PathGlob; by: PathGlob | undefined; spelling: string | undefined };

function exclusionOf(rule: Rule, glob: PathGlob): Exclusion {
  const by = rule.exclude.find((cover) => globCovers(cover, glob));
  if (by === undefined) return { glob, by, spelling: undefined };
  // Paths the glob stands for, as written and as matched: each * filled with "x", and with nothing (`/api/*` counts `/api`).
  const canonical = canonicalGlob(glob.source, rule.caseSensitive);
  // And with ";" (a segment Tomcat and Spring drop), so that a path written under the exclude but matched elsewhere shows.
  const instances = [glob.source, canonical].flatMap((g) => ["x", "", ";"].map((fill) => g.replaceAll("*", fill)));
  const spellings = instances.flatMap((path) => [path, ...otherSpellings(path, rule.caseSensitive)]);
  const counted = countsPath(rule);
  const spelling = spellings.find((path) => normalizePath(path) === path && counted(path));
  return { glob, by, spelling };
}

/**
 * A rule none of whose paths can match, and path globs an exclude covers. A
 * path glob that an exclude covers as written still counts the other
 * spellings of its paths; the rule is called never-matching only when it
 * counts none of the spellings a client would try.
 */
function excludedPathWarnings(rule: Rule): string[] {
  const live = livePaths(rule);
  if (live.length === 0) return ["never matches: none of its paths can match"];
  const excluded = live.map((glob) => exclusionOf(rule, glob));
  if (excluded.every(({ by }) => by !== undefined)) {
    const how = excluded.map(({ glob, by }) => `path ${show(glob.source)} by exclude ${show(by!.source)}`).join("; ");
    const spelling = excluded.find((e) => e.spelling !== undefined)?.spelling;
    return [
      spelling === undefined
        ? `never matches: every path is excluded (${how})`
        : `counts only other spellings of the paths it excludes (${how}): exclude matches the path as written only, so ${show(spelling)} is counted`,
    ];
  }
  return excluded.flatMap(({ glob, by, spelling }) => {
    if (by === undefined) return [];
    return [
      spelling === undefined
        ? `field "path": ${show(glob.source)} is entirely excluded by exclude ${show(by.source)}, so it adds nothing`
        : `field "path": ${show(glob.source)} is excluded by exclude ${show(by.source)} as written, so it counts only other spellings, such as ${show(spelling)}`,
    ];
  });
}

/** Methods that never reach a Worker. */
function methodWarnings(rule: Rule): string[] {
  if (rule.methods === null) return [];
  const never = [...rule.methods].filter((method) => !WORKER_METHODS.has(method));
  if (never.length === rule.methods.size) {
    return [`never matches: Workers never receive ${never.join(" or ")} requests (the runtime cannot carry them)`];
  }
  if (never.length > 0) {
    return [`field "methods": Workers never receive ${never.join(" or ")} requests (the runtime cannot carry them)`];
  }
  return [];
}

function shadowWarnings(rule: Rule): string[] {
  if (rule.action !== "log" || rule.onError !== "closed") return [];
  return ['field "on_error": "closed" has no effect on a shadow rule (action = "log"), which never refuses a request'];
}

/**
 * A delay on a shadow rule, which never refuses and so never holds anything
 * (a kind warns of a delay too long for its own fields).
 */
function delayWarnings(rule: Rule, maxDelay: unknown): string[] {
  if (rule.maxDelayMs === undefined || rule.action !== "log") return [];
  return [
    `field "max_delay": ${show(maxDelay)} has no effect on a shadow rule (action = "log"), which never refuses a request and so never holds one`,
  ];
}

/**
 * An adaptive shadow rule, which never reports the origin's health (so its
 * limit never moves); critical requests marked by a header, which any
 * client can send; or an adaptive rule whose floor is its limit: the
 * factor can never take the limit anywhere.
 */
function adaptiveWarnings(rule: Rule): string[] {
  if (rule.adaptive === undefined) return [];
  if (rule.action === "log") {
    return [
      `field "adaptive": has no effect on a shadow rule (action = "log"), which never reports the origin's health, so its limit never moves; enforce the rule, or remove "adaptive"`,
    ];
  }
  const headers = (rule.adaptive.priorities?.critical ?? []).filter((m) => m.kind === "header");
  const marked = headers.map(
    (m) =>
      `field "adaptive.critical": ${show(m.source)} is a header the client sends: any client can mark its requests critical and take the share kept for them; mark them by a verified claim ("jwt:…"), a tier or a path, or have something you trust in front of the Worker set the header`,
  );
  if (rule.adaptive.floor < rule.limit) return marked;
  return [
    ...marked,
    `field "adaptive.floor": ${rule.adaptive.floor} is the rule's limit, so the limit never moves and the rule is not adaptive at all; lower the floor, or remove "adaptive"`,
  ];
}

/** IP ranges wider than /8 (IPv4) or /32 (IPv6): one rule over a whole carrier or region is rarely what was meant. */
function rangeWarnings(rule: Rule): string[] {
  const fields: [string, IpRange[] | undefined][] = [
    ["ips", rule.ips],
    ["exclude_ips", rule.excludeIps],
  ];
  return fields.flatMap(([field, ranges]) =>
    (ranges ?? [])
      .filter((range) => range.prefix < (range.v4 ? 8 : 32))
      .map(
        (range) =>
          `field "${field}": ${show(range.source)} is wider than /${range.v4 ? 8 : 32}: ${range.v4 ? "more than 1/256 of every IPv4 address" : "more than the /32 a regional registry allocates to one network"}; is that meant?`,
      ),
  );
}

/** A key's characteristic as written, such as "header:x-api-key|ip". */

/**
 * The characteristics of a key other than `sources`, as " (one for each value of ...)", or "". A missing
 * characteristic makes the requests that lack it share one key only for each value of the others.
 */
function perOthers(rule: Rule, sources: Characteristic): string {
  const others = rule.key.filter((c) => c !== sources).map((c) => show(characteristicLabel(c)));
  return others.length === 0 ? "" : ` (one for each value of ${listed(others)})`;
}

/** Whether some characteristic of the key reads the client's IP: then requests lacking the others are still told apart. */
const keyedByIp = (rule: Rule): boolean => rule.key.some((sources) => sources.some((s) => s.kind === "ip"));

/** A characteristic made only of a token's claims: every request without a valid token shares its one missing value. */
function claimKeyWarnings(rule: Rule): string[] {
  if (keyedByIp(rule)) return [];
  return rule.key
    .filter((sources) => sources.every(isClaim))
    .map((sources) => {
      const label = characteristicLabel(sources);
      const claims = sources.length > 1 ? "a token's claims" : "a token's claim";
      return `field "key": ${show(label)} is only ${claims}, with no fallback, so every request without a valid token (none, expired, or signed with a key the limiter lacks) shares one key${perOthers(rule, sources)}, and one client can use up its limit for all of them; add a fallback, such as ${show(`${label}|ip`)}`;
    });
}

/** A characteristic whose last fallback is `ja4`, which only Bot Management sets. */
function ja4KeyWarnings(rule: Rule): string[] {
  if (keyedByIp(rule)) return [];
  return rule.key
    .filter((sources) => sources.at(-1)?.kind === "ja4")
    .map((sources) => {
      const label = characteristicLabel(sources);
      const before = sources.slice(0, -1).map((source) => show(sourceLabel(source)));
      const which = before.length === 0 ? `${show(label)} is` : `${show(label)} falls back to "ja4", which is`;
      const lacking = before.length === 0 ? "every request" : `every request that lacks ${listed(before)}`;
      return `field "key": ${which} present only with Cloudflare Bot Management (Enterprise); without it, ${lacking} shares one key${perOthers(rule, sources)}; add a fallback, such as ${show(`${label}|ip`)}`;
    });
}

/** What decides which requests a rule counts, and how: equal signatures count the same requests the same way. */
function signature(rule: Rule): string {
  const sources = (globs: PathGlob[]) => globs.map((g) => g.source).sort();
  // Paths as they are matched (`/Login/` is `/login`); excludes as written, the way they are matched.
  const paths = [...new Set(rule.paths.map((g) => canonicalGlob(g.source, rule.caseSensitive)))].sort();
  const key = rule.key.map((sources) => sources.map(sourceLabel).join("|")).sort();
  // GET covers HEAD, so ["GET"] and ["GET", "HEAD"] count the same requests.
  const methods =
    rule.methods === null ? null : [...new Set([...rule.methods, ...(rule.methods.has("GET") ? ["HEAD"] : [])])].sort();
  // What the rule's kind counts over: a period, or requests in flight (whatever the place timeout).
  const measure = [rule.kind, kindOf(rule).measure(rule)];
  // An adaptive rule's limit moves with its own controller: it may fall below a fixed one, or another adaptive one's.
  const adaptive = rule.adaptive === undefined ? null : rule.id;
  return JSON.stringify([paths, sources(rule.exclude), methods, key, rule.caseSensitive, measure, adaptive]);
}

/**
 * Two enforcing rules with the same paths, methods, key and period count the
 * same requests in the same window, so the looser never decides anything.
 * Rules that differ only in period are not reported: that is how a burst and
 * a sustained limit are written. A shadow rule beside an enforcing one is how
 * a new limit is tried out, and is not reported either; nor is an adaptive
 * rule, whose limit may fall below the other's.
 */
function sameRequestsWarnings(rules: ValidRule[]): Finding[] {
  const out: Finding[] = [];
  const seen = new Map<string, { rule: Rule; where: string }>();
  for (const { rule, where } of rules) {
    if (rule.action !== "block") continue;
    const sig = signature(rule);
    const first = seen.get(sig);
    if (first === undefined) {
      seen.set(sig, { rule, where });
      continue;
    }
    const a = `${first.where} "${first.rule.id}"`;
    const b = `${where} "${rule.id}"`;
    const looser = first.rule.limit >= rule.limit ? a : b;
    const same = first.rule.limit === rule.limit;
    out.push({ level: "warning", message: kindOf(rule).overlap(a, b, looser, same) });
  }
  return out;
}

/**
 * Warnings about `TIERS`, valid as it is: a tier that names no rule, or rule
 * ids no rule has (the Worker ignores them, so renaming a rule never stops
 * it), and a limit that is the rule's own. `written` are the ids in `RULES`,
 * valid or not: a tier naming an invalid rule is left to that rule's errors.
 */
function tierWarnings(tiers: Tiers, valid: ValidRule[], written: string[], given: TierGiven): Finding[] {
  const rules = valid.map(({ rule }) => rule);
  const unknown = unknownRules(tiers, rules).filter(({ rule }) => !written.includes(rule));
  const unknownIn = (tier: string) => unknown.filter((u) => u.tier === tier).map((u) => u.rule);
  return [...tiers].flatMap(([tier, limits]) => [
    ...(limits.size === 0 ? [emptyTier(tier)] : []),
    ...unknownIdsWarnings(tier, unknownIn(tier), written),
    ...sameLimitWarnings(tier, limits, valid, given.get(tier)),
  ]);
}

/** A tier with no limits: putting a client in it is the same as no override. */
function emptyTier(tier: string): Finding {
  return warning(
    `TIERS.${tier}: names no rule, so a client put in this tier keeps every rule's own limit; add rule ids and limits, such as login = 20, or remove it`,
  );
}

/** At most this many of the rules' ids are listed beside a tier's unknown ones. */
const LISTED_IDS = 10;

/** The ids a tier names that no rule has, listed beside the rules' own, where a typo or a renamed rule shows. */
function unknownIdsWarnings(tier: string, ids: string[], written: string[]): Finding[] {
  if (ids.length === 0) return [];
  const shown = written.slice(0, LISTED_IDS).map((id) => show(id));
  if (written.length > LISTED_IDS) shown.push(`${written.length - LISTED_IDS} more`);
  const rules = written.length === 0 ? "there are no rules" : `the rules are ${listed(shown)}`;
  const ignored = ids.length === 1 ? "which no rule has; it is ignored" : "which no rule has; they are ignored";
  return [warning(`TIERS.${tier}: names ${listed(ids.map((id) => show(id)))}, ${ignored} (${rules})`)];
}

/** A tier's limit that is the rule's own, with nothing else given (a burst): a client in the tier is counted the same as without it. */
function sameLimitWarnings(
  tier: string,
  limits: ReadonlyMap<string, number>,
  valid: ValidRule[],
  given: ReadonlyMap<string, unknown> | undefined,
): Finding[] {
  return valid.flatMap(({ rule, where }) =>
    limits.get(rule.id) === rule.limit && given?.has(rule.id) !== true
      ? [
          warning(
            `TIERS.${tier}.${rule.id}: ${rule.limit} is already the limit of ${where} "${rule.id}", so the tier changes nothing for it`,
          ),
        ]
      : [],
  );
}

/** The report as lines of text, errors first, and a summary. */
export function formatReport(report: CheckReport, file: string): string[] {
  const count = (level: Finding["level"]) => report.findings.filter((f) => f.level === level).length;
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const tag = { error: "error", danger: "DANGER", warning: "warning" };
  const lines = report.findings.map((f) => `${tag[f.level]}: ${f.message}`);
  const errors = count("error");
  const dangers = count("danger");
  const warnings = plural(dangers + count("warning"), "warning") + (dangers > 0 ? ` (${dangers} DANGER)` : "");
  lines.push(
    `${file}: ${plural(report.rules, "rule")}, ${plural(errors, "error")}, ${warnings}${errors > 0 ? "" : " - OK"}`,
  );
  return lines;
}
