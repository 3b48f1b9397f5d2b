/**
 * @module
 * `npm run limits -- <command>`: per-client overrides, and a client's usage
 * of a quota and its credits, from the command line, for operators who
 * would rather not write curl. It talks to a running Worker's admin API
 * (`{prefix}/overrides` and `{prefix}/credits`, see
 * src/worker/admin/overrides.ts and credits.ts) with the admin token, and
 * prints the answer as a table, or as the API's own JSON with `--json`.
 *
 * Exit status: 0 done; 1 the API refused (its errors are printed); 2 the
 * request could not be made: bad usage, no token, an unreadable file, or no
 * Worker answering at the URL.
 */
import { readFileSync } from "node:fs";
import { extname, resolve } from "node:path";
import { parseArgs } from "node:util";

const USAGE = `usage: npm run limits -- <command> [options]

Commands:
  set <rule> <key>... (--limit N [--burst N] | --tier NAME | --unlimited | --deny) [--expires TIME] [--note TEXT]
  get <rule> <key>...
  delete <rule> <key>...
  list [--rule ID] [--tier NAME] [--note TEXT] [--all]
  import <file.json | file.csv>
  usage <rule> <key>...                       a client's usage of a quota: this period and the past ones
  credit <rule> <key>... (--add N | --take N | --set N) [--note TEXT]
                                              what it has left this period: add to it, take from it, or set it

A key names a client as its rule counts it: ip=203.0.113.7, header:x-api-key=abc,
or a bare value when the rule has a single characteristic; one key per characteristic.
TIME is an ISO 8601 time (2099-12-31T00:00:00Z) or Unix milliseconds, no later than 2099.

Options:
  --json          print the API's JSON instead of a table
  --all           list: every page, not only the first 100 overrides
  --url URL       the Worker (default: $LIMITS_URL, else http://127.0.0.1:8787)
  --prefix PATH   the admin API's path (default: $ADMIN_PREFIX, else /__ratelimit)
  -h, --help      this text

The admin token comes from $ADMIN_TOKEN, else from the ADMIN_TOKEN= line of ./.dev.vars.
Exit status: 0 done, 1 the API refused, 2 the request could not be made.`;

const OPTIONS = {
  add: { type: "string" },
  take: { type: "string" },
  set: { type: "string" },
  limit: { type: "string" },
  burst: { type: "string" },
  tier: { type: "string" },
  unlimited: { type: "boolean" },
  deny: { type: "boolean" },
  expires: { type: "string" },
  note: { type: "string" },
  rule: { type: "string" },
  all: { type: "boolean" },
  json: { type: "boolean" },
  url: { type: "string" },
  prefix: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

type Options = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>["values"];

/** Where the admin API is, and the token it takes. */
type Target = { base: string; prefix: string; token: string };

/** One run of a command: its positional arguments, the options, and where to send it. */
type Run = { args: string[]; options: Options; target: Target };

/** The parts of a client key as the API shows them: `[label, value]`, value null when absent. */
type Key = [string, string | null][];

/** An override as the API shows it (see `overrideView`). */
type View = {
  limit?: number;
  burst?: number;
  tier?: string;
  unlimited?: true;
  deny?: true;
  expires: string | null;
  note: string;
};

/** One entry of the index (see `entryView`). */
type Entry = View & { rule: string; key: Key; expired?: true; state: "applied" | "pending" };

type Page = { overrides: Entry[]; next: string | null; total: number; pending: number };

type Change = { rule: string; key: Key; before: View | null; after: View | null; applied: boolean };

/** A period's usage as the API shows it (see credits.ts). */
type PeriodView = { start: string; end: string; used: number; credit: number };

/** A client's usage of a quota (see `usageView` in credits.ts); a credit's answer adds `change` and `before`. */
type UsageView = {
  rule: string;
  key?: Key;
  hash?: string;
  limit: number | null;
  override?: string;
  tier?: string;
  quota: string;
  /** null: periods from a first request, and none made yet. */
  period: { start: string; end: string } | null;
  used: number;
  credit: number;
  remaining: number | null;
  past: PeriodView[];
  change?: Record<string, number>;
  note?: string;
  before?: { limit: number; used: number; credit: number; remaining: number };
};

/** The options each command takes, besides --json, --url and --prefix; and how many arguments. */
const COMMANDS: Record<
  string,
  { options: string[]; args: [min: number, max: number]; run: (run: Run) => Promise<void> }
> = {
  set: {
    options: ["limit", "burst", "tier", "unlimited", "deny", "expires", "note"],
    args: [2, Infinity],
    run: setCommand,
  },
  get: { options: [], args: [2, Infinity], run: getCommand },
  delete: { options: [], args: [2, Infinity], run: deleteCommand },
  list: { options: ["rule", "tier", "note", "all"], args: [0, 0], run: listCommand },
  import: { options: [], args: [1, 1], run: importCommand },
  usage: { options: [], args: [2, Infinity], run: usageCommand },
  credit: { options: ["add", "take", "set", "note"], args: [2, Infinity], run: creditCommand },
};
const COMMON = new Set(["json", "url", "prefix", "help"]);

/** Prints `lines` to stderr and exits with `code`. */
function exit(code: 1 | 2, ...lines: string[]): never {
  for (const line of lines) console.error(line);
  process.exit(code);
}

/** A usage error: the problem, and where the usage is. */
function usage(problem: string): never {
  return exit(2, `limits: ${problem}`, "Run npm run limits -- --help for usage.");
}

// --- Arguments ---------------------------------------------------------------

function parse(argv: string[]): { command: string | undefined; args: string[]; options: Options } {
  try {
    const { values, positionals } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true });
    return { command: positionals[0], args: positionals.slice(1), options: values };
  } catch (error) {
    return usage((error as Error).message);
  }
}

