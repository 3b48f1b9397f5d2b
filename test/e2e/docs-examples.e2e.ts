/**
 * The examples in the README and docs/ print what the docs show. Each command
 * block marked `<!-- example: checked by test/e2e/docs-examples.e2e.ts -->` is
 * run as written, as a new user runs it: in a scratch copy of the project
 * (its own wrangler.toml, .dev.vars and .wrangler/ state), against
 * `npm run dev -- --port <free port>` started there, each command in order in
 * one shell per page. What each command prints on stdout is compared with
 * the `# ` lines under it: `…` stands for any text within a line, and a line of `…`
 * alone for any lines; in a block marked `numbers vary`, any number matches
 * any number, and a run of spaces any run of spaces. The port in commands and
 * output is the one started (the docs say 8787). npm's banner is left out
 * (`npm_config_loglevel=silent`), as the docs say.
 *
 * Also: every TOML block marked `<!-- config: checked … -->`, put in place of
 * the shipped file's `[vars]`, gives no error under `check-config`; and the
 * Node origin of docs/deploying.md refuses requests without its secret.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { type Block, blocksOf } from "../support/markdown.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const TEST = "test/e2e/docs-examples.e2e.ts";
const CHECKED = new RegExp(`^example: checked by ${TEST.replaceAll(".", "\\.")}(; numbers vary)?$`);

/**
 * The pages with checked examples, in the order a reader meets them. `token`:
 * the page's examples need the admin token from the start (the page says so),
 * so `.dev.vars` has one before `npm run dev` starts; `dev`: they need a
 * running limiter at all.
 */
const PAGES = [
  { page: "README.md", dev: true, token: false },
  { page: "docs/getting-started.md", dev: true, token: false },
  { page: "docs/configuration.md", dev: false, token: false },
  { page: "docs/admin-api.md", dev: true, token: true },
  { page: "docs/per-client-limits.md", dev: true, token: true },
  { page: "docs/statistics.md", dev: true, token: true },
];

