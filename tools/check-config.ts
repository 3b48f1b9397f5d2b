/**
 * @module
 * `npm run check-config [-- <wrangler.toml>] [-- --env <name>]`: checks the
 * limiter's configuration offline, reading the file exactly as wrangler
 * does. Prints every error (naming the rule and field) and every warning.
 * Besides what the Worker's own parser finds, what Cloudflare would refuse
 * or do: variable names the Worker does not read, variables over 5 KB,
 * tables wrangler does not know, an `--env` the file lacks, and a deploy
 * that would forward requests to itself.
 * Exit status: 0 with warnings only, 1 with errors, 2 when the file cannot be read.
 *
 * Secrets are never in the file. A `JWT_JWKS` listed in `[secrets] required`
 * is taken as set, since `wrangler deploy` refuses to deploy without it; one
 * that is neither there nor in [vars] is a warning, not an error, as it may
 * have been set with `wrangler secret put`. `.dev.vars` is not read: it is
 * what `wrangler dev` runs with, not what is deployed, and CI has none.
 */
import { experimental_readRawConfig, unstable_defaultWranglerConfig, unstable_readConfig } from "wrangler";
import { checkConfig, type FileFacts, formatReport, type WranglerConfig } from "../src/config/check.ts";
import { fail, ok, type Result } from "../src/core/result.ts";

/** Top-level fields wrangler reads that its default configuration has no value for. */
const WRANGLER_FIELDS_WITHOUT_DEFAULTS = ["$schema", "env", "legacy_env", "usage_model", "secrets"];

const USAGE = "usage: npm run check-config -- [path/to/wrangler.toml] [--env <name>]";

/** The file and environment to check; `--help` is a failure with no message, so only the usage is printed. */
function parseArgs(argv: string[]): Result<{ file: string; env: string | undefined }> {
  let file: string | undefined;
  let env: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--env" || arg === "-e") {
      env = argv[++i];
      if (env === undefined) return fail("--env needs a name");
    } else if (arg === "--help" || arg === "-h") return fail();
    else if (arg.startsWith("-")) return fail(`unknown option ${arg}`);
    else if (file === undefined) file = arg;
    else return fail(`one file at a time; got ${file} and ${arg}`);
  }
  return ok({ file: file ?? "wrangler.toml", env });
}

const parsed = parseArgs(process.argv.slice(2));
if (!parsed.ok) {
  for (const error of parsed.errors) console.error(`check-config: ${error}`);
  console.error(USAGE);
  process.exit(2);
}
const args = parsed.value;

let config: WranglerConfig;
let file: FileFacts;
try {
  config = unstable_readConfig({ config: args.file, env: args.env }, { hideWarnings: true });
  const { rawConfig } = experimental_readRawConfig({ config: args.file });
  const environments = Object.keys((rawConfig.env ?? {}) as Record<string, unknown>);
  file = {
    fields: Object.keys(rawConfig),
    knownFields: [...Object.keys(unstable_defaultWranglerConfig), ...WRANGLER_FIELDS_WITHOUT_DEFAULTS],
    env: args.env,
    environments,
  };
} catch (error) {
  console.error(`error: cannot read ${args.file}: ${(error as Error).message}`);
  process.exit(2);
}

const report = checkConfig(config, file);
const label = args.env === undefined ? args.file : `${args.file} [env.${args.env}]`;
for (const line of formatReport(report, label)) console.log(line);
process.exit(report.findings.some((f) => f.level === "error") ? 1 : 0);
