/**
 * A small origin for trying the limiter locally: it answers every request
 * with what it received, so you can see what got through.
 */
import { createServer } from "node:http";

/** Starts the demo origin on `port` (0 picks a free one) and resolves to the port it listens on. */
export function startDemoOrigin(port = 0) {
  const server = createServer((req, res) => {
    let bytes = 0;
    req.on("data", (chunk) => {
      bytes += chunk.length;
    });
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/json", "x-served-by": "demo-origin" });
      res.end(
        `${JSON.stringify({ origin: "demo", method: req.method, url: req.url, bodyBytes: bytes, at: new Date().toISOString() })}\n`,
      );
    });
  });
  return new Promise((resolve) =>
    server.listen(port, "127.0.0.1", () => resolve({ server, port: server.address().port })),
  );
}
