/**
 * @module
 * A constant origin on this machine: a Node server answering every request
 * with 200 and a small JSON body, as workers/origin.ts does inside workerd.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

/** Starts it on a free port; `from` goes in the body, to tell origins apart. */
export async function startNodeOrigin(from: string): Promise<{ url: string; close: () => void }> {
  const body = JSON.stringify({ ok: true, from });
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
}