function checkCommand(command: string, args: string[], options: Options): void {
  const spec = COMMANDS[command];
  if (spec === undefined) usage(`no command ${JSON.stringify(command)}; commands: ${Object.keys(COMMANDS).join(", ")}`);
  const foreign = Object.keys(options).filter((name) => !COMMON.has(name) && !spec.options.includes(name));
  if (foreign.length > 0) usage(`${command} takes no ${foreign.map((name) => `--${name}`).join(", ")}`);
  const [min, max] = spec.args;
  if (args.length < min) usage(`${command}: needs ${min === 1 ? "a file" : "a rule and a key"}`);
  if (args.length > max) usage(`${command}: unexpected ${args.slice(max).join(" ")}`);
}

/** The Worker's URL, the prefix and the token, from the options, the environment and ./.dev.vars. */
function targetOf(options: Options): Target {
  const base = options.url ?? process.env.LIMITS_URL ?? "http://127.0.0.1:8787";
  if (!URL.canParse(base)) usage(`--url: not a URL: ${base}`);
  const prefix = options.prefix ?? process.env.ADMIN_PREFIX ?? "/__ratelimit";
  if (!prefix.startsWith("/")) usage(`--prefix: must start with "/"; got ${prefix}`);
  return { base: base.replace(/\/+$/, ""), prefix: prefix.replace(/\/+$/, ""), token: tokenOf() };
}

function tokenOf(): string {
  const token = process.env.ADMIN_TOKEN || devVarsToken();
  if (token) return token;
  return exit(
    2,
    "limits: no admin token. Set it in the environment, as the Worker has it:",
    "  ADMIN_TOKEN=<token> npm run limits -- …",
    "or add a line ADMIN_TOKEN=<token> to .dev.vars in this directory (wrangler dev reads it too).",
  );
}

