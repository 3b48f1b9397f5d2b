/**
 * @module
 * Reading the docs as the tests check them: fenced blocks with the HTML
 * comment that marks them, reference tables, headings and their GitHub
 * anchors, and links. Pure (no I/O), so the workers-pool tests and the
 * end-to-end examples test share it.
 */

/** A fenced code block: its language, its text, the marker comment just above it (if any), and its line. */
export type Block = { lang: string; text: string; marker: string | null; line: number };

const FENCE = /^(\s*)(`{3,}|~{3,})\s*([\w+-]*)[^\n]*$/;
const MARKER = /^<!--\s*([\s\S]*?)\s*-->$/;

/** Every fenced block of a Markdown text, in order. */
export function blocksOf(markdown: string): Block[] {
  const lines = markdown.split("\n");
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && !lines[j]!.trimStart().startsWith(fence!); j++)
      body.push(lines[j]!.slice(indent!.length));
    let k = i - 1;
    while (k >= 0 && lines[k]!.trim() === "") k--;
    const marker = k >= 0 ? (MARKER.exec(lines[k]!.trim())?.[1] ?? null) : null;
    blocks.push({ lang: lang ?? "", text: body.join("\n"), marker, line: i + 1 });
    i = j;
  }
  return blocks;
}

/** The text with fenced blocks and inline code spans blanked out, so their `#` and `[x](y)` are not read as Markdown. */
export function proseOf(markdown: string): string {
  const lines = markdown.split("\n");
  const out: string[] = [];
  let fence: string | null = null;
  for (const line of lines) {
    const open = FENCE.exec(line);
    if (fence === null && open) {
      fence = open[2]!;
      out.push("");
    } else if (fence !== null) {
      if (line.trimStart().startsWith(fence)) fence = null;
      out.push("");
    } else out.push(line.replace(/(`+)[\s\S]*?\1/g, (span) => span.replace(/[^`]/g, "x")));
  }
  return out.join("\n");
}

/** A table's rows, after the `<!-- reference: <name> … -->` comment: each row its cells, header and separator left out. */
export function referenceTable(markdown: string, name: string): string[][] {
  const lines = markdown.split("\n");
  const at = lines.findIndex((line) => line.trim().startsWith(`<!-- reference: ${name} `));
  if (at < 0) throw new Error(`no <!-- reference: ${name} … --> comment`);
  const table: string[] = [];
  for (let i = at + 1; i < lines.length && lines[i]!.trim().startsWith("|"); i++) table.push(lines[i]!.trim());
  if (table.length < 2) throw new Error(`<!-- reference: ${name} --> is not followed by a table`);
  return table.slice(2).map(cellsOf);
}

/** A table row's cells, trimmed; `\|` is a `|` inside a cell. */
export const cellsOf = (row: string): string[] =>
  row
    .replace(/^\|/, "")
    .replace(/\|$/, "")
    .split(/(?<!\\)\|/)
    .map((cell) => cell.trim().replaceAll("\\|", "|"));

/** The `code` spans of a cell, in order. */
export const codeSpans = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

/** A heading's anchor as GitHub makes it (github-slugger): lower case, punctuation but `-` and `_` dropped, spaces to `-`. */
export function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/`([^`]*)`/g, "$1")
    .replace(/<[^>]+>/g, "");
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, "")
    .replace(/ /g, "-");
}

/** Every anchor a Markdown page has: its headings' slugs (repeats numbered as GitHub numbers them), and `<a id>`s. */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const prose = markdownWithoutFences(markdown);
  for (const match of prose.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = slug(match[1]!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  for (const match of prose.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(match[1]!);
  return anchors;
}

/** The text with fenced blocks blanked out, inline code kept (a heading's `code` is part of its anchor). */
function markdownWithoutFences(markdown: string): string {
  let fence: string | null = null;
  return markdown
    .split("\n")
    .map((line) => {
      const open = FENCE.exec(line);
      if (fence === null && open) {
        fence = open[2]!;
        return "";
      }
      if (fence !== null) {
        if (line.trimStart().startsWith(fence)) fence = null;
        return "";
      }
      return line;
    })
    .join("\n");
}

/** A link or image target in the prose, with its line. */
export type Link = { target: string; line: number };

/** Every link and image target outside code: `[text](target)` and `![alt](target)`. */
export function linksOf(markdown: string): Link[] {
  const links: Link[] = [];
  proseOf(markdown)
    .split("\n")
    .forEach((line, i) => {
      for (const match of line.matchAll(/!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
        links.push({ target: match[1]!, line: i + 1 });
      }
    });
  return links;
}

/** Where a relative link from `from` (a repository path such as `docs/x.md`) points, as a repository path. */
export function resolvePath(from: string, target: string): string {
  const parts = from.split("/").slice(0, -1);
  for (const part of target.split("/")) {
    if (part === "..") parts.pop();
    else if (part !== "." && part !== "") parts.push(part);
  }
  return parts.join("/");
}
