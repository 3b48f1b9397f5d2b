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
 * `--deploy`: the check every deploy makes first (tools/build-check.mjs,
 * wrangler.toml's `[build] command`): the file and every environment it
 * defines, since wrangler does not tell a build command which one it
 * deploys; each report printed, and exit status 1, which stops the deploy,
 * when any of them has an error.
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

const USAGE = "usage: npm run check-config -- [path/to/wrangler.toml] [--env <name> | --deploy]";

type Args = { file: string; env: string | undefined; deploy: boolean };

/** The file and environment to check; `--help` is a failure with no message, so only the usage is printed. */
function parseArgs(argv: string[]): Result<Args> {
  let file: string | undefined;
  let env: string | undefined;
  let deploy = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--deploy") deploy = true;
    else if (arg === "--env" || arg === "-e") {
      env = argv[++i];
      if (env === undefined) return fail("--env needs a name");
    } else if (arg === "--help" || arg === "-h") return fail();
    else if (arg.startsWith("-")) return fail(`unknown option ${arg}`);
    else if (file === undefined) file = arg;
    else return fail(`one file at a time; got ${file} and ${arg}`);
  }
  if (deploy && env !== undefined) return fail("--deploy checks every environment; give no --env");
  return ok({ file: file ?? "wrangler.toml", env, deploy });
}

const parsed = parseArgs(process.argv.slice(2));
if (!parsed.ok) {
  for (const error of parsed.errors) console.error(`check-config: ${error}`);
  console.error(USAGE);
  process.exit(2);
}
const args = parsed.value;

/** The configuration of `env` in the file (the top level for undefined), and what only the file tells; exits 2 when it cannot be read. */
function read(env: string | undefined): { config: WranglerConfig; file: FileFacts } {
  try {
    const config: WranglerConfig = unstable_readConfig({ config: args.file, env }, { hideWarnings: true });
    const { rawConfig } = experimental_readRawConfig({ config: args.file });
    const environments = Object.keys((rawConfig.env ?? {}) as Record<string, unknown>);
    const file = {
      fields: Object.keys(rawConfig),
      knownFields: [...Object.keys(unstable_defaultWranglerConfig), ...WRANGLER_FIELDS_WITHOUT_DEFAULTS],
      env,
      environments,
    };
    return { config, file };
  } catch (error) {
    console.error(`error: cannot read ${args.file}: ${(error as Error).message}`);
    process.exit(2);
  }
}

/** Checks one environment, prints its report, and says whether it has an error. */
function check(env: string | undefined): boolean {
  const { config, file } = read(env);
  const report = checkConfig(config, file);
  const label = env === undefined ? args.file : `${args.file} [env.${env}]`;
  for (const line of formatReport(report, label)) console.log(line);
  return report.findings.some((f) => f.level === "error");
}

if (!args.deploy) process.exit(check(args.env) ? 1 : 0);

const environments = [undefined, ...read(undefined).file.environments];
const failed = environments.filter((env) => check(env));
if (failed.length > 0) {
  const where = failed.map((env) => (env === undefined ? "the top level" : `[env.${env}]`)).join(", ");
  console.error(
    `check-config: not deploying: ${args.file} has errors (${where}); each is named above. Fix them and deploy again (npm run check-config checks without deploying).`,
  );
  process.exit(1);
}
