/**
 * @module
 * `npm run bench:smooth`: what held requests and concurrency rules cost, on
 * the multi-isolate shape of test/edge/ (one standalone `workerd serve`, 8
 * edge isolates running the product's bundle, one `objects` service whose
 * `RateLimiter` counts every call by method, a Node origin on this machine).
 *
 * 1. CPU per held request: the same 400 requests for one key (100 a second,
 *    round the isolates), once under a rule they never reach (each decided
 *    by one call, as a rule with `max_delay` decides every request) and once
 *    under 40 a second held up to 10 s (most of them held). workerd's CPU
 *    time (user + system, from /proc) over each run; the difference over the
 *    requests held is what holding costs: the `awaitTurn` call, the timers,
 *    the object's wake-up.
 * 2. Durable Object calls per request under a concurrency rule
 *    (`concurrency = 4`, waiting in line up to 30 s): one busy key (300
 *    requests, 32 at once, each streaming 20 ms), and 300 quiet keys (one
 *    request each); and 32 requests of one key streaming 6 s, longer than
 *    `place_timeout` (5 s), whose places are renewed every third of it, a
 *    key's places in one isolate with one call.
 *
 * Options (environment): SMOOTH_REQUESTS (400), SMOOTH_KEEP (keep the run's directory).
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { RuleInput } from "../../src/core/rules.ts";
import { buildBundle, freePorts, ROOT, startWorkerd, writeEdgeConfig } from "../workerd.ts";

const ISOLATES = 8;
const REQUESTS = Number(process.env.SMOOTH_REQUESTS ?? 400);

const RULES: RuleInput[] = [
  { id: "now", path: "/now/*", limit: 1_000_000_000, period: "1h", max_delay: "10s", key: ["ip"] },
  { id: "held", path: "/held/*", limit: 40, period: "1s", max_delay: "10s", key: ["ip"] },
  { id: "cap", path: "/cap/*", concurrency: 4, max_delay: "30s", place_timeout: "5s", key: ["ip"] },
  { id: "long", path: "/long/*", concurrency: 64, place_timeout: "5s", key: ["ip"] },
];

/** A Node origin: 200 at once, or a body streamed over `<ms>` on a path ending in `/stream/<ms>`. */
async function startOrigin(): Promise<{ url: string; close: () => void }> {
  const server = createServer((req, res) => {
    req.resume();
    const ms = Number(/\/stream\/(\d+)$/.exec(req.url ?? "")?.[1] ?? -1);
    res.writeHead(200, { "content-type": "text/plain" });
    if (ms < 0) {
      res.end("ok\n");
      return;
    }
    res.write("first\n");
    setTimeout(() => res.end("last\n"), ms);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
}

/** workerd's CPU time so far (user + system), in milliseconds. */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15 of the whole line)
  return (ticks * 1000) / 100;
}

/** One request: its status, whether it was held (Server-Timing), its body read to the end. */
async function send(url: string, ip: string): Promise<{ status: number; held: boolean }> {
  const res = await fetch(url, { headers: { "cf-connecting-ip": ip } });
  await res.arrayBuffer();
  return { status: res.status, held: (res.headers.get("server-timing") ?? "").includes("held") };
}

/** `n` requests, `concurrency` at a time, the i-th to isolate i mod 8, for the key `keyOf(i)`. */
async function pool(urls: string[], n: number, concurrency: number, path: string, keyOf: (i: number) => string) {
  const results: { status: number; held: boolean }[] = [];
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < n; i = next++) results.push(await send(`${urls[i % ISOLATES]}${path}`, keyOf(i)));
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return results;
}