/** The `ADMIN_TOKEN=` line of ./.dev.vars, unquoted; undefined when there is none. */
function devVarsToken(): string | undefined {
  let text: string;
  try {
    text = readFileSync(".dev.vars", "utf8");
  } catch {
    return undefined;
  }
  const value = /^\s*ADMIN_TOKEN\s*=\s*(.*?)\s*$/m.exec(text)?.[1];
  return value?.replace(/^(["'])(.*)\1$/, "$2");
}

// --- The API -----------------------------------------------------------------

type ApiRequest = { method: string; path: string; query?: URLSearchParams; body?: string; contentType?: string };

/** Sends one request to the admin API and returns its JSON; exits on any failure. */
async function call<T>(target: Target, request: ApiRequest): Promise<T> {
  const url = `${target.base}${target.prefix}${request.path}${request.query ? `?${request.query}` : ""}`;
  const headers: Record<string, string> = { Authorization: `Bearer ${target.token}`, Accept: "application/json" };
  if (request.contentType) headers["Content-Type"] = request.contentType;
  let response: Response;
  try {
    response = await fetch(url, {
      method: request.method,
      headers,
      body: request.body,
      signal: AbortSignal.timeout(30_000),
    });
  } catch (error) {
    if ((error as Error).name === "TimeoutError") return exit(2, `limits: no answer from ${url} within 30 s.`);
    return exit(
      2,
      `limits: could not reach ${target.base} (${reasonOf(error)}). Is the Worker running there? (--url or LIMITS_URL)`,
    );
  }
  return answerOf<T>(response, `${request.method} ${url}`);
}

/** Why a fetch failed, in a few words: the system's code (ECONNREFUSED…) when there is one. */
function reasonOf(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error as Error).message;
}

async function answerOf<T>(response: Response, asked: string): Promise<T> {
  const text = await response.text();
  const body = jsonOf(text, response.headers.get("content-type"));
  if (response.ok && body !== undefined) return body as T;
  if (body === undefined) {
    exit(
      1,
      `limits: ${asked}: ${response.status} ${response.statusText}, and not the admin API's JSON.`,
      "Is ADMIN_TOKEN set on the Worker, and is the prefix right? (--prefix or ADMIN_PREFIX)",
    );
  }
  const problem = body as { title?: string; detail?: string; errors?: unknown };
  const errors = Array.isArray(problem.errors) ? problem.errors.map(String) : [problem.detail ?? ""];
  const hint = response.status === 401 ? ["The Worker refused the token: ADMIN_TOKEN must be the Worker's own."] : [];
  return exit(
    1,
    `limits: ${response.status} ${problem.title ?? response.statusText}`,
    ...errors.map((e) => `  ${e}`),
    ...hint,
  );
}

/** The body as JSON when it is JSON, else undefined. */
function jsonOf(text: string, contentType: string | null): unknown {
  if (!/^application\/(problem\+)?json/i.test(contentType ?? "")) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** `rule=<id>&key=<k>…` for one client. */
const clientQuery = (args: string[]): URLSearchParams =>
  new URLSearchParams([["rule", args[0]!], ...args.slice(1).map((key): [string, string] => ["key", key])]);

// --- Commands ----------------------------------------------------------------

async function setCommand({ args, options, target }: Run): Promise<void> {
  const body = JSON.stringify(overrideOf(options));
  const change = await call<Change>(target, {
    method: "PUT",
    path: "/overrides",
    query: clientQuery(args),
    body,
    contentType: "application/json",
  });
  print(options, change, () => changeText(change));
}

async function getCommand({ args, options, target }: Run): Promise<void> {
  const entry = await call<Entry | { rule: string; key: Key; override: null }>(target, {
    method: "GET",
    path: "/overrides",
    query: clientQuery(args),
  });
  print(options, entry, () =>
    "override" in entry ? `No override for ${entry.rule} ${keyText(entry.key)}.` : entriesTable([entry]),
  );
}

async function deleteCommand({ args, options, target }: Run): Promise<void> {
  const change = await call<Change>(target, { method: "DELETE", path: "/overrides", query: clientQuery(args) });
  print(options, change, () => changeText(change));
}

async function listCommand({ options, target }: Run): Promise<void> {
  const query = new URLSearchParams();
  for (const name of ["rule", "tier", "note"] as const) if (options[name] !== undefined) query.set(name, options[name]);
  if (options.all) query.set("limit", "1000");
  let page = await call<Page>(target, { method: "GET", path: "/overrides", query });
  const overrides = [...page.overrides];
  while (options.all && page.next !== null) {
    query.set("cursor", page.next);
    page = await call<Page>(target, { method: "GET", path: "/overrides", query });
    overrides.push(...page.overrides);
  }
  const all: Page = { ...page, overrides };
  print(options, all, () => listText(all));
}

async function importCommand({ args, options, target }: Run): Promise<void> {
  const file = args[0]!;
  const contentType = { ".csv": "text/csv", ".json": "application/json" }[extname(file).toLowerCase()];
  if (contentType === undefined) usage(`import: takes a .json or .csv file; got ${file}`);
  let body: string;
  try {
    // `npm run` works in the project's directory; the file is named from where npm was run.
    body = readFileSync(resolve(process.env.INIT_CWD ?? ".", file), "utf8");
  } catch (error) {
    return exit(2, `limits: cannot read ${file}: ${(error as Error).message}`);
  }
  const report = await call<Record<string, number>>(target, {
    method: "POST",
    path: "/overrides/import",
    body,
    contentType,
  });
  print(options, report, () => importText(report));
}

async function usageCommand({ args, options, target }: Run): Promise<void> {
  const usage = await call<UsageView>(target, { method: "GET", path: "/credits", query: clientQuery(args) });
  print(options, usage, () => usageText(usage));
}

async function creditCommand({ args, options, target }: Run): Promise<void> {
  const changes = (["add", "take", "set"] as const).filter((name) => options[name] !== undefined);
  if (changes.length !== 1) usage("credit: give exactly one of --add N, --take N or --set N");
  const name = changes[0]!;
  const body = {
    [name]: numeric(options[name]!),
    ...(options.note === undefined ? {} : { note: options.note }),
  };
  const answer = await call<UsageView>(target, {
    method: "POST",
    path: "/credits",
    query: clientQuery(args),
    body: JSON.stringify(body),
    contentType: "application/json",
  });
  print(options, answer, () => usageText(answer));
}

/** The PUT body: exactly one setting, and the expiry and note when given. */
function overrideOf(options: Options): Record<string, unknown> {
  const settings = [
    options.limit === undefined ? null : { limit: numeric(options.limit) },
    options.tier === undefined ? null : { tier: options.tier },
    options.unlimited ? { unlimited: true } : null,
    options.deny ? { deny: true } : null,
  ].filter((setting) => setting !== null);
  if (settings.length !== 1) usage("set: give exactly one of --limit N, --tier NAME, --unlimited or --deny");
  return {
    ...settings[0],
    // A token bucket's burst for this client, with its limit (the API says so if the rule is not a bucket).
    ...(options.burst === undefined ? {} : { burst: numeric(options.burst) }),
    ...(options.expires === undefined ? {} : { expires: numeric(options.expires) }),
    ...(options.note === undefined ? {} : { note: options.note }),
  };
}

/** Digits as a number (spaces around them, as a CSV import reads them, allowed); anything else as written, for the API to name in its error. */
const numeric = (text: string): number | string => (/^\s*\d+\s*$/.test(text) ? Number(text.trim()) : text);

// --- Output ------------------------------------------------------------------

function print(options: Options, json: unknown, text: () => string): void {
  console.log(options.json ? JSON.stringify(json, null, 2) : printable(text()));
}

/**
 * Text for a terminal: a note or a key may hold anything a client or an
 * operator sent, and control characters (an ESC starting a colour or a
 * cursor move), bidirectional overrides and lone surrogates are shown as
 * `\u{…}` escapes rather than acted on. Line breaks are the output's own.
 */
const printable = (text: string): string =>
  text.replace(UNPRINTABLE, (c) => `\\u{${c.codePointAt(0)!.toString(16).padStart(4, "0")}}`);

/** Control characters (but the line break), bidirectional marks and overrides, and surrogates without their pair. */
const UNPRINTABLE = new RegExp(
  [
    "[\\u0000-\\u0009\\u000b-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]",
    "[\\ud800-\\udbff](?![\\udc00-\\udfff])",
    "(?<![\\ud800-\\udbff])[\\udc00-\\udfff]",
  ].join("|"),
  "g",
);

/** A client key as it would be written on the command line: `header:x-api-key=abc`. */
const keyText = (key: Key): string =>
  key
    .map(([label, value]) => `${label}=${/[\s"]/.test(value ?? "") ? JSON.stringify(value) : (value ?? "")}`)
    .join(" ");

function settingText(view: View): string {
  if (view.limit !== undefined)
    return view.burst === undefined ? `limit ${view.limit}` : `limit ${view.limit}, burst ${view.burst}`;
  if (view.tier !== undefined) return `tier ${view.tier}`;
  return view.unlimited ? "unlimited" : "deny";
}

/** An ISO time without its milliseconds when they are zero. */
const timeText = (iso: string | null): string => (iso === null ? "never" : iso.replace(/\.000Z$/, "Z"));

const oneLine = (text: string, max: number): string => {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
};

/** An override in a line: `tier pro, until 2027-01-31T00:00:00Z, "a note"`. */
function viewText(view: View | null): string {
  if (view === null) return "none";
  const until = view.expires === null ? [] : [`until ${timeText(view.expires)}`];
  const note = view.note === "" ? [] : [JSON.stringify(view.note)];
  return [settingText(view), ...until, ...note].join(", ");
}

function changeText(change: Change): string {
  if (change.before === null && change.after === null) {
    return `No override for ${change.rule} ${keyText(change.key)}: nothing to delete.`;
  }
  const state = change.applied
    ? "applied"
    : "pending: the client's object has not confirmed it yet; the Worker keeps retrying (see `limits list`)";
  return [
    `${change.rule} ${keyText(change.key)}`,
    `  before  ${viewText(change.before)}`,
    `  after   ${viewText(change.after)}`,
    `  state   ${state}`,
  ].join("\n");
}

/** Rows of cells, each column padded to its widest cell. */
function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  return rows
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

const entriesTable = (entries: Entry[]): string =>
  table([
    ["RULE", "KEY", "SETTING", "EXPIRES", "NOTE", "STATE"],
    ...entries.map((e) => [
      e.rule,
      keyText(e.key),
      settingText(e),
      `${timeText(e.expires)}${e.expired ? " (expired)" : ""}`,
      oneLine(e.note, 40),
      e.state,
    ]),
  ]);

function listText(page: Page): string {
  if (page.overrides.length === 0) return page.total === 0 ? "No overrides." : "No overrides match.";
  const shown = page.overrides.length;
  const counts = [shown === page.total ? `${shown} overrides` : `${shown} shown; ${page.total} overrides in all`];
  if (page.pending > 0) counts.push(`${page.pending} changes pending`);
  if (page.next !== null) counts.push("more with --all");
  return `${entriesTable(page.overrides)}\n\n${counts.join("; ")}`;
}

/** A signed number: `+500`, `-100`, `0`. */
const signed = (n: number): string => (n > 0 ? `+${n}` : String(n));

/** A client's usage: its quota, this period's counts, what a credit changed, and the past periods. */
function usageText(view: UsageView): string {
  const who = view.key === undefined ? `hash=${view.hash}` : keyText(view.key);
  const applied = view.override ? ` (override: ${view.override})` : view.tier ? ` (tier ${view.tier})` : "";
  const lines = [
    `${view.rule} ${who}`,
    `  quota     ${view.limit === null ? "none" : view.quota}${applied}`,
    view.period === null
      ? "  period    starts at the client's next request (periods from its first request)"
      : `  period    ${timeText(view.period.start)} to ${timeText(view.period.end)}`,
  ];
  if (view.change !== undefined && view.before !== undefined) {
    const [name, amount] = Object.entries(view.change)[0]!;
    const note = view.note === undefined ? "" : `, ${JSON.stringify(view.note)}`;
    lines.push(`  change    ${name} ${amount}${note}`);
    lines.push(
      `  before    used ${view.before.used}, credit ${signed(view.before.credit)}, left ${view.before.remaining}`,
    );
  }
  lines.push(
    `  ${view.change === undefined ? "now   " : "after "}    used ${view.used}, credit ${signed(view.credit)}, left ${view.remaining ?? "no limit"}`,
  );
  if (view.past.length === 0) return lines.join("\n");
  const past = table([
    ["PERIOD START", "END", "USED", "CREDIT"],
    ...view.past.map((p) => [timeText(p.start), timeText(p.end), String(p.used), signed(p.credit)]),
  ]);
  return `${lines.join("\n")}\n\n${past}`;
}

const importText = (report: Record<string, number>): string =>
  `${["created", "updated", "unchanged", "deleted"].map((name) => `${name} ${report[name] ?? 0}`).join(", ")}` +
  ((report.created ?? 0) + (report.updated ?? 0) + (report.deleted ?? 0) > 0
    ? "\nThe Worker applies the changes in the background; `limits list` shows any still pending."
    : "");

// --- Main --------------------------------------------------------------------

const { command, args, options } = parse(process.argv.slice(2));
if (options.help) {
  console.log(USAGE);
  process.exit(0);
}
if (command === undefined) exit(2, USAGE);
checkCommand(command, args, options);
await COMMANDS[command]!.run({ args, options, target: targetOf(options) });
