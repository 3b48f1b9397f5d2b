/**
 * @module
 * `npm run bench:hot-key`: one client key through 16 edge isolates, on the
 * multi-isolate shape of test/edge/ (one standalone `workerd serve`, 16 edge
 * services each in its own isolate on its own port, one `objects` service
 * defining the RateLimiter namespace they all bind, on-disk storage).
 *
 * 1. One object's capacity in this workerd: `check` calls per second, each
 *    admitting and writing SQLite (the answer waits for the write), from a
 *    Worker that calls the object directly: one call at a time, and 16 and
 *    64 at once.
 * 2. One key through the 16 isolates, driven by wrk (one thread per
 *    isolate): far below its limit, as fast as answers come; then, paced at
 *    half that rate (an offered rate: requests pile up in the server when it
 *    slows), at its limit (limit = rate × period) and far over it (a tenth).
 *    Strict rules with precision, and every arrival recorded by the edges,
 *    so each window's admissions are compared with what one object deciding
 *    every request at its arrival, in arrival order, admits (the product's
 *    own sliding window, replayed). DO calls per request are counted in the
 *    objects service; latency is wrk's.
 * 3. The same against an object that takes 8 ms per check (HOT_SERVICE_MS):
 *    a capacity of about 120 calls a second, which this machine's edges can
 *    outrun twentyfold, as a real edge's many machines can outrun one object.
 *    The shipped object here decides faster than these two cores can send.
 *
 * `hotKeyBench()` returns the markdown tables, for `npm run bench` to print
 * beside its own. Options (environment): HOT_SECONDS (far-below run, 10),
 * HOT_PERIOD (seconds, 10), HOT_WINDOWS (windows per paced run, 2),
 * HOT_CONNECTIONS (64), HOT_PACED_CONNECTIONS (1024), HOT_SHARE (0.5),
 * HOT_TIMEOUT_MS (LIMITER_TIMEOUT_MS, 1000), HOT_SERVICE_MS (8), HOT_ROOT
 * (another checkout to build the Workers from, to compare), HOT_KEEP.
 */
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { RateRuleInput, RuleInput } from "../../src/core/rules.ts";
import { check, emptyState, type WindowLimit, type WindowState } from "../../src/core/sliding-window.ts";
import { buildBundle, freePorts, ROOT, startWorkerd, type Workerd, writeEdgeConfig } from "../workerd.ts";
import { startNodeOrigin } from "./node-origin.ts";

const execFileAsync = promisify(execFile);

const ISOLATES = 16;
const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);

export type HotKeyOptions = {
  /** Seconds of the far-below run. */
  seconds?: number;
  /** The period of the rules at and over the limit, in whole seconds. */
  periodS?: number;
  /** Windows (periods) per run at and over the limit. */
  windows?: number;
  /** wrk connections, spread over the 16 isolates. */
  connections?: number;
  /** LIMITER_TIMEOUT_MS of the edges. */
  timeoutMs?: number;
  /** What the slowed object takes per check, in ms: its capacity is 1000 / serviceMs calls a second. */
  serviceMs?: number;
  /** Connections of the paced runs (at and over the limit): as many requests can pile up in the server. */
  pacedConnections?: number;
  /** The paced rate, as a share of the far-below rate. */
  share?: number;
  /** Where the Workers' sources are built from: another checkout, to compare (default this one). */
  root?: string;
  /** Progress lines; default console.log. */
  log?: (line: string) => void;
};

/** One object's capacity: check calls per second at a given concurrency. */
type Capacity = { concurrency: number; callsPerS: number; p50Ms: number; p99Ms: number; errors: number };

/** wrk's summary of a run (tools/bench/hot-key/ports.lua). */
type WrkSummary = {
  requests: number;
  durationUs: number;
  p50Us: number;
  p99Us: number;
  maxUs: number;
  ok: number;
  refused: number;
  failed: number;
  other: number;
  socketErrors: number;
  timeouts: number;
};

/** What the edges recorded of one request. */
type Arrival = { atMs: number; status: number; durationMs: number };

type WindowFigures = { index: number; requests: number; admitted: number; exact: number };

