/**
 * @module
 * `npm run bench:origin`: the scenario of docs/adaptive.md ("The benchmark")
 * against the limiter in a standalone `workerd serve`, one variant after
 * another in front of a fresh simulated origin, and one table of figures.
 *
 * Variants (ORIGIN_VARIANTS, default "none,fixed,adaptive"):
 * - `none`: the bare proxy, no limiter;
 * - `fixed`: the limiter with one count for all clients (`key = ["host"]`), C a second;
 * - `adaptive`: the limiter with an adaptive rule per client, ten times C a
 *   second, far above C (ADAPTIVE_RULE below), its isolate reporting to the
 *   rule's controller (ADAPTIVE_WIRED); its factor over the run is read from
 *   the controller's history through the admin API's /stats;
 * - `drift`: the same adaptive rule in the baseline drift scenario
 *   (`driftScenarioFromEnv`): the origin's latency raised above the rule's
 *   target while the load is light, then an overload; its own table
 *   (results-drift.md);
 * - `priorities`: the priorities scenario (`prioritiesScenarioFromEnv`):
 *   steady critical requests at half of C and a sheddable spike at twelve
 *   times C from the same clients, each marked by its `x-priority` header,
 *   under the adaptive rule with `critical` and `sheddable` matchers;
 *   `priorities-reserve` the same with `reserve = "20%"`; `priorities-none`
 *   the same traffic under the rule without them (the baseline); their own
 *   table (results-priorities.md).
 *
 * `-- --simulate` plays the same scenario in virtual time with the limiter
 * modelled in Node (simulate.ts), the adaptive rule run by the product's own
 * controller, beside the published controllers of a concurrency limit at a
 * proxy (envoy-gradient.ts, gradient2.ts, with their defaults) and an
 * oracle that knows C and sends the origin 90 % or 85 % of it (the best a
 * rate can do: what is sent stays as random as the clients' requests), with
 * and without C halved, the drift scenario, and the priorities scenario (with
 * and without priorities); `-- --sweep '{"raiseMost":[1.1,1.15]}'`
 * runs a grid of controller parameters (and `latencyMs`) over three seeds.
 *
 * Environment: ORIGIN_C (requests/s; 100, or 200 simulated; the priorities
 * scenario's 50 in workerd), ORIGIN_BEFORE,
 * ORIGIN_OVERLOAD, ORIGIN_AFTER (seconds: 20, 60, 30), ORIGIN_HALVE=1 (C
 * halves halfway through the overload), ORIGIN_WORKERS (10), ORIGIN_SEED,
 * ORIGIN_CLIENTS (the light clients, 50), ORIGIN_SPIKE (the priorities
 * scenario's sheddable spike as a multiple of C, 12), ORIGIN_DUMP (in
 * workerd, a path prefix: each variant's requests, what the origin served
 * and refused, and the controller's history go to `<prefix>-<variant>.json`,
 * for a look second by second). The machine's load is
 * printed with the figures: on a shared machine, run it when the load is low.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { ControllerParams } from "../../../src/core/controller.ts";
import { parseAdaptive } from "../../../src/core/health.ts";
import type { Factors, Priorities, Priority } from "../../../src/core/priorities.ts";
import {
  buildBundle,
  COMPATIBILITY_DATE,
  COMPATIBILITY_FLAGS,
  capnpString,
  embedPath,
  freePort,
  ROOT,
  startWorkerd,
} from "../../workerd.ts";
import { EnvoyGradient } from "./envoy-gradient.ts";
import { Gradient2 } from "./gradient2.ts";
import {
  type DriftFigures,
  driftFigures,
  driftTable,
  type FactorPoint,
  type Figures,
  figures,
  figuresTable,
  type Outcome,
  type PriorityFactorPoint,
  type PriorityFigures,
  priorityFigures,
  priorityTable,
  type RequestRecord,
} from "./metrics.ts";
import {
  arrivals,
  driftScenarioFromEnv,
  prioritiesScenarioFromEnv,
  type Scenario,
  scenarioFromEnv,
} from "./scenario.ts";
import { startOrigin } from "./server.ts";
import { type Limiter, simulate } from "./simulate.ts";

/** Whether the isolate reports to an adaptive rule's controller and applies its factor: the hook for issue 28's isolate half. */
const ADAPTIVE_WIRED = true;