/** The README and every page of docs/. */
const ALL_PAGES = [
  "README.md",
  ...readdirSync(join(ROOT, "docs"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => `docs/${name}`),
];

const read = (page: string): string => readFileSync(join(ROOT, page), "utf8");

// --- A command block: its commands, and what each prints ----------------------------------------

type Command = { command: string; expected: string[] };

/** A checked block's commands, each with the `# ` lines under it (`#` alone is an empty line). */
function commandsOf(block: Block): Command[] {
  const commands: Command[] = [];
  for (const line of block.text.split("\n")) {
    if (line.startsWith("#")) {
      const last = commands.at(-1);
      if (last === undefined) throw new Error(`line ${block.line}: output before any command: ${line}`);
      last.expected.push(line === "#" ? "" : line.replace(/^# /, ""));
    } else if (line.trim() !== "") commands.push({ command: line, expected: [] });
  }
  return commands;
}

const literal = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** A regular expression for one line of expected output. */
function lineMatcher(line: string, numbersVary: boolean): RegExp {
  const parts = numbersVary ? /…|\d+(?:\.\d+)?|\s+|[^…\d\s]+/g : /…|[^…]+/g;
  const source = (line.match(parts) ?? [])
    .map((part) => {
      if (part === "…") return ".*";
      if (numbersVary && /^\d/.test(part)) return "\\d+(?:\\.\\d+)?";
      if (numbersVary && /^\s/.test(part)) return "\\s+";
      return literal(part);
    })
    .join("");
  return new RegExp(`^${source}$`);
}

/** Whether the output lines are what the expected lines describe; a line of `…` alone is any lines. */
function matches(actual: string[], expected: string[], numbersVary: boolean): boolean {
  const [first, ...rest] = expected;
  if (first === undefined) return actual.length === 0;
  if (first === "…") {
    for (let skip = 0; skip <= actual.length; skip++) {
      if (matches(actual.slice(skip), rest, numbersVary)) return true;
    }
    return false;
  }
  return (
    actual.length > 0 && lineMatcher(first, numbersVary).test(actual[0]!) && matches(actual.slice(1), rest, numbersVary)
  );
}

// --- A scratch copy of the project, and npm run dev in it ----------------------------------------

/** A directory that is the project as a user has it: the sources linked, its own config and state. */
function scratchProject(): string {
  const dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-docs-"));
  for (const linked of ["src", "tools", "test", "docs", "node_modules"])
    symlinkSync(join(ROOT, linked), join(dir, linked));
  for (const copied of ["package.json", "wrangler.toml", "tsconfig.json"])
    copyFileSync(join(ROOT, copied), join(dir, copied));
  return dir;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** npm, with the Node that `npm run` gave this process (22). */
const npmCommand = (): [string, string[]] => {
  const cli = process.env.npm_execpath;
  return cli ? [process.execPath, [cli]] : ["npm", []];
};

/** The environment a user's shell has: nothing of this test run's own settings. */
function userEnv(port: number): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", FORCE_COLOR: "0" };
  for (const name of ["ADMIN_TOKEN", "ADMIN_PREFIX", "DEMO_URL", "DEMO_SECONDS", "PORT", "LIMITS_URL"])
    delete env[name];
  // The docs leave npm's `> script` banner out.
  env.npm_config_loglevel = "silent";
  // What the docs' 8787 becomes: `npm run demo` and `npm run limits` default to it.
  env.PORT = String(port);
  env.LIMITS_URL = `http://127.0.0.1:${port}`;
  return env;
}

type Dev = { process: ChildProcess; output: () => string; readyCount: () => number };

/** `npm run dev -- --port <port>` in `dir`, as the README says; resolves once wrangler is ready. */
async function startDev(dir: string, port: number): Promise<Dev> {
  const [npm, prefix] = npmCommand();
  const env = userEnv(port);
  delete env.npm_config_loglevel;
  const child = spawn(npm, [...prefix, "run", "dev", "--", "--port", String(port)], {
    cwd: dir,
    env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    output += chunk.toString("utf8");
  });
  child.stderr!.on("data", (chunk: Buffer) => {
    output += chunk.toString("utf8");
  });
  const dev: Dev = {
    process: child,
    output: () => output,
    readyCount: () => output.match(/Ready on http:\/\/127\.0\.0\.1:\d+/g)?.length ?? 0,
  };
  await waitFor(
    () => dev.readyCount() >= 1,
    120_000,
    () => `npm run dev never got ready:\n${output}`,
  );
  return dev;
}

async function stopDev(dev: Dev): Promise<void> {
  const pid = dev.process.pid!;
  const exited = new Promise<void>((resolve) => {
    if (dev.process.exitCode !== null || dev.process.signalCode !== null) resolve();
    else dev.process.once("exit", () => resolve());
  });
  try {
    process.kill(-pid, "SIGTERM");
  } catch {
    return;
  }
  await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
  try {
    process.kill(-pid, "SIGKILL");
  } catch {
    // Gone already.
  }
}

async function waitFor(done: () => boolean, timeoutMs: number, why: () => string): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > until) throw new Error(why());
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

// --- One shell per page ---------------------------------------------------------------------------

/**
 * A bash that keeps its variables from one command to the next, as a
 * terminal does. What a command prints on stdout is what is compared; its
 * stderr (where curl draws a progress meter when its output is not a
 * terminal, as here) is kept for the failure message.
 */
class Shell {
  private readonly bash: ChildProcess;
  private readonly errors: string;
  private buffer = "";

  constructor(dir: string, env: NodeJS.ProcessEnv) {
    this.errors = join(dir, ".docs-examples-stderr");
    this.bash = spawn("bash", ["--noprofile", "--norc"], { cwd: dir, env, stdio: ["pipe", "pipe", "pipe"] });
    this.bash.stdout!.on("data", (chunk: Buffer) => {
      this.buffer += chunk.toString("utf8");
    });
  }

  /** Runs one command: what it printed on stdout, line by line, and on stderr. */
  async run(command: string, timeoutMs = 60_000): Promise<{ lines: string[]; stderr: string }> {
    const marker = `__done_${randomBytes(6).toString("hex")}__`;
    this.buffer = "";
    this.bash.stdin!.write(`{ ${command}\n} 2>${JSON.stringify(this.errors)}; printf '\\n${marker}\\n'\n`);
    await waitFor(
      () => this.buffer.includes(`${marker}\n`),
      timeoutMs,
      () => `${command}: no end after ${timeoutMs} ms:\n${this.buffer}`,
    );
    const text = this.buffer.slice(0, this.buffer.indexOf(`${marker}\n`)).replace(/\n$/, "");
    // Trailing spaces (`-w "%{http_code} "`) and CRs (HTTP headers) are invisible in a terminal.
    const lines = text.split("\n").map((line) => line.trimEnd());
    if (lines.at(-1) === "") lines.pop();
    return { lines, stderr: readFileSync(this.errors, "utf8") };
  }

  close(): void {
    this.bash.stdin!.end();
    this.bash.kill();
  }
}

// --- The tests ------------------------------------------------------------------------------------

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const step of cleanup.reverse()) await step();
  cleanup = [];
});

