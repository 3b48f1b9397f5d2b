/**
 * @module
 * The origin behind every edge isolate: a Node HTTP server, in the test's
 * own process, that answers 200 (after a while on `/slow/<ms>`) and counts what reaches it by the
 * `x-edge-tag` header, so a test can set what the origin saw against what the
 * clients saw. It notes when each request arrived, in order; and on
 * `/stream/<ms>` it streams its answer (a first part at once, the last that
 * many ms later), counting per client key (`cf-connecting-ip`) the answers
 * open at once: from a request's arrival until its response is done or
 * its connection is gone.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocketServer } from "ws";

export const TAG_HEADER = "x-edge-tag";

export type CountingOrigin = {
  /** Such as `http://127.0.0.1:41234`: the edges' `ORIGIN_URL`. */
  url: string;
  /** How many requests tagged `tag` arrived. */
  hits: (tag: string) => number;
  /** The headers the last request tagged `tag` arrived with, names lower-cased; null if none arrived. */
  headers: (tag: string) => Record<string, string | string[] | undefined> | null;
  /** Every tag that arrived, with its count. */
  tags: () => Map<string, number>;
  /** Requests that arrived, tagged or not. */
  total: () => number;
  /** Every tagged request, in the order it arrived, with when (Unix ms, the clock the objects decide on). */
  arrivals: () => Arrival[];
  /** Per client key, the most `/stream/` answers it ever had open at once. */
  maxOpen: (key: string) => number;
  /** Per client key, the `/stream/` answers it has open now. */
  openNow: (key: string) => number;
  /** Per client key, every `/stream/` answer opening (+1) and closing (−1), in order, with the count after it. */
  openings: (key: string) => { atMs: number; tag: string; change: 1 | -1; open: number }[];
  /** Per client key, the WebSockets the origin upgraded (`/ws/<ms>`) that are open now. */
  webSocketsOpen: (key: string) => number;
  close: () => Promise<void>;
};

/** A tagged request as it reached the origin. */
export type Arrival = { tag: string; key: string; path: string; atMs: number };

export async function startOrigin(): Promise<CountingOrigin> {
  const byTag = new Map<string, number>();
  const headersByTag = new Map<string, Record<string, string | string[] | undefined>>();
  const arrivals: Arrival[] = [];
  const open = new Map<string, number>();
  const maxOpen = new Map<string, number>();
  const openings = new Map<string, { atMs: number; tag: string; change: 1 | -1; open: number }[]>();
  const note = (key: string, tag: string, change: 1 | -1, open: number) => {
    const list = openings.get(key) ?? [];
    list.push({ atMs: performance.timeOrigin + performance.now(), tag, change, open });
    openings.set(key, list);
  };
  let total = 0;
  const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    // Counted on arrival, not after the body: what matters is that the limiter let it through.
    total++;
    const tag = req.headers[TAG_HEADER];
    const key = String(req.headers["cf-connecting-ip"] ?? "");
    if (typeof tag === "string") {
      byTag.set(tag, (byTag.get(tag) ?? 0) + 1);
      headersByTag.set(tag, req.headers);
      arrivals.push({ tag, key, path: req.url ?? "", atMs: performance.timeOrigin + performance.now() });
    }
    req.resume();
    const stream = /^\/stream\/(\d+)/.exec(req.url ?? "");
    if (stream) {
      const now = (open.get(key) ?? 0) + 1;
      open.set(key, now);
      maxOpen.set(key, Math.max(maxOpen.get(key) ?? 0, now));
      note(key, String(tag), 1, now);
      res.once("close", () => {
        const left = (open.get(key) ?? 1) - 1;
        open.set(key, left);
        note(key, String(tag), -1, left);
      });
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("first\n");
      setTimeout(() => {
        if (!res.destroyed) res.end("last\n");
      }, Number(stream[1]));
      return;
    }
    // `/slow/<ms>…` answers after that long: time for a client to hang up first.
    const delayMs = Number(/^\/slow\/(\d+)/.exec(req.url ?? "")?.[1] ?? 0);
    req.on("end", () => {
      setTimeout(() => {
        if (res.destroyed) return;
        res.writeHead(200, { "content-type": "text/plain" });
        res.end("origin\n");
      }, delayMs);
    });
  });
  // `/ws/<ms>`: a WebSocket handshake the origin answers with its 101 that long after it came (if its connection is
  // still open then); each socket upgraded is counted open, per client key, until it closes.
  const upgrader = new WebSocketServer({ noServer: true });
  const webSockets = new Map<string, number>();
  server.on("upgrade", (req, socket, head) => {
    const key = String(req.headers["cf-connecting-ip"] ?? "");
    const delayMs = Number(/^\/ws\/(\d+)/.exec(req.url ?? "")?.[1] ?? 0);
    setTimeout(() => {
      if (socket.destroyed) return;
      upgrader.handleUpgrade(req, socket, head, (ws) => {
        webSockets.set(key, (webSockets.get(key) ?? 0) + 1);
        ws.on("close", () => webSockets.set(key, (webSockets.get(key) ?? 1) - 1));
      });
    }, delayMs);
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits: (tag) => byTag.get(tag) ?? 0,
    headers: (tag) => headersByTag.get(tag) ?? null,
    tags: () => new Map(byTag),
    total: () => total,
    arrivals: () => [...arrivals],
    maxOpen: (key) => maxOpen.get(key) ?? 0,
    openNow: (key) => open.get(key) ?? 0,
    openings: (key) => [...(openings.get(key) ?? [])],
    webSocketsOpen: (key) => webSockets.get(key) ?? 0,
    close: () =>
      new Promise<void>((done) => {
        for (const ws of upgrader.clients) ws.terminate();
        upgrader.close();
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
}
