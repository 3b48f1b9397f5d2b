/**
 * The reference cannot drift from the code: every field, variable,
 * characteristic, admin route and problem type the code accepts, and every
 * event it logs, has a row in its table in docs/, and every row names one
 * the code has. The lists come from the parsers, the router and the sources
 * themselves, not from a second list kept by hand.
 */
/// <reference types="vite/client" />
import { describe, expect, it } from "vitest";
import adaptivePage from "../docs/adaptive.md?raw";
import adminApiPage from "../docs/admin-api.md?raw";
import configurationPage from "../docs/configuration.md?raw";
import perClientPage from "../docs/per-client-limits.md?raw";
import responsesPage from "../docs/responses.md?raw";
import { JWT_FIELDS } from "../src/config/jwt.ts";
import { RULE_GROUP, VARIABLES } from "../src/config/variables.ts";
import { ADAPTIVE_FIELDS } from "../src/core/health.ts";
import { OVERRIDE_FIELDS } from "../src/core/overrides.ts";
import { NAMED_CHARACTERISTICS, namedForm, PLAIN_CHARACTERISTICS, RULE_FIELDS } from "../src/core/rules.ts";
import { QUOTA_EXCEEDED, TEMPORARY_REDUCED_CAPACITY } from "../src/http/problem.ts";
import { ADMIN_ROUTES } from "../src/worker/admin/api.ts";
import { isDashboardPath } from "../src/worker/admin/dashboard.ts";
import { IMPORT_COLUMNS } from "../src/worker/admin/overrides.ts";
import { codeSpans, referenceTable } from "./support/markdown.ts";

const sources = import.meta.glob<string>("../src/**/*.ts", { query: "?raw", import: "default", eager: true });

/** How the variables table writes the `RULES_<GROUP>` variables that RULE_GROUP accepts. */
const RULE_GROUP_ROW = "RULES_<GROUP>";

/** Every problem type a file of src/ can answer with: the urn:edge-rate-limiter: ones, and the draft's two. */
const problemTypes = (): string[] => [
  QUOTA_EXCEEDED,
  TEMPORARY_REDUCED_CAPACITY,
  ...new Set(Object.values(sources).flatMap((source) => source.match(/urn:edge-rate-limiter:[a-z-]+/g) ?? [])),
];

/**
 * Every event a file of src/ logs: the string literals of each `event:` it
 * writes (both, where it chooses between two), event names having an
 * underscore. The dashboard's bundled assets are left out.
 */
const logEvents = (): string[] => [
  ...new Set(
    Object.entries(sources)
      .filter(([path]) => !path.endsWith("/dashboard/assets.ts"))
      .flatMap(([, source]) => [...source.matchAll(/\bevent: ([^,\n]+)/g)])
      .flatMap(([, expression]) => [...expression!.matchAll(/"([a-z]+(?:_[a-z]+)+)"/g)].map((m) => m[1]!)),
  ),
];

/** What the code accepts, beside what the page lists, as the two differences. */
function compare(accepted: readonly string[], documented: readonly string[]) {
  return {
    missingFromThePage: accepted.filter((name) => !documented.includes(name)).sort(),
    onThePageButNotAccepted: documented.filter((name) => !accepted.includes(name)).sort(),
    listedTwice: documented.filter((name, i) => documented.indexOf(name) !== i),
  };
}

const agree = { missingFromThePage: [], onThePageButNotAccepted: [], listedTwice: [] };

