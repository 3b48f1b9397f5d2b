/**
 * @module
 * `npm run bench`: one command, one run, every variant side by side.
 *
 * Builds each Worker with wrangler's bundler, serves them all from one
 * standalone `workerd serve` (not `wrangler dev`, whose dev proxy caps
 * throughput), and drives each variant with wrk in alternating rounds
 * (a b c d e f, a b c d e f, …). Reports medians, and for each variant its
 * throughput and workerd's CPU time per request beside those of its
 * baseline, round by round.
 *
 * The origin is a constant 200 served by the same workerd (workers/origin.ts),
 * which every proxying variant reaches as its `globalOutbound`: it costs
 * little, so the allowed variants measure their Worker, and workerd's CPU per
 * request is the Worker's plus that small constant. BENCH_ORIGIN=node puts
 * the earlier origin back, a Node server on the same machine (which was the
 * allowed variants' bottleneck), to compare with runs made with it.
 *
 * (e) is the physical limit for the blocked path, a constant 429; (l) sends
 * the limiter's own 429 (eight headers, a longer body) in the same way, made
 * by the limiter's code, without deciding: (d) is compared with both.
 *
 * (j) and (k) are (b) and (d) with statistics on: the same bundle in a
 * service of its own that also binds STATS (the StatsObject class, in that
 * service). Every other variant runs without it, as before statistics
 * existed. When (j) or (k) ran, the bench also reports their with/without
 * ratios, and reads the statistics object at the end (from a small service
 * of its own) to show that flushes arrived and counted what was served.
 *
 * Options (environment): BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONNECTIONS (16), BENCH_THREADS (2),
 * BENCH_ONLY (e.g. "b,d", or "b,d,j,k" for statistics off and on, or "hot" for the hot-key bench alone),
 * BENCH_ORIGIN ("workerd", or "node"), and hot-key.ts's own (HOT_*).
 *
 * A full run ends with the hot-key bench (hot-key.ts): one key through 16
 * isolates, far below, at and far over its limit, against the object as
 * shipped and one slowed to 8 ms per check.
 */
