/**
 * @module
 * The origin behind every edge isolate: a Node HTTP server, in the test's
 * own process, that answers 200 (after a while on `/slow/<ms>`) and counts what reaches it by the
 * `x-edge-tag` header, so a test can set what the origin saw against what the
 * clients saw.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

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
  close: () => Promise<void>;
};

export async function startOrigin(): Promise<CountingOrigin> {
  const byTag = new Map<string, number>();
  const headersByTag = new Map<string, Record<string, string | string[] | undefined>>();
  let total = 0;
  const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    // Counted on arrival, not after the body: what matters is that the limiter let it through.
    total++;
    const tag = req.headers[TAG_HEADER];
    if (typeof tag === "string") {
      byTag.set(tag, (byTag.get(tag) ?? 0) + 1);
      headersByTag.set(tag, req.headers);
    }
    req.resume();
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
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits: (tag) => byTag.get(tag) ?? 0,
    headers: (tag) => headersByTag.get(tag) ?? null,
    tags: () => new Map(byTag),
    total: () => total,
    close: () =>
      new Promise<void>((done) => {
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
}
