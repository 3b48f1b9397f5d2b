/**
 * A real HTTP origin for the tests, in Node. It echoes what it received and
 * counts requests per `x-test-tag`, so a test can ask how many reached it.
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Echo } from "./echo.ts";

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

/** `extra` answers the paths it knows (returning true), before the origin's own. */
export function startOrigin(
  port = 0,
  extra?: (url: URL, req: IncomingMessage, res: ServerResponse) => Promise<boolean>,
): Promise<{ server: Server; port: number }> {
  const hits = new Map<string, number>();
  // Cloudflare accepts request headers up to 128 KB in all; so does this origin.
  const server = createServer({ maxHeaderSize: 256 * 1024 }, async (req, res) => {
    const url = new URL(req.url ?? "/", "http://origin");
    if (url.pathname === "/__hits") {
      json(res, 200, { hits: hits.get(url.searchParams.get("tag") ?? "") ?? 0 });
      return;
    }
    if (await servedKeySet(url, req, res)) return;
    if (extra !== undefined && (await extra(url, req, res))) return;
    const tag = req.headers["x-test-tag"];
    if (typeof tag === "string") hits.set(tag, (hits.get(tag) ?? 0) + 1);
    const body = await readBody(req);

    if (url.pathname === "/redirect") {
      res.writeHead(302, {
        location: "/elsewhere?from=redirect",
        "set-cookie": ["session=abc; Path=/; HttpOnly", "theme=dark"],
      });
      res.end();
      return;
    }
    const slow = /^\/slow\/(\d+)$/.exec(url.pathname);
    if (slow) {
      // An answer that takes a while: a request still in flight when others are decided.
      await new Promise((resolve) => setTimeout(resolve, Number(slow[1])));
      json(res, 200, { from: "origin", slow: true });
      return;
    }
    const stream = /^\/stream\/(\d+)$/.exec(url.pathname);
    if (stream) {
      // A streamed answer, as an AI completion's: its first part at once, the last after that many ms.
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("first\n");
      setTimeout(() => {
        // `?reset`: the origin fails mid-body, its connection reset before the last part.
        if (url.searchParams.has("reset")) res.socket?.resetAndDestroy();
        else if (!res.destroyed) res.end("last\n");
      }, Number(stream[1]));
      return;
    }
    const tokens = /^\/tokens\/([^/]*)$/.exec(url.pathname);
    if (tokens) {
      // An AI-style API: the answer says what it cost, in a header the limiter reads and strips.
      json(res, 200, { from: "origin" }, { "x-tokens-used": decodeURIComponent(tokens[1]!) });
      return;
    }
    const status = /^\/status\/(\d{3})$/.exec(url.pathname);
    if (status) {
      json(res, Number(status[1]), { from: "origin", status: Number(status[1]) }, { "retry-after": "7" });
      return;
    }
    if (url.pathname === "/hop-by-hop") {
      res.setHeader("connection", "keep-alive, x-origin-hop");
      res.setHeader("keep-alive", "timeout=5");
      res.setHeader("x-origin-hop", "should be removed");
      res.setHeader("proxy-authenticate", "Basic");
      res.setHeader("x-end-to-end", "kept");
    }
    const pairs: [string, string][] = [];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      pairs.push([req.rawHeaders[i]!.toLowerCase(), req.rawHeaders[i + 1]!]);
    }
    const echo: Echo = {
      method: req.method ?? "",
      url: req.url ?? "",
      headers: pairs,
      bodyBytes: body.length,
      bodySha256: createHash("sha256").update(body).digest("hex"),
    };
    json(res, 200, echo, { "x-origin": "test-origin" });
  });
  return new Promise((resolve) => {
    server.listen(port, "127.0.0.1", () => resolve({ server, port: (server.address() as AddressInfo).port }));
  });
}

/** How a test's key set endpoint answers: what it serves, with what status, how late, and how often it was asked. */
type KeySetEndpoint = { body: unknown; status: number; delayMs: number; fetches: number };
const keySets = new Map<string, KeySetEndpoint>();

/**
 * Key sets for the token tests, each under a name the test picks:
 * `PUT /__jwks/<name>` with `{"body": <key set>, "status"?, "delayMs"?}` sets
 * what `GET /jwks/<name>` answers; `GET /__jwks/<name>` says how many times
 * it was fetched. The keys are the test's own, made when it runs.
 */
async function servedKeySet(url: URL, req: IncomingMessage, res: ServerResponse): Promise<boolean> {
  const control = /^\/__jwks\/([\w-]+)$/.exec(url.pathname);
  if (control && req.method === "PUT") {
    const set = JSON.parse((await readBody(req)).toString()) as Partial<KeySetEndpoint>;
    const fetches = keySets.get(control[1]!)?.fetches ?? 0;
    keySets.set(control[1]!, { body: set.body, status: set.status ?? 200, delayMs: set.delayMs ?? 0, fetches });
    json(res, 200, { ok: true });
    return true;
  }
  if (control) {
    json(res, 200, { fetches: keySets.get(control[1]!)?.fetches ?? 0 });
    return true;
  }
  const served = /^\/jwks\/([\w-]+)$/.exec(url.pathname);
  if (!served) return false;
  const endpoint = keySets.get(served[1]!);
  if (endpoint === undefined) {
    json(res, 404, { error: "no such key set" });
    return true;
  }
  endpoint.fetches++;
  if (endpoint.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, endpoint.delayMs));
  json(res, endpoint.status, endpoint.body);
  return true;
}

/** A port with nothing listening on it: an origin that is down. */
export async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}
