/**
 * A WebSocket through the limiter: the upgrade is one request against the
 * limit, and frames then flow both ways until either side closes.
 */
import { randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { describe, expect, inject, it } from "vitest";
import WebSocket from "ws";
import { limiterUrl, originHits, send, uniqueIp, uniqueTag } from "./support/client.ts";

type Frame = { data: Buffer; isBinary: boolean };

/** Opens a WebSocket and collects its frames; `next()` resolves to the next frame, in order. */
async function connect(path: string, headers: Record<string, string>) {
  const ws = new WebSocket(`${limiterUrl().replace(/^http/, "ws")}${path}`, { headers });
  const frames: Frame[] = [];
  const waiting: ((frame: Frame) => void)[] = [];
  ws.on("message", (data: Buffer, isBinary) => {
    const frame = { data, isBinary };
    const waiter = waiting.shift();
    if (waiter) waiter(frame);
    else frames.push(frame);
  });
  // ws emits "upgrade" and then "open" in one go: listen for both before waiting.
  let handshake: IncomingMessage | undefined;
  ws.once("upgrade", (res) => {
    handshake = res;
  });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.on("error", reject);
    ws.once("unexpected-response", (req, res) => {
      res.resume();
      req.destroy();
      reject(new Error(`upgrade refused with ${res.statusCode}`));
    });
  });
  const next = (): Promise<Frame> => {
    const frame = frames.shift();
    if (frame) return Promise.resolve(frame);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no frame within 10 s")), 10_000);
      waiting.push((f) => {
        clearTimeout(timer);
        resolve(f);
      });
    });
  };
  const close = () =>
    new Promise<number>((resolve) => {
      ws.once("close", (code) => resolve(code));
      ws.close(1000, "done");
    });
  return { ws, handshake: handshake!, next, close };
}

describe("WebSockets through the limiter", () => {
  it("echoes text and binary frames both ways, and counts the upgrade once", async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("ws");
    const socket = await connect("/ws/echo", { "cf-connecting-ip": ip, "x-test-tag": tag });
    expect(socket.handshake.statusCode).toBe(101);
    expect(socket.handshake.headers["x-ratelimit-remaining"]).toBe("49");

    const greeting = await socket.next();
    expect(greeting).toEqual({ data: Buffer.from("hello from the origin"), isBinary: false });

    for (let i = 1; i <= 20; i++) {
      socket.ws.send(`ping ${i}`);
      const echo = await socket.next();
      expect({ text: echo.data.toString("utf8"), isBinary: echo.isBinary }).toEqual({
        text: `ping ${i}`,
        isBinary: false,
      });
    }
    const payload = randomBytes(256 * 1024);
    socket.ws.send(payload);
    const echoed = await socket.next();
    expect(echoed.isBinary).toBe(true);
    expect(echoed.data.equals(payload)).toBe(true);

    expect(await socket.close()).toBe(1000);
    expect(await originHits(tag)).toBe(1);
    // 20 frames and more in each direction, yet only the upgrade counted: this is the second request.
    const after = await send("/api/after-websocket", { headers: { "cf-connecting-ip": ip } });
    expect(after.headers["x-ratelimit-remaining"]).toBe("48");
  });

  it("refuses an upgrade over the limit with the limiter's 429, before it reaches the origin", async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("ws-blocked");
    await Promise.all(Array.from({ length: 50 }, () => send("/api/fill", { headers: { "cf-connecting-ip": ip } })));
    const refused = await connect("/ws/echo", { "cf-connecting-ip": ip, "x-test-tag": tag }).then(
      () => "opened",
      (error: Error) => error.message,
    );
    expect(refused).toBe("upgrade refused with 429");
    expect(await originHits(tag)).toBe(0);
  });

  it("holds its place under a concurrency rule until it closes, relaying frames both ways meanwhile", async () => {
    const ip = uniqueIp();
    const first = await connect("/ws-one/echo", { "cf-connecting-ip": ip, "x-test-tag": uniqueTag("ws-one") });
    expect(first.handshake.headers.ratelimit).toBe('"e2e-ws-one";r=0');
    expect(first.handshake.headers["ratelimit-policy"]).toContain('"e2e-ws-one";q=1;qu="concurrent-requests"');
    expect((await first.next()).data.toString("utf8")).toBe("hello from the origin");
    // Its one place is held: a second socket of the client is refused while it is open.
    const second = await connect("/ws-one/echo", { "cf-connecting-ip": ip }).then(
      () => "opened",
      (error: Error) => error.message,
    );
    expect(second).toBe("upgrade refused with 429");
    first.ws.send("still here");
    expect((await first.next()).data.toString("utf8")).toBe("still here");
    expect(await first.close()).toBe(1000);
    // Closed: the place is free again (the release goes in the background; give it a moment).
    let third: Awaited<ReturnType<typeof connect>> | null = null;
    for (let i = 0; i < 20 && third === null; i++) {
      third = await connect("/ws-one/echo", { "cf-connecting-ip": ip }).catch(() => null);
      if (third === null) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(third).not.toBeNull();
    await third!.close();
  });

  it("finishes an open WebSocket its client is denied meanwhile, and refuses the client's next upgrade with 403", async () => {
    const ip = uniqueIp();
    const tag = uniqueTag("ws-deny");
    const socket = await connect("/ws-one/echo", { "cf-connecting-ip": ip, "x-test-tag": tag });
    expect((await socket.next()).data.toString("utf8")).toBe("hello from the origin");
    const admin = (method: string) =>
      send(`/__ratelimit/overrides?rule=e2e-ws-one&key=${ip}`, {
        method,
        headers: {
          authorization: `Bearer ${inject("adminToken")}`,
          "content-type": "application/json",
          "cf-connecting-ip": uniqueIp(),
        },
        ...(method === "PUT" ? { body: JSON.stringify({ deny: true }) } : {}),
      });
    expect((await admin("PUT")).status).toBe(200);
    // A deny refuses what comes after it; it does not cut what is on its way (docs/lifecycle.md, "admitted").
    socket.ws.send("after the deny");
    expect((await socket.next()).data.toString("utf8")).toBe("after the deny");
    const next = await connect("/ws-one/echo", { "cf-connecting-ip": ip, "x-test-tag": tag }).then(
      () => "opened",
      (error: Error) => error.message,
    );
    expect(next).toBe("upgrade refused with 403");
    expect(await socket.close()).toBe(1000);
    expect(await originHits(tag)).toBe(1);
    expect((await admin("DELETE")).status).toBe(200);
  });
});
