/**
 * @module
 * wrangler.toml's `[build] command`, so that no deploy goes out with a
 * configuration error. Wrangler runs a build command before
 * `wrangler deploy` (`--dry-run` too), `wrangler versions upload`,
 * `wrangler dev` and `wrangler types`, and names the command in
 * `WRANGLER_COMMAND`. Under `dev` and `types`, which deploy nothing, this
 * exits at once; otherwise it runs `npm run check-config -- --deploy` (the
 * project's own Node, whatever Node runs wrangler), which prints the
 * reports and exits 1 on an error, and wrangler then stops.
 *
 * Plain JavaScript, so that it starts on any Node in a few milliseconds:
 * `wrangler dev` runs it again on every change under src/.
 */
import { spawnSync } from "node:child_process";

if (process.env.WRANGLER_COMMAND === "dev" || process.env.WRANGLER_COMMAND === "types") process.exit(0);

const run = spawnSync("npm", ["run", "--silent", "check-config", "--", "--deploy", ...process.argv.slice(2)], {
  stdio: "inherit",
  shell: process.platform === "win32",
});
if (run.error) {
  console.error(`build-check: could not run npm run check-config: ${run.error.message}`);
  process.exit(1);
}
process.exit(run.status ?? 1);