/** The admin API's token in the benchmark's workerd: the adaptive variant reads its controller's history through /stats. */
const ADMIN_TOKEN = "bench-origin-admin-token";

const REDUCED = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/** The adaptive rule of the benchmark: per client, far above C; the target twice the origin's unloaded p99. */
const ADAPTIVE_RULE = (c: number, unloadedP99Ms: number) => ({
  id: "per-client",
  limit: 10 * c,
  period: "1s",
  key: ["ip"],
  adaptive: { latency: `${Math.round(2 * unloadedP99Ms)}ms`, percentile: 99, errors: "5%", floor: 1 },
});

/** The priorities of the priorities scenario's rule, as written in its `adaptive` table: each request's `x-priority` header says which it is. */
const PRIORITIES = { critical: ["header:x-priority=critical"], sheddable: ["header:x-priority=sheddable"] };

/** The adaptive rule with priorities (and a reserve, when given). */
const PRIORITIES_RULE = (c: number, unloadedP99Ms: number, reserve?: string) => {
  const rule = ADAPTIVE_RULE(c, unloadedP99Ms);
  return { ...rule, adaptive: { ...rule.adaptive, ...PRIORITIES, ...(reserve ? { reserve } : {}) } };
};

/** The origin's unloaded p99 with its default service time (10 workers at C, ± 20 %), plus a little for the hops. */
const unloadedP99Of = (scenario: Scenario): number => ((scenario.workers * 1000) / scenario.capacityPerSecond) * 1.2;

type Variant = {
  id: string;
  label: string;
  worker: "proxy" | "limiter";
  rules: unknown[];
  /** The scenario it plays, when not the run's own (the drift and priorities variants'). */
  scenario?: Scenario;
  /** Its table: the scenario's (default), the drift's or the priorities'. */
  table?: "drift" | "priorities";
};

/**
 * The variants in workerd; the priorities scenario's at `priorities`' C
 * (12.5 × C at its spike is more than the benchmark's two cores push
 * through workerd at the other variants' C of 100).
 */
const variantsFor = (scenario: Scenario, priorities: Scenario): Variant[] => {
  const c = scenario.capacityPerSecond;
  return [
    { id: "none", label: "no limiter", worker: "proxy", rules: [] },
    {
      id: "fixed",
      label: `fixed limit at C (${c}/s, all clients together)`,
      worker: "limiter",
      rules: [{ id: "origin", limit: c, period: "1s", key: ["host"] }],
    },
    {
      id: "adaptive",
      label: `adaptive, per client, ${10 * c}/s configured${ADAPTIVE_WIRED ? "" : " (not wired yet: runs at its configured limit)"}`,
      worker: "limiter",
      rules: [ADAPTIVE_RULE(c, unloadedP99Of(scenario))],
    },
    {
      id: "drift",
      label: `adaptive, per client, ${10 * c}/s configured, the origin's latency drifted above the target`,
      worker: "limiter",
      rules: [ADAPTIVE_RULE(c, unloadedP99Of(scenario))],
      scenario: driftScenarioFromEnv(),
      table: "drift",
    },
    ...priorityVariants(priorities),
  ];
};

/** The priorities scenario's variants: with priorities, with them and a reserve, and without them (the baseline). */
const priorityVariants = (played: Scenario): Variant[] => {
  const c = played.capacityPerSecond;
  const unloadedP99Ms = unloadedP99Of(played);
  return [
    {
      id: "priorities",
      label: `adaptive with priorities, per client, ${10 * c}/s configured`,
      worker: "limiter",
      rules: [PRIORITIES_RULE(c, unloadedP99Ms)],
      scenario: played,
      table: "priorities",
    },
    {
      id: "priorities-reserve",
      label: `adaptive with priorities and reserve = "20%", per client, ${10 * c}/s configured`,
      worker: "limiter",
      rules: [PRIORITIES_RULE(c, unloadedP99Ms, "20%")],
      scenario: played,
      table: "priorities",
    },
    {
      id: "priorities-none",
      label: `adaptive without priorities (the baseline), per client, ${10 * c}/s configured`,
      worker: "limiter",
      rules: [ADAPTIVE_RULE(c, unloadedP99Ms)],
      scenario: played,
      table: "priorities",
    },
  ];
};

