/**
 * @module
 * `count` when the client hangs up: the origin never answered it, so it
 * counts as failed. Over real sockets, because only a real TCP reset makes
 * workerd cancel the request, the way a client that goes away does.
 */
import { connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { outcomeOf } from "./support/driver.ts";
import { type Edge, startEdge } from "./support/harness.ts";

const FAILED: RuleInput = { id: "count-failed", path: "/*", limit: 2, period: "1h", key: ["ip"], count: "failed" };
/** Under `/up/`: only successes count. */
const SUCCESSFUL: RuleInput = {
  id: "count-successful",
  path: "/up/*",
  limit: 2,
  period: "1h",
  key: ["ip"],
  count: "successful",
};

let edge: Edge;

beforeAll(async () => {
  edge = await startEdge({ rules: [FAILED, SUCCESSFUL], isolates: 1 });
  expect(outcomeOf(await edge.driver().send(0, "10.9.0.1").done)).toBe(200);
});

afterAll(async () => {
  await edge?.stop();
});

describe('count = "failed" when the client hangs up', () => {
  it("counts a request whose client hung up before the origin answered, and never one that succeeded", async () => {
    const driver = edge.driver();
    const ip = "10.9.0.2";
    // Successes never count: five in a row, and the client still has both of its failures.
    for (let i = 0; i < 5; i++) expect(outcomeOf(await driver.send(0, ip).done)).toBe(200);
    // Two requests to a slow answer, each abandoned (a TCP reset) after 100 ms: the origin never answered them.
    for (let i = 0; i < 2; i++) {
      const gone = await driver.send(0, ip, { path: "/slow/1000", abortAfterMs: 100 }).done;
      expect(outcomeOf(gone)).toBe("aborted");
    }
    // Both counted as failed: the limit of 2 is spent.
    expect(outcomeOf(await driver.send(0, ip).done)).toBe(429);
  });
});

/**
 * A POST declaring 100 000 bytes, of which 64 KiB are sent before the client
 * closes its side (FIN): its upload is broken off. Resolves with what came back.
 */
function brokenUpload(url: string, path: string, ip: string, chunked = false): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let answer = "";
    const socket = connect(Number(port), hostname, () => {
      const framing = chunked ? "transfer-encoding: chunked" : "content-length: 100000";
      socket.write(`POST ${path} HTTP/1.1\r\nhost: count.test\r\ncf-connecting-ip: ${ip}\r\n${framing}\r\n\r\n`);
      // Chunked: one chunk, and the client is gone before the last (empty) one.
      socket.end(chunked ? `64\r\n${"x".repeat(100)}\r\n` : Buffer.alloc(64 * 1024, 120));
    });
    socket.on("data", (chunk) => {
      answer += chunk.toString();
    });
    socket.on("error", () => resolve(answer));
    socket.on("close", () => resolve(answer));
    socket.setTimeout(5_000, () => socket.destroy());
  });
}

describe("a client that breaks its upload off", () => {
  // As a hang-up: the origin did not fail, so under "successful" it keeps its count (it was taken for an unreachable
  // origin, a 502, and given back).
  it('keeps its count under count = "successful"', async () => {
    const driver = edge.driver();
    const ip = "10.9.0.3";
    for (let i = 0; i < 2; i++) {
      // Its client broke it off: a client's error (nginx's 499), not a 502 "origin unreachable".
      expect((await brokenUpload(edge.urls[0]!, "/up/slow/0", ip)).split("\r\n")[0]).toBe("HTTP/1.1 499 Client Error");
    }
    await sleep(500); // time for a count given back to land, had one been
    expect(outcomeOf(await driver.send(0, ip, { path: "/up/x" }).done)).toBe(429);
  });

  it("sent in chunks, never reaches the origin as whole", async () => {
    // The runtime ends such a body as if it were whole; passed on as it is, the origin sees the break.
    const line = (await brokenUpload(edge.urls[0]!, "/up/slow/0", "10.9.0.4", true)).split("\r\n")[0];
    expect(line).not.toBe("HTTP/1.1 200 OK");
  });
});
