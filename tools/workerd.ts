/**
 * @module
 * Running Workers in a standalone `workerd serve`, from Node: bundles made by
 * wrangler's own bundler, a capnp config, free ports, and the process itself,
 * which can be stopped, killed and started again on the same storage and
 * ports. Shared by the benchmark (tools/bench/run.ts) and the multi-isolate tests
 * (test/edge/).
 *
 * Standalone workerd rather than `wrangler dev`: wrangler's dev proxy caps
 * throughput and puts one isolate behind one port, where the benchmark needs
 * speed and the tests need many isolates and control over the process.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createWriteStream, mkdirSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { basename, dirname, join, relative, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

export const ROOT = resolve(import.meta.dirname, "..");
export const COMPATIBILITY_DATE = "2026-11-01";
/** wrangler.toml's `compatibility_flags`, in a workerd config: `request.signal` aborts when a client hangs up. */
export const COMPATIBILITY_FLAGS = 'compatibilityFlags = ["enable_request_signal"],';

// The project's own binaries, run with the Node that runs this file (the project's Node 22 under `npm run`),
// so that neither PATH nor the system's older Node decides which wrangler or workerd runs.
const WRANGLER = join(ROOT, "node_modules/wrangler/bin/wrangler.js");
export const WORKERD = join(ROOT, "node_modules/.bin/workerd");

export type BundleOptions = {
  /** The Worker's entry point. */
  main: string;
  /** Where the bundle goes; wrangler's `.wrangler/` scratch directory lands here too, out of the source tree. */
  outdir: string;
  /** The Worker's name, as wrangler wants one. */
  name: string;
};

/**
 * Bundles a Worker with wrangler's bundler (`wrangler deploy --dry-run`),
 * exactly as a deploy would. Returns the bundle's absolute path.
 */
export function buildBundle({ main, outdir, name }: BundleOptions): string {
  mkdirSync(outdir, { recursive: true });
  // A config of its own, so that the limiter's wrangler.toml (found next to the sources) is not used;
  // keep_names = false as in wrangler.toml: esbuild's __name wrapper costs on every closure made.
  const config = join(outdir, "wrangler.toml");
  writeFileSync(
    config,
    `name = ${JSON.stringify(name)}\nmain = ${JSON.stringify(main)}\ncompatibility_date = "${COMPATIBILITY_DATE}"\nkeep_names = false\n`,
  );
  execFileSync(process.execPath, [WRANGLER, "deploy", "--dry-run", "--outdir", outdir, "--config", config], {
    cwd: outdir,
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
  });
  return join(outdir, `${basename(main).replace(/\.[cm]?[jt]s$/, "")}.js`);
}

export const capnpString = (s: string) => JSON.stringify(s);

/**
 * A path for `embed` in a config written to `configPath`: relative to it,
 * because capnp reads a leading "/" as its own import path, not the file system.
 */
export const embedPath = (configPath: string, file: string): string => relative(dirname(configPath), file);

/** A port nothing listens on now. Another process may take it before it is used; on loopback that is rare. */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

/** `count` distinct free ports: every probe stays open until all are found, so none is handed out twice. */
export async function freePorts(count: number): Promise<number[]> {
  const probes: Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const probe = createServer();
      probes.push(probe);
      await new Promise<void>((done) => probe.listen(0, "127.0.0.1", done));
    }
    return probes.map((probe) => (probe.address() as AddressInfo).port);
  } finally {
    await Promise.all(probes.map((probe) => new Promise<void>((done) => probe.close(() => done()))));
  }
}

export type WaitOptions = {
  /** Tries before giving up; default 100, one every `intervalMs`. */
  attempts?: number;
  intervalMs?: number;
  /** Checked between tries: a process that has exited will never come up, so fail at once. */
  alive?: () => boolean;
};

/** Resolves once `url` answers anything over HTTP. */
export async function waitUntilUp(url: string, options: WaitOptions = {}): Promise<void> {
  const { attempts = 100, intervalMs = 100, alive = () => true } = options;
  for (let i = 0; i < attempts; i++) {
    try {
      const res = await fetch(url);
      await res.arrayBuffer();
      return;
    } catch {
      if (!alive()) throw new Error(`workerd exited before ${url} came up`);
      await sleep(intervalMs);
    }
  }
  throw new Error(`workerd did not come up at ${url}`);
}

/** A binding of a Worker: plain text, or a value given to the Worker as parsed JSON. */
export type Binding = { name: string; text: string } | { name: string; json: unknown };

const capnpBinding = (b: Binding): string =>
  "text" in b
    ? `(name = ${capnpString(b.name)}, text = ${capnpString(b.text)})`
    : `(name = ${capnpString(b.name)}, json = ${capnpString(JSON.stringify(b.json))})`;