import { execFile, execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import type { StatsView } from "../../src/object/stats-protocol.ts";
import {
  buildBundle,
  COMPATIBILITY_DATE,
  COMPATIBILITY_FLAGS,
  capnpString,
  embedPath,
  freePort,
  ROOT,
  WORKERD,
  waitUntilUp,
} from "../workerd.ts";
import { hotKeyBench } from "./hot-key.ts";
import { startNodeOrigin } from "./node-origin.ts";
import { BENCH_RULES } from "./rules.ts";

const execFileAsync = promisify(execFile);

const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const connections = Number(process.env.BENCH_CONNECTIONS ?? 16);
const threads = Number(process.env.BENCH_THREADS ?? 2);
/** Where allowed requests go: the constant service in the same workerd, or a Node server (the earlier bench). */
const originKind = process.env.BENCH_ORIGIN === "node" ? "node" : "workerd";
/** ORIGIN_URL with the in-workerd origin: any host, since `globalOutbound` sends every fetch to that service. */
const WORKERD_ORIGIN_URL = "http://bench-origin.internal";

type Variant = {
  id: string;
  label: string;
  worker: "proxy" | "limiter" | "overridden" | "constant" | "constantOwn" | "peer" | "statistics";
  path: string;
  /** Distinct client IPs; 0 for one fixed IP. */
  keys: number;
  /** Which variant's throughput this one is compared with. */
  baseline: string;
  /** Another variant it is compared with, round by round, besides its baseline. */
  alsoAgainst?: string;
  countsCalls: boolean;
};

const allVariants: Variant[] = [
  {
    id: "a",
    label: "bare Hono proxy, no limiter",
    worker: "proxy",
    path: "/allowed/x",
    keys: 10_000,
    baseline: "a",
    countsCalls: false,
  },
  {
    id: "b",
    label: "limiter, allowed, 10,000 keys",
    worker: "limiter",
    path: "/allowed/x",
    keys: 10_000,
    baseline: "a",
    countsCalls: true,
  },
  {
    id: "j",
    label: "limiter, allowed, 10,000 keys, statistics on",
    worker: "statistics",
    path: "/allowed/x",
    keys: 10_000,
    baseline: "b",
    countsCalls: true,
  },
  {
    id: "c",
    label: "limiter, allowed, one hot key",
    worker: "limiter",
    path: "/allowed/x",
    keys: 0,
    baseline: "a",
    countsCalls: true,
  },
  {
    id: "d",
    label: "limiter, blocked, one key over its limit",
    worker: "limiter",
    path: "/blocked/x",
    keys: 0,
    baseline: "e",
    alsoAgainst: "l",
    countsCalls: true,
  },
  {
    id: "k",
    label: "limiter, blocked, one key over its limit, statistics on",
    worker: "statistics",
    path: "/blocked/x",
    keys: 0,
    baseline: "d",
    countsCalls: true,
  },
  {
    id: "e",
    label: "constant 429 Worker",
    worker: "constant",
    path: "/blocked/x",
    keys: 0,
    baseline: "e",
    countsCalls: false,
  },
  {
    id: "l",
    label: "constant Worker sending the limiter's own 429 (its headers and body)",
    worker: "constantOwn",
    path: "/blocked/x",
    keys: 0,
    baseline: "e",
    countsCalls: false,
  },
  {
    id: "f",
    label: "peer: hono-rate-limiter + DO store, 10,000 keys",
    worker: "peer",
    path: "/allowed/x",
    keys: 10_000,
    baseline: "a",
    countsCalls: true,
  },
  {
    id: "h",
    label: "limiter, allowed, 10,000 keys, each with its own override",
    worker: "overridden",
    path: "/allowed/x",
    keys: 10_000,
    baseline: "a",
    countsCalls: true,
  },
  {
    id: "i",
    label: "limiter, blocked, one key over its override, 10,000 overrides stored",
    worker: "overridden",
    path: "/blocked/x",
    keys: 0,
    baseline: "e",
    countsCalls: true,
  },
  {
    id: "g",
    label: "limiter, a path no rule matches",
    worker: "limiter",
    path: "/free/x",
    keys: 10_000,
    baseline: "a",
    countsCalls: true,
  },
];

/**
 * BENCH_ONLY=b,d runs just those variants (for a quick look; the README's
 * tables are from a full run); "hot" among them runs the hot-key bench
 * (hot-key.ts), which a full run ends with.
 */
const only = process.env.BENCH_ONLY?.split(",");
const variants = only ? allVariants.filter((v) => only.includes(v.id)) : allVariants;
const withHotKey = only === undefined || only.includes("hot");

const rules = BENCH_RULES;

type Sample = {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  non2xx: number;
  socketErrors: number;
  calls: number | null;
  /** CPU time workerd spent per request in the sample, user and system, in µs; null off Linux. */
  cpuUs: number | null;
};

/** Statistics off and on, side by side: (b) and (j), (d) and (k). */
const statsPairs = [
  { path: "allowed", off: "b", on: "j" },
  { path: "blocked", off: "d", on: "k" },
] as const;

/** Clock ticks per second, the unit of /proc/<pid>/stat's CPU times. */
const clockTicks = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/**
 * CPU time a process has used, user and system, in µs (Linux only; null
 * elsewhere). Less at the mercy of a busy machine than requests per second:
 * another process slows the clock, not the work.
 */
function cpuUs(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // After "pid (command) ", utime and stime are the 12th and 13th fields.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / clockTicks;
  } catch {
    return null;
  }
}

/** Bundles tools/bench/workers/<file>.ts; the path is relative to the workerd config, which sits in `work`. */
function build(file: string, work: string): string {
  const bundle = buildBundle({
    main: join(ROOT, "tools/bench/workers", `${file}.ts`),
    outdir: join(work, file),
    name: `bench-${file}`,
  });
  return embedPath(join(work, "bench.capnp"), bundle);
}

/**
 * The config: every variant's service, and the origin's when it is in
 * workerd (then every variant's fetches go to it, whatever the URL says).
 */