/** `n` requests for one key, paced at `perSecond`, each answered whenever it is. */
async function paced(urls: string[], n: number, perSecond: number, path: string, ip: string) {
  const started = performance.now();
  const sent: Promise<{ status: number; held: boolean }>[] = [];
  for (let i = 0; i < n; i++) {
    const waitMs = started + (i * 1000) / perSecond - performance.now();
    if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
    sent.push(send(`${urls[i % ISOLATES]}${path}`, ip));
  }
  return Promise.all(sent);
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), "edge-rate-limiter-smooth-"));
  const origin = await startOrigin();
  const edgeBundle = buildBundle({ main: join(ROOT, "src/index.ts"), outdir: join(work, "edge"), name: "edge" });
  const objectsBundle = buildBundle({
    main: join(ROOT, "tools/bench/smooth/workers/objects.ts"),
    outdir: join(work, "objects"),
    name: "objects",
  });
  const [objectsPort, ...ports] = await freePorts(ISOLATES + 1);
  const configPath = join(work, "smooth.capnp");
  writeEdgeConfig(configPath, {
    edgeBundle,
    edges: ports.map((port, i) => ({ name: `edge-${i}`, port })),
    bindings: [
      { name: "ORIGIN_URL", text: origin.url },
      { name: "RULES", json: RULES },
      { name: "LIMITER_TIMEOUT_MS", text: "5000" },
    ],
    objects: {
      name: "objects",
      bundle: objectsBundle,
      className: "RateLimiter",
      uniqueKey: "smooth-bench",
      port: objectsPort!,
    },
    namespaceBinding: "RATE_LIMITER",
    storageDir: join(work, "storage"),
  });
  const urls = ports.map((port) => `http://127.0.0.1:${port}`);
  const objectsUrl = `http://127.0.0.1:${objectsPort}`;
  const workerd = await startWorkerd({
    configPath,
    logFile: join(work, "workerd.log"),
    readyUrls: [...urls.map((url) => `${url}/__ratelimit/rules`), `${objectsUrl}/calls`],
  });
  const calls = async () => (await (await fetch(`${objectsUrl}/calls`)).json()) as Record<string, number>;
  const settle = () => new Promise((resolve) => setTimeout(resolve, 500));
  try {
    const pid = workerd.pid()!;
    // Warm every isolate and the objects service up first: compiling is not what is measured.
    await pool(urls, 4 * ISOLATES, ISOLATES, "/now/warm", () => "10.79.0.1");
    await pool(urls, 4 * ISOLATES, ISOLATES, "/cap/stream/1", () => "10.79.0.2");
    await settle();
    await calls();

    const measure = async (run: () => Promise<{ status: number; held: boolean }[]>) => {
      const before = cpuMs(pid);
      const results = await run();
      await settle();
      return { results, cpuMs: cpuMs(pid) - before, calls: await calls() };
    };
    const now = await measure(() => paced(urls, REQUESTS, 100, "/now/x", "10.80.0.1"));
    const held = await measure(() => paced(urls, REQUESTS, 100, "/held/x", "10.80.0.2"));
    const heldCount = held.results.filter((r) => r.held).length;
    const busy = await measure(() => pool(urls, 300, 32, "/cap/stream/20", () => "10.80.0.3"));
    const quiet = await measure(() => pool(urls, 300, 32, "/cap/stream/20", (i) => `10.81.${i >> 8}.${i & 255}`));
    const long = await measure(() => pool(urls, 32, 32, "/long/stream/6000", () => "10.80.0.4"));

    const perRequest = (c: Record<string, number>, n: number) =>
      Object.entries(c)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([method, count]) => `${method} ${(count / n).toFixed(2)}`)
        .join(", ");
    const statuses = (rs: { status: number }[]) => {
      const by: Record<number, number> = {};
      for (const r of rs) by[r.status] = (by[r.status] ?? 0) + 1;
      return Object.entries(by)
        .map(([s, n]) => `${n}× ${s}`)
        .join(", ");
    };
    const total = (c: Record<string, number>) => Object.values(c).reduce((a, b) => a + b, 0);
    const lines = [
      `## Held requests (${REQUESTS} requests for one key, 100 a second, over ${ISOLATES} isolates)`,
      "",
      "| run | answers | held | workerd CPU | CPU per request | object calls per request |",
      "| --- | --- | ---: | ---: | ---: | --- |",
      `| decided at once (a rule never reached) | ${statuses(now.results)} | 0 | ${now.cpuMs} ms | ${(now.cpuMs / REQUESTS).toFixed(2)} ms | ${perRequest(now.calls, REQUESTS)} |`,
      `| 40 a second, held up to 10 s | ${statuses(held.results)} | ${heldCount} | ${held.cpuMs} ms | ${(held.cpuMs / REQUESTS).toFixed(2)} ms | ${perRequest(held.calls, REQUESTS)} |`,
      "",
      `CPU per held request, beyond a request decided at once: ${((held.cpuMs - now.cpuMs) / Math.max(1, heldCount)).toFixed(2)} ms (workerd's CPU time, user + system, 10 ms ticks).`,
      "",
      "## Concurrency rules: Durable Object calls per request",
      "",
      "| run | answers | calls per request | by method |",
      "| --- | --- | ---: | --- |",
      `| one busy key, concurrency 4, 300 requests 32 at once, 20 ms each | ${statuses(busy.results)} | ${(total(busy.calls) / 300).toFixed(2)} | ${perRequest(busy.calls, 300)} |`,
      `| 300 quiet keys, one request each | ${statuses(quiet.results)} | ${(total(quiet.calls) / 300).toFixed(2)} | ${perRequest(quiet.calls, 300)} |`,
      `| one key, 32 requests streaming 6 s (place_timeout 5 s) | ${statuses(long.results)} | ${(total(long.calls) / 32).toFixed(2)} | ${perRequest(long.calls, 32)} |`,
      "",
      `Renewals: ${long.calls.renew ?? 0} calls for 32 requests of 6 s in ${ISOLATES} isolates; one per request per third of place_timeout would be ${32 * Math.floor(6_000 / (5_000 / 3))}.`,
    ];
    console.log(lines.join("\n"));
  } finally {
    await workerd.close();
    origin.close();
    if (process.env.SMOOTH_KEEP) console.log(`kept ${work}`);
    else rmSync(work, { recursive: true, force: true });
  }
}

await main();