/** Each table the reference checks: where it is, what the code accepts, and how a row names its entries. */
const TABLES: {
  table: string;
  page: string;
  markdown: string;
  accepted: () => readonly string[];
  named: (cells: string[]) => string[];
}[] = [
  {
    table: "rule fields",
    page: "docs/configuration.md",
    markdown: configurationPage,
    accepted: () => RULE_FIELDS,
    named: (cells) => codeSpans(cells[0]!),
  },
  {
    table: "adaptive fields",
    page: "docs/adaptive.md",
    markdown: adaptivePage,
    accepted: () => ADAPTIVE_FIELDS,
    named: (cells) => codeSpans(cells[0]!),
  },
  {
    table: "variables",
    page: "docs/configuration.md",
    markdown: configurationPage,
    accepted: () => [...Object.keys(VARIABLES), RULE_GROUP_ROW],
    named: (cells) => codeSpans(cells[0]!),
  },
  {
    table: "characteristics",
    page: "docs/configuration.md",
    markdown: configurationPage,
    accepted: () => [...PLAIN_CHARACTERISTICS, ...NAMED_CHARACTERISTICS.map(namedForm)],
    named: (cells) => codeSpans(cells[0]!),
  },
  {
    table: "JWT fields",
    page: "docs/configuration.md",
    markdown: configurationPage,
    accepted: () => JWT_FIELDS,
    named: (cells) => codeSpans(cells[0]!),
  },
  {
    table: "override fields",
    page: "docs/per-client-limits.md",
    markdown: perClientPage,
    accepted: () => OVERRIDE_FIELDS,
    named: (cells) => codeSpans(cells[0]!),
  },
  {
    table: "import columns",
    page: "docs/per-client-limits.md",
    markdown: perClientPage,
    accepted: () => IMPORT_COLUMNS,
    named: (cells) => codeSpans(cells[0]!),
  },
  {
    table: "admin routes",
    page: "docs/admin-api.md",
    markdown: adminApiPage,
    // The dashboard's page is the one route outside ADMIN_ROUTES: the dashboard answers it.
    accepted: () => [
      ...(isDashboardPath("/") ? ["GET /"] : []),
      ...Object.entries(ADMIN_ROUTES).flatMap(([route, methods]) => methods.map((method) => `${method} ${route}`)),
    ],
    named: ([route, methods]) => {
      const path = /^`\{prefix\}([^`?]*)/.exec(route!)?.[1];
      if (path === undefined) throw new Error(`admin routes: ${route} does not start with \`{prefix}`);
      return codeSpans(methods!).map((method) => `${method} ${path}`);
    },
  },
  {
    table: "log events",
    page: "docs/responses.md",
    markdown: responsesPage,
    accepted: logEvents,
    named: (cells) => codeSpans(cells[0]!),
  },
  {
    table: "problem types",
    page: "docs/responses.md",
    markdown: responsesPage,
    accepted: problemTypes,
    named: (cells) => codeSpans(cells[1]!),
  },
];

describe("the reference lists exactly what the code accepts", () => {
  it.each(TABLES)("$page: the $table", ({ table, markdown, accepted, named }) => {
    const rows = referenceTable(markdown, table);
    expect(rows.length).toBeGreaterThan(0);
    expect(compare(accepted(), rows.flatMap(named))).toEqual(agree);
  });

  it.each(TABLES)("$page: every row of the $table fills every column", ({ table, markdown }) => {
    const lines = markdown.split("\n");
    const header = lines[lines.findIndex((line) => line.startsWith(`<!-- reference: ${table} `)) + 1]!;
    const columns = header.split("|").length - 2;
    for (const cells of referenceTable(markdown, table)) {
      expect(cells, cells[0]).toHaveLength(columns);
      expect(
        cells.filter((cell) => cell === ""),
        `${cells[0]}: an empty cell`,
      ).toEqual([]);
    }
  });

  it("marks as secret exactly the variables that are secrets", () => {
    const rows = referenceTable(configurationPage, "variables");
    const markedSecret = rows
      .filter((cells) => cells[1]!.includes("**secret**"))
      .flatMap((cells) => codeSpans(cells[0]!));
    const secrets = Object.entries(VARIABLES)
      .filter(([, variable]) => variable.secret)
      .map(([name]) => name);
    expect(markedSecret.sort()).toEqual(secrets.sort());
  });

  it("writes the rule-group variables as RULE_GROUP accepts them", () => {
    expect(RULE_GROUP.test(RULE_GROUP_ROW.replace("<GROUP>", "AUTH"))).toBe(true);
    expect(RULE_GROUP.test(RULE_GROUP_ROW)).toBe(false);
  });
});