function workerdConfig(
  bundles: Record<string, string>,
  ports: Record<string, number>,
  originUrl: string,
  diskPath: string,
): string {
  const outbound = bundles.origin === undefined ? "internet" : "origin";
  const worker = (name: string, extra: string) => `(
    modules = [ (name = "${name}.js", esModule = embed ${capnpString(bundles[name]!)}) ],
    compatibilityDate = "${COMPATIBILITY_DATE}",
    ${COMPATIBILITY_FLAGS}
    globalOutbound = "${outbound}",
    ${extra}
  )`;
  const origin = `(name = "ORIGIN_URL", text = ${capnpString(originUrl)})`;
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "internet", network = (allow = ["public", "private", "local"])),
    (name = "disk", disk = (path = ${capnpString(diskPath)}, writable = true)),${
      bundles.origin === undefined
        ? ""
        : `
    (name = "origin", worker = (
      modules = [ (name = "origin.js", esModule = embed ${capnpString(bundles.origin)}) ],
      compatibilityDate = "${COMPATIBILITY_DATE}",
    )),`
    }
    (name = "proxy", worker = ${worker("proxy", `bindings = [ ${origin} ],`)}),
    (name = "limiter", worker = ${worker(
      "limiter",
      `bindings = [ ${origin}, (name = "RULES", json = ${capnpString(JSON.stringify(rules))}),
        (name = "RATE_LIMITER", durableObjectNamespace = "RateLimiter") ],
      durableObjectNamespaces = [ (className = "RateLimiter", uniqueKey = "bench-limiter", enableSql = true) ],
      durableObjectStorage = (localDisk = "disk"),`,
    )}),
    (name = "overridden", worker = ${worker(
      "overridden",
      `bindings = [ ${origin}, (name = "RULES", json = ${capnpString(JSON.stringify(rules))}),
        (name = "ADMIN_TOKEN", text = ${capnpString(ADMIN_TOKEN)}),
        (name = "RATE_LIMITER", durableObjectNamespace = "RateLimiter"),
        (name = "OVERRIDES", durableObjectNamespace = "OverrideRegistry") ],
      durableObjectNamespaces = [
        (className = "RateLimiter", uniqueKey = "bench-overridden", enableSql = true),
        (className = "OverrideRegistry", uniqueKey = "bench-registry", enableSql = true) ],
      durableObjectStorage = (localDisk = "disk"),`,
    )}),
    (name = "statistics", worker = ${worker(
      "statistics",
      `bindings = [ ${origin}, (name = "RULES", json = ${capnpString(JSON.stringify(rules))}),
        (name = "RATE_LIMITER", durableObjectNamespace = "RateLimiter"),
        (name = "STATS", durableObjectNamespace = "StatsObject") ],
      durableObjectNamespaces = [
        (className = "RateLimiter", uniqueKey = "bench-statistics", enableSql = true),
        (className = "StatsObject", uniqueKey = "bench-stats", enableSql = true) ],
      durableObjectStorage = (localDisk = "disk"),`,
    )}),
    (name = "statsReader", worker = ${worker(
      "statsReader",
      `bindings = [ (name = "STATS", durableObjectNamespace = (className = "StatsObject", serviceName = "statistics")) ],`,
    )}),
    (name = "constant", worker = ${worker("constant", "")}),
    (name = "constantOwn", worker = ${worker("constantOwn", "")}),
    (name = "peer", worker = ${worker(
      "peer",
      `bindings = [ ${origin}, (name = "CACHE", durableObjectNamespace = "DurableObjectRateLimiter") ],
      durableObjectNamespaces = [ (className = "DurableObjectRateLimiter", uniqueKey = "bench-peer") ],
      durableObjectStorage = (localDisk = "disk"),`,
    )}),
  ],
  sockets = [
${Object.entries(ports)
  .map(([name, port]) => `    (name = "${name}", address = "127.0.0.1:${port}", http = (), service = "${name}")`)
  .join(",\n")}
  ],
);
`;
}

/** The IP of key `i`, as bench/random-ip.lua spells it. */
const keyIp = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;

/** One request from each of `keys` clients, `connections` at a time. */
async function touchEveryKey(url: string, keys: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < keys; i = next++) {
      const res = await fetch(url, { headers: { "cf-connecting-ip": keyIp(i) } });
      await res.arrayBuffer();
    }
  };
  await Promise.all(Array.from({ length: connections }, worker));
}

const ADMIN_TOKEN = "bench-admin-token";
/** The one client of the single-key variants, as random-ip.lua spells it. */
const FIXED_IP = "10.255.0.1";

/**
 * (h), (i): 10,000 overrides, one per key of (h) (a limit far above its
 * traffic), and one for the single client of (i) (a limit of 2, which it is
 * then put over); returns once every client's object has its override.
 */
async function storeOverrides(port: number): Promise<void> {
  const started = Date.now();
  const admin = (path: string, init: RequestInit = {}) =>
    fetch(`http://127.0.0.1:${port}/__ratelimit/overrides${path}`, {
      ...init,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    });
  const items = Array.from({ length: 10_000 }, (_, i) => ({ rule: "allowed", key: keyIp(i), limit: 999_999_999 }));
  items.push({ rule: "blocked", key: FIXED_IP, limit: 2 });
  const imported = await admin("/import", { method: "POST", body: JSON.stringify(items) });
  if (!imported.ok) throw new Error(`importing overrides: ${imported.status} ${await imported.text()}`);
  for (;;) {
    const { pending, total } = (await (await admin("?limit=1")).json()) as { pending: number; total: number };
    if (pending === 0 && total === items.length) break;
    await sleep(200);
  }
  for (let i = 0; i < 3; i++) {
    await fetch(`http://127.0.0.1:${port}/blocked/x`, { headers: { "cf-connecting-ip": FIXED_IP } });
  }
  console.log(`stored ${items.length} overrides for (h) and (i) in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

/** The rule a variant's path matches. */
const ruleOf = (v: Variant): "allowed" | "blocked" => (v.path.startsWith("/allowed/") ? "allowed" : "blocked");

/** Requests the statistics service (j, k) answered, per rule: what its statistics should have counted. */
type Served = Record<"allowed" | "blocked", number>;

/** What the statistics object of (j), (k) received, against what was served. */
type StatsCheck = {
  /** Flushes the object received while the bench ran (warming and rounds), by the isolate's own clock. */
  flushesDuringRun: number;
  /** All it received: those, and the one triggered after them to send the last counts. */
  flushes: number;
  lostFlushes: number;
  lostDecisions: number;
  rules: { rule: string; served: number; counted: number; outcomes: Record<string, number> }[];
  ok: boolean;
};

/** src/isolate/stats.ts, DEFAULT_FLUSH_EVERY_MS: an isolate flushes on a request once its last flush is this old. */
const FLUSH_EVERY_MS = 10_000;

async function readStats(readerPort: number): Promise<StatsView> {
  const res = await fetch(`http://127.0.0.1:${readerPort}/`);
  if (!res.ok) throw new Error(`reading the statistics object: ${res.status} ${await res.text()}`);
  return (await res.json()) as StatsView;
}

