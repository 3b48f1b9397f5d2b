/**
 * @module
 * `{prefix}/overrides`: per-client limits without a redeploy.
 *
 * - `GET    {prefix}/overrides?rule=<id>&key=<client>`: one client's override
 * - `GET    {prefix}/overrides?rule=&tier=&note=&cursor=&limit=`: a page of them
 * - `PUT    {prefix}/overrides?rule=<id>&key=<client>` with `{"limit": 500}`,
 *   `{"tier": "pro"}`, `{"unlimited": true}` or `{"deny": true}`, and
 *   optionally `"expires"` and `"note"`
 * - `DELETE {prefix}/overrides?rule=<id>&key=<client>`
 * - `POST   {prefix}/overrides/import` with a JSON list or CSV: many at once
 *
 * Writes go through the registry object, which drives the client's object;
 * the decision path reads neither.
 */
import type { Settings } from "../../config/settings.ts";
import { hashKey, keyParams as keyParamsOf } from "../../core/keys.ts";
import { CLIENT_FIELDS } from "../../core/kinds/registry.ts";
import { limitOutOfRange, type Override, overrideView, parseOverride } from "../../core/overrides.ts";
import { fail, ok, type Result } from "../../core/result.ts";
import type { Rule } from "../../core/rules.ts";
import { show } from "../../core/show.ts";
import { textUpTo } from "../../http/body-text.ts";
import { problemResponse } from "../../http/problem.ts";
import { type Isolate, overrideChanged } from "../../isolate/isolate.ts";
import { type Change, logChange, type OverrideRegistry, type RegistryEntry } from "../../object/registry.ts";
import { keyHashPrefix, logEvent } from "../../observe/log.ts";
import { adminKey } from "./key.ts";
import { json } from "./views.ts";

export const INVALID_OVERRIDE = "urn:edge-rate-limiter:invalid-override";
export const NO_REGISTRY = "urn:edge-rate-limiter:no-override-registry";
export const BODY_TOO_LARGE = "urn:edge-rate-limiter:body-too-large";

/** The largest body an override request may have: 10,000 overrides of a few hundred bytes. */
const MAX_BODY_BYTES = 8 * 1024 * 1024;
const DEFAULT_PAGE = 100;
const MAX_PAGE = 1_000;

/** What an overrides request needs besides itself. */
export type OverridesContext = {
  settings: Settings;
  registry: DurableObjectNamespace<OverrideRegistry> | undefined;
  isolate: Isolate;
  /** Who is asking: a prefix of the admin token's hash. */
  by: string;
};

/** The registry: one object for the whole deployment. */
const registryOf = (ns: DurableObjectNamespace<OverrideRegistry>) => ns.get(ns.idFromName("registry"));

/** Answers `{prefix}/overrides` and `{prefix}/overrides/import`. */
export async function overrides(
  method: string,
  route: string,
  request: Request,
  context: OverridesContext,
): Promise<Response> {
  const { registry } = context;
  if (registry === undefined) {
    return problemResponse({
      type: NO_REGISTRY,
      title: "Not Implemented",
      status: 501,
      detail: "No OVERRIDES binding: bind the OverrideRegistry class to OVERRIDES (see wrangler.toml).",
    });
  }
  const url = new URL(request.url);
  if (route === "/overrides/import") return importOverrides(request, context, registryOf(registry));
  const stub = registryOf(registry);
  if (method === "GET" && !url.searchParams.has("key")) return listOverrides(url, context.settings, stub);
  const client = await clientOf(url, context.settings);
  if (!client.ok) return invalid(client.errors);
  const { rule, key, name } = client.value;
  if (method === "GET") {
    const entry = await stub.get(rule.id, key);
    if (!entry?.override) return json({ ...clientView(rule.id, key, name), override: null });
    return json(entryView(entry));
  }
  let override: Override | null = null;
  if (method === "PUT") {
    const text = await textUpTo(request, MAX_BODY_BYTES);
    if (text === null) return tooLarge();
    const body = jsonOf(text);
    if (!body.ok) return invalid(body.errors);
    const parsed = overrideOf(body.value, rule, context);
    if (!parsed.ok) return invalid(parsed.errors);
    override = parsed.value;
  }
  const report = await stub.change({ rule: rule.id, key, name, override });
  forgetHere(context, rule, key);
  logChange(context.by, { rule: rule.id, key, name, override }, report.before);
  return json({
    ...clientView(rule.id, key, name),
    before: report.before === null ? null : overrideView(report.before),
    after: report.after === null ? null : overrideView(report.after),
    applied: report.applied,
  });
}