const loadavg = (): string => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

/** A client's address, as CF-Connecting-IP gives it. */
const ipOf = (client: number) => `10.77.${client >> 8}.${client & 255}`;

function workerdConfig(
  configPath: string,
  bundle: string,
  port: number,
  originUrl: string,
  rules: unknown[],
  disk: string,
) {
  const limiter = rules.length > 0;
  // Only the adaptive variant has the admin API and statistics on: the others run as they always have.
  const adaptive = rules.some((rule) => (rule as { adaptive?: unknown }).adaptive !== undefined);
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "internet", network = (allow = ["public", "private", "local"])),
    (name = "disk", disk = (path = ${capnpString(disk)}, writable = true)),
    (name = "edge", worker = (
      modules = [ (name = "worker.js", esModule = embed ${capnpString(embedPath(configPath, bundle))}) ],
      compatibilityDate = "${COMPATIBILITY_DATE}",
      ${COMPATIBILITY_FLAGS}
      globalOutbound = "internet",
      bindings = [ (name = "ORIGIN_URL", text = ${capnpString(originUrl)})${
        limiter
          ? `,
        (name = "RULES", json = ${capnpString(JSON.stringify(rules))}),
        (name = "RATE_LIMITER", durableObjectNamespace = "RateLimiter")`
          : ""
      }${
        adaptive
          ? `,
        (name = "ADMIN_TOKEN", text = ${capnpString(ADMIN_TOKEN)}),
        (name = "STATS", durableObjectNamespace = "StatsObject")`
          : ""
      } ],${
        limiter
          ? `
      durableObjectNamespaces = [ (className = "RateLimiter", uniqueKey = "bench-origin", enableSql = true)${
        adaptive ? `, (className = "StatsObject", uniqueKey = "bench-origin-stats", enableSql = true)` : ""
      } ],
      durableObjectStorage = (localDisk = "disk"),`
          : ""
      }
    )),
  ],
  sockets = [ (name = "edge", address = "127.0.0.1:${port}", http = (), service = "edge") ],
);
`;
}

/**
 * The adaptive rule's factor over the run, from its controller's history as
 * the admin API's /stats shows it: a point at every change (and every 10 s),
 * on the run's clock.
 */
async function factorHistory(
  port: number,
  wallAtStartMs: number,
): Promise<{
  factors: FactorPoint[];
  priorityFactors: PriorityFactorPoint[];
  drift: { atMs: number; drift: boolean }[];
}> {
  const res = await fetch(`http://127.0.0.1:${port}/__ratelimit/stats?minutes=10`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "cf-connecting-ip": "127.0.0.1" },
  });
  if (!res.ok) throw new Error(`/stats answered ${res.status}: ${await res.text()}`);
  const body = (await res.json()) as {
    adaptive: {
      rule: string;
      controller: {
        history: {
          atMs: number;
          factor: number;
          drift?: boolean;
          priorities?: Partial<Record<Priority, [factor: number, forwarded: number, shed: number]>>;
        }[];
      } | null;
    }[];
  };
  const history = body.adaptive.find((a) => a.rule === "per-client")?.controller?.history ?? [];
  // A point at every change of the factor and of the drift: the drift's changes are where it differs from the point before.
  const drift = history.flatMap((p, i) =>
    (p.drift === true) !== (history[i - 1]?.drift === true)
      ? [{ atMs: p.atMs - wallAtStartMs, drift: p.drift === true }]
      : [],
  );
  // Each priority's factor (the point's own, the default priority's, for a priority the rule does not have).
  const priorityFactors = history.map((p) => {
    const of = (priority: Priority) => p.priorities?.[priority]?.[0] ?? p.factor;
    const factors: Factors = { critical: of("critical"), default: p.factor, sheddable: of("sheddable") };
    return { atMs: p.atMs - wallAtStartMs, factors };
  });
  return {
    factors: history.map((p) => ({ atMs: p.atMs - wallAtStartMs, factor: p.factor })),
    priorityFactors,
    drift,
  };
}