/**
 * (j), (k): what the statistics object received, read straight from it (not
 * through the admin API, which would force a flush first). An isolate only
 * flushes on a request, so the counts of the last 10 s are still in it:
 * wait until a flush is due, send one more request (its flush starts before
 * it is counted, so it stays behind), wait for that flush to land, and
 * read. Every request served should then be counted: a few more, not fewer,
 * since requests in flight when wrk stops are decided but not reported by it.
 */
async function checkStatistics(port: number, readerPort: number, served: Served): Promise<StatsCheck> {
  await sleep(FLUSH_EVERY_MS + 1_000);
  const before = (await readStats(readerPort)).health.flushes;
  const res = await fetch(`http://127.0.0.1:${port}/allowed/x`, { headers: { "cf-connecting-ip": keyIp(0) } });
  await res.arrayBuffer();
  let view = await readStats(readerPort);
  for (let i = 0; i < 50 && view.health.flushes === before; i++) {
    await sleep(100);
    view = await readStats(readerPort);
  }
  const rules = (["allowed", "blocked"] as const).map((rule) => {
    const outcomes: Record<string, number> = view.rules.find((r) => r.id === rule)?.lifetime ?? {};
    const counted = Object.values(outcomes).reduce((a, b) => a + b, 0);
    return { rule, served: served[rule], counted, outcomes };
  });
  const { flushes, lostFlushes, lostDecisions } = view.health;
  return {
    flushesDuringRun: before,
    flushes,
    lostFlushes,
    lostDecisions,
    rules,
    ok: before > 0 && flushes > before && lostFlushes === 0 && rules.every((r) => r.counted >= r.served),
  };
}

