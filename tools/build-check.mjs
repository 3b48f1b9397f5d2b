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
 * Which file: the one wrangler was given (`-c` / `--c` / `--config`, from
 * its `--cwd` when it has one), read
 * from the command line of the wrangler process that runs this, so that a
 * copy of wrangler.toml under another name, deployed with
 * `wrangler deploy -c production.toml`, is checked itself and not the
 * file it was copied from; given none, the one wrangler then reads (a
 * redirect's, else `wrangler.json`, `wrangler.jsonc`, `wrangler.toml`, in
 * its order). A file named as this command's argument is checked too. Where wrangler's command line cannot be read (no `/proc`
 * and no `ps`), the argument or wrangler.toml, saying so.
 *
 * Plain JavaScript, so that it starts on any Node in a few milliseconds:
 * `wrangler dev` runs it again on every change under src/.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readFileSync, readlinkSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

if (process.env.WRANGLER_COMMAND === "dev" || process.env.WRANGLER_COMMAND === "types") process.exit(0);

/** A process's parent, command line and working directory, from /proc (Linux) or `ps` and `lsof` (macOS, BSD); null when unreadable. */
function processInfo(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8")
      .split("\0")
      .filter((arg) => arg !== "");
    return { ppid, argv, cwd: readlinkSync(`/proc/${pid}/cwd`) };
  } catch {
    // No /proc: ps and lsof, where there are.
  }
  try {
    const [ppid, ...args] = execFileSync("ps", ["-o", "ppid=,args=", "-p", String(pid)], { encoding: "utf8" })
      .trim()
      .split(/\s+/);
    const lsof = execFileSync("lsof", ["-a", "-d", "cwd", "-p", String(pid), "-Fn"], { encoding: "utf8" });
    const cwd = lsof
      .split("\n")
      .find((line) => line.startsWith("n"))
      ?.slice(1);
    return cwd === undefined ? null : { ppid: Number(ppid), argv: args, cwd };
  } catch {
    return null;
  }
}

/** The value of a flag in a wrangler command line, by any of its `names` (`-c`, `--config`), spaced or with `=`; undefined when absent. */
function flagValue(argv, names) {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (names.includes(arg)) return argv[i + 1];
    for (const name of names) if (arg.startsWith(`${name}=`)) return arg.slice(name.length + 1);
  }
  return undefined;
}

/** The value of `-c` / `--config` in a wrangler command line (any spelling its parser takes); undefined when it names none. */
const configFlag = (argv) => flagValue(argv, ["-c", "--c", "--config"]);

/**
 * The file wrangler reads when it is given none, from its working directory
 * `cwd`: the one a redirect names (`.wrangler/deploy/config.json`, which
 * the Cloudflare Vite plugin writes), else the first of `wrangler.json`,
 * `wrangler.jsonc` and `wrangler.toml` there, as wrangler prefers them.
 */
function defaultConfig(cwd) {
  const redirect = join(cwd, ".wrangler", "deploy", "config.json");
  if (existsSync(redirect)) {
    try {
      const { configPath } = JSON.parse(readFileSync(redirect, "utf8"));
      if (typeof configPath === "string") return resolve(dirname(redirect), configPath);
    } catch {
      // Not a redirect wrangler would follow either: the files below.
    }
  }
  return ["wrangler.json", "wrangler.jsonc", "wrangler.toml"].map((name) => join(cwd, name)).find(existsSync);
}

/**
 * The config file the nearest wrangler process above this one was given, as
 * a path from here; `{ found: false }` when no wrangler process is found,
 * `{ found: true, file: undefined }` when it was given none.
 */
function wranglersConfig() {
  let pid = process.ppid;
  for (let depth = 0; depth < 8 && pid > 1; depth++) {
    const info = processInfo(pid);
    if (info === null) return { found: false };
    const at = info.argv.findIndex((arg) => /(^|[\\/])wrangler(\.js|\.cjs|\.mjs)?$/.test(arg));
    if (at >= 0) {
      const args = info.argv.slice(at + 1);
      // `--cwd`: wrangler runs as if started there, and reads its file (named or not) from there.
      const cwd = resolve(info.cwd, flagValue(args, ["--cwd"]) ?? ".");
      const flag = configFlag(args);
      const file = flag === undefined ? defaultConfig(cwd) : resolve(cwd, flag);
      return { found: true, file: file === undefined ? undefined : relative(process.cwd(), file) };
    }
    pid = info.ppid;
  }
  return { found: false };
}

const named = process.argv[2];
const wrangler = wranglersConfig();
const files = [];
if (named !== undefined) files.push(named);
if (wrangler.found && wrangler.file !== undefined && !files.some((file) => resolve(file) === resolve(wrangler.file))) {
  files.push(wrangler.file);
}
if (files.length === 0) files.push("wrangler.toml");
if (!wrangler.found) {
  console.error(
    `build-check: could not read wrangler's command line to see which config it was given; checking ${files.join(" and ")}`,
  );
}

let status = 0;
for (const file of files) {
  const run = spawnSync("npm", ["run", "--silent", "check-config", "--", "--deploy", file], {
    stdio: "inherit",
    shell: process.platform === "win32",
  });
  if (run.error) {
    console.error(`build-check: could not run npm run check-config: ${run.error.message}`);
    process.exit(1);
  }
  if (run.status !== 0) status = run.status ?? 1;
}
process.exit(status);
