/**
 * @module
 * `npm run bench:instructions`: what one request costs workerd, counted in
 * machine instructions under valgrind's callgrind, which, unlike requests
 * per second or CPU time, does not move with the machine's speed: on a
 * shared 2-core machine whose speed swings by half from one hour to the
 * next, it is how a change to the hot paths is measured before and after.
 *
 * One `workerd serve` runs under callgrind with instrumentation off. Each
 * variant is warmed (INSTR_WARM requests, so V8 has compiled what it will),
 * then instrumentation is switched on for exactly INSTR_REQUESTS requests
 * (keep-alive, 4 at a time) and off again; the count is the whole process's
 * (HTTP parsing, the Worker, any Durable Object call, the response), less
 * the instructions of V8's compilers, which land in whichever round they
 * happen to fall in. Rounds alternate variants; medians are reported.
 *
 * Variants: (e) the constant 429 Worker; (l) a constant Worker sending the
 * limiter's own 429; (d) the limiter, blocked; (a) the bare proxy and (c)
 * the limiter, allowed, one hot key, both in front of a constant origin in
 * the same workerd; (k) and (j), (d) and (c) with statistics on; (n) and (m),
 * (d) and (c) with `LEGACY_HEADERS = false`; (bd) and (bc), (d) and (c) with
 * the same rules as token buckets (`burst`). INSTR_BASE=<another checkout> adds (d) and (c) built
 * from there (e.g. a `git worktree` of main), to compare.
 *
 * Needs valgrind (`apt-get install valgrind`). Options (environment):
 * INSTR_REQUESTS (3000), INSTR_ROUNDS (3), INSTR_WARM (5000),
 * INSTR_ONLY (e.g. "e,l,d"), INSTR_BASE.
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  buildBundle,
  COMPATIBILITY_DATE,
  COMPATIBILITY_FLAGS,
  capnpString,
  embedPath,
  freePort,
  ROOT,
  WORKERD,
} from "../workerd.ts";
import { BENCH_BUCKET_RULES, BENCH_RULES } from "./rules.ts";

const requests = Number(process.env.INSTR_REQUESTS ?? 3000);
const rounds = Number(process.env.INSTR_ROUNDS ?? 3);
const warm = Number(process.env.INSTR_WARM ?? 5000);
const only = process.env.INSTR_ONLY?.split(",");
const base = process.env.INSTR_BASE ? resolve(process.env.INSTR_BASE) : undefined;

type Variant = {
  id: string;
  label: string;
  /** The Worker's entry point, under `root`. */
  entry: string;
  root: string;
  path: string;
  /** Whether it is the limiter (binds RATE_LIMITER and RULES). */
  limiter: boolean;
  /** Whether statistics are on (binds STATS, the StatsObject class in its own service). */
  stats?: boolean;
  /** More text variables to bind, such as `LEGACY_HEADERS`. */
  vars?: Record<string, string>;
  /** The limiter's `RULES`, when not {@link BENCH_RULES}. */
  rules?: unknown[];
};

const variant = (
  id: string,
  label: string,
  entry: string,
  path: string,
  limiter: boolean,
  root = ROOT,
  stats = false,
  vars: Record<string, string> = {},
): Variant => ({ id, label, entry, root, path, limiter, stats, vars });

const NO_LEGACY = { LEGACY_HEADERS: "false" };

const all: Variant[] = [
  variant("e", "constant 429 Worker", "tools/bench/workers/constant.ts", "/blocked/x", false),
  variant(
    "l",
    "constant Worker sending the limiter's own 429",
    "tools/bench/workers/constant-own-429.ts",
    "/blocked/x",
    false,
  ),
  variant("d", "limiter, blocked", "src/index.ts", "/blocked/x", true),
  variant("k", "limiter, blocked, statistics on", "src/index.ts", "/blocked/x", true, ROOT, true),
  variant("n", "limiter, blocked, LEGACY_HEADERS = false", "src/index.ts", "/blocked/x", true, ROOT, false, NO_LEGACY),
  ...(base ? [variant("d0", `limiter, blocked, built from ${base}`, "src/index.ts", "/blocked/x", true, base)] : []),
  { ...variant("bd", "limiter, blocked, token bucket", "src/index.ts", "/blocked/x", true), rules: BENCH_BUCKET_RULES },
  variant("a", "bare Hono proxy", "tools/bench/workers/proxy.ts", "/allowed/x", false),
  variant("c", "limiter, allowed, one hot key", "src/index.ts", "/allowed/x", true),
  variant("j", "limiter, allowed, one hot key, statistics on", "src/index.ts", "/allowed/x", true, ROOT, true),
  variant(
    "m",
    "limiter, allowed, one hot key, LEGACY_HEADERS = false",
    "src/index.ts",
    "/allowed/x",
    true,
    ROOT,
    false,
    NO_LEGACY,
  ),
  ...(base
    ? [variant("c0", `limiter, allowed, one hot key, built from ${base}`, "src/index.ts", "/allowed/x", true, base)]
    : []),
  {
    ...variant("bc", "limiter, allowed, one hot key, token bucket", "src/index.ts", "/allowed/x", true),
    rules: BENCH_BUCKET_RULES,
  },
];
const variants = only ? all.filter((v) => only.includes(v.id.replace(/0$/, ""))) : all;

