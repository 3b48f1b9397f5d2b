/**
 * @module
 * Starts the Worker the way a user does, `wrangler dev`, on a free port, and
 * stops it with every process it started.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { fileURLToPath } from "node:url";

export type RunningWorker = {
  /** Where `wrangler dev` listens, such as `http://127.0.0.1:41234`. */
  url: string;
  /** The `wrangler` process; the Worker runs in `workerd` processes below it. */
  pid: number;
  stop: () => Promise<void>;
};

export type WranglerOptions = {
  /** The wrangler config file. Wrangler keeps its build output in `.wrangler/` beside it. */
  configPath: string;
  /** The Worker's entry point; it overrides the config's `main`. */
  entryPath: string;
  /** `--var` values, such as `ORIGIN_URL`. */
  vars: Record<string, string>;
  /** Where Durable Object storage goes: a fresh directory gives fresh counters. */
  persistTo: string;
  /** Everything wrangler prints (the Worker's logs among it) is appended here. */
  logFile: string;
  /** How long to wait for "Ready on"; default 90 s, for a busy 2-core machine. */
  startTimeoutMs?: number;
  /** The wrangler CLI to run (a `bin/wrangler.js`); default this repository's. A consumer project runs its own. */
  wrangler?: string;
};

const WRANGLER = fileURLToPath(new URL("../../../node_modules/wrangler/bin/wrangler.js", import.meta.url));
const READY = /Ready on (http:\/\/127\.0\.0\.1:\d+)/;

/** Starts `wrangler dev`; rejects with its output when it exits or does not get ready in time. */
export async function startWrangler(options: WranglerOptions): Promise<RunningWorker> {
  const vars = Object.entries(options.vars).flatMap(([name, value]) => ["--var", `${name}:${value}`]);
  const args = [
    options.wrangler ?? WRANGLER,
    "dev",
    options.entryPath,
    ["--config", options.configPath],
    ["--ip", "127.0.0.1"],
    // Port 0: the OS picks free ports, so parallel runs on one machine never collide.
    ["--port", "0"],
    ["--inspector-port", "0"],
    ["--persist-to", options.persistTo],
    ["--show-interactive-dev-session", "false"],
    vars,
  ].flat();
  // Its own process group, so stopping it reaches the workerd processes too.
  const child = spawn(process.execPath, args, {
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", FORCE_COLOR: "0" },
  });
  const log = createWriteStream(options.logFile, { flags: "a" });
  let output = "";
  const collect = (chunk: Buffer) => {
    log.write(chunk);
    if (output.length < 64 * 1024) output += chunk.toString("utf8");
  };
  child.stdout!.on("data", collect);
  child.stderr!.on("data", collect);

  const stop = () => stopGroup(child).finally(() => new Promise<void>((resolve) => log.end(resolve)));
  const killOnExit = () => signalGroup(child, "SIGKILL");
  process.once("exit", killOnExit);

  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`wrangler dev: not ready after ${options.startTimeoutMs ?? 90_000} ms:\n${output}`)),
        options.startTimeoutMs ?? 90_000,
      );
      const onData = () => {
        const ready = READY.exec(output);
        if (!ready) return;
        clearTimeout(timer);
        resolve(ready[1]!);
      };
      child.stdout!.on("data", onData);
      child.stderr!.on("data", onData);
      child.once("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`wrangler dev: exited (${signal ?? code}) before it was ready:\n${output}`));
      });
    });
    return {
      url,
      pid: child.pid!,
      stop: async () => {
        process.off("exit", killOnExit);
        await stop();
      },
    };
  } catch (error) {
    process.off("exit", killOnExit);
    await stop();
    throw error;
  }
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    // The group is already gone.
  }
}

/** SIGTERM to the whole group, then SIGKILL to whatever is left after 5 s. */
async function stopGroup(child: ChildProcess): Promise<void> {
  const exited =
    child.exitCode !== null || child.signalCode !== null
      ? Promise.resolve()
      : new Promise<void>((resolve) => child.once("exit", () => resolve()));
  signalGroup(child, "SIGTERM");
  const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), 5_000).unref());
  await Promise.race([exited, timeout]);
  // workerd may outlive wrangler by a moment; the group kill makes sure it does not linger.
  signalGroup(child, "SIGKILL");
}
