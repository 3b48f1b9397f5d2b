/**
 * `npm pack`'s manifest: the `prepack` step (after the build) writes the
 * package.json a user installs, without the scripts and dependencies that
 * only this repository uses: its `prepare` (which bundles the dashboard from
 * src/, not in the package) would otherwise be listed by npm as an install
 * script for the user to approve. `postpack` puts the repository's back.
 *
 *   node tools/package/manifest.ts pack     # before packing
 *   node tools/package/manifest.ts restore  # after
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const path = fileURLToPath(new URL("../../package.json", import.meta.url));
const kept = `${path}.repository`;

const step = process.argv[2];
if (step === "pack") {
  if (existsSync(kept)) throw new Error(`${kept} exists: an earlier pack did not finish; restore it first`);
  const manifest = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  renameSync(path, kept);
  const {
    scripts: _scripts,
    devDependencies: _dev,
    allowScripts: _allow,
    overrides: _overrides,
    ...published
  } = manifest;
  writeFileSync(path, `${JSON.stringify(published, null, 2)}\n`);
} else if (step === "restore") {
  if (existsSync(kept)) renameSync(kept, path);
} else {
  console.error("usage: node tools/package/manifest.ts pack|restore");
  process.exit(2);
}
