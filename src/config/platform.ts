/**
 * @module
 * What Cloudflare's platform would refuse or do with a configuration that
 * the Worker's own parser cannot see: variables it does not read (a
 * misspelled name is silently a default), variables over the 5 KB each may
 * hold, too many of them, tables wrangler does not know, an environment the
 * file does not have, and a deployment that would forward to itself.
 */
import { show } from "../core/show.ts";
import { danger, type Finding, warning } from "./findings.ts";
import { isVariable, RULE_GROUP, VARIABLES } from "./variables.ts";

/** Cloudflare's limit on one environment variable's value, in bytes. */
export const MAX_VARIABLE_BYTES = 5 * 1024;
/** Variables (and secrets) a Worker may have on the Free plan; 128 on paid plans. */
export const MAX_VARIABLES_FREE = 64;

/** What a variable's value weighs as deployed: its text, or its JSON for a table or list. */
export const variableBytes = (value: unknown): number =>
  new TextEncoder().encode(typeof value === "string" ? value : JSON.stringify(value)).length;

/** Edit distance, for telling a misspelled name from an unrelated one. */
function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

/** The known name `name` is probably a misspelling of, or undefined. */
export function meant(name: string, known: readonly string[]): string | undefined {
  const lower = name.toLowerCase();
  let best: { name: string; distance: number } | undefined;
  for (const candidate of known) {
    const d = distance(lower, candidate.toLowerCase());
    if (d <= Math.max(1, Math.floor(candidate.length / 4)) && (best === undefined || d < best.distance)) {
      best = { name: candidate, distance: d };
    }
  }
  return best?.name;
}

/**
 * Variables the Worker does not read. A near miss of a variable that is not
 * set is an error: what was meant is silently the default (or, for `RULES`,
 * no rules at all). Any other unknown name is a warning.
 */
export function variableNameFindings(vars: Readonly<Record<string, unknown>>): Finding[] {
  const known = Object.keys(VARIABLES);
  return Object.keys(vars)
    .filter((name) => !isVariable(name))
    .map((name) => {
      // `RULE_AUTH`, `rules_auth`: a rule group.
      const guess = /^RULES?_./i.test(name) ? `RULES_${name.replace(/^RULES?_/i, "")}` : meant(name, known);
      const forRules = guess === "RULES" || guess?.startsWith("RULES_") === true;
      const rules = holdsRules(vars[name]);
      // A near miss of a variable not set: what was meant, unless it holds rules and what was meant is not for them.
      if (guess !== undefined && vars[guess] === undefined && (forRules || !rules)) {
        const effect = forRules ? "its rules are not read" : `${guess} is unset, so its default applies`;
        return {
          level: "error",
          message: `vars.${name}: the limiter reads no variable of this name; did you mean ${guess}? As it is, ${effect}`,
        };
      }
      // Rule tables under a name the limiter does not read: whatever else is set, these rules are not read.
      if (rules) {
        const group = name
          .replace(/^RULES?(?=$|[-_ .])[-_ .]*/i, "")
          .replace(/[-_ .]*RULES?$/i, "")
          .replace(/[^A-Za-z0-9_]+/g, "_")
          .replace(/^_+|_+$/g, "");
        return {
          level: "error",
          message: `vars.${name}: holds rules, but the limiter reads rules only from RULES and RULES_<GROUP> (letters, digits and _ after RULES_): its rules are not read. ${group === "" ? "Move them into RULES" : `Name it RULES_${group}, or move them into RULES`}`,
        };
      }
      return warning(
        `vars.${name}: the limiter reads no variable of this name${guess === undefined ? "" : ` (did you mean ${guess}?)`}; variables it reads: ${known.join(", ")}, RULES_<GROUP>`,
      );
    });
}

/** Each variable against Cloudflare's 5 KB, and the number of variables against the Free plan's 64. */
export function variableSizeFindings(vars: Readonly<Record<string, unknown>>): Finding[] {
  const findings: Finding[] = [];
  for (const [name, value] of Object.entries(vars)) {
    const bytes = variableBytes(value);
    if (bytes <= MAX_VARIABLE_BYTES) continue;
    const over = bytes - MAX_VARIABLE_BYTES;
    const way =
      name === "RULES" || RULE_GROUP.test(name)
        ? ` Split the rules across variables named RULES_<GROUP> ([[vars.RULES_AUTH]], [[vars.RULES_API]], …), at least ${Math.ceil(bytes / MAX_VARIABLE_BYTES)}; the Worker reads them all as one list`
        : "";
    findings.push({
      level: "error",
      message: `vars.${name}: ${bytes} bytes as deployed, ${over} over Cloudflare's limit of ${MAX_VARIABLE_BYTES} bytes (5 KB) per variable; wrangler deploy would be refused.${way}`,
    });
  }
  const count = Object.keys(vars).length;
  if (count > MAX_VARIABLES_FREE) {
    findings.push(
      warning(
        `vars: ${count} variables; the Free plan allows ${MAX_VARIABLES_FREE} (secrets included), paid plans 128. Fewer, larger RULES_<GROUP> variables (up to 5 KB each) hold the same rules`,
      ),
    );
  }
  return findings;
}

