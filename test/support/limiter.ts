/**
 * Drives the real Worker app, with real Durable Objects and the real origin,
 * under rules chosen by each test.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { inject } from "vitest";
import { app } from "../../src/worker/app.ts";
import type { Env } from "../../src/worker/env.ts";
import { env } from "./env.ts";

export const originUrl = (): string => `http://127.0.0.1:${inject("originPort")}`;
export const downOriginUrl = (): string => `http://127.0.0.1:${inject("downPort")}`;

/**
 * The Worker under `rules`: `timed(path, init)` returns its response and how
 * long it took to answer, once background work (refunds) is done too.
 */
export function timedLimiter(rules: unknown[], vars: Partial<Env> = {}) {
  const testEnv: Env = { ...env, ORIGIN_URL: originUrl(), ...vars, RULES: rules };
  return async (path: string, init: RequestInit = {}): Promise<{ response: Response; responseMs: number }> => {
    const ctx = createExecutionContext();
    const url = path.startsWith("/") ? `http://limiter.test${path}` : path;
    const started = Date.now();
    const response = await app.fetch(new Request(url, init), testEnv, ctx);
    const responseMs = Date.now() - started;
    await waitOnExecutionContext(ctx);
    return { response, responseMs };
  };
}

/** The Worker under `rules`: `send(path, init)` returns its response once background work (refunds) is done. */
export function limiter(rules: unknown[], vars: Partial<Env> = {}) {
  const timed = timedLimiter(rules, vars);
  return async (path: string, init: RequestInit = {}): Promise<Response> => (await timed(path, init)).response;
}

/** How many requests tagged `tag` (header `x-test-tag`) the origin has received. */
export async function originHits(tag: string): Promise<number> {
  const res = await fetch(`${originUrl()}/__hits?tag=${encodeURIComponent(tag)}`);
  return ((await res.json()) as { hits: number }).hits;
}

let clients = 0;
/** A client IP no other test uses: storage is shared by the tests of a file. */
export const uniqueIp = (): string => {
  clients++;
  return `10.${(clients >> 8) & 255}.${clients & 255}.${Math.floor(Math.random() * 250) + 1}`;
};

let tags = 0;
export const uniqueTag = (name: string): string => `${name}-${++tags}-${Date.now()}`;

/** Headers for a client with this IP (as Cloudflare's edge sets it). */
export const from = (ip: string, headers: Record<string, string> = {}): RequestInit => ({
  headers: { "cf-connecting-ip": ip, ...headers },
});

/** `n` requests in a row; their statuses. */
export async function statuses(n: number, send: () => Promise<Response>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const res = await send();
    await res.arrayBuffer();
    out.push(res.status);
  }
  return out;
}
