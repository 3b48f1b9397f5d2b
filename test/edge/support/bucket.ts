/**
 * @module
 * An S3-compatible bucket in the test's own process, in memory: the shared
 * state of a workerd cluster (workerd.capnp, `ClusterConfig`), which the
 * harness starts when a test wants isolates in a workerd process of their
 * own. It serves what a cluster asks of one: objects put, read (whole or by
 * range) and deleted, conditional puts (`If-None-Match: *`, `If-Match`), and
 * listings (ListObjectsV2, with a prefix and a delimiter). It checks no
 * signature: only the cluster's instances, on loopback, reach it.
 */
import { createHash } from "node:crypto";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export type Bucket = {
  /** Such as `http://127.0.0.1:41234`: the cluster's `aws_endpoint`. */
  endpoint: string;
  /** Requests it answered, for a failure's message. */
  requests: () => number;
  close: () => Promise<void>;
};

type Stored = { body: Buffer; etag: string };

const xml = (res: ServerResponse, status: number, body: string) =>
  res.writeHead(status, { "content-type": "application/xml" }).end(`<?xml version="1.0" encoding="UTF-8"?>${body}`);
const escapeXml = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const error = (res: ServerResponse, status: number, code: string) =>
  xml(res, status, `<Error><Code>${code}</Code><Message>${code}</Message></Error>`);

export async function startBucket(): Promise<Bucket> {
  /** Objects by `/<bucket>/<key>`. */
  const objects = new Map<string, Stored>();
  let requests = 0;
  let version = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      requests++;
      const url = new URL(req.url ?? "/", "http://bucket");
      const path = decodeURIComponent(url.pathname);
      const current = objects.get(path);
      if (req.method === "GET" && url.searchParams.get("list-type") === "2") {
        const bucket = path.split("/")[1] ?? "";
        const prefix = url.searchParams.get("prefix") ?? "";
        const delimiter = url.searchParams.get("delimiter") ?? "";
        const keys: string[] = [];
        const prefixes = new Set<string>();
        for (const name of [...objects.keys()].sort()) {
          if (!name.startsWith(`/${bucket}/${prefix}`)) continue;
          const key = name.slice(bucket.length + 2);
          const cut = delimiter === "" ? -1 : key.indexOf(delimiter, prefix.length);
          if (cut >= 0) prefixes.add(key.slice(0, cut + delimiter.length));
          else keys.push(key);
        }
        const contents = keys
          .map((key) => {
            const stored = objects.get(`/${bucket}/${key}`)!;
            return `<Contents><Key>${escapeXml(key)}</Key><ETag>${escapeXml(stored.etag)}</ETag><Size>${stored.body.length}</Size></Contents>`;
          })
          .join("");
        const common = [...prefixes]
          .map((p) => `<CommonPrefixes><Prefix>${escapeXml(p)}</Prefix></CommonPrefixes>`)
          .join("");
        xml(
          res,
          200,
          `<ListBucketResult><Name>${escapeXml(bucket)}</Name><Prefix>${escapeXml(prefix)}</Prefix><KeyCount>${keys.length + prefixes.size}</KeyCount><MaxKeys>100000</MaxKeys><IsTruncated>false</IsTruncated>${contents}${common}</ListBucketResult>`,
        );
        return;
      }
      if (req.method === "PUT") {
        const noneMatch = req.headers["if-none-match"];
        const match = req.headers["if-match"];
        if ((noneMatch === "*" && current) || (match !== undefined && current?.etag !== match)) {
          error(res, 412, "PreconditionFailed");
          return;
        }
        const body = Buffer.concat(chunks);
        const etag = `"${createHash("md5").update(body).update(String(++version)).digest("hex")}"`;
        objects.set(path, { body, etag });
        res.writeHead(200, { etag }).end();
        return;
      }
      if (req.method === "GET" || req.method === "HEAD") {
        if (current === undefined) {
          error(res, 404, "NoSuchKey");
          return;
        }
        const head = req.method === "HEAD";
        const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? "");
        if (range) {
          const start = Number(range[1]);
          const end = Math.min(range[2] ? Number(range[2]) : Number.POSITIVE_INFINITY, current.body.length - 1);
          if (start >= current.body.length) {
            error(res, 416, "InvalidRange");
            return;
          }
          res.writeHead(206, {
            etag: current.etag,
            "content-range": `bytes ${start}-${end}/${current.body.length}`,
            "content-length": end - start + 1,
          });
          res.end(head ? undefined : current.body.subarray(start, end + 1));
          return;
        }
        res.writeHead(200, { etag: current.etag, "content-length": current.body.length });
        res.end(head ? undefined : current.body);
        return;
      }
      if (req.method === "DELETE") {
        objects.delete(path);
        res.writeHead(204).end();
        return;
      }
      error(res, 501, "NotImplemented");
    });
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: () => requests,
    close: () =>
      new Promise<void>((done) => {
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
}