/** Where the deployed Worker is reached: the parts of the file that decide it. */
export type Reach = {
  /** `routes` or `route`, as written: none means no route. */
  routes?: unknown[] | undefined;
  route?: unknown;
  workers_dev?: boolean | undefined;
};

/**
 * A deployment that would forward requests to itself. Without ORIGIN_URL,
 * a request goes on to its own URL: on a route that is the zone's origin,
 * but on `*.workers.dev` (on unless set off, and by default when there are
 * no routes) it is the Worker itself, which answers 508 Loop Detected.
 */
export function loopFindings(vars: Readonly<Record<string, unknown>>, reach: Reach): Finding[] {
  const origin = vars.ORIGIN_URL;
  if (typeof origin === "string" && origin !== "") return [];
  const routed = (reach.routes?.length ?? 0) > 0 || reach.route !== undefined;
  const workersDev = reach.workers_dev ?? !routed;
  const findings: Finding[] = [];
  if (!routed) {
    findings.push(
      danger(
        'ORIGIN_URL: unset, and no route: the Worker would forward each request to its own URL, and answer 508 Loop Detected. Set ORIGIN_URL, or add routes = [{ pattern = "api.example.com/*", zone_name = "example.com" }] to forward to the zone\'s own origin',
      ),
    );
  }
  if (workersDev) {
    findings.push(
      danger(
        `workers_dev: ${reach.workers_dev === undefined ? "on (the default without routes)" : "true"}, and ORIGIN_URL unset: on its *.workers.dev address the Worker would forward each request to itself, and answer 508 Loop Detected. Set ORIGIN_URL, or workers_dev = false`,
      ),
    );
  }
  return findings;
}

/** Top-level fields wrangler does not know, such as `[var]` for `[vars]`; `known` is wrangler's list. */
export function tableFindings(fields: readonly string[], known: readonly string[]): Finding[] {
  const knownSet = new Set(known);
  return fields
    .filter((field) => !knownSet.has(field))
    .map((field) => {
      const guess = meant(field, known);
      return {
        level: "error",
        message: `${show(field)}: not a field wrangler knows${guess === undefined ? "" : `; did you mean ${show(guess)}?`} It is ignored, with everything in it`,
      };
    });
}

/** `--env name` must name an `[env.name]` of the file; wrangler would otherwise deploy the top level under that name. */
export function environmentFindings(name: string | undefined, defined: readonly string[]): Finding[] {
  if (name === undefined || defined.includes(name)) return [];
  const guess = meant(name, defined);
  return [
    {
      level: "error",
      message: `--env ${name}: the file has no [env.${name}]${guess === undefined ? "" : `; did you mean ${guess}?`} (environments: ${defined.length === 0 ? "none" : defined.join(", ")})`,
    },
  ];
}

/** Fields only a rule has: a table with one of them is a rule. */
const RULE_FIELDS = ["limit", "period", "path", "rate", "burst", "concurrency", "quota", "max_delay"];

/** Whether a table has a field only a rule has. */
const isRuleTable = (entry: unknown): boolean =>
  typeof entry === "object" && entry !== null && !Array.isArray(entry) && RULE_FIELDS.some((field) => field in entry);

/**
 * Whether a variable's value holds rules: a list of rule tables, a single
 * rule table (`[vars.AUTH_RULES]`), or a table holding them a level down
 * (`[[vars.RATE.RULES]]`); or their JSON text, as a dashboard or a secret
 * holds it.
 */
function holdsRules(value: unknown, depth = 0): boolean {
  let held = value;
  if (typeof value === "string" && /^\s*[[{]/.test(value)) {
    try {
      held = JSON.parse(value);
    } catch {
      return false;
    }
  }
  if (Array.isArray(held)) return held.some(isRuleTable);
  if (isRuleTable(held)) return true;
  return (
    depth === 0 &&
    typeof held === "object" &&
    held !== null &&
    Object.values(held).some((inner) => holdsRules(inner, depth + 1))
  );
}