/** A client as the query names it: its rule, canonical key and object name. */
async function clientOf(url: URL, settings: Settings): Promise<Result<{ rule: Rule; key: string; name: string }>> {
  const rule = ruleNamed(url.searchParams.get("rule"), settings);
  if (!rule.ok) return rule;
  const key = adminKey(rule.value, url.searchParams.getAll("key"), settings.ipv6PrefixBits);
  if (!key.ok) return fail(...key.errors.map((error) => `key: ${error}`));
  return ok({ rule: rule.value, key: key.value, name: await hashKey(key.value) });
}

function ruleNamed(id: unknown, settings: Settings): Result<Rule> {
  const rule = settings.rules.find((r) => r.id === id);
  if (rule !== undefined) return ok(rule);
  const known = settings.rules.map((r) => r.id).join(", ");
  return fail(id == null ? `rule: required; rules: ${known}` : `rule: no rule ${show(id)}; rules: ${known}`);
}

const overrideContext = (context: OverridesContext, rule: Rule) => ({
  nowMs: Date.now(),
  tiers: new Set(context.settings.tiers.keys()),
  by: context.by,
  rule,
});

/** An override of `rule` from an operator's fields: valid, and giving a limit the rule can enforce (its cost at least; at most 10000 places). */
function overrideOf(fields: unknown, rule: Rule, context: OverridesContext): Result<Override> {
  const parsed = parseOverride(fields, overrideContext(context, rule));
  if (!parsed.ok) return parsed;
  const outOfRange = limitOutOfRange(parsed.value, rule);
  return outOfRange === null ? parsed : fail(outOfRange);
}

/**
 * What this isolate remembers of the client under the rule goes at once, so
 * a raised limit or a lifted rule is not met by a refusal it cached; other
 * isolates' refusals lapse within their cap (10 s by default).
 */
function forgetHere({ isolate }: OverridesContext, rule: Rule, key: string): void {
  overrideChanged(isolate, rule, key);
}

async function listOverrides(url: URL, settings: Settings, stub: ReturnType<typeof registryOf>): Promise<Response> {
  const params = url.searchParams;
  const errors: string[] = [];
  const rule = params.get("rule") ?? undefined;
  if (rule !== undefined && !settings.rules.some((r) => r.id === rule)) errors.push(`rule: no rule ${show(rule)}`);
  const tier = params.get("tier") ?? undefined;
  if (tier !== undefined && !settings.tiers.has(tier)) errors.push(`tier: no tier ${show(tier)} in TIERS`);
  const limit = params.has("limit") ? Number(params.get("limit")) : DEFAULT_PAGE;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) {
    errors.push(`limit: must be an integer from 1 to ${MAX_PAGE}; got ${show(params.get("limit"))}`);
  }
  const cursor = params.get("cursor") ?? undefined;
  if (cursor !== undefined && !isCursor(cursor)) errors.push("cursor: not one this API gave out");
  if (errors.length > 0) return invalid(errors);
  const page = await stub.list({ rule, tier, note: params.get("note") ?? undefined, after: cursor, limit });
  const counts = await stub.counts();
  return json({
    overrides: page.entries.map(entryView),
    next: page.next,
    total: page.total,
    pending: counts.pending,
  });
}

const isCursor = (text: string): boolean => {
  try {
    const value = JSON.parse(text) as unknown;
    return Array.isArray(value) && value.length === 2 && value.every((part) => typeof part === "string");
  } catch {
    return false;
  }
};

/**
 * A client under a rule as every answer names it: its key's parts
 * (`[label, value]`, value null when absent), the `key=` parameters that name
 * it in a request to this API, and its key's hash prefix.
 */
const clientView = (rule: string, key: string, name: string) => ({
  rule,
  key: JSON.parse(key) as unknown,
  keyParams: keyParamsOf(key),
  keyHash: keyHashPrefix(name),
});