/** What a response says happened to the request, as its client sees it. */
async function outcomeOf(res: Response): Promise<Outcome> {
  const text = await res.text();
  if (res.status >= 200 && res.status < 300) return "ok";
  if (res.status === 429) return "refused";
  if (res.status === 503 && text.includes(REDUCED)) return "shed";
  return "error";
}

/**
 * Plays every arrival at its instant, each request with its client's
 * address, its priority's `x-priority` header (in the priorities scenario)
 * and its timeout; and the origin's changes at theirs.
 */
async function play(
  scenario: Scenario,
  url: string,
  startMs: number,
  changes: { atMs: number; run: () => void }[],
): Promise<RequestRecord[]> {
  const records: RequestRecord[] = [];
  const pending: Promise<void>[] = [];
  const all = arrivals(scenario);
  const due = [...changes].sort((a, b) => a.atMs - b.atMs);
  for (let i = 0; i < all.length; ) {
    const nowMs = performance.now() - startMs;
    while (due.length > 0 && nowMs >= due[0]!.atMs) due.shift()!.run();
    for (; i < all.length && all[i]!.atMs <= nowMs; i++) {
      const { client, priority } = all[i]!;
      const sentMs = performance.now() - startMs;
      const headers: Record<string, string> = { "cf-connecting-ip": ipOf(client) };
      if (priority !== undefined) headers["x-priority"] = priority;
      pending.push(
        fetch(url, {
          headers,
          signal: AbortSignal.timeout(scenario.clientTimeoutMs),
        })
          .then(outcomeOf)
          .catch((error: Error): Outcome => (error.name === "TimeoutError" ? "timeout" : "error"))
          .then((outcome) => {
            const doneMs = performance.now() - startMs;
            records.push(
              priority === undefined
                ? { client, sentMs, doneMs, outcome }
                : { client, sentMs, doneMs, outcome, priority },
            );
          }),
      );
    }
    await sleep(2);
  }
  await Promise.all(pending);
  return records;
}

async function runVariant(variant: Variant, scenario: Scenario, bundles: Record<string, string>, work: string) {
  const origin = await startOrigin(scenario);
  const changes = [
    ...(scenario.halveAtMs === null ? [] : [{ atMs: scenario.halveAtMs, run: origin.halve }]),
    ...(scenario.driftAtMs === null ? [] : [{ atMs: scenario.driftAtMs, run: origin.drift }]),
  ];
  const port = await freePort();
  const dir = join(work, variant.id);
  mkdirSync(join(dir, "disk"), { recursive: true });
  const configPath = join(dir, "config.capnp");
  writeFileSync(
    configPath,
    workerdConfig(configPath, bundles[variant.worker]!, port, origin.url, variant.rules, join(dir, "disk")),
  );
  const workerd = await startWorkerd({
    configPath,
    logFile: join(dir, "workerd.log"),
    readyUrls: [`http://127.0.0.1:${port}/ready`],
  });
  try {
    // The records start here; the requests that found workerd up are not counted.
    const startMs = performance.now();
    origin.start(startMs);
    origin.served.length = 0;
    origin.refusedAtMs.length = 0;
    const wallAtStartMs = Date.now() - (performance.now() - startMs);
    const load = loadavg();
    const requests = await play(scenario, `http://127.0.0.1:${port}/api/x`, startMs, changes);
    const adaptive = variant.rules.some((rule) => (rule as { adaptive?: unknown }).adaptive !== undefined);
    const history = adaptive
      ? await factorHistory(port, wallAtStartMs).catch((error: Error) => {
          console.warn(`    the controller's history could not be read: ${error.message}`);
          return null;
        })
      : null;
    const dump = process.env.ORIGIN_DUMP;
    if (dump)
      writeFileSync(
        `${dump}-${variant.id}.json`,
        JSON.stringify({ requests, served: origin.served, refused: origin.refusedAtMs, history }),
      );
    return {
      requests,
      served: origin.served,
      refusedAtMs: origin.refusedAtMs,
      load: `${load} → ${loadavg()}`,
      factors: history?.factors ?? null,
      priorityFactors: history?.priorityFactors ?? null,
      drift: history?.drift ?? [],
    };
  } finally {
    await workerd.close();
    await origin.close();
  }
}

