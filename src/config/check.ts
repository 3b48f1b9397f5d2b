/**
 * @module
 * The offline config checker: every error in the limiter's configuration,
 * each naming the variable (and the rule and field), and warnings for
 * settings that are valid but suspicious, in the spirit of express-rate-limit's
 * validations. Pure: it takes the configuration as wrangler reads it;
 * `tools/check-config.ts` reads the file and prints the findings.
 *
 * src/config/ is the Worker's variables, validated; pure, so the offline
 * checker runs the same code: the errors here are the ones the Worker itself
 * would answer 500 for.
 */

import { describePeriod } from "../core/duration.ts";
import { sourceLabel } from "../core/keys.ts";
import { canonicalGlob, normalizePath, type PathGlob } from "../core/paths.ts";
import { parseRule, type Rule, ruleMatches } from "../core/rules.ts";
import { show } from "../core/show.ts";
import { parseAdminPrefix } from "./admin-prefix.ts";
import { parseOrigin } from "./origin.ts";
import { parseSettings, type SettingsInput } from "./settings.ts";

/** The parts of a wrangler configuration the checker reads: what `unstable_readConfig` returns, or a raw wrangler.json. */
export type WranglerConfig = {
  vars?: Record<string, unknown>;
  durable_objects?: { bindings?: { name: string; class_name: string; script_name?: string }[] };
  migrations?: {
    new_classes?: string[];
    new_sqlite_classes?: string[];
    renamed_classes?: { from: string; to: string }[];
    deleted_classes?: string[];
  }[];
};

/**
 * One finding. An `error` makes the Worker refuse to run (it answers 500) or
 * fail; a `danger` is a valid setting that can let clients escape their
 * limits or expose a secret; a `warning` is valid but probably not meant.
 */
export type Finding = { level: "error" | "danger" | "warning"; message: string };

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
export function checkConfig(config: WranglerConfig): CheckReport {
  const vars = config.vars ?? {};
  const findings: Finding[] = [];
  const error = (message: string) => findings.push({ level: "error", message });

  for (const parsed of [
    parseSettings(vars as SettingsInput),
    parseOrigin(vars.ORIGIN_URL as string | undefined),
    parseAdminPrefix(vars.ADMIN_PREFIX),
  ]) {
    if (!parsed.ok) for (const message of parsed.errors) error(message);
  }
  findings.push(...durableObjectFindings(config));

  findings.push(...varWarnings(vars));
  // Each valid rule is checked for warnings, even beside invalid ones.
  const raw = rawRules(vars.RULES);
  const valid: { rule: Rule; index: number }[] = [];
  if (Array.isArray(raw)) {
    raw.forEach((input: unknown, index) => {
      const parsed = parseRule(input, `RULES[${index}]`);
      if (!parsed.ok) return;
      const rule = parsed.value;
      valid.push({ rule, index });
      findings.push(...ruleWarnings(rule, `RULES[${index}] "${rule.id}"`, input as Record<string, unknown>));
    });
  }
  findings.push(...sameRequestsWarnings(valid));

  const order = { error: 0, danger: 1, warning: 2 };
  findings.sort((a, b) => order[a.level] - order[b.level]);
  return { rules: Array.isArray(raw) ? raw.length : 0, findings };
}

/** `RULES` as the Worker reads it: a list, or the same list as a JSON string. */
function rawRules(value: unknown): unknown {
  if (typeof value !== "string") return value ?? [];
  try {
    return JSON.parse(value);
  } catch {
    return []; // parseSettings has reported it
  }
}

function durableObjectFindings(config: WranglerConfig): Finding[] {
  if (config.durable_objects === undefined && config.migrations === undefined) return [];
  const out: Finding[] = [];
  const error = (message: string) => out.push({ level: "error", message });
  const bindings = config.durable_objects?.bindings ?? [];
  const binding = bindings.find((b) => b.name === BINDING);
  if (binding === undefined) {
    const names = bindings.map((b) => b.name).join(", ") || "none";
    error(
      `durable_objects.bindings: no binding named "${BINDING}" (found: ${names}); the Worker cannot reach its counters. Add [[durable_objects.bindings]] name = "${BINDING}", class_name = "${CLASS}"`,
    );
  } else if (binding.script_name !== undefined) {
    return out; // the class lives in another Worker, with its own migrations
  } else if (binding.class_name !== CLASS) {
    error(`durable_objects.bindings: "${BINDING}" binds class "${binding.class_name}"; the Worker exports "${CLASS}"`);
  }
  const kind = storageOf(CLASS, config.migrations ?? []);
  if (kind === "kv") {
    error(
      `migrations: "${CLASS}" is created with new_classes (key-value storage); it keeps its counters in SQL and needs new_sqlite_classes = ["${CLASS}"]`,
    );
  } else if (kind === undefined) {
    error(
      `migrations: no migration creates "${CLASS}"; add [[migrations]] tag = "v1", new_sqlite_classes = ["${CLASS}"]`,
    );
  }
  return out;
}

