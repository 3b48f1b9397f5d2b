/**
 * @module
 * `npm run demo:smooth`: held requests and concurrency rules, shown on a
 * limiter of its own (the product's bundle in a standalone `workerd serve`,
 * 4 isolates, in front of a demo origin that notes when each request
 * arrives and streams "completions"). Nothing else needs to run.
 *
 * 1. A burst smoothed for a fragile origin: 30 requests from one client in
 *    0.6 s against 5 a second, held up to 4 s (`max_delay`). The origin
 *    receives them spread out, 5 a second, in the order they were sent;
 *    those whose turn is past the delay are refused at once.
 * 2. One streaming completion at a time per user: three users send three
 *    completions each at once (each streams for 1.5 s) under
 *    `concurrency = 1` per user, waiting in line up to 10 s. Each user's
 *    completions reach the origin one after another; the users' own run
 *    side by side.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { RuleInput } from "../src/core/rules.ts";
import { buildBundle, freePorts, ROOT, startWorkerd, writeEdgeConfig } from "./workerd.ts";

const ISOLATES = 4;
const RULES: RuleInput[] = [
  // A fragile origin: 5 requests a second per client, a burst held up to 4 s rather than refused.
  { id: "fragile", path: "/reports/*", limit: 5, period: "1s", max_delay: "4s", key: ["ip"] },
  // One streaming completion at a time per user (their API key), waiting in line up to 10 s.
  { id: "one-completion", path: "/completions/*", concurrency: 1, max_delay: "10s", key: ["header:x-api-key"] },
];
const COMPLETION_MS = 1_500;

type Arrival = { path: string; client: string; atMs: number; endedAtMs?: number };

/** The demo origin: notes every arrival; a completion streams for COMPLETION_MS, the rest answers at once. */
async function startOrigin(): Promise<{ url: string; arrivals: Arrival[]; close: () => void }> {
  const arrivals: Arrival[] = [];
  const server = createServer((req, res) => {
    req.resume();
    const arrival: Arrival = {
      path: req.url ?? "",
      client: String(req.headers["x-api-key"] ?? req.headers["cf-connecting-ip"] ?? ""),
      atMs: Date.now(),
    };
    arrivals.push(arrival);
    res.once("close", () => {
      arrival.endedAtMs = Date.now();
    });
    res.writeHead(200, { "content-type": "text/plain" });
    if (!req.url?.startsWith("/completions/")) {
      res.end("report\n");
      return;
    }
    res.write("The answer");
    setTimeout(() => res.write(" is"), COMPLETION_MS / 3);
    setTimeout(() => res.end(" 42.\n"), COMPLETION_MS);
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, arrivals, close: () => server.close() };
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

async function burst(urls: string[], origin: { arrivals: Arrival[] }): Promise<void> {
  console.log("\n1. A burst smoothed for a fragile origin: 30 requests in 0.6 s, 5 a second allowed, held up to 4 s\n");
  const started = Date.now();
  const answers = await Promise.all(
    Array.from({ length: 30 }, async (_, i) => {
      await new Promise((resolve) => setTimeout(resolve, 20 * i));
      const res = await fetch(`${urls[i % ISOLATES]}/reports/${i + 1}`, {
        headers: { "cf-connecting-ip": "203.0.113.10" },
      });
      await res.arrayBuffer();
      const held = /dur=(\d+)/.exec(res.headers.get("server-timing") ?? "")?.[1];
      return { i: i + 1, status: res.status, held, retryAfter: res.headers.get("retry-after") };
    }),
  );
  for (const a of answers) {
    const arrival = origin.arrivals.find((r) => r.path === `/reports/${a.i}`);
    const what =
      a.status === 200
        ? `200, at the origin after ${seconds(arrival!.atMs - started)}${a.held ? ` (held ${a.held} ms)` : ""}`
        : `${a.status}, refused at once: Retry-After ${a.retryAfter}`;
    console.log(`  request ${String(a.i).padStart(2)}: ${what}`);
  }
}

async function completions(urls: string[], origin: { arrivals: Arrival[] }): Promise<void> {
  console.log(
    `\n2. One streaming completion at a time per user: 3 users, 3 completions each at once, ${seconds(COMPLETION_MS)} each\n`,
  );
  const started = Date.now();
  const users = ["alice-key", "bob-key", "carol-key"];
  await Promise.all(
    users.flatMap((user, u) =>
      [1, 2, 3].map(async (n) => {
        const res = await fetch(`${urls[(u + n) % ISOLATES]}/completions/${user}/${n}`, {
          headers: { "x-api-key": user },
        });
        await res.text();
        return res.status;
      }),
    ),
  );
  for (const user of users) {
    const mine = origin.arrivals.filter((a) => a.client === user).sort((a, b) => a.atMs - b.atMs);
    const spans = mine.map((a) => `${seconds(a.atMs - started)}–${seconds((a.endedAtMs ?? a.atMs) - started)}`);
    console.log(`  ${user.padEnd(9)}: at the origin ${spans.join(", then ")}`);
  }
  console.log("\n  Each user's completions ran one after another; the three users' ran side by side.");
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), "edge-rate-limiter-demo-"));
  const origin = await startOrigin();
  console.log("building the Worker and starting workerd …");
  const bundle = buildBundle({ main: join(ROOT, "src/index.ts"), outdir: join(work, "edge"), name: "demo" });
  const [objectsPort, ...ports] = await freePorts(ISOLATES + 1);
  const configPath = join(work, "demo.capnp");
  writeEdgeConfig(configPath, {
    edgeBundle: bundle,
    edges: ports.map((port, i) => ({ name: `edge-${i}`, port })),
    bindings: [
      { name: "ORIGIN_URL", text: origin.url },
      { name: "RULES", json: RULES },
    ],
    objects: { name: "objects", bundle, className: "RateLimiter", uniqueKey: "demo-smooth", port: objectsPort! },
    namespaceBinding: "RATE_LIMITER",
    storageDir: join(work, "storage"),
  });
  const urls = ports.map((port) => `http://127.0.0.1:${port}`);
  const workerd = await startWorkerd({
    configPath,
    logFile: join(work, "workerd.log"),
    readyUrls: urls.map((url) => `${url}/__ratelimit/rules`),
  });
  try {
    console.log(`rules: ${JSON.stringify(RULES)}`);
    await burst(urls, origin);
    await completions(urls, origin);
  } finally {
    await workerd.close();
    origin.close();
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
