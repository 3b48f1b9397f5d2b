/**
 * Bodies stream through the limiter both ways, without being held in its
 * memory, and a client that goes away stops the origin.
 */
import { createHash, randomBytes } from "node:crypto";
import { request } from "node:http";
import { describe, expect, inject, it } from "vitest";
import { eventually, limiterUrl, originStream, uniqueIp } from "./support/client.ts";
import { describeMemory, measureMemory, workerdProcesses } from "./support/memory.ts";
import type { UploadReceipt } from "./support/origin.ts";

const TRANSFER_BYTES = 100 * 2 ** 20;
const CHUNK_BYTES = 64 * 1024;
/** Holding a 100 MiB body would add at least 100 MiB; streaming adds buffers of a few MiB. */
const MAX_PEAK_GROWTH_BYTES = 60 * 2 ** 20;

const limiter = () => new URL(limiterUrl());

/** Uploads `totalBytes` of random data, written as the socket drains; the client's SHA-256 and the origin's receipt. */
function upload(
  totalBytes: number,
  ip: string,
): Promise<{ sentSha256: string; status: number; receipt: UploadReceipt }> {
  const hash = createHash("sha256");
  return new Promise((resolve, reject) => {
    const req = request({
      hostname: limiter().hostname,
      port: limiter().port,
      path: "/upload",
      method: "PUT",
      headers: { "cf-connecting-ip": ip, "content-type": "application/octet-stream", "content-length": totalBytes },
      agent: false,
    });
    req.on("error", reject);
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        text += chunk;
      });
      res.on("end", () =>
        resolve({ sentSha256: hash.digest("hex"), status: res.statusCode ?? 0, receipt: JSON.parse(text) }),
      );
    });
    let sent = 0;
    const pump = (): void => {
      while (sent < totalBytes) {
        const chunk = randomBytes(Math.min(CHUNK_BYTES, totalBytes - sent));
        hash.update(chunk);
        sent += chunk.length;
        if (!req.write(chunk)) {
          req.once("drain", pump);
          return;
        }
      }
      req.end();
    };
    pump();
  });
}

/** Downloads `/download/<id>`; the status, the byte count and the SHA-256 of what arrived. */
function download(
  id: string,
  totalBytes: number,
  ip: string,
): Promise<{ status: number; bytes: number; sha256: string }> {
  return new Promise((resolve, reject) => {
    const req = request({
      hostname: limiter().hostname,
      port: limiter().port,
      path: `/download/${id}?bytes=${totalBytes}`,
      headers: { "cf-connecting-ip": ip },
      agent: false,
    });
    req.on("error", reject);
    req.on("response", (res) => {
      const hash = createHash("sha256");
      let bytes = 0;
      res.on("data", (chunk: Buffer) => {
        hash.update(chunk);
        bytes += chunk.length;
      });
      res.on("error", reject);
      res.on("end", () => resolve({ status: res.statusCode ?? 0, bytes, sha256: hash.digest("hex") }));
    });
    req.end();
  });
}

function expectFlatMemory(reports: Awaited<ReturnType<typeof measureMemory>>["reports"]): void {
  expect(reports.map((r) => r.role).sort()).toEqual(["proxy", "worker"]);
  for (const r of reports) expect(r.peakRssBytes - r.beforeRssBytes).toBeLessThan(MAX_PEAK_GROWTH_BYTES);
}

describe("streaming through the limiter", () => {
  it("streams a 100 MiB upload to the origin intact, without holding it in memory", async () => {
    const processes = workerdProcesses(inject("wranglerPid"));
    const started = performance.now();
    const { result, reports } = await measureMemory(processes, () => upload(TRANSFER_BYTES, uniqueIp()));
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `upload: ${TRANSFER_BYTES} bytes in ${seconds.toFixed(1)} s (${(TRANSFER_BYTES / 2 ** 20 / seconds).toFixed(0)} MiB/s)\n` +
        describeMemory("upload", reports),
    );
    expect(result.status).toBe(200);
    expect(result.receipt).toEqual({ bytes: TRANSFER_BYTES, sha256: result.sentSha256 });
    expectFlatMemory(reports);
  });

  it("streams a 100 MiB download to the client intact, without holding it in memory", async () => {
    const processes = workerdProcesses(inject("wranglerPid"));
    const id = `download-${randomBytes(6).toString("hex")}`;
    const started = performance.now();
    const { result, reports } = await measureMemory(processes, () => download(id, TRANSFER_BYTES, uniqueIp()));
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `download: ${TRANSFER_BYTES} bytes in ${seconds.toFixed(1)} s (${(TRANSFER_BYTES / 2 ** 20 / seconds).toFixed(0)} MiB/s)\n` +
        describeMemory("download", reports),
    );
    expect(result.status).toBe(200);
    const sent = await eventually("the origin to finish the download", async () => {
      const record = await originStream(id);
      return record.state === "streaming" ? undefined : record;
    });
    expect(sent).toEqual({ state: "finished", bytesSent: TRANSFER_BYTES, sha256: result.sha256 });
    expect(result.bytes).toBe(TRANSFER_BYTES);
    expectFlatMemory(reports);
  });

  it("cancels the origin's response when the client aborts mid-download", async () => {
    const id = `abort-${randomBytes(6).toString("hex")}`;
    const receivedBytes = await new Promise<number>((resolve, reject) => {
      const req = request({
        hostname: limiter().hostname,
        port: limiter().port,
        path: `/endless/${id}`,
        headers: { "cf-connecting-ip": uniqueIp() },
        agent: false,
      });
      req.on("error", reject);
      req.on("response", (res) => {
        let bytes = 0;
        res.on("error", () => {}); // the abort below is this client's own doing
        res.on("data", (chunk: Buffer) => {
          bytes += chunk.length;
          if (bytes >= 2 ** 20) {
            req.destroy();
            resolve(bytes);
          }
        });
      });
      req.end();
    });
    expect(receivedBytes).toBeGreaterThanOrEqual(2 ** 20);
    // The origin streams without end: only a cancelled fetch makes its response close.
    const record = await eventually(
      "the origin to see its response closed",
      async () => {
        const r = await originStream(id);
        return r.state === "streaming" ? undefined : r;
      },
      15_000,
    );
    console.log(
      `abort: the client read ${receivedBytes} bytes; the origin had sent ${record.bytesSent} when it closed`,
    );
    expect(record.state).toBe("closed-early");
  });
});