/** An entry as the API shows it. */
export const entryView = (entry: RegistryEntry) => ({
  ...clientView(entry.rule, entry.key, entry.name),
  ...(entry.override === null ? {} : overrideView(entry.override)),
  ...(entry.override?.expiresAtMs != null && entry.override.expiresAtMs <= Date.now() ? { expired: true } : {}),
  state: entry.applied ? "applied" : "pending",
});

/**
 * Many overrides at once, from a JSON list (`[{"rule", "key", "tier"…}]`,
 * `"delete": true` to remove one) or CSV with a header line (`rule,key,limit,burst,
 * tier,unlimited,deny,expires,note,delete`). All or nothing: one bad line
 * makes a 400 that names every bad line, and nothing changes. Then this
 * isolate forgets every client the import names, as after a PUT; the
 * registry sends the first changes before it answers (see importMany).
 */
async function importOverrides(
  request: Request,
  context: OverridesContext,
  stub: ReturnType<typeof registryOf>,
): Promise<Response> {
  const text = await textUpTo(request, MAX_BODY_BYTES);
  if (text === null) return tooLarge();
  const csv = (request.headers.get("content-type") ?? "").toLowerCase().startsWith("text/csv");
  const items = csv ? csvItems(text) : jsonItems(text);
  if (!items.ok) return invalid(items.errors);
  const changes: { change: Change; rule: Rule }[] = [];
  const errors: string[] = [];
  const settings = context.settings;
  // Each client once per rule: two items for one would leave it to their order, and an import run again would
  // report each time what it changed.
  const first = new Map<string, number>();
  for (const [i, item] of items.value.entries()) {
    const change = await changeOf(item, context, settings);
    if (!change.ok) {
      errors.push(...change.errors.map((error) => `item ${i + 1}: ${error}`));
      continue;
    }
    const { rule, name } = change.value.change;
    const earlier = first.get(`${rule}|${name}`);
    if (earlier !== undefined) errors.push(`item ${i + 1}: names the same client under "${rule}" as item ${earlier}`);
    else first.set(`${rule}|${name}`, i + 1);
    changes.push(change.value);
  }
  if (errors.length > 0) return invalid(errors);
  const report = await stub.importMany(
    changes.map(({ change }) => change),
    context.by,
  );
  for (const { change, rule } of changes) forgetHere(context, rule, change.key);
  logEvent({ event: "overrides_imported", by: context.by, ...report }, "info");
  return json(report);
}

/** One item of an import as a change, with the rule it names. */
async function changeOf(
  item: unknown,
  context: OverridesContext,
  settings: Settings,
): Promise<Result<{ change: Change; rule: Rule }>> {
  if (typeof item !== "object" || item === null || Array.isArray(item))
    return fail(`must be an object; got ${show(item)}`);
  const { rule: ruleId, key: keyParams, delete: remove, ...fields } = item as Record<string, unknown>;
  const rule = ruleNamed(ruleId, settings);
  if (!rule.ok) return rule;
  const params = typeof keyParams === "string" ? [keyParams] : keyParams;
  if (!Array.isArray(params) || !params.every((p) => typeof p === "string")) {
    return fail(`key: must be a string such as "ip=203.0.113.7", or a list of them; got ${show(keyParams)}`);
  }
  const key = adminKey(rule.value, params, settings.ipv6PrefixBits);
  if (!key.ok) return fail(...key.errors.map((error) => `key: ${error}`));
  const name = await hashKey(key.value);
  const change = (override: Override | null) => ({
    change: { rule: rule.value.id, key: key.value, name, override },
    rule: rule.value,
  });
  if (remove === true) {
    // A deletion with a setting beside it says two things at once: which one is meant is not for the import to guess.
    const beside = Object.keys(fields).filter((name) => fields[name] !== undefined);
    if (beside.length > 0) {
      return fail(`delete: true deletes the override; remove ${beside.map((n) => show(n)).join(", ")}, or "delete"`);
    }
    return ok(change(null));
  }
  const override = overrideOf(fields, rule.value, context);
  return override.ok ? ok(change(override.value)) : override;
}

function jsonItems(text: string): Result<unknown[]> {
  try {
    const value = JSON.parse(text) as unknown;
    return Array.isArray(value) ? ok(value) : fail(`body: must be a JSON list of overrides; got ${show(value)}`);
  } catch (error) {
    return fail(`body: not valid JSON (${(error as Error).message})`);
  }
}