async function calls(port: number): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/__bench/calls`);
  return ((await res.json()) as { calls: number }).calls;
}

/** Runs wrk without blocking this process, which also serves the origin. */
async function wrk(url: string, variant: Variant, durationS: number): Promise<Omit<Sample, "calls" | "cpuUs">> {
  const { stdout: out } = await execFileAsync(
    "wrk",
    [
      "-t",
      String(threads),
      "-c",
      String(connections),
      "-d",
      `${durationS}s`,
      "--latency",
      "-s",
      join(ROOT, "tools/bench/random-ip.lua"),
      url,
    ],
    { encoding: "utf8", env: { ...process.env, BENCH_KEYS: String(variant.keys) } },
  );
  const line = out.split("\n").find((l) => l.startsWith("BENCH "));
  if (!line) throw new Error(`wrk printed no summary:\n${out}`);
  const s = JSON.parse(line.slice(6)) as {
    requests: number;
    durationUs: number;
    p50Us: number;
    p99Us: number;
    non2xx: number;
    socketErrors: number;
  };
  return {
    rps: s.requests / (s.durationUs / 1e6),
    p50Ms: s.p50Us / 1000,
    p99Ms: s.p99Us / 1000,
    requests: s.requests,
    non2xx: s.non2xx,
    socketErrors: s.socketErrors,
  };
}

const median = (xs: number[]): number => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

async function main(): Promise<void> {
  try {
    execFileSync("wrk", ["--version"], { stdio: "ignore" });
  } catch (error) {
    // wrk --version exits 1 but prints; only a missing binary throws ENOENT.
    if ((error as NodeJS.ErrnoException).code === "ENOENT") {
      console.error("wrk is not installed: apt-get install wrk");
      process.exit(2);
    }
  }
  if (variants.length === 0) {
    // BENCH_ONLY=hot: the hot-key bench alone.
    const hotKey = await hotKeyBench();
    console.log(`\n${hotKey}\n`);
    const command = `BENCH_ONLY=${only!.join(",")} npm run bench`;
    writeFileSync(
      join(ROOT, "tools/bench/results.json"),
      `${JSON.stringify({ date: new Date().toISOString(), command, hotKey }, null, 2)}\n`,
    );
    writeFileSync(join(ROOT, "tools/bench/results.md"), `${hotKey}\n`);
    console.log("wrote tools/bench/results.json and tools/bench/results.md");
    return;
  }
  const work = mkdtempSync(join(tmpdir(), "bench-"));
  mkdirSync(join(work, "disk"));
  console.log("building bundles with wrangler …");
  const bundles: Record<string, string> = {};
  for (const worker of ["proxy", "limiter", "constant", "peer"] as const) {
    bundles[worker] = build(worker, work);
  }
  bundles.constantOwn = build("constant-own-429", work);
  // (h), (i): the same Worker as (b)–(d), in its own namespace, with overrides stored.
  bundles.overridden = bundles.limiter!;
  // (j), (k): the same Worker as (b)–(d) again, in its own namespace, with STATS bound.
  bundles.statistics = bundles.limiter!;
  bundles.statsReader = build("stats-reader", work);
  if (originKind === "workerd") bundles.origin = build("origin", work);

  const origin = originKind === "node" ? await startNodeOrigin("bench-origin") : null;
  const ports: Record<string, number> = {};
  for (const worker of Object.keys(bundles)) ports[worker] = await freePort();
  const configPath = join(work, "bench.capnp");
  const originUrl = origin === null ? WORKERD_ORIGIN_URL : origin.url;
  writeFileSync(configPath, workerdConfig(bundles, ports, originUrl, join(work, "disk")));
  // The Worker's own logs (a JSON line per blocked decision) would flood the terminal; errors still show.
  const workerd = spawn(WORKERD, ["serve", "--experimental", configPath], {
    stdio: ["ignore", process.env.BENCH_VERBOSE ? "inherit" : "ignore", "inherit"],
  });
  const samples: Record<string, Sample[]> = Object.fromEntries(variants.map((v) => [v.id, []]));
  const served: Served = { allowed: 0, blocked: 0 };
  let statsCheck: StatsCheck | null = null;
  try {
    for (const port of Object.values(ports)) await waitUntilUp(`http://127.0.0.1:${port}/`);
    if (process.env.BENCH_PAUSE) {
      console.log(ports, work);
      await sleep(Number(process.env.BENCH_PAUSE) * 1000);
    }
    // (d), (k): put the one blocked client over its limit before measuring.
    for (const worker of ["limiter", "statistics"]) {
      await fetch(`http://127.0.0.1:${ports[worker]}/blocked/x`, { headers: { "cf-connecting-ip": FIXED_IP } });
    }
    served.blocked++;

    if (variants.some((v) => v.worker === "overridden")) await storeOverrides(ports.overridden!);

    // Every one of the 10,000 keys' objects exists before measuring, for the limiter and the peer alike:
    // the table is about steady state, not about creating objects.
    for (const v of variants.filter((x) => x.keys > 0 && x.countsCalls && x.path.startsWith("/allowed/"))) {
      const started = Date.now();
      await touchEveryKey(`http://127.0.0.1:${ports[v.worker]}${v.path}`, v.keys);
      if (v.worker === "statistics") served.allowed += v.keys;
      console.log(`warmed ${v.keys} keys for (${v.id}) in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    }
    console.log(`${rounds} rounds × ${variants.length} variants × ${seconds}s, wrk -t${threads} -c${connections}`);
    for (let round = 1; round <= rounds; round++) {
      for (const v of variants) {
        const port = ports[v.worker]!;
        const url = `http://127.0.0.1:${port}${v.path}`;
        const warmUp = await wrk(url, v, 1);
        const before = v.countsCalls ? await calls(port) : 0;
        const cpuBefore = cpuUs(workerd.pid);
        const sample = await wrk(url, v, seconds);
        const cpuAfter = cpuUs(workerd.pid);
        const after = v.countsCalls ? await calls(port) : 0;
        if (v.worker === "statistics") served[ruleOf(v)] += warmUp.requests + sample.requests;
        samples[v.id]!.push({
          ...sample,
          calls: v.countsCalls ? (after - before) / sample.requests : null,
          cpuUs: cpuBefore === null || cpuAfter === null ? null : (cpuAfter - cpuBefore) / sample.requests,
        });
        console.log(`  round ${round} (${v.id}) ${v.label}: ${sample.rps.toFixed(0)} req/s, non-2xx ${sample.non2xx}`);
      }
    }
    if (variants.some((v) => v.worker === "statistics")) {
      statsCheck = await checkStatistics(ports.statistics!, ports.statsReader!, served);
    }
  } finally {
    workerd.kill("SIGTERM");
    origin?.close();
  }

  const summary = variants.map((v) => {
    const s = samples[v.id]!;
    const rps = median(s.map((x) => x.rps));
    return {
      id: v.id,
      label: v.label,
      rps,
      p50Ms: median(s.map((x) => x.p50Ms)),
      p99Ms: median(s.map((x) => x.p99Ms)),
      doCallsPerRequest: v.countsCalls ? median(s.map((x) => x.calls ?? 0)) : null,
      workerdCpuUsPerRequest: s.every((x) => x.cpuUs !== null) ? median(s.map((x) => x.cpuUs!)) : null,
      non2xxShare: median(s.map((x) => x.non2xx / x.requests)),
      socketErrors: s.reduce((n, x) => n + x.socketErrors, 0),
      baseline: v.baseline,
      samplesRps: s.map((x) => Math.round(x.rps)),
      samplesCpuUs: s.map((x) => (x.cpuUs === null ? null : Math.round(x.cpuUs))),
    };
  });
  const byId = Object.fromEntries(summary.map((s) => [s.id, s]));
  const rows = summary.map((s) => ({ ...s, ratio: byId[s.baseline] ? s.rps / byId[s.baseline]!.rps : Number.NaN }));

  const table = [
    "| variant | req/s (median) | p50 ms | p99 ms | ratio | workerd CPU µs/req | DO calls/req | non-2xx |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map(
      (r) =>
        `| (${r.id}) ${r.label} | ${r.rps.toFixed(0)} | ${r.p50Ms.toFixed(2)} | ${r.p99Ms.toFixed(2)} | ${r.ratio.toFixed(2)}× (${r.baseline}) | ${r.workerdCpuUsPerRequest === null ? "–" : r.workerdCpuUsPerRequest.toFixed(0)} | ${r.doCallsPerRequest === null ? "–" : r.doCallsPerRequest.toFixed(4)} | ${(r.non2xxShare * 100).toFixed(1)}% |`,
    ),
  ].join("\n");
  console.log(`\n${table}\n`);
  const sideBySide = baselineComparison(samples);
  const sideTable = sideBySide.length > 0 ? `${baselineComparisonTable(sideBySide)}\n` : "";
  if (sideTable) console.log(sideTable);
  const statistics = statsComparison(samples);
  const statsTable = statistics.length > 0 ? `${statsComparisonTable(statistics)}\n` : "";
  if (statsTable) console.log(`${statsTable}`);
  if (statsCheck) {
    console.log(statsCheckLine(statsCheck));
    if (!statsCheck.ok) {
      console.error(
        "WARNING: the statistics object did not count what (j), (k) served; their numbers are not with statistics on",
      );
      process.exitCode = 1;
    }
  }
  // Last, on a quiet machine: the workerd of the variants has stopped.
  const hotKey = withHotKey ? await hotKeyBench() : null;
  if (hotKey !== null) console.log(`\n${hotKey}\n`);
  const results = {
    date: new Date().toISOString(),
    command: only ? `BENCH_ONLY=${only.join(",")} npm run bench` : "npm run bench",
    settings: {
      rounds,
      seconds,
      connections,
      threads,
      cpus: (await import("node:os")).cpus().length,
      origin: originKind === "workerd" ? "constant service in the same workerd" : "Node server on the same machine",
    },
    rows,
    baselineComparison: sideBySide,
    ...(statistics.length > 0 ? { statistics: { comparison: statistics, check: statsCheck } } : {}),
    ...(hotKey !== null ? { hotKey } : {}),
  };
  writeFileSync(join(ROOT, "tools/bench/results.json"), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(
    join(ROOT, "tools/bench/results.md"),
    `${table}\n${sideTable ? `\n${sideTable}` : ""}${statsTable ? `\n${statsTable}` : ""}${hotKey ? `\n${hotKey}\n` : ""}`,
  );
  console.log("wrote tools/bench/results.json and tools/bench/results.md");
  if (!process.env.BENCH_KEEP) rmSync(work, { recursive: true, force: true });
}

