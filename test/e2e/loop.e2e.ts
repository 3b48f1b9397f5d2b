/**
 * The shipped wrangler.toml as a user runs it, with ORIGIN_URL left unset
 * off a route: the Worker's origin is then its own URL. One request must
 * give one 508 after one nested request, never a chain of them.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningWorker, startWrangler } from "./support/wrangler.ts";

const CONFIG = fileURLToPath(new URL("../../wrangler.toml", import.meta.url));
const ENTRY = fileURLToPath(new URL("../../src/index.ts", import.meta.url));

let dir: string;
let logFile: string;
let worker: RunningWorker;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-loop-"));
  logFile = join(dir, "wrangler-dev.log");
  worker = await startWrangler({
    configPath: CONFIG,
    entryPath: ENTRY,
    vars: {},
    persistTo: join(dir, "state"),
    logFile,
  });
});

afterAll(async () => {
  await worker?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("without ORIGIN_URL, off a route", () => {
  it("answers one request with one 508 after a single nested request, and logs the way out", async () => {
    const res = await fetch(`${worker.url}/api/hello`, { headers: { "cf-connecting-ip": "203.0.113.50" } });
    expect(res.status).toBe(508);
    expect(await res.json()).toMatchObject({ type: "urn:edge-rate-limiter:loop-detected", status: 508 });
    // wrangler prints one line per request the Worker answers: the client's, and the one it sent itself.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const log = readFileSync(logFile, "utf8");
    expect(log.match(/GET \/api\/hello 508/g)?.length).toBe(2);
    expect(log).toContain('"event":"loop_detected"');
  });
});
