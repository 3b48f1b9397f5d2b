/**
 * @module
 * A client over real sockets: requests to the limiter under `wrangler dev`,
 * sent with node:http so the request target goes on the wire exactly as written.
 */
import { randomBytes } from "node:crypto";
import { type IncomingHttpHeaders, request } from "node:http";
import { inject } from "vitest";
import type { StreamRecord } from "./origin.ts";

export type Reply = {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  text: () => string;
  json: <T = unknown>() => T;
};

export type SendOptions = {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
};

export const limiterUrl = (): string => inject("limiterUrl");
export const originUrl = (): string => inject("e2eOriginUrl");

/**
 * Sends one request to `base` (default: the limiter) on its own connection,
 * as a separate client would, and reads the whole answer.
 */
export function send(target: string, options: SendOptions = {}, base = limiterUrl()): Promise<Reply> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({
      hostname,
      port,
      path: target,
      method: options.method ?? "GET",
      headers: options.headers,
      agent: false,
    });
    req.on("error", reject);
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("error", reject);
      res.on("end", () => {
        const body = Buffer.concat(chunks);
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body,
          text: () => body.toString("utf8"),
          json: <T>() => JSON.parse(body.toString("utf8")) as T,
        });
      });
    });
    req.end(options.body);
  });
}

/** How many requests tagged `tag` (header `x-test-tag`) reached the origin. */
export async function originHits(tag: string): Promise<number> {
  const reply = await send(`/__e2e/hits/${encodeURIComponent(tag)}`, {}, originUrl());
  return reply.json<{ hits: number }>().hits;
}

/** What the origin knows about the response body it streamed as `id`. */
export async function originStream(id: string): Promise<StreamRecord> {
  const reply = await send(`/__e2e/streams/${encodeURIComponent(id)}`, {}, originUrl());
  if (reply.status !== 200) throw new Error(`origin: no stream ${JSON.stringify(id)} (status ${reply.status})`);
  return reply.json<StreamRecord>();
}

/**
 * A client IP no other test uses. Each test file runs in a fresh module, so
 * a counter alone would repeat across files; 24 random bits do not.
 */
export const uniqueIp = (): string => `10.${[...randomBytes(3)].join(".")}`;

/** A tag no other request uses, to count what reached the origin. */
export const uniqueTag = (name: string): string => `${name}-${randomBytes(6).toString("hex")}`;

/** Polls `check` every 50 ms until it returns a value, or fails after `timeoutMs` with `what`. */
export async function eventually<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