type Spread = { median: number; min: number; max: number };

const spread = (xs: number[]): Spread => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs) });

/**
 * A variant beside its baseline, round by round: each round ran the two a
 * few seconds apart, so a round's ratio is less at the mercy of the machine's
 * speed, which drifts from round to round, than the ratio of the medians.
 */
type BaselineComparison = {
  id: string;
  baseline: string;
  /** This variant's req/s over its baseline's, in each round. */
  rpsRatio: Spread;
  /** workerd CPU µs per request: this variant's, its baseline's, and the difference in each round. */
  cpuUs: { variant: Spread; baseline: Spread; overBaseline: Spread } | null;
};

/** Every variant that ran with its baseline (and with the other variant it is compared with), against it. */
function baselineComparison(samples: Record<string, Sample[]>): BaselineComparison[] {
  const pairs = variants.flatMap((v) => [
    { id: v.id, baseline: v.baseline },
    ...(v.alsoAgainst === undefined ? [] : [{ id: v.id, baseline: v.alsoAgainst }]),
  ]);
  return pairs.flatMap((v) => {
    const a = samples[v.id];
    const b = samples[v.baseline];
    if (v.baseline === v.id || !a?.length || !b?.length) return [];
    const rounds = Array.from({ length: Math.min(a.length, b.length) }, (_, i) => [a[i]!, b[i]!] as const);
    const cpu = rounds.every(([x, y]) => x.cpuUs !== null && y.cpuUs !== null);
    return [
      {
        id: v.id,
        baseline: v.baseline,
        rpsRatio: spread(rounds.map(([x, y]) => x.rps / y.rps)),
        cpuUs: cpu
          ? {
              variant: spread(a.map((x) => x.cpuUs!)),
              baseline: spread(b.map((y) => y.cpuUs!)),
              overBaseline: spread(rounds.map(([x, y]) => x.cpuUs! - y.cpuUs!)),
            }
          : null,
      },
    ];
  });
}