/** The columns of an import's CSV, and the fields of each item of its JSON (docs/per-client-limits.md documents each). */
export const IMPORT_COLUMNS = [
  "rule",
  "key",
  "limit",
  ...CLIENT_FIELDS,
  "tier",
  "unlimited",
  "deny",
  "expires",
  "note",
  "delete",
] as const;

/**
 * CSV (RFC 4180) with a header line: quoted fields may hold commas, doubled
 * quotes and line breaks. Empty cells are absent fields. A column named
 * twice, a row with more cells than the header, or a quote left open is
 * an error naming its line.
 */
function csvItems(text: string): Result<unknown[]> {
  const records = csvRecords(text);
  if (!records.ok) return records;
  const lines = records.value.filter(({ cells }) => cells.some((cell) => cell.trim() !== ""));
  const [header, ...rows] = lines;
  if (header === undefined) return fail("body: an empty CSV; the first line names the columns");
  const names = header.cells.map((name) => name.trim());
  const unknown = names.filter((name) => !(IMPORT_COLUMNS as readonly string[]).includes(name));
  if (unknown.length > 0) return fail(`body: unknown CSV columns ${unknown.map((n) => show(n)).join(", ")}`);
  const twice = names.filter((name, i) => names.indexOf(name) !== i);
  if (twice.length > 0)
    return fail(`body: CSV columns named twice: ${[...new Set(twice)].map((n) => show(n)).join(", ")}`);
  const long = rows.filter(({ cells }) => cells.length > names.length);
  if (long.length > 0) {
    return fail(
      ...long.map(
        ({ line, cells }) => `line ${line}: ${cells.length} cells, and the header names ${names.length} columns`,
      ),
    );
  }
  return ok(
    rows.map(({ cells }) => {
      const item: Record<string, unknown> = {};
      names.forEach((name, i) => {
        const cell = cells[i]?.trim() ?? "";
        if (cell === "") return;
        // A number only when it is written as one; anything else stays as sent, for the error to quote.
        if ((name === "limit" || CLIENT_FIELDS.includes(name)) && /^\d+$/.test(cell)) item[name] = Number(cell);
        else if (name === "unlimited" || name === "deny" || name === "delete") {
          // A flag: true when it says so; false, no or 0 (as spreadsheets fill every column) is no flag at all.
          if (cell.toLowerCase() === "true") item[name] = true;
        } else if (name === "expires" && /^\d+$/.test(cell)) item[name] = Number(cell);
        else item[name] = cell;
      });
      return item;
    }),
  );
}

/** The records of a CSV text, each with the line it starts on; a quote left open is an error naming that line. */
function csvRecords(text: string): Result<{ line: number; cells: string[] }[]> {
  const records: { line: number; cells: string[] }[] = [];
  let cells: string[] = [];
  let cell = "";
  let quoted = false;
  let line = 1;
  let startLine = 1;
  let quotedAt = 0;
  const endRecord = () => {
    cells.push(cell);
    records.push({ line: startLine, cells });
    cells = [];
    cell = "";
    startLine = line;
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (c === '"') quoted = false;
      else {
        if (c === "\n") line++;
        cell += c;
      }
    } else if (c === '"') {
      quoted = true;
      quotedAt = line;
    } else if (c === ",") {
      cells.push(cell);
      cell = "";
    } else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      line++;
      endRecord();
    } else cell += c;
  }
  if (quoted) return fail(`line ${quotedAt}: a quote opened here is never closed`);
  if (cell !== "" || cells.length > 0) endRecord();
  return ok(records);
}

function jsonOf(text: string): Result<unknown> {
  try {
    return ok(JSON.parse(text) as unknown);
  } catch (error) {
    return fail(`body: not valid JSON (${(error as Error).message})`);
  }
}

const tooLarge = (): Response =>
  problemResponse({
    type: BODY_TOO_LARGE,
    title: "Content Too Large",
    status: 413,
    detail: `A body may be at most ${MAX_BODY_BYTES} bytes; send a larger import in parts.`,
    maxBytes: MAX_BODY_BYTES,
  });

const invalid = (errors: string[]): Response =>
  problemResponse({
    type: INVALID_OVERRIDE,
    title: "Bad Request",
    status: 400,
    detail: errors.join("; "),
    errors,
  });