type Scenario = {
  name: string;
  rule: string;
  /** The most checks waiting at the object at once (the slowed object only). */
  maxQueued: number | null;
  limit: number | null;
  rps: number;
  wrk: WrkSummary;
  calls: number;
  windows: WindowFigures[];
  /** Edge-measured duration, p99, in the first and the last third of the run: a growing queue shows here. */
  p99FirstMs: number;
  p99LastMs: number;
  maxInFlight: number;
  unavailable: number;
};

const quantile = (sorted: number[], q: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;

/** The workerd of one phase: 16 edge isolates and a driver isolate running the bench's edge bundle, and the objects service. */
type Phase = {
  workerd: Workerd;
  edgeUrls: string[];
  driverUrl: string;
  objectsUrl: string;
  stop: () => Promise<void>;
};

async function startPhase(
  work: string,
  name: string,
  bundles: { edge: string; objects: string },
  originUrl: string,
  rules: RuleInput[],
  timeoutMs: number,
): Promise<Phase> {
  const dir = join(work, name);
  const [objectsPort, driverPort, ...ports] = await freePorts(ISOLATES + 2);
  const edges = [...ports.map((port, i) => ({ name: `edge-${i}`, port })), { name: "driver", port: driverPort! }];
  const configPath = join(work, `${name}.capnp`);
  writeEdgeConfig(configPath, {
    edgeBundle: bundles.edge,
    edges,
    bindings: [
      { name: "ORIGIN_URL", text: originUrl },
      { name: "RULES", json: rules },
      { name: "LIMITER_TIMEOUT_MS", text: String(timeoutMs) },
    ],
    objects: {
      name: "objects",
      bundle: bundles.objects,
      className: "RateLimiter",
      uniqueKey: `hot-key-${name}`,
      port: objectsPort!,
    },
    namespaceBinding: "RATE_LIMITER",
    storageDir: join(dir, "storage"),
  });
  const edgeUrls = ports.map((port) => `http://127.0.0.1:${port}`);
  const driverUrl = `http://127.0.0.1:${driverPort}`;
  const objectsUrl = `http://127.0.0.1:${objectsPort}`;
  const workerd = await startWorkerd({
    configPath,
    logFile: join(work, `${name}.log`),
    readyUrls: [...edgeUrls, driverUrl].map((url) => `${url}/__hot/nothing`).concat(`${objectsUrl}/checks`),
  });
  return { workerd, edgeUrls, driverUrl, objectsUrl, stop: () => workerd.close() };
}

async function measureCapacity(phase: Phase, concurrency: number, ms: number, rule: string): Promise<Capacity> {
  const query = new URLSearchParams({
    concurrency: String(concurrency),
    ms: String(ms),
    key: `${rule}-${concurrency}`,
    rule,
  });
  const res = await fetch(`${phase.driverUrl}/__hot/capacity?${query}`);
  if (!res.ok) throw new Error(`capacity: ${res.status} ${await res.text()}`);
  const r = (await res.json()) as { calls: number; errors: number; elapsedMs: number; p50Ms: number; p99Ms: number };
  return { concurrency, callsPerS: (r.calls * 1000) / r.elapsedMs, p50Ms: r.p50Ms, p99Ms: r.p99Ms, errors: r.errors };
}

/** The most checks that waited at the slowed object at once, per scenario. */
async function readQueued(phase: Phase, scenarios: Scenario[]): Promise<void> {
  const queued = (await (await fetch(`${phase.objectsUrl}/queued`)).json()) as Record<string, number>;
  for (const s of scenarios) s.maxQueued = queued[s.rule] ?? 0;
}

async function checksOf(phase: Phase, rule: string): Promise<number> {
  const all = (await (await fetch(`${phase.objectsUrl}/checks`)).json()) as Record<string, number>;
  return all[rule] ?? 0;
}

/** Takes every edge's record of requests to `path` (and starts a new record of everything). */
async function takeArrivals(phase: Phase, path: string): Promise<{ arrivals: Arrival[]; maxInFlight: number }> {
  const arrivals: Arrival[] = [];
  let maxInFlight = 0;
  for (const url of phase.edgeUrls) {
    const { records, maxInFlight: most } = (await (await fetch(`${url}/__hot/log`)).json()) as {
      records: Record<string, number[]>;
      maxInFlight: number;
    };
    maxInFlight = Math.max(maxInFlight, most);
    const record = records[path] ?? [];
    for (let i = 0; i < record.length; i += 3) {
      arrivals.push({ atMs: record[i]!, status: record[i + 1]!, durationMs: record[i + 2]! });
    }
  }
  arrivals.sort((a, b) => a.atMs - b.atMs);
  return { arrivals, maxInFlight };
}

async function wrk(
  phase: Phase,
  path: string,
  ip: string,
  seconds: number,
  connections: number,
  rate = 0,
): Promise<WrkSummary> {
  const { stdout } = await execFileAsync(
    "wrk",
    [
      "-t",
      String(ISOLATES),
      "-c",
      String(connections),
      "-d",
      `${seconds}s`,
      "--timeout",
      "10s",
      "--latency",
      "-s",
      join(ROOT, "tools/bench/hot-key/ports.lua"),
      `${phase.edgeUrls[0]}${path}`,
    ],
    {
      encoding: "utf8",
      env: {
        ...process.env,
        HOT_PORTS: phase.edgeUrls.map((u) => new URL(u).port).join(","),
        HOT_IP: ip,
        HOT_RATE: String(rate),
      },
    },
  );
  const line = stdout.split("\n").find((l) => l.startsWith("HOTKEY "));
  if (!line) throw new Error(`wrk printed no summary:\n${stdout}`);
  return JSON.parse(line.slice(7)) as WrkSummary;
}

/**
 * Each window's requests and admissions, against what one object deciding
 * every request at its arrival, in arrival order, admits: the product's own
 * sliding window, replayed. Windows are whole periods from `startMs`.
 */
function perWindow(arrivals: Arrival[], rule: WindowLimit, startMs: number, windows: number): WindowFigures[] {
  const figures = Array.from({ length: windows }, (_, index) => ({ index, requests: 0, admitted: 0, exact: 0 }));
  let state: WindowState = emptyState(startMs, rule);
  for (const a of arrivals) {
    // workerd's clock reads the time its current event began, a few ms behind ours at the start: those
    // first arrivals belong to the first window, not before it.
    const index = Math.max(0, Math.floor((a.atMs - startMs) / rule.periodMs));
    const decided = check(state, a.atMs, rule);
    state = decided.state;
    const w = figures[index];
    if (!w) continue;
    w.requests++;
    if (a.status === 200) w.admitted++;
    if (decided.decision.allowed) w.exact++;
  }
  return figures;
}

/** Per half second of a run: requests, their statuses, and the edge-measured duration p50 and max (HOT_DEBUG). */
function timeline(arrivals: Arrival[], startMs: number): string {
  const slots = new Map<number, Arrival[]>();
  for (const a of arrivals) {
    const slot = Math.floor((a.atMs - startMs) / 500);
    const list = slots.get(slot) ?? [];
    list.push(a);
    slots.set(slot, list);
  }
  return [...slots.entries()]
    .sort(([a], [b]) => a - b)
    .map(([slot, list]) => {
      const durations = list.map((a) => a.durationMs).sort((a, b) => a - b);
      const statuses: Record<number, number> = {};
      for (const a of list) statuses[a.status] = (statuses[a.status] ?? 0) + 1;
      return `    ${(slot / 2).toFixed(1)} s: ${list.length} requests ${JSON.stringify(statuses)}, p50 ${quantile(durations, 0.5)} ms, max ${durations.at(-1)} ms`;
    })
    .join("\n");
}

/** The edge-measured duration p99 of the first and the last third of the arrivals. */
function thirds(arrivals: Arrival[]): { first: number; last: number } {
  const third = Math.floor(arrivals.length / 3);
  const p99 = (xs: Arrival[]) =>
    quantile(
      xs.map((a) => a.durationMs).sort((a, b) => a - b),
      0.99,
    );
  return { first: p99(arrivals.slice(0, third)), last: p99(arrivals.slice(arrivals.length - third)) };
}

type RunPlan = {
  name: string;
  path: string;
  ip: string;
  rule: string;
  window: WindowLimit | null;
  seconds: number;
  connections: number;
  /** Requests a second offered, paced; 0: as fast as answers come. */
  rate: number;
};

async function runScenario(phase: Phase, plan: RunPlan, log: (line: string) => void): Promise<Scenario[]> {
  // HOT_ONLY=at,serial-8-over: only those scenarios (by rule id), for a quick look.
  const only = process.env.HOT_ONLY?.split(",");
  if (only && !only.includes(plan.rule)) return [];
  return [await runOne(phase, plan, log)];
}

async function runOne(phase: Phase, plan: RunPlan, log: (line: string) => void): Promise<Scenario> {
  // A short warm-up on another key, so every isolate has compiled its code before the clock starts.
  await wrk(phase, "/warm/x", "10.49.0.1", 1, plan.connections);
  await takeArrivals(phase, plan.path);
  const periodMs = plan.window?.periodMs ?? 1000;
  // Start on a window's edge, so that every window of the run is whole.
  const wait = periodMs - (Date.now() % periodMs);
  await sleep(wait);
  const startMs = Date.now();
  const callsBefore = await checksOf(phase, plan.rule);
  const mark = phase.workerd.mark();
  const summary = await wrk(phase, plan.path, plan.ip, plan.seconds, plan.connections, plan.rate);
  await sleep(200); // the last answers land
  const calls = (await checksOf(phase, plan.rule)) - callsBefore;
  if (process.env.HOT_DEBUG) {
    const batches = (await (await fetch(`${phase.objectsUrl}/batches`)).json()) as Record<string, unknown>;
    log(`    batches: ${JSON.stringify(batches[plan.rule] ?? null)}`);
  }
  const { arrivals, maxInFlight } = await takeArrivals(phase, plan.path);
  if (process.env.HOT_DEBUG) log(timeline(arrivals, startMs));
  const output = phase.workerd.outputSince(mark);
  const unavailable = output.match(/limiter_unavailable/g)?.length ?? 0;
  const windowRule = plan.window ?? { limit: Number.MAX_SAFE_INTEGER, periodMs, precision: 1, strict: true };
  const windows = perWindow(arrivals, windowRule, startMs, Math.floor((plan.seconds * 1000) / periodMs));
  const { first, last } = thirds(arrivals);
  const rps = summary.requests / (summary.durationUs / 1e6);
  log(
    `  ${plan.name}: ${rps.toFixed(0)} req/s, ${summary.ok} admitted, ${summary.refused} refused, ${summary.failed} 5xx, ${(calls / summary.requests).toFixed(4)} calls/request`,
  );
  return {
    name: plan.name,
    rule: plan.rule,
    maxQueued: null,
    limit: plan.window?.limit ?? null,
    rps,
    wrk: summary,
    calls,
    windows,
    p99FirstMs: first,
    p99LastMs: last,
    maxInFlight,
    unavailable,
  };
}

const fmt = (n: number, digits = 0) => n.toFixed(digits);
const pct = (a: number, b: number) => (b > 0 ? `${((100 * a) / b).toFixed(1)}%` : "–");

function partTables({ title, capacity, scenarios }: Part): string {
  const best = Math.max(...capacity.map((c) => c.callsPerS));
  const capacityTable = [
    `| ${title}: \`check\` calls with a durable write | calls/s | p50 ms | p99 ms | errors |`,
    "| --- | ---: | ---: | ---: | ---: |",
    ...capacity.map(
      (c) =>
        `| ${c.concurrency === 1 ? "one at a time" : `${c.concurrency} at a time`} | ${fmt(c.callsPerS)} | ${fmt(c.p50Ms, 0)} | ${fmt(c.p99Ms, 0)} | ${c.errors} |`,
    ),
  ].join("\n");
  const scenarioTable = [
    `| one key, 16 isolates, ${title} | req/s | × object capacity | requests | admitted | exact (one object) | admitted ÷ exact | most in a window ÷ limit | DO calls/request | DO calls/s | p50 ms | p99 ms | max ms | 5xx | limiter_unavailable | edge p99 ms, first → last third | most waiting at the object |`,
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...scenarios.map((s) => {
      const admitted = s.windows.reduce((n, w) => n + w.admitted, 0);
      const exact = s.windows.reduce((n, w) => n + w.exact, 0);
      const requests = s.windows.reduce((n, w) => n + w.requests, 0);
      const most = s.limit === null ? "–" : fmt(Math.max(...s.windows.map((w) => w.admitted)) / s.limit, 3);
      return `| ${s.name} | ${fmt(s.rps)} | ${fmt(s.rps / best, 1)}× | ${requests} | ${admitted} | ${exact} | ${pct(admitted, exact)} | ${most} | ${fmt(s.calls / s.wrk.requests, 4)} | ${fmt(s.calls / (s.wrk.durationUs / 1e6))} | ${fmt(s.wrk.p50Us / 1000, 1)} | ${fmt(s.wrk.p99Us / 1000, 1)} | ${fmt(s.wrk.maxUs / 1000, 0)} | ${s.wrk.failed} | ${s.unavailable} | ${fmt(s.p99FirstMs)} → ${fmt(s.p99LastMs)} | ${s.maxQueued ?? "–"} |`;
    }),
  ].join("\n");
  const windowTable = [
    `| ${title}: per window | window | requests ÷ limit | admitted | exact (one object) | admitted ÷ exact |`,
    "| --- | ---: | ---: | ---: | ---: | ---: |",
    ...scenarios
      .filter((s) => s.limit !== null)
      .flatMap((s) =>
        s.windows.map(
          (w) =>
            `| ${s.name} (limit ${s.limit}) | ${w.index + 1} | ${fmt(w.requests / s.limit!, 2)} | ${w.admitted} | ${w.exact} | ${pct(w.admitted, w.exact)} |`,
        ),
      ),
  ].join("\n");
  return `${capacityTable}\n\n${scenarioTable}\n\n${windowTable}\n`;
}

/** A set of scenarios against one kind of object: the object as shipped, or one that takes `serviceMs` per check. */
type Part = { title: string; capacity: Capacity[]; scenarios: Scenario[] };

export async function hotKeyBench(options: HotKeyOptions = {}): Promise<string> {
  const seconds = options.seconds ?? env("HOT_SECONDS", 10);
  const periodS = options.periodS ?? env("HOT_PERIOD", 10);
  const windows = options.windows ?? env("HOT_WINDOWS", 2);
  const connections = options.connections ?? env("HOT_CONNECTIONS", 64);
  const pacedConnections = options.pacedConnections ?? env("HOT_PACED_CONNECTIONS", 1024);
  const share = options.share ?? env("HOT_SHARE", 0.5);
  const timeoutMs = options.timeoutMs ?? env("HOT_TIMEOUT_MS", 1000);
  const serviceMs = options.serviceMs ?? env("HOT_SERVICE_MS", 8);
  const root = options.root ?? process.env.HOT_ROOT ?? ROOT;
  const log = options.log ?? ((line: string) => console.log(line));
  try {
    execFileSync("wrk", ["--version"], { stdio: "ignore" });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT")
      throw new Error("wrk is not installed: apt-get install wrk");
  }
  const work = mkdtempSync(join(tmpdir(), "bench-hot-key-"));
  const origin = await startNodeOrigin("hot-key-origin");
  const phases: Phase[] = [];
  try {
    log(`hot key: building bundles with wrangler${root === ROOT ? "" : ` from ${root}`} …`);
    const bundles = {
      edge: buildBundle({
        main: join(root, "tools/bench/hot-key/workers/edge.ts"),
        outdir: join(work, "edge"),
        name: "hot-edge",
      }),
      objects: buildBundle({
        main: join(root, "tools/bench/hot-key/workers/objects.ts"),
        outdir: join(work, "objects"),
        name: "hot-objects",
      }),
    };
    const periodMs = periodS * 1000;
    const slow = `serial-${serviceMs}-`;
    const belowRule = (id: string): RuleInput => ({
      id,
      path: `/${id}/*`,
      limit: 1_000_000_000,
      period: "1h",
      key: ["ip"],
    });
    const first = await startPhase(
      work,
      "first",
      bundles,
      origin.url,
      [belowRule("below"), belowRule(`${slow}below`)],
      timeoutMs,
    );
    phases.push(first);
    log("hot key: one object's capacity …");
    const capacity: Capacity[] = [];
    for (const concurrency of [1, 16, 64]) capacity.push(await measureCapacity(first, concurrency, 3000, "capacity"));
    for (const c of capacity) log(`  ${c.concurrency} at a time: ${c.callsPerS.toFixed(0)} calls/s`);
    const slowCapacity = [await measureCapacity(first, 64, 3000, `${slow}capacity`)];
    log(
      `  an object that takes ${serviceMs} ms per check, 64 at a time: ${slowCapacity[0]!.callsPerS.toFixed(0)} calls/s`,
    );
    log(`hot key: one key through ${ISOLATES} isolates …`);
    const unpaced = (name: string, path: string, ip: string, rule: string): RunPlan => ({
      name,
      path,
      ip,
      rule,
      window: null,
      seconds,
      connections,
      rate: 0,
    });
    // Always run: its rate sets the pace of the others.
    const below = await runOne(first, unpaced("far below its limit", "/below/x", "10.40.0.1", "below"), log);
    const slowBelow = await runScenario(
      first,
      unpaced("far below its limit", `/${slow}below/x`, "10.44.0.1", `${slow}below`),
      log,
    );
    await readQueued(first, slowBelow);
    await first.stop();
    phases.pop();

    // At and over the limit the load is paced at a share of the far-below rate, so that what each window
    // sees is known: the limit (rate × period), or ten times the limit.
    const rate = Math.max(1, Math.round(share * below.rps));
    const atLimit = rate * periodS;
    const overLimit = Math.max(1, Math.round(atLimit / 10));
    const window = (limit: number): WindowLimit => ({ limit, periodMs, precision: 10, strict: true });
    const rule = (id: string, limit: number, extra: Partial<RateRuleInput> = {}): RuleInput => ({
      id,
      path: `/${id}/*`,
      limit,
      period: periodS,
      precision: 10,
      strict: true,
      key: ["ip"],
      ...extra,
    });
    const second = await startPhase(
      work,
      "second",
      bundles,
      origin.url,
      [
        rule("at", atLimit),
        rule("over", overLimit),
        rule(`${slow}at`, atLimit),
        rule(`${slow}atclosed`, atLimit, { on_error: "closed" }),
        rule(`${slow}over`, overLimit),
      ],
      timeoutMs,
    );
    phases.push(second);
    const paced = (name: string, path: string, ip: string, id: string, limit: number): RunPlan => ({
      name,
      path,
      ip,
      rule: id,
      window: window(limit),
      seconds: windows * periodS,
      connections: pacedConnections,
      rate,
    });
    const shipped: Part = { title: "the object as shipped", capacity, scenarios: [below] };
    shipped.scenarios.push(
      ...(await runScenario(second, paced("at its limit", "/at/x", "10.41.0.1", "at", atLimit), log)),
    );
    shipped.scenarios.push(
      ...(await runScenario(second, paced("far over its limit (10×)", "/over/x", "10.42.0.1", "over", overLimit), log)),
    );
    const slowed: Part = {
      title: `an object that takes ${serviceMs} ms per check`,
      capacity: slowCapacity,
      scenarios: [...slowBelow],
    };
    slowed.scenarios.push(
      ...(await runScenario(second, paced("at its limit", `/${slow}at/x`, "10.45.0.1", `${slow}at`, atLimit), log)),
    );
    slowed.scenarios.push(
      ...(await runScenario(
        second,
        paced("at its limit, on_error closed", `/${slow}atclosed/x`, "10.46.0.1", `${slow}atclosed`, atLimit),
        log,
      )),
    );
    slowed.scenarios.push(
      ...(await runScenario(
        second,
        paced("far over its limit (10×)", `/${slow}over/x`, "10.47.0.1", `${slow}over`, overLimit),
        log,
      )),
    );
    await readQueued(
      second,
      slowed.scenarios.filter((s) => s.rule !== `${slow}below`),
    );
    const setup = [
      `Hot key on ${ISOLATES} isolates${root === ROOT ? "" : ` (built from ${root})`}: one \`workerd serve\` with 16 edge isolates and one objects service (storage on disk), driven by wrk with one thread per isolate; LIMITER_TIMEOUT_MS ${timeoutMs}; on_error open unless said; ${cpus().length} cores shared by wrk, workerd and the origin.`,
      `Far below the limit: as fast as answers come, ${connections} connections. At and over the limit: paced at ${rate} req/s offered (${share} of the far-below rate), ${pacedConnections} connections; strict, precision 10, period ${periodS} s, ${windows} whole windows per run; limit ${atLimit} (rate × period) and ${overLimit} (a tenth).`,
    ].join("\n");
    return `${setup}\n\n${[shipped, slowed]
      .filter((part) => part.scenarios.length > 0)
      .map(partTables)
      .join("\n")}`;
  } finally {
    for (const phase of phases) await phase.stop();
    origin.close();
    if (!process.env.HOT_KEEP) rmSync(work, { recursive: true, force: true });
    else log(`hot key: kept ${work}`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  console.log(`\n${await hotKeyBench()}`);
}