/** The storage a class ends up with once the migrations are replayed; undefined when none creates it or one deletes it. */
function storageOf(
  className: string,
  migrations: NonNullable<WranglerConfig["migrations"]>,
): "sqlite" | "kv" | undefined {
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

const warning = (message: string): Finding => ({ level: "warning", message });
const danger = (message: string): Finding => ({ level: "danger", message });

/** Warnings about the variables, apart from the rules in `RULES`. */
function varWarnings(vars: Record<string, unknown>): Finding[] {
  return [
    ...rulesWarnings(vars.RULES),
    ...trustedIpHeaderWarnings(vars.TRUSTED_IP_HEADER),
    ...adminTokenWarnings(vars.ADMIN_TOKEN),
    ...ipv6PrefixWarnings(vars.IPV6_PREFIX),
    ...timeoutWarnings(vars.LIMITER_TIMEOUT_MS),
  ];
}

function rulesWarnings(rules: unknown): Finding[] {
  if (rules !== undefined && !(Array.isArray(rules) && rules.length === 0)) return [];
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
    return `paths are matched after decoding unreserved characters and collapsing repeated slashes (write ${show(normal)})`;
  }
  return null;
}

/** "a", "a and b", "a, b and c". */
const listed = (items: string[]): string =>
  items.slice(0, -1).join(", ") + (items.length > 1 ? " and " : "") + items.at(-1);

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
  return out;
}

/** Warnings about one valid rule, each starting with `label`; `raw` is the rule as written. */
function ruleWarnings(rule: Rule, label: string, raw: Record<string, unknown>): Finding[] {
  const messages = [
    ...periodWarnings(rule, raw.period),
    ...pathWarnings(rule),
    ...excludeWarnings(rule),
    ...excludedPathWarnings(rule),
    ...methodWarnings(rule),
    ...shadowWarnings(rule),
  ];
  return messages.map((message) => warning(`${label}: ${message}`));
}

/** A period so short that jitter dominates it, or a number of seconds that looks like milliseconds. */
function periodWarnings(rule: Rule, period: unknown): string[] {
  if (rule.periodMs < 1_000) {
    return [
      `field "period": ${show(period)} is under 1 second${typeof period === "number" ? " (a number is seconds)" : ""}: every request costs a Durable Object round trip, and clock and network jitter are a large share of so short a window; use a longer period with a proportionally larger limit`,
    ];
  }
  if (typeof period === "number" && period >= 1_000 && period % 1_000 === 0) {
    return [
      `field "period": ${period} is seconds, that is ${describePeriod(rule.periodMs)}; if you meant milliseconds, write "${period / 1_000}s"`,
    ];
  }
  return [];
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
    if (canonical !== glob.source) {
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
  const instances = [glob.source, canonical].flatMap((g) => [g.replaceAll("*", "x"), g.replaceAll("*", "")]);
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

/** What decides which requests a rule counts, and how: equal signatures count the same requests the same way. */
function signature(rule: Rule): string {
  const sources = (globs: PathGlob[]) => globs.map((g) => g.source).sort();
  // Paths as they are matched (`/Login/` is `/login`); excludes as written, the way they are matched.
  const paths = [...new Set(rule.paths.map((g) => canonicalGlob(g.source, rule.caseSensitive)))].sort();
  const key = rule.key.map((sources) => sources.map(sourceLabel).join("|")).sort();
  // GET covers HEAD, so ["GET"] and ["GET", "HEAD"] count the same requests.
  const methods =
    rule.methods === null ? null : [...new Set([...rule.methods, ...(rule.methods.has("GET") ? ["HEAD"] : [])])].sort();
  return JSON.stringify([paths, sources(rule.exclude), methods, key, rule.caseSensitive, rule.periodMs]);
}

/**
 * Two enforcing rules with the same paths, methods, key and period count the
 * same requests in the same window, so the looser never decides anything.
 * Rules that differ only in period are not reported: that is how a burst and
 * a sustained limit are written. A shadow rule beside an enforcing one is how
 * a new limit is tried out, and is not reported either.
 */
function sameRequestsWarnings(rules: { rule: Rule; index: number }[]): Finding[] {
  const out: Finding[] = [];
  const seen = new Map<string, { rule: Rule; index: number }>();
  for (const { rule, index } of rules) {
    if (rule.action !== "block") continue;
    const sig = signature(rule);
    const first = seen.get(sig);
    if (first === undefined) {
      seen.set(sig, { rule, index });
      continue;
    }
    const a = `RULES[${first.index}] "${first.rule.id}"`;
    const b = `RULES[${index}] "${rule.id}"`;
    const looser = first.rule.limit >= rule.limit ? a : b;
    out.push({
      level: "warning",
      message:
        first.rule.limit === rule.limit
          ? `${a} and ${b}: are the same limit on the same requests, key and period; remove one`
          : `${a} and ${b}: count the same requests with the same key and period, so ${looser}, the looser, never refuses anything; remove it, or give the two different periods for a burst and a sustained limit`,
    });
  }
  return out;
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
