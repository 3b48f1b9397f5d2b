/**
 * @module
 * WebSocket handshakes over real sockets, in a standalone workerd (which,
 * unlike `wrangler dev`, sees a client's reset while its request waits for
 * the origin): a client that hangs up before the origin's 101 leaves no
 * WebSocket open at the origin. The origin answers `/ws/<ms>` with its 101
 * that long after the handshake came, and counts the sockets it upgraded
 * that are still open.
 */
import { connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { type Edge, startEdge } from "./support/harness.ts";

const RULES: RuleInput[] = [
  { id: "ws-one", path: "/ws/*", concurrency: 1, max_delay: "15s", place_timeout: "30s", key: ["ip"] },
];

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: RULES, isolates: 1, timeoutMs: 5_000 });
});
afterAll(async () => {
  await edge?.stop();
});

/**
 * A WebSocket handshake on a raw socket, reset `resetAfterMs` later (null: kept open until `close` is called).
 * Resolves with the status line that came back, if any, once it is known (or the socket is gone).
 */
function handshake(url: string, path: string, ip: string, resetAfterMs: number | null) {
  const { hostname, port } = new URL(url);
  let answer = "";
  const socket = connect(Number(port), hostname, () => {
    socket.write(
      `GET ${path} HTTP/1.1\r\nhost: ws.test\r\ncf-connecting-ip: ${ip}\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`,
    );
    if (resetAfterMs !== null) setTimeout(() => socket.resetAndDestroy(), resetAfterMs);
  });
  const line = new Promise<string>((resolve) => {
    socket.on("data", (chunk) => {
      answer += chunk.toString("latin1");
      if (answer.includes("\r\n")) resolve(answer.split("\r\n")[0]!);
    });
    socket.on("error", () => resolve(answer.split("\r\n")[0] ?? ""));
    socket.on("close", () => resolve(answer.split("\r\n")[0] ?? ""));
  });
  return { line, close: () => socket.destroy() };
}

describe("a WebSocket handshake whose client hangs up before the origin's 101", () => {
  it("leaves no WebSocket open at the origin, and frees its place", async () => {
    const ip = "10.71.0.1";
    // Three clients, one after another, each resetting 300 ms into a handshake the origin answers after 1 s.
    for (let i = 0; i < 3; i++) await handshake(edge.urls[0]!, "/ws/1000", ip, 300).line;
    await sleep(1_500);
    expect(edge.origin.webSocketsOpen(ip)).toBe(0);
    // The place is free: a handshake the client keeps is upgraded, and open at the origin until it closes.
    const kept = handshake(edge.urls[0]!, "/ws/0", ip, null);
    expect(await kept.line).toBe("HTTP/1.1 101 Switching Protocols");
    await sleep(200);
    expect(edge.origin.webSocketsOpen(ip)).toBe(1);
    kept.close();
  });
});
