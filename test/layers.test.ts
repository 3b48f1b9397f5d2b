/**
 * The dependency rule of src/: each folder is one layer, and a file imports
 * only from its own layer and the layers below it, never from one above.
 * Packages are confined the same way: only the Durable Object layer touches
 * `cloudflare:workers`, only the identity layer touches jose, only the
 * Worker shell touches Hono. And no file imports itself back, through any
 * chain of imports, type-only ones included: no import cycle anywhere.
 */
/// <reference types="vite/client" />
import { describe, expect, it } from "vitest";

/** Lowest first. The README's "Layout" section shows the same list. */
const LAYERS = ["core", "observe", "object", "config", "http", "identity", "isolate", "worker", "entry"] as const;
type Layer = (typeof LAYERS)[number];

const PACKAGES: Record<string, Layer> = { "cloudflare:workers": "object", jose: "identity", hono: "worker" };

const sources = import.meta.glob<string>("../src/**/*.ts", { query: "?raw", import: "default", eager: true });

/** `../src/isolate/decide.ts` → `isolate`; a file directly in src/ is an entry point. */
function layerOf(file: string): Layer {
  const parts = file.replace(/^\.\.\/src\//, "").split("/");
  if (parts.length === 1) return "entry";
  const layer = parts[0] as Layer;
  if (!LAYERS.includes(layer)) throw new Error(`${file}: src/${parts[0]}/ is not a layer; add it to LAYERS`);
  return layer;
}

/** Every module specifier a file imports or re-exports, statically or dynamically. */
function specifiers(source: string): string[] {
  const found: string[] = [];
  // No `=` before `from`: `export const X = { about: "fetched from" }` is a value, not an import.
  for (const match of source.matchAll(/^\s*(?:import|export)\b[^;=]*?\bfrom\s*"([^"]+)"/gms)) found.push(match[1]!);
  for (const match of source.matchAll(/^\s*import\s*"([^"]+)"/gm)) found.push(match[1]!);
  for (const match of source.matchAll(/\bimport\(\s*"([^"]+)"\s*\)/g)) found.push(match[1]!);
  return found;
}

/** Where a relative specifier points, as a glob key such as `../src/core/rules.ts`. */
function resolve(from: string, specifier: string): string {
  const parts = from.split("/").slice(0, -1);
  for (const part of specifier.split("/")) {
    if (part === "..") parts.pop();
    else if (part !== ".") parts.push(part);
  }
  return parts.join("/");
}

type Edge = { from: string; to: string; fromLayer: Layer; toLayer: Layer | "outside src" };

const edges: Edge[] = Object.entries(sources).flatMap(([file, source]) =>
  specifiers(source).map((specifier): Edge => {
    const fromLayer = layerOf(file);
    if (!specifier.startsWith(".")) {
      const pkg = specifier.startsWith("@") ? specifier.split("/").slice(0, 2).join("/") : specifier.split("/")[0]!;
      return { from: file, to: specifier, fromLayer, toLayer: PACKAGES[pkg] ?? "outside src" };
    }
    const target = resolve(file, specifier);
    if (!target.startsWith("../src/")) return { from: file, to: target, fromLayer, toLayer: "outside src" };
    return { from: file, to: target, fromLayer, toLayer: layerOf(target) };
  }),
);

const rank = (layer: Layer) => LAYERS.indexOf(layer);

/**
 * The import cycles among `files`, each as its files in order, found by
 * Tarjan's strongly connected components: every component of more than one
 * file, or of one file that imports itself, is a cycle.
 */
function importCycles(imports: Map<string, Set<string>>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (file: string) => {
    index.set(file, next);
    low.set(file, next);
    next++;
    stack.push(file);
    onStack.add(file);
    for (const to of imports.get(file) ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(file, Math.min(low.get(file)!, low.get(to)!));
      } else if (onStack.has(to)) low.set(file, Math.min(low.get(file)!, index.get(to)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== file);
    if (component.length > 1 || imports.get(file)?.has(file)) cycles.push(component.sort());
  };
  for (const file of imports.keys()) if (!index.has(file)) visit(file);
  return cycles;
}

/** Each source file's imports within src/. */
const importsWithin = (list: Edge[]): Map<string, Set<string>> => {
  const imports = new Map<string, Set<string>>(Object.keys(sources).map((file) => [file, new Set<string>()]));
  for (const edge of list) if (edge.toLayer !== "outside src") imports.get(edge.from)!.add(edge.to);
  return imports;
};

describe("the layers of src/", () => {
  it("finds every source file and its imports (so the rule below is checked against something)", () => {
    for (const file of [
      "../src/index.ts",
      "../src/core/rules.ts",
      "../src/isolate/decide.ts",
      "../src/worker/admin/api.ts",
    ]) {
      expect(sources[file], file).toContain("@module");
    }
    for (const layer of LAYERS)
      expect(
        Object.keys(sources).some((file) => layerOf(file) === layer),
        layer,
      ).toBe(true);
    expect(edges.filter((edge) => edge.toLayer !== "outside src").length).toBeGreaterThan(100);
  });

  it("never imports from a higher layer", () => {
    const upward = edges
      .filter((edge) => edge.toLayer !== "outside src" && rank(edge.toLayer) > rank(edge.fromLayer))
      .map((edge) => `${edge.from} (${edge.fromLayer}) imports ${edge.to} (${edge.toLayer})`);
    expect(upward).toEqual([]);
  });

  it("has no import cycle, type-only imports included", () => {
    const cycles = importCycles(importsWithin(edges)).map((files) => `a cycle among ${files.join(", ")}`);
    expect(cycles).toEqual([]);
  });

  it("finds a cycle where there is one (so the check above can fail)", () => {
    const planted: Edge[] = [
      ...edges,
      { from: "../src/core/lru.ts", to: "../src/core/maps.ts", fromLayer: "core", toLayer: "core" },
      { from: "../src/core/maps.ts", to: "../src/core/lru.ts", fromLayer: "core", toLayer: "core" },
    ];
    expect(importCycles(importsWithin(planted))).toContainEqual(["../src/core/lru.ts", "../src/core/maps.ts"]);
  });

  it("never imports from tests, tools or an unknown package", () => {
    const outside = edges
      .filter((edge) => edge.toLayer === "outside src")
      .map((edge) => `${edge.from} imports ${edge.to}`);
    expect(outside).toEqual([]);
  });

  it("keeps the core free of I/O: no console, no fetch, no storage, no timers", () => {
    const impure = Object.entries(sources)
      .filter(([file]) => layerOf(file) === "core")
      .flatMap(([file, source]) =>
        [...source.matchAll(/\b(console\.|fetch\(|setTimeout|setInterval|Date\.now|caches\.|\.storage\b)/g)].map(
          (match) => `${file}: ${match[0]}`,
        ),
      );
    expect(impure).toEqual([]);
  });
});