describe("the docs' command examples", () => {
  it("lists every page with a checked example", () => {
    const marked = ALL_PAGES.filter((page) => blocksOf(read(page)).some((block) => CHECKED.test(block.marker ?? "")));
    expect(marked.sort()).toEqual(PAGES.map(({ page }) => page).sort());
  });

  it.each(PAGES)(
    "$page prints what it shows",
    async ({ page, dev, token }) => {
      const blocks = blocksOf(read(page)).filter((block) => CHECKED.test(block.marker ?? ""));
      expect(blocks.length).toBeGreaterThan(0);
      const dir = scratchProject();
      cleanup.push(async () => rmSync(dir, { recursive: true, force: true }));
      const port = await freePort();
      if (token) writeFileSync(join(dir, ".dev.vars"), `ADMIN_TOKEN=${randomBytes(32).toString("hex")}\n`);
      const running = dev ? await startDev(dir, port) : undefined;
      if (running) cleanup.push(() => stopDev(running));
      const shell = new Shell(dir, userEnv(port));
      cleanup.push(async () => shell.close());
      const here = (text: string) => text.replaceAll("127.0.0.1:8787", `127.0.0.1:${port}`);

      for (const block of blocks) {
        const numbersVary = block.marker!.endsWith("numbers vary");
        for (const { command, expected } of commandsOf(block)) {
          const readyBefore = running?.readyCount() ?? 0;
          const { lines: actual, stderr } = await shell.run(here(command));
          const shown = expected.map(here);
          expect(
            matches(actual, shown, numbersVary),
            `${page}:${block.line}: ${command}\n--- the docs show:\n${shown.join("\n")}\n--- it printed:\n${actual.join("\n")}\n--- and on stderr:\n${stderr}`,
          ).toBe(true);
          // npm run dev restarts wrangler when .dev.vars changes; a user waits for "Ready on" too.
          if (running && />>?\s*\.dev\.vars/.test(command)) {
            await waitFor(
              () => running.readyCount() > readyBefore,
              120_000,
              () => `npm run dev did not restart after ${command}:\n${running.output()}`,
            );
          }
        }
      }
    },
    300_000,
  );
});

describe("the docs' configuration examples", () => {
  const shipped = read("wrangler.toml");
  const head = shipped.slice(0, shipped.search(/^\[vars\]$/m));
  const cases = ALL_PAGES.flatMap((page) =>
    blocksOf(read(page))
      .filter((block) => block.lang === "toml" && block.marker?.startsWith(`config: checked by ${TEST}`))
      .map((block) => ({ page, line: block.line, text: block.text })),
  );

  it("finds the configuration examples", () => {
    expect(cases.length).toBeGreaterThan(5);
  });

  it.each(cases)("$page:$line: check-config finds no error in it", async ({ text }) => {
    const dir = scratchProject();
    cleanup.push(async () => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, "wrangler.toml"), `${head}${text}\n`);
    const { code, output } = await new Promise<{ code: number; output: string }>((resolve) => {
      execFile(process.execPath, ["tools/check-config.ts"], { cwd: dir }, (error, stdout, stderr) =>
        resolve({ code: error ? Number(error.code ?? 1) : 0, output: stdout + stderr }),
      );
    });
    expect(
      output.split("\n").filter((line) => line.startsWith("error")),
      output,
    ).toEqual([]);
    expect(code, output).toBe(0);
  });
});

describe("the origin of docs/deploying.md", () => {
  it("answers requests that carry the secret, and refuses the others with 403", async () => {
    const block = blocksOf(read("docs/deploying.md")).find((b) => b.marker?.startsWith("example: node-origin"));
    expect(block?.lang).toBe("js");
    const dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-origin-"));
    cleanup.push(async () => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, "origin.mjs"), block!.text);
    const port = await freePort();
    const secret = randomBytes(32).toString("hex");
    const origin = spawn(process.execPath, [join(dir, "origin.mjs")], {
      env: { ...process.env, ORIGIN_SECRET: secret, PORT: String(port) },
      stdio: "ignore",
    });
    cleanup.push(async () => {
      origin.kill();
    });
    const url = `http://127.0.0.1:${port}/api/hello`;
    const send = async (headers: Record<string, string>) => {
      const res = await fetch(url, { headers });
      return { status: res.status, body: await res.text() };
    };
    let up = false;
    for (let i = 0; i < 50 && !up; i++) {
      up = await fetch(url).then(
        () => true,
        () => false,
      );
      if (!up) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(up).toBe(true);
    expect(await send({ "x-origin-secret": secret })).toEqual({ status: 200, body: "hello from the origin\n" });
    expect((await send({ "x-origin-secret": `${secret.slice(1)}x` })).status).toBe(403);
    expect((await send({ "x-origin-secret": "short" })).status).toBe(403);
    expect((await send({})).status).toBe(403);
  });
});
