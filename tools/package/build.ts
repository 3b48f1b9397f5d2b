/**
 * `npm run build`: the package's `dist/`, compiled ESM and `.d.ts` files
 * from `src/` (tsconfig.build.json), as `npm pack` ships them.
 *
 * tsc rewrites the source's `./x.ts` imports to `./x.js` in the JavaScript
 * it emits, but not in the declarations (TypeScript 5.9), where a consumer's
 * stock `tsconfig` would then refuse them (TS5097). So the declarations'
 * relative specifiers are rewritten here, the one thing tsc leaves undone.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const dist = join(root, "dist");

// The dashboard's files as strings: made by `npm install` (the `prepare` script); a clone that skipped it gets them now.
if (!existsSync(join(root, "src/worker/admin/dashboard/assets.ts"))) {
  execFileSync(process.execPath, [join(root, "src/worker/admin/dashboard/bundle.mjs")], { stdio: "inherit" });
}
rmSync(dist, { recursive: true, force: true });
execFileSync(
  process.execPath,
  [join(root, "node_modules/typescript/bin/tsc"), "-p", join(root, "tsconfig.build.json")],
  {
    stdio: "inherit",
  },
);

/** `from "./a.ts"`, `import("../b.ts")` and `import "./c.ts"`, relative only: the `.ts` becomes `.js`. */
const RELATIVE_TS = /((?:from|import)\s*\(?\s*["'])(\.{1,2}\/[^"']*?)\.ts(["'])/g;

let files = 0;
for (const entry of readdirSync(dist, { recursive: true, encoding: "utf8" })) {
  if (!entry.endsWith(".d.ts")) continue;
  const path = join(dist, entry);
  const text = readFileSync(path, "utf8");
  const rewritten = text.replace(RELATIVE_TS, "$1$2.js$3");
  if (rewritten !== text) writeFileSync(path, rewritten);
  files++;
}
console.log(`dist/: ${files} declaration files, relative imports ending in .js`);