async function real(): Promise<void> {
  const priorities = withEnv({ ORIGIN_C: process.env.ORIGIN_C ?? "50" }, prioritiesScenarioFromEnv);
  process.env.ORIGIN_C ??= "100";
  const scenario = scenarioFromEnv();
  const wanted = (
    process.env.ORIGIN_VARIANTS ?? "none,fixed,adaptive,drift,priorities,priorities-reserve,priorities-none"
  ).split(",");
  const variants = variantsFor(scenario, priorities).filter((v) => wanted.includes(v.id));
  const work = mkdtempSync(join(tmpdir(), "bench-origin-"));
  console.log("building bundles with wrangler …");
  const bundles: Record<string, string> = {};
  for (const [name, main] of [
    ["proxy", join(ROOT, "tools/bench/workers/proxy.ts")],
    ["limiter", join(ROOT, "src/index.ts")],
  ] as const) {
    if (variants.some((v) => v.worker === name)) bundles[name] = buildBundle({ main, outdir: join(work, name), name });
  }
  const seconds = scenario.phases.map((p) => p.durationMs / 1000).join(" + ");
  console.log(
    `C = ${scenario.capacityPerSecond}/s, phases ${seconds} s${scenario.halveAtMs === null ? "" : ", C halved halfway through the overload"}, load ${loadavg()}`,
  );
  const rows: { variant: string; figures: Figures; load: string }[] = [];
  const driftRows: { variant: string; figures: DriftFigures; load: string }[] = [];
  const priorityRows: { variant: string; figures: PriorityFigures; load: string }[] = [];
  try {
    for (const variant of variants) {
      console.log(`  ${variant.label} …`);
      const played = variant.scenario ?? scenario;
      const run = await runVariant(variant, played, bundles, work);
      if (variant.table === "drift") {
        const f = driftFigures(played, run.requests, run.served, run.refusedAtMs, run.factors ?? [], run.drift);
        driftRows.push({ variant: variant.label, figures: f, load: run.load });
      } else if (variant.table === "priorities") {
        const f = priorityFigures(played, run.requests, run.served, run.refusedAtMs, run.priorityFactors);
        priorityRows.push({ variant: variant.label, figures: f, load: run.load });
      } else {
        rows.push({
          variant: variant.label,
          figures: figures(played, run.requests, run.served, run.refusedAtMs, run.factors),
          load: run.load,
        });
      }
      console.log(`    load ${run.load}`);
    }
  } finally {
    if (!process.env.ORIGIN_KEEP) rmSync(work, { recursive: true, force: true });
  }
  if (rows.length > 0) {
    report(scenario, rows, "npm run bench:origin", scenario.halveAtMs === null ? "results" : "results-halved");
  }
  if (driftRows.length > 0) report(scenario, driftRows, "npm run bench:origin", "results-drift", driftTable);
  if (priorityRows.length > 0) {
    // Other numbers of clients than the scenario's 50 in a file of their own.
    const clients = priorities.lightClients;
    const file = clients === 50 ? "results-priorities" : `results-priorities-${clients}-clients`;
    report(priorities, priorityRows, "npm run bench:origin", file, priorityTable);
  }
}

/** The table, printed and written to tools/bench/origin/results.md and .json. */
function report<F>(
  scenario: Scenario,
  rows: { variant: string; figures: F; load?: string }[],
  command: string,
  file = "results",
  table: (rows: { variant: string; figures: F }[]) => string = figuresTable as never,
) {
  const env = [
    "ORIGIN_C",
    "ORIGIN_BEFORE",
    "ORIGIN_OVERLOAD",
    "ORIGIN_AFTER",
    "ORIGIN_HALVE",
    "ORIGIN_DRIFT",
    "ORIGIN_SPIKE",
    "ORIGIN_CLIENTS",
    "ORIGIN_WORKERS",
    "ORIGIN_VARIANTS",
    "ORIGIN_SEED",
  ]
    .filter((name) => process.env[name] !== undefined)
    .map((name) => `${name}=${process.env[name]}`)
    .join(" ");
  const tableText = table(rows);
  const loads = rows.flatMap((r) => (r.load ? [`- ${r.variant}: load ${r.load}`] : [])).join("\n");
  const text = `\`${`${env} ${command}`.trim()}\` (${new Date().toISOString()})\n\n${tableText}\n${loads ? `\nLoad average (1, 5, 15 min) at the start and end of each variant:\n\n${loads}\n` : ""}`;
  console.log(`\n${text}`);
  writeFileSync(join(ROOT, `tools/bench/origin/${file}.md`), text);
  writeFileSync(
    join(ROOT, `tools/bench/origin/${file}.json`),
    `${JSON.stringify({ date: new Date().toISOString(), command: `${env} ${command}`.trim(), scenario, rows }, null, 2)}\n`,
  );
  console.log(`wrote tools/bench/origin/${file}.md and ${file}.json`);
}

