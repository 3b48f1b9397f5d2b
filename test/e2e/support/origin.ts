/**
 * @module
 * The origin behind the limiter in the end-to-end suite: a real Node HTTP and
 * WebSocket server. It echoes what arrived byte for byte, streams large
 * bodies both ways with their SHA-256, and reports what it saw under
 * `/__e2e/`, which the tests ask directly, not through the limiter.
 */
import { createHash, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocketServer } from "ws";

/** What the origin reports about a request it answered with an echo. */
export type Echo = {
  method: string;
  /** The request target exactly as it arrived on the wire. */
  target: string;
  /** Header names and values exactly as they arrived, in order. */
  rawHeaders: string[];
  bodyBytes: number;
};

/** What the origin knows about a response body it streamed. */
export type StreamRecord = {
  /** `finished`: every byte was handed to the socket; `closed-early`: the connection closed first. */
  state: "streaming" | "finished" | "closed-early";
  bytesSent: number;
  /** SHA-256 (hex) of the bytes sent; set once the stream ends either way. */
  sha256: string | null;
};

/** What the origin received as an upload. */
export type UploadReceipt = { bytes: number; sha256: string };

export type RunningOrigin = { url: string; close: () => Promise<void> };

const CHUNK_BYTES = 64 * 1024;

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

/** Reads the body only to count it: an echo must not hold a large upload in memory. */
function countBody(req: IncomingMessage): Promise<number> {
  return new Promise((resolve, reject) => {
    let bytes = 0;
    req.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
    });
    req.on("end", () => resolve(bytes));
    req.on("error", reject);
  });
}

/**
 * Streams random bytes, `totalBytes` of them or until the client goes away
 * (`Infinity`), waiting for the socket to drain so nothing piles up here.
 */
function streamRandom(res: ServerResponse, totalBytes: number, record: StreamRecord): void {
  const hash = createHash("sha256");
  res.on("close", () => {
    if (record.state === "streaming") record.state = res.writableFinished ? "finished" : "closed-early";
    record.sha256 ??= hash.digest("hex");
  });
  res.writeHead(200, {
    "content-type": "application/octet-stream",
    ...(Number.isFinite(totalBytes) ? { "content-length": String(totalBytes) } : {}),
  });
  const pump = (): void => {
    while (record.bytesSent < totalBytes && !res.destroyed) {
      const chunk = randomBytes(Math.min(CHUNK_BYTES, totalBytes - record.bytesSent));
      hash.update(chunk);
      record.bytesSent += chunk.length;
      if (!res.write(chunk)) {
        res.once("drain", pump);
        return;
      }
    }
    if (!res.destroyed) res.end();
  };
  pump();
}

/** Starts the origin on a free port of 127.0.0.1. */
export function startOrigin(): Promise<RunningOrigin> {
  const hitsByTag = new Map<string, number>();
  const streams = new Map<string, StreamRecord>();

  const countHit = (req: IncomingMessage): void => {
    const tag = req.headers["x-test-tag"];
    if (typeof tag === "string") hitsByTag.set(tag, (hitsByTag.get(tag) ?? 0) + 1);
  };

  const newStream = (id: string): StreamRecord => {
    const record: StreamRecord = { state: "streaming", bytesSent: 0, sha256: null };
    streams.set(id, record);
    return record;
  };

  // Cloudflare accepts request headers up to 128 KB in all; so does this origin.
  const server = createServer({ maxHeaderSize: 256 * 1024, keepAliveTimeout: 120_000 }, async (req, res) => {
    // Routing reads the raw target: URL parsing would rewrite `//` and dot segments.
    const target = req.url ?? "/";
    const param = (pattern: RegExp): string | null => {
      const match = pattern.exec(target);
      return match ? decodeURIComponent(match[1]!) : null;
    };

    const hitsOf = param(/^\/__e2e\/hits\/([^/?]+)$/);
    if (hitsOf !== null) {
      json(res, 200, { hits: hitsByTag.get(hitsOf) ?? 0 });
      return;
    }
    const streamOf = param(/^\/__e2e\/streams\/([^/?]+)$/);
    if (streamOf !== null) {
      const record = streams.get(streamOf);
      json(res, record ? 200 : 404, record ?? { error: "no such stream" });
      return;
    }

    countHit(req);
    if (target === "/upload") {
      const hash = createHash("sha256");
      let bytes = 0;
      req.on("data", (chunk: Buffer) => {
        hash.update(chunk);
        bytes += chunk.length;
      });
      req.on("end", () => json(res, 200, { bytes, sha256: hash.digest("hex") } satisfies UploadReceipt));
      return;
    }
    const download = /^\/download\/([^/?]+)\?bytes=(\d+)$/.exec(target);
    if (download) {
      streamRandom(res, Number(download[2]), newStream(decodeURIComponent(download[1]!)));
      return;
    }
    const endless = param(/^\/endless\/([^/?]+)$/);
    if (endless !== null) {
      streamRandom(res, Number.POSITIVE_INFINITY, newStream(endless));
      return;
    }
    const bodyBytes = await countBody(req);
    if (target === "/redirect") {
      res.writeHead(302, {
        location: "/elsewhere?from=redirect&x=%2F",
        "set-cookie": ["session=abc; Path=/; HttpOnly", "theme=dark; Max-Age=3600", "consent=yes; SameSite=Lax"],
      });
      res.end();
      return;
    }
    const statusParam = param(/^\/status\/(\d{3})$/);
    if (statusParam !== null) {
      const status = Number(statusParam);
      json(res, status, { from: "origin", status }, { "retry-after": "30", "x-origin": "e2e-origin" });
      return;
    }
    json(res, 200, { method: req.method ?? "", target, rawHeaders: req.rawHeaders, bodyBytes } satisfies Echo, {
      "x-origin": "e2e-origin",
    });
  });

  // WebSockets: greet, then echo every frame as it came (text stays text, binary stays binary).
  const sockets = new WebSocketServer({ noServer: true });
  server.on("upgrade", (req, socket, head) => {
    countHit(req);
    sockets.handleUpgrade(req, socket, head, (ws) => {
      ws.send("hello from the origin");
      ws.on("message", (data, isBinary) => ws.send(data, { binary: isBinary }));
    });
  });

  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        close: () =>
          new Promise<void>((done) => {
            for (const ws of sockets.clients) ws.terminate();
            sockets.close();
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}