/** Exactly `n` requests to `url`, keep-alive, 4 at a time, from one client IP; the statuses seen. */
async function send(url: string, n: number): Promise<Record<string, number>> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  const statuses: Record<string, number> = {};
  let next = 0;
  const one = () =>
    new Promise<void>((done) => {
      const request = http.get(url, { agent, headers: { "cf-connecting-ip": "10.255.0.1" } }, (response) => {
        response.resume();
        response.on("end", () => {
          statuses[response.statusCode!] = (statuses[response.statusCode!] ?? 0) + 1;
          done();
        });
      });
      request.on("error", () => {
        statuses.error = (statuses.error ?? 0) + 1;
        done();
      });
    });
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (next++ < n) await one();
    }),
  );
  agent.destroy();
  return statuses;
}

function config(work: string, bundles: Map<Variant, string>, origin: string, ports: Map<Variant, number>): string {
  const configPath = join(work, "instructions.capnp");
  const service = (v: Variant, i: number) => {
    const bindings = [
      `(name = "ORIGIN_URL", text = "http://origin.internal")`,
      ...(v.limiter
        ? [
            `(name = "RULES", json = ${capnpString(JSON.stringify(v.rules ?? BENCH_RULES))})`,
            `(name = "RATE_LIMITER", durableObjectNamespace = "RateLimiter")`,
          ]
        : []),
      ...(v.stats ? [`(name = "STATS", durableObjectNamespace = "StatsObject")`] : []),
      ...Object.entries(v.vars ?? {}).map(
        ([name, text]) => `(name = ${capnpString(name)}, text = ${capnpString(text)})`,
      ),
    ];
    const statsObject = v.stats
      ? `, (className = "StatsObject", uniqueKey = "instructions-stats-${i}", enableSql = true)`
      : "";
    const objects = v.limiter
      ? `durableObjectNamespaces = [ (className = "RateLimiter", uniqueKey = "instructions-${i}", enableSql = true)${statsObject} ],
      durableObjectStorage = (localDisk = "disk"),`
      : "";
    return `(name = "v${i}", worker = (
      modules = [ (name = "v${i}.js", esModule = embed ${capnpString(embedPath(configPath, bundles.get(v)!))}) ],
      compatibilityDate = "${COMPATIBILITY_DATE}",
      ${COMPATIBILITY_FLAGS}
      globalOutbound = "origin",
      bindings = [ ${bindings.join(", ")} ],
      ${objects}
    ))`;
  };
  const text = `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "disk", disk = (path = ${capnpString(join(work, "disk"))}, writable = true)),
    (name = "origin", worker = (
      modules = [ (name = "origin.js", esModule = embed ${capnpString(embedPath(configPath, origin))}) ],
      compatibilityDate = "${COMPATIBILITY_DATE}",
    )),
    ${variants.map(service).join(",\n    ")}
  ],
  # Compile on the thread that runs the code, so that the compilers' instructions can be told apart.
  v8Flags = [ "--no-concurrent-recompilation", "--no-concurrent-osr" ],
  sockets = [ ${variants.map((v, i) => `(name = "s${i}", address = "127.0.0.1:${ports.get(v)}", http = (), service = "v${i}")`).join(", ")} ],
);
`;
  writeFileSync(configPath, text);
  return configPath;
}