/** The adaptive rule as simulate.ts models it, with these controller parameters and target. */
const simulatedAdaptive = (
  scenario: Scenario,
  latencyMs: number,
  params: Partial<ControllerParams> = {},
  priorities?: Priorities,
): Limiter => ({
  kind: "adaptive",
  limit: 10 * scenario.capacityPerSecond,
  periodMs: 1_000,
  floor: 1,
  latencyMs,
  percentile: 99,
  errorShare: 0.05,
  params,
  ...(priorities ? { priorities } : {}),
});

/** The rule's priorities as the product parses them from its `adaptive` table (with a reserve, when given). */
function parsedPriorities(scenario: Scenario, reserve?: string): Priorities {
  const rule = PRIORITIES_RULE(scenario.capacityPerSecond, unloadedP99Of(scenario), reserve);
  const parsed = parseAdaptive(rule.adaptive, rule.limit);
  if (!parsed.ok) throw new Error(`the priorities rule: ${parsed.errors.join("; ")}`);
  return parsed.value.priorities!;
}

function simulated(): void {
  const rows: { variant: string; figures: Figures }[] = [];
  for (const halve of [false, true]) {
    const scenario = scenarioFromEnv(halve);
    const c = scenario.capacityPerSecond;
    const limiters: [string, Limiter][] = [
      ["no limiter", { kind: "none" }],
      [`fixed limit at C (${c}/s, all clients together)`, { kind: "fixed", limit: c, periodMs: 1_000 }],
      [`adaptive, per client, ${10 * c}/s configured`, simulatedAdaptive(scenario, 2 * unloadedP99Of(scenario))],
      ...[0.92, 0.9, 0.85].map((share): [string, Limiter] => [
        `oracle: knows C, thins the heavy client to ${share * 100} % of C`,
        { kind: "oracle", share },
      ]),
      [
        "Envoy adaptive concurrency, gradient controller (defaults)",
        { kind: "concurrency", create: (schedule, random) => new EnvoyGradient(schedule, random) },
      ],
      ["Netflix Gradient2 in WindowedLimit (defaults)", { kind: "concurrency", create: () => new Gradient2() }],
    ];
    for (const [label, limiter] of limiters) {
      const r = simulate(scenario, limiter);
      const variant = `${label}${halve ? ", C halved" : ""}`;
      rows.push({ variant, figures: figures(scenario, r.requests, r.served, r.originRefusedAtMs, r.factors) });
    }
  }
  report(scenarioFromEnv(), rows, "npm run bench:origin -- --simulate", "results-simulated");
  // The baseline drift: the adaptive rule alone (the published controllers have no target to drift above).
  const drift = driftScenarioFromEnv();
  const run = simulate(drift, simulatedAdaptive(drift, 2 * unloadedP99Of(drift)));
  const driftRows = [
    {
      variant: `adaptive, per client, ${10 * drift.capacityPerSecond}/s configured, the origin's latency drifted above the target`,
      figures: driftFigures(drift, run.requests, run.served, run.originRefusedAtMs, run.factors ?? [], run.drift),
    },
  ];
  report(drift, driftRows, "npm run bench:origin -- --simulate", "results-drift-simulated", driftTable);
  // Priorities: the same traffic with them, with them and a reserve, and without them; at the run's C and
  // clients, and at C = 100 and 50 with 50 clients and C = 50 with 10 (the workerd runs').
  const own = [Number(process.env.ORIGIN_C ?? 200), Number(process.env.ORIGIN_CLIENTS ?? 50)] as const;
  const configurations = [own, [100, 50], [50, 50], [50, 10]].filter(
    ([c, clients], i, all) => all.findIndex(([c2, n2]) => c2 === c && n2 === clients) === i,
  );
  const priorityRows = configurations.flatMap(([c, clients]) => {
    const played = withEnv({ ORIGIN_C: String(c), ORIGIN_CLIENTS: String(clients) }, prioritiesScenarioFromEnv);
    const latencyMs = 2 * unloadedP99Of(played);
    return priorityVariants(played).map((variant) => {
      const priorities =
        variant.id === "priorities-none"
          ? undefined
          : parsedPriorities(played, variant.id === "priorities-reserve" ? "20%" : undefined);
      const r = simulate(played, simulatedAdaptive(played, latencyMs, {}, priorities));
      return {
        variant: `C = ${c}/s, ${clients} clients: ${variant.label}`,
        figures: priorityFigures(played, r.requests, r.served, r.originRefusedAtMs, r.priorityFactors),
      };
    });
  });
  const played = prioritiesScenarioFromEnv();
  report(played, priorityRows, "npm run bench:origin -- --simulate", "results-priorities-simulated", priorityTable);
}

