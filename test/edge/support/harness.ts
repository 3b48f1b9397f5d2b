/**
 * @module
 * The multi-isolate harness: one `workerd serve` running N edge services
 * (`edge-0` … `edge-(N-1)`, each the product's own bundle of src/index.ts in
 * its own isolate, on its own port) and one `objects` service that defines
 * the `RateLimiter` namespace they all bind, in front of a counting origin.
 * That is production's shape: many isolates, each with its own caches,
 * calling one object per key. workerd can be stopped, killed and restarted
 * on the same storage and ports in the middle of a run.
 *
 * With `vanishing`, the last isolates run in a second workerd process
 * instead, which can be killed alone: isolates that vanish while the others
 * and the objects live. The two processes are a workerd cluster (workerd.capnp,
 * `ClusterConfig`, over a bucket this process serves): the second reaches
 * each object through the first, which runs it. An object runs in the
 * process that first asks for it, so a test reaches a key through the first
 * process (an isolate of it, or the admin API) before the vanishing ones.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inject } from "vitest";
import type { RuleInput } from "../../../src/core/rules.ts";
import {
  type Binding,
  type ClusterOptions,
  freePorts,
  startWorkerd,
  type Workerd,
  writeEdgeConfig,
} from "../../../tools/workerd.ts";
import { type Bucket, startBucket } from "./bucket.ts";
import { Driver } from "./driver.ts";
import { type CountingOrigin, startOrigin } from "./origin.ts";
import { scanForFailures } from "./scan.ts";

/** Edge isolates when a test does not say: EDGE_ISOLATES, else 16. */
export const DEFAULT_ISOLATES = Number(process.env.EDGE_ISOLATES ?? 16);
const ADMIN_TOKEN = "edge-harness-admin-token";

export type EdgeOptions = {
  /** The `RULES` of every edge isolate. */
  rules: RuleInput[];
  /** How many edge isolates; default {@link DEFAULT_ISOLATES}. */
  isolates?: number;
  /** `LIMITER_TIMEOUT_MS`; default 5000, well above what a slowed object takes in these tests. */
  timeoutMs?: number;
  /** More bindings for every edge isolate (`IPV6_PREFIX`, …). */
  bindings?: Binding[];
  /** How many of the isolates, the last ones, run in a second workerd process that can be killed alone; default none. */
  vanishing?: number;
};

/** The second workerd process of a harness started with `vanishing`: its isolates, by index, and the process. */
export type Vanishing = {
  isolates: number[];
  workerd: Workerd;
  logFile: string;
};

/** What the admin API says of a client for one rule (README, "Admin API"). */
export type AdminStatus = {
  rule: string;
  keyHash: string;
  limit: number;
  periodMs: number;
  /** The object's count, leased units included. */
  weighted: number;
  allowed: boolean;
  remaining: number;
  /** Under a concurrency rule: its places held now, free, and the requests waiting for one. */
  inUse?: number;
  free?: number | null;
  waiting?: number;
};

export type Edge = {
  /** How many edge isolates run. */
  isolates: number;
  /** The base URL of each edge isolate, by index. */
  urls: string[];
  origin: CountingOrigin;
  /** The process with the objects (and every isolate, or all but the vanishing ones). */
  workerd: Workerd;
  /** With `vanishing`: the process of the last isolates, which can be killed alone; else null. */
  vanishing: Vanishing | null;
  /** The run's directory: config, storage, log; kept when EDGE_KEEP is set. */
  dir: string;
  logFile: string;
  /** A fresh driver over these isolates; each keeps its own records. `timeoutMs`: when a client gives up (default 60 s). */
  driver: (timeoutMs?: number) => Driver;
  /**
   * Checks the objects received since workerd last started, by the rule ids
   * they carried (joined with ","): how many Durable Object calls the edges made.
   */
  objectChecks: () => Promise<Record<string, number>>;
  /** The admin API's view of `key` for `rule`, asked of edge isolate `isolate` (default 0). */
  status: (rule: string, key: string, isolate?: number) => Promise<AdminStatus>;
  /** Lines of workerd's output, since `mark` (default: since it first started), where the runtime reports a hung, cancelled or failed request. */
  failures: (mark?: number) => string[];
  /** Stops workerd and the origin, and removes the run's directory unless EDGE_KEEP is set. */
  stop: () => Promise<void>;
};

