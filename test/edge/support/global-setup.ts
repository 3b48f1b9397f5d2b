/**
 * @module
 * Bundles the Workers once per run, with wrangler as a deploy would: the
 * product's entry point for the edge isolates, and the slowable objects
 * service. Each test file then starts its own workerd on them, with its own
 * rules and storage.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { buildBundle, ROOT } from "../../../tools/workerd.ts";

export default function setup(project: TestProject) {
  const dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-bundles-"));
  const started = Date.now();
  try {
    project.provide(
      "edgeBundle",
      buildBundle({ main: join(ROOT, "src/index.ts"), outdir: join(dir, "edge"), name: "edge" }),
    );
    project.provide(
      "objectsBundle",
      buildBundle({ main: join(ROOT, "test/edge/workers/objects.ts"), outdir: join(dir, "objects"), name: "objects" }),
    );
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  console.log(`edge: bundles built in ${Date.now() - started} ms in ${dir}`);
  return () => rmSync(dir, { recursive: true, force: true });
}