function baselineComparisonTable(rows: BaselineComparison[]): string {
  const range = (s: Spread, digits = 0) => `${s.min.toFixed(digits)}–${s.max.toFixed(digits)}`;
  const signed = (n: number) => `${n >= 0 ? "+" : "−"}${Math.abs(n).toFixed(0)}`;
  return [
    "| against its baseline, round by round | req/s ratio (min–max) | workerd CPU µs/req (min–max) | baseline's (min–max) | difference (min–max) |",
    "| --- | ---: | ---: | ---: | ---: |",
    ...rows.map((r) => {
      const { rpsRatio: q, cpuUs: c } = r;
      const cpu = c
        ? `${c.variant.median.toFixed(0)} (${range(c.variant)}) | ${c.baseline.median.toFixed(0)} (${range(c.baseline)}) | ${signed(c.overBaseline.median)} (${signed(c.overBaseline.min)} to ${signed(c.overBaseline.max)})`
        : "– | – | –";
      return `| (${r.id}) against (${r.baseline}) | ${q.median.toFixed(2)}× (${range(q, 2)}) | ${cpu} |`;
    }),
  ].join("\n");
}

/** One path with statistics off and on: medians, and the on/off ratio of each round's pair (same round, back to back). */
type StatsComparison = {
  path: string;
  off: string;
  on: string;
  rps: { off: Spread; on: Spread; ratio: number; roundRatios: Spread };
  cpuUs: { off: Spread; on: Spread; ratio: number; roundRatios: Spread } | null;
};