/** `make()` with these environment variables set, and the environment as it was after. */
function withEnv<T>(vars: Record<string, string>, make: () => T): T {
  const saved = Object.fromEntries(Object.keys(vars).map((name) => [name, process.env[name]]));
  Object.assign(process.env, vars);
  try {
    return make();
  } finally {
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
}

/** A grid of controller parameters (and `latencyMs`), each over three seeds, with and without C halved. */
function sweep(grid: Record<string, unknown[]>): void {
  let combos: Record<string, unknown>[] = [{}];
  for (const [name, values] of Object.entries(grid)) {
    combos = combos.flatMap((combo) => values.map((value) => ({ ...combo, [name]: value })));
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  // ORIGIN_SEEDS (a count, default 3): the seeds 1…n each combination runs with.
  const seeds = Array.from({ length: Number(process.env.ORIGIN_SEEDS ?? 3) }, (_, i) => i + 1);
  const lines = [
    "| parameters | goodput / C | p99 after onset ÷ unloaded | light ok | limit back | halved: goodput | halved: light ok | halved: followed in | then goodput / halved C | then light ok |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const combo of combos) {
    const { latencyMs, ...params } = combo as { latencyMs?: number } & Partial<ControllerParams>;
    const runs = { normal: [] as Figures[], halved: [] as Figures[] };
    for (const seed of seeds) {
      for (const halve of [false, true]) {
        process.env.ORIGIN_SEED = String(seed);
        const scenario = scenarioFromEnv(halve);
        const r = simulate(scenario, simulatedAdaptive(scenario, latencyMs ?? 2 * unloadedP99Of(scenario), params));
        (halve ? runs.halved : runs.normal).push(
          figures(scenario, r.requests, r.served, r.originRefusedAtMs, r.factors),
        );
      }
    }
    const pct = (x: number) => `${(x * 100).toFixed(1)} %`;
    // Once followed: over the runs that followed the halving (how many of them, in the column's time).
    const followed = runs.halved.flatMap((f) => (f.followed?.afterMs == null ? [] : [f.followed]));
    lines.push(
      `| ${JSON.stringify(combo)} | ${pct(mean(runs.normal.map((f) => f.goodputShare)))} | ${mean(runs.normal.map((f) => f.settledP99Ms / f.unloadedP99Ms)).toFixed(2)} × | ${pct(mean(runs.normal.map((f) => f.lightSuccess)))} | ${(mean(runs.normal.map((f) => f.limitBackMs ?? Number.NaN)) / 1000).toFixed(1)} s | ${pct(mean(runs.halved.map((f) => f.goodputShare)))} | ${pct(mean(runs.halved.map((f) => f.lightSuccess)))} | ${(mean(followed.map((f) => f.afterMs!)) / 1000).toFixed(1)} s (${followed.length} of ${runs.halved.length}) | ${pct(mean(followed.map((f) => f.goodputShare)))} | ${pct(mean(followed.map((f) => f.lightSuccess)))} |`,
    );
  }
  console.log(lines.join("\n"));
}

const args = process.argv.slice(2);
if (args[0] === "--simulate") simulated();
else if (args[0] === "--sweep") sweep(JSON.parse(args[1] ?? "{}") as Record<string, unknown[]>);
else await real();