export type EdgeConfigOptions = {
  /** The bundle every edge service runs: one file, many isolates. */
  edgeBundle: string;
  /** Edge services, each with its own port. Each is its own isolate, with its own module state. */
  edges: { name: string; port: number }[];
  /** Bindings every edge service gets, besides `binding` below. */
  bindings: Binding[];
  /** The service that defines the Durable Object class, its bundle, and a port of its own when it should serve HTTP too. */
  objects: { name: string; bundle: string; className: string; uniqueKey: string; port?: number };
  /** The binding, in every edge, to the one namespace in `objects`. */
  namespaceBinding: string;
  /** Durable Object storage: a directory that outlives the process, so a restart finds the objects' state. */
  storageDir: string;
  /** The services this process serves on their ports (default: every edge, and the objects service if it has a port). */
  listen?: string[];
  /**
   * Joins a workerd cluster (workerd.capnp, `ClusterConfig`): processes on
   * one config but their sockets and storage, each Durable Object run by one
   * of them and reached from the others through it.
   */
  cluster?: ClusterOptions;
};

/** A cluster's shared state: an S3-compatible bucket, and the secret its instances share. */
export type ClusterOptions = {
  /** `s3://bucket/prefix`. */
  bucket: string;
  /** The bucket's endpoint, such as `http://127.0.0.1:41234`. */
  endpoint: string;
  /** At least 32 bytes. */
  key: string;
};

/**
 * A config of N edge Worker services and one objects service whose
 * namespace they all bind: the shape of production, where many isolates
 * call one object per key. Embedded paths are made relative to `configPath`.
 */
export function edgeConfig(configPath: string, options: EdgeConfigOptions): string {
  const { objects } = options;
  const module = (bundle: string) =>
    `modules = [ (name = ${capnpString(basename(bundle))}, esModule = embed ${capnpString(embedPath(configPath, bundle))}) ]`;
  const namespace = `(name = ${capnpString(options.namespaceBinding)}, durableObjectNamespace = (className = ${capnpString(objects.className)}, serviceName = ${capnpString(objects.name)}))`;
  const edgeBindings = [...options.bindings.map(capnpBinding), namespace].join(",\n        ");
  const edges = options.edges.map(
    (edge) => `    (name = ${capnpString(edge.name)}, worker = (
      ${module(options.edgeBundle)},
      compatibilityDate = "${COMPATIBILITY_DATE}",
      ${COMPATIBILITY_FLAGS}
      globalOutbound = "internet",
      bindings = [
        ${edgeBindings}
      ],
    ))`,
  );
  const listening = [
    ...options.edges,
    ...(objects.port === undefined ? [] : [{ name: objects.name, port: objects.port }]),
  ].filter((s) => options.listen === undefined || options.listen.includes(s.name));
  const cluster =
    options.cluster === undefined
      ? ""
      : `
  cluster = (
    bucket = ${capnpString(options.cluster.bucket)},
    bucketOptions = [${[`aws_endpoint=${options.cluster.endpoint}`, "aws_region=auto", "aws_access_key_id=edge", "aws_secret_access_key=edge"].map(capnpString).join(", ")}],
    address = "127.0.0.1:0",
    key = ${capnpString(options.cluster.key)},
  ),`;
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "internet", network = (allow = ["public", "private", "local"])),
    (name = "disk", disk = (path = ${capnpString(options.storageDir)}, writable = true)),
    (name = ${capnpString(objects.name)}, worker = (
      ${module(objects.bundle)},
      compatibilityDate = "${COMPATIBILITY_DATE}",
      durableObjectNamespaces = [
        (className = ${capnpString(objects.className)}, uniqueKey = ${capnpString(objects.uniqueKey)}, enableSql = true)
      ],
      durableObjectStorage = (localDisk = "disk"),
    )),