/** (b) against (j), (d) against (k), for the pairs that both ran. */
function statsComparison(samples: Record<string, Sample[]>): StatsComparison[] {
  return statsPairs.flatMap(({ path, off, on }) => {
    const a = samples[off];
    const b = samples[on];
    if (!a?.length || !b?.length) return [];
    const n = Math.min(a.length, b.length);
    const pairs = (pick: (s: Sample) => number) => {
      const offs = a.map(pick);
      const ons = b.map(pick);
      const o = spread(offs);
      const w = spread(ons);
      return {
        off: o,
        on: w,
        ratio: w.median / o.median,
        roundRatios: spread(Array.from({ length: n }, (_, i) => ons[i]! / offs[i]!)),
      };
    };
    const cpu = [...a, ...b].every((s) => s.cpuUs !== null);
    return [{ path, off, on, rps: pairs((s) => s.rps), cpuUs: cpu ? pairs((s) => s.cpuUs!) : null }];
  });
}

function statsComparisonTable(rows: StatsComparison[]): string {
  const range = (s: Spread, digits = 0) => `${s.min.toFixed(digits)}–${s.max.toFixed(digits)}`;
  return [
    "| statistics off → on | req/s off (min–max) | req/s on (min–max) | on/off | on/off per round (min–max) | CPU µs/req off (min–max) | CPU µs/req on (min–max) | on/off | on/off per round (min–max) |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map((r) => {
      const { rps, cpuUs } = r;
      const cpu = cpuUs
        ? `${cpuUs.off.median.toFixed(0)} (${range(cpuUs.off)}) | ${cpuUs.on.median.toFixed(0)} (${range(cpuUs.on)}) | ${cpuUs.ratio.toFixed(2)}× | ${cpuUs.roundRatios.median.toFixed(2)}× (${range(cpuUs.roundRatios, 2)})`
        : "– | – | – | –";
      return `| ${r.path}: (${r.off}) → (${r.on}) | ${rps.off.median.toFixed(0)} (${range(rps.off)}) | ${rps.on.median.toFixed(0)} (${range(rps.on)}) | ${rps.ratio.toFixed(2)}× | ${rps.roundRatios.median.toFixed(2)}× (${range(rps.roundRatios, 2)}) | ${cpu} |`;
    }),
  ].join("\n");
}

function statsCheckLine(check: StatsCheck): string {
  const rules = check.rules
    .map(
      (r) => `${r.rule}: ${r.counted} decisions counted, ${r.served} requests served (${JSON.stringify(r.outcomes)})`,
    )
    .join("; ");
  return `statistics object of (j), (k): ${check.flushesDuringRun} flushes received during the run, ${check.flushes} with the last, ${check.lostFlushes} lost (${check.lostDecisions} decisions); ${rules}`;
}

await main();
