/**
 * @module
 * What the configuration checker reports, and the helpers its findings share.
 */
import { sourceLabel } from "../core/keys.ts";
import type { Characteristic, Rule } from "../core/rules.ts";

/** The parts of a wrangler configuration the checker reads: what `unstable_readConfig` returns, or a raw wrangler.json. */
export type WranglerConfig = {
  vars?: Record<string, unknown>;
  /** Where the deployed Worker answers (see platform.ts, loopFindings). */
  routes?: unknown[];
  route?: unknown;
  workers_dev?: boolean;
  compatibility_flags?: string[];
  /** The secrets `wrangler deploy` refuses to deploy without; their values are never in the file. */
  secrets?: { required?: string[] };
  durable_objects?: { bindings?: { name: string; class_name: string; script_name?: string }[] };
  migrations?: {
    tag?: string;
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

/** A rule that parsed: the rule, where it is written (such as `RULES[2]` or `RULES_AUTH[0]`), and its fields as written. */
export type ValidRule = { rule: Rule; where: string; input: Record<string, unknown> };

export const warning = (message: string): Finding => ({ level: "warning", message });
export const danger = (message: string): Finding => ({ level: "danger", message });

/** "a", "a and b", "a, b and c". */
export const listed = (items: string[]): string =>
  items.slice(0, -1).join(", ") + (items.length > 1 ? " and " : "") + items.at(-1);

/** A characteristic as written, such as `header:x-api-key|ip`. */
export const characteristicLabel = (sources: Characteristic): string => sources.map(sourceLabel).join("|");