${edges.join(",\n")}
  ],
  sockets = [
${listening
  .map(
    (s) =>
      `    (name = ${capnpString(s.name)}, address = "127.0.0.1:${s.port}", http = (), service = ${capnpString(s.name)})`,
  )
  .join(",\n")}
  ],${cluster}
);
`;
}

/** Writes {@link edgeConfig} to `configPath`, creating the storage directory it names. */
export function writeEdgeConfig(configPath: string, options: EdgeConfigOptions): void {
  mkdirSync(options.storageDir, { recursive: true });
  writeFileSync(configPath, edgeConfig(configPath, options));
}

export type WorkerdOptions = {
  configPath: string;
  /** Everything workerd prints, from every run, is appended here as well as kept in memory. */
  logFile: string;
  /** URLs that answer once workerd is serving; waited for on every start. */
  readyUrls: string[];
  /** Extra `workerd serve` arguments. */
  args?: string[];
};

/** How a workerd process ended. */
export type Exit = { code: number | null; signal: NodeJS.Signals | null };

export type Workerd = {
  /** The pid of the running process, or null while it is stopped. */
  pid: () => number | null;
  /** Everything workerd printed on stdout and stderr, over every run, in arrival order. */
  output: () => string;
  /** A position in {@link Workerd.output}, for reading only what comes after it. */
  mark: () => number;
  /** The output since `mark`. */
  outputSince: (mark: number) => string;
  /** SIGTERM, then SIGKILL if it lingers past `graceMs` (default 5 s). It can be restarted. */
  stop: (graceMs?: number) => Promise<Exit>;
  /** SIGKILL: a crash, nothing flushed or closed. It can be restarted. */
  kill: () => Promise<Exit>;
  /** Starts workerd again on the same config (the same storage and ports), stopping it first if it runs. */
  restart: () => Promise<void>;
  /** Stops it for good and closes the log file. */
  close: () => Promise<void>;
};

/** Output kept in memory beyond this is dropped from the front; the log file keeps it all. */
const MAX_BUFFER_CHARS = 64 * 2 ** 20;

/**
 * Starts `workerd serve` and waits until every ready URL answers.
 * `--verbose`: the runtime's reports of uncaught exceptions and of requests
 * it cancelled (which the tests read) then come with the JavaScript stack.
 */
export async function startWorkerd(options: WorkerdOptions): Promise<Workerd> {
  const log = createWriteStream(options.logFile, { flags: "a" });
  let buffer = "";
  /** Characters dropped from the front of `buffer`, so that marks stay positions in all the output. */
  let dropped = 0;
  const append = (text: string) => {
    log.write(text);
    buffer += text;
    if (buffer.length > MAX_BUFFER_CHARS) {
      const cut = buffer.length - MAX_BUFFER_CHARS / 2;
      buffer = buffer.slice(cut);
      dropped += cut;
    }
  };

  let child: ChildProcess | null = null;
  let closed: Promise<Exit> = Promise.resolve({ code: null, signal: null });
  // A test runner that dies must not strand a workerd holding ports and storage.
  const killOnExit = () => child?.kill("SIGKILL");
  process.on("exit", killOnExit);

  const end = async (sig: NodeJS.Signals, graceMs?: number): Promise<Exit> => {
    const proc = child;
    if (!proc) return closed;
    proc.kill(sig);
    const timer = graceMs === undefined ? undefined : setTimeout(() => proc.kill("SIGKILL"), graceMs);
    const exit = await closed;
    clearTimeout(timer);
    return exit;
  };

  const start = async () => {
    const proc = spawn(WORKERD, ["serve", "--experimental", "--verbose", ...(options.args ?? []), options.configPath], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    child = proc;
    append(`--- harness: workerd pid ${proc.pid} started ---\n`);
    proc.stdout!.setEncoding("utf8").on("data", append);
    proc.stderr!.setEncoding("utf8").on("data", append);
    // "close", not "exit": it comes after the pipes are drained, so the last lines are in the buffer.
    closed = new Promise<Exit>((done) => {
      const ended = (code: number | null, signal: NodeJS.Signals | null, why = `${signal ?? code}`) => {
        if (child === proc) child = null;
        append(`--- harness: workerd pid ${proc.pid} ended (${why}) ---\n`);
        done({ code, signal });
      };
      proc.once("close", (code, signal) => ended(code, signal));
      // A binary that cannot be started never closes; without this the error would go unhandled.
      proc.once("error", (error) => proc.pid === undefined && ended(null, null, error.message));
    });
    try {
      for (const url of options.readyUrls) await waitUntilUp(url, { alive: () => child === proc });
    } catch (error) {
      await end("SIGKILL");
      throw new Error(`${(error as Error).message}; workerd printed:\n${buffer.slice(-8000)}`);
    }
  };

  const handle: Workerd = {
    pid: () => child?.pid ?? null,
    output: () => buffer,
    mark: () => dropped + buffer.length,
    outputSince: (mark) => buffer.slice(Math.max(0, mark - dropped)),
    stop: (graceMs = 5_000) => end("SIGTERM", graceMs),
    kill: () => end("SIGKILL"),
    restart: async () => {
      await end("SIGTERM", 5_000);
      await start();
    },
    close: async () => {
      await end("SIGTERM", 5_000);
      process.off("exit", killOnExit);
      await new Promise<void>((done) => log.end(done));
    },
  };
  try {
    await start();
  } catch (error) {
    await handle.close();
    throw error;
  }
  return handle;
}