/** Starts the harness; the bundles are the ones global setup built for the whole run. */
export async function startEdge(options: EdgeOptions): Promise<Edge> {
  const isolates = options.isolates ?? DEFAULT_ISOLATES;
  const vanishingCount = options.vanishing ?? 0;
  if (!Number.isInteger(vanishingCount) || vanishingCount < 0 || vanishingCount >= isolates) {
    throw new Error(`vanishing: from 0 to ${isolates - 1} of the ${isolates} isolates; got ${vanishingCount}`);
  }
  const dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-edge-"));
  const logFile = join(dir, "workerd.log");
  const origin = await startOrigin();
  const [objectsPort, ...ports] = await freePorts(isolates + 1);
  const edges = ports.map((port, i) => ({ name: `edge-${i}`, port }));
  const firstCount = isolates - vanishingCount;
  let bucket: Bucket | null = null;
  /** Writes the config of one process: every service, the sockets of `listen`, its own storage. */
  const config = (name: string, listen: string[], cluster: ClusterOptions | undefined) => {
    const configPath = join(dir, `${name}.capnp`);
    writeEdgeConfig(configPath, {
      edgeBundle: inject("edgeBundle"),
      edges,
      bindings: [
        { name: "ORIGIN_URL", text: origin.url },
        { name: "RULES", json: options.rules },
        { name: "LIMITER_TIMEOUT_MS", text: String(options.timeoutMs ?? 5000) },
        { name: "ADMIN_TOKEN", text: ADMIN_TOKEN },
        ...(options.bindings ?? []),
      ],
      objects: {
        name: "objects",
        bundle: inject("objectsBundle"),
        className: "RateLimiter",
        uniqueKey: "edge-harness",
        port: objectsPort!,
      },
      namespaceBinding: "RATE_LIMITER",
      storageDir: join(dir, name === "edge" ? "storage" : `storage-${name}`),
      listen,
      ...(cluster === undefined ? {} : { cluster }),
    });
    return configPath;
  };
  const urls = ports.map((port) => `http://127.0.0.1:${port}`);
  const objectsUrl = `http://127.0.0.1:${objectsPort}`;
  const readyUrl = (i: number) => `${urls[i]}/__ratelimit/rules`;
  let workerd: Workerd;
  let vanishing: Vanishing | null = null;
  const started = Date.now();
  try {
    let cluster: ClusterOptions | undefined;
    if (vanishingCount > 0) {
      bucket = await startBucket();
      cluster = { bucket: "s3://edge/cluster", endpoint: bucket.endpoint, key: randomBytes(32).toString("hex") };
    }
    const first = edges.slice(0, firstCount).map((edge) => edge.name);
    // The admin API answers without a token (401) before any rule applies: up, and nothing counted.
    workerd = await startWorkerd({
      configPath: config("edge", [...first, "objects"], cluster),
      logFile,
      readyUrls: [...first.map((_, i) => readyUrl(i)), `${objectsUrl}/checks`],
    });
    if (cluster !== undefined) {
      const indices = Array.from({ length: vanishingCount }, (_, i) => firstCount + i);
      const vanishingLog = join(dir, "vanishing.log");
      try {
        vanishing = {
          isolates: indices,
          logFile: vanishingLog,
          workerd: await startWorkerd({
            configPath: config(
              "vanishing",
              indices.map((i) => edges[i]!.name),
              cluster,
            ),
            logFile: vanishingLog,
            readyUrls: indices.map(readyUrl),
          }),
        };
      } catch (error) {
        await workerd.close();
        throw error;
      }
    }
  } catch (error) {
    await origin.close();
    await bucket?.close();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }

  console.log(
    `edge: workerd up with ${isolates} edge isolates${vanishing ? ` (${vanishingCount} in a second process)` : ""} in ${Date.now() - started} ms; its output goes to ${logFile}`,
  );

  const status = async (rule: string, key: string, isolate = 0): Promise<AdminStatus> => {
    const query = new URLSearchParams({ rule, key });
    const res = await fetch(`${urls[isolate]}/__ratelimit/status?${query}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`admin status ${rule} ${key}: ${res.status} ${text}`);
    return JSON.parse(text) as AdminStatus;
  };

  return {
    isolates,
    urls,
    origin,
    workerd,
    vanishing,
    dir,
    logFile,
    driver: (timeoutMs) => new Driver(urls, timeoutMs),
    objectChecks: async () => (await (await fetch(`${objectsUrl}/checks`)).json()) as Record<string, number>,
    status,
    failures: (mark = 0) => scanForFailures(workerd.outputSince(mark)),
    stop: async () => {
      await vanishing?.workerd.close();
      await workerd.close();
      await origin.close();
      await bucket?.close();
      if (process.env.EDGE_KEEP) console.log(`edge: kept ${dir}`);
      else rmSync(dir, { recursive: true, force: true });
    },
  };
}