/** Instructions in a callgrind dump, and those of V8's compilers among them. */
function countsOf(file: string): { total: number; compiler: number } {
  const total = Number(/^summary: (\d+)/m.exec(readFileSync(file, "utf8"))![1]);
  const annotated = execFileSync("callgrind_annotate", ["--inclusive=no", "--threshold=100", file], {
    encoding: "utf8",
    maxBuffer: 1 << 28,
  });
  let compiler = 0;
  for (const line of annotated.split("\n")) {
    const m = /^\s*([\d,]+) \(.*?\)\s+(.*)$/.exec(line);
    if (m && /compiler::|Compiler|Deoptimiz|maglev|Maglev|turboshaft|Turboshaft/.test(m[2]!))
      compiler += Number(m[1]!.replace(/,/g, ""));
  }
  return { total, compiler };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

async function main(): Promise<void> {
  try {
    execFileSync("valgrind", ["--version"], { stdio: "ignore" });
  } catch {
    console.error("valgrind is not installed: apt-get install valgrind");
    process.exit(2);
  }
  const work = mkdtempSync(join(tmpdir(), "bench-instructions-"));
  mkdirSync(join(work, "disk"));
  console.log("building bundles with wrangler …");
  const bundles = new Map<Variant, string>();
  const built = new Map<string, string>();
  for (const [i, v] of variants.entries()) {
    const main = join(v.root, v.entry);
    if (!built.has(main)) built.set(main, buildBundle({ main, outdir: join(work, `b${i}`), name: `v${i}` }));
    bundles.set(v, built.get(main)!);
  }
  const origin = buildBundle({
    main: join(ROOT, "tools/bench/workers/origin.ts"),
    outdir: join(work, "origin"),
    name: "origin",
  });
  const ports = new Map<Variant, number>();
  for (const v of variants) ports.set(v, await freePort());
  const configPath = config(work, bundles, origin, ports);
  const out = join(work, "callgrind.out");
  const valgrind = spawn(
    "valgrind",
    [
      "--tool=callgrind",
      "--smc-check=all-non-file",
      "--instr-atstart=no",
      `--callgrind-out-file=${out}`,
      WORKERD,
      "serve",
      "--experimental",
      configPath,
    ],
    { stdio: ["ignore", "ignore", process.env.INSTR_VERBOSE ? "inherit" : "ignore"] },
  );
  const url = (v: Variant) => `http://127.0.0.1:${ports.get(v)}${v.path}`;
  const counts = new Map<Variant, { perRequest: number[]; compiler: number[] }>();
  try {
    console.log("starting workerd under callgrind (slow: about a minute) …");
    for (let i = 0; ; i++) {
      try {
        await fetch(`http://127.0.0.1:${ports.get(variants[0]!)}/`);
        break;
      } catch {
        if (i > 240) throw new Error("workerd did not come up under valgrind");
        await sleep(500);
      }
    }
    const pid = String(valgrind.pid);
    const control = (...args: string[]) => execFileSync("callgrind_control", [...args, pid], { stdio: "ignore" });
    for (const v of variants) {
      console.log(`  warming (${v.id}) with ${warm} requests …`);
      await send(url(v), warm);
    }
    for (let round = 1; round <= rounds; round++) {
      for (const v of variants) {
        for (const f of readdirSync(work)) if (f.startsWith("callgrind.out.")) rmSync(join(work, f));
        control("-z");
        control("-i", "on");
        const statuses = await send(url(v), requests);
        control("-d", `${v.id}-${round}`);
        control("-i", "off");
        const dump = readdirSync(work).find((f) => f.startsWith("callgrind.out."));
        if (dump === undefined) throw new Error("callgrind wrote no dump");
        const { total, compiler } = countsOf(join(work, dump));
        const c = counts.get(v) ?? { perRequest: [], compiler: [] };
        c.perRequest.push((total - compiler) / requests);
        c.compiler.push(compiler / requests);
        counts.set(v, c);
        console.log(
          `  round ${round} (${v.id}): ${((total - compiler) / requests / 1000).toFixed(1)}k instructions/request ${JSON.stringify(statuses)}`,
        );
      }
    }
  } finally {
    valgrind.kill("SIGTERM");
  }
  const k = (n: number) => `${(n / 1000).toFixed(1)}k`;
  const table = [
    `| variant (${requests} requests a round, ${rounds} rounds) | instructions per request, median | min–max | V8 compilers, excluded |`,
    "| --- | ---: | ---: | ---: |",
    ...variants.map((v) => {
      const c = counts.get(v)!;
      return `| (${v.id}) ${v.label} | ${k(median(c.perRequest))} | ${k(Math.min(...c.perRequest))}–${k(Math.max(...c.perRequest))} | ${k(median(c.compiler))} |`;
    }),
  ].join("\n");
  console.log(`\n${table}\n`);
  if (!process.env.INSTR_KEEP) rmSync(work, { recursive: true, force: true });
}

await main();
