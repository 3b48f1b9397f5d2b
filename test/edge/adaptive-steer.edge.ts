/**
 * @module
 * No client steers an adaptive rule, over real sockets, in a standalone
 * workerd: clients that trickle a 2-byte body over 1.2 s, or send one byte
 * and reset their connection 50 ms later (from 1 key, and from 5), while a
 * legitimate client sends 4 POSTs a second, far below its limit, to an
 * origin that answers in a millisecond. The limit stays the configured one
 * (every legitimate answer's `RateLimit-Policy` says so) and every
 * legitimate request gets 200. Before the fix, within 5 s the limit was at
 * its floor and the legitimate client got 503 for about half its requests.
 */
import { connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { quotaOf, type RequestRecord } from "./support/driver.ts";
import { type Edge, startEdge } from "./support/harness.ts";

const ISOLATES = 4;
const LIMIT = 600;
const RUN_MS = 8_000;

/** One rule per attack, each on its own path, so each has its own controller. */
const ATTACKS = [
  { path: "trickle-1", attackers: 1, how: "trickle" },
  { path: "trickle-5", attackers: 5, how: "trickle" },
  { path: "reset-1", attackers: 1, how: "reset" },
  { path: "reset-5", attackers: 5, how: "reset" },
] as const;
const adaptiveRule = (path: string): RuleInput => ({
  id: `steer-${path}`,
  path: `/${path}/*`,
  limit: LIMIT,
  period: "1m",
  key: ["ip"],
  adaptive: { latency: "300ms", percentile: 99, errors: "5%" },
});
/** Clients that send a GET with a body, which a Worker's fetch cannot forward (it was a 502, an origin failure). */
const GET_WITH_BODY = "get-body";
const RULES: RuleInput[] = [...ATTACKS.map(({ path }) => adaptiveRule(path)), adaptiveRule(GET_WITH_BODY)];

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: RULES, isolates: ISOLATES, timeoutMs: 5_000 });
});
afterAll(async () => {
  await edge?.stop();
});

/**
 * One attacking request on a raw socket: a POST declaring 2 bytes, its
 * first byte at once; then the second 1.2 s later (`trickle`), or a reset
 * 50 ms later (`reset`). Resolves when the socket is done.
 */
function attack(url: string, path: string, ip: string, how: "trickle" | "reset"): Promise<void> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname, () => {
      socket.write(
        `POST ${path} HTTP/1.1\r\nhost: steer.test\r\ncf-connecting-ip: ${ip}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{`,
      );
      if (how === "reset") setTimeout(() => socket.resetAndDestroy(), 50);
      else setTimeout(() => socket.write("}"), 1_200);
    });
    socket.on("data", () => socket.end());
    socket.on("error", () => resolve());
    socket.on("close", () => resolve());
    socket.setTimeout(10_000, () => socket.destroy());
  });
}

describe("clients that cannot move an adaptive rule's limit, over real sockets", () => {
  it("a trickled body or a reset mid-upload, from 1 key and from 5, every second each: the limit stays, and the legitimate client gets only 200", async () => {
    const driver = edge.driver(10_000);
    const startedAt = Date.now();
    const attacking = ATTACKS.map(async ({ path, attackers, how }, a) => {
      const ips = Array.from({ length: attackers }, (_, i) => `10.66.${a}.${i + 1}`);
      const sockets: Promise<void>[] = [];
      for (let round = 0; Date.now() - startedAt < RUN_MS; round++) {
        ips.forEach((ip, i) => {
          sockets.push(attack(edge.urls[(round + i) % ISOLATES]!, `/${path}/x`, ip, how));
        });
        await sleep(1_000);
      }
      await Promise.all(sockets);
    });
    const legitimate = ATTACKS.map(async ({ path }, a) => {
      const records: RequestRecord[] = [];
      for (let i = 0; Date.now() - startedAt < RUN_MS + 1_000; i++) {
        records.push(await driver.send(i % ISOLATES, `10.77.${a}.1`, { method: "POST", path: `/${path}/x` }).done);
        await sleep(250);
      }
      return records;
    });
    const [records] = await Promise.all([Promise.all(legitimate), Promise.all(attacking)]);
    ATTACKS.forEach(({ path }, a) => {
      const mine = records[a]!;
      const statuses: Record<string, number> = {};
      for (const r of mine) statuses[String(r.status)] = (statuses[String(r.status)] ?? 0) + 1;
      console.log(
        `${path}: legitimate ${JSON.stringify(statuses)}, lowest quota ${Math.min(...mine.map((r) => quotaOf(r) ?? LIMIT))}`,
      );
    });
    for (const mine of records) {
      expect(mine.length).toBeGreaterThan(20);
      expect(mine.filter((r) => r.status !== 200).map((r) => r.status)).toEqual([]);
      expect(mine.map(quotaOf).filter((q) => q !== LIMIT)).toEqual([]);
    }
  });
});

/** A GET with a body of `bytes` (2: `{}`) on a raw socket (no client library sends one): the status line it gets back. */
function getWithBody(url: string, path: string, ip: string, bytes: 0 | 2 = 2): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let answer = "";
    const socket = connect(Number(port), hostname, () => {
      socket.write(
        `GET ${path} HTTP/1.1\r\nhost: steer.test\r\ncf-connecting-ip: ${ip}\r\ncontent-length: ${bytes}\r\nconnection: close\r\n\r\n${bytes === 2 ? "{}" : ""}`,
      );
    });
    socket.on("data", (chunk) => {
      answer += chunk.toString();
    });
    socket.on("error", () => resolve(answer.split("\r\n")[0] ?? ""));
    socket.on("close", () => resolve(answer.split("\r\n")[0] ?? ""));
    socket.setTimeout(10_000, () => socket.destroy());
  });
}

describe("clients that send what the Worker cannot forward", () => {
  it("six keys, each a GET with a body every 300 ms: 400 at the edge, and the legitimate client gets only 200 at the configured limit", async () => {
    const driver = edge.driver(10_000);
    const startedAt = Date.now();
    const lines: string[] = [];
    const attacking = Array.from({ length: 6 }, async (_, i) => {
      for (let round = 0; Date.now() - startedAt < 5_000; round++) {
        lines.push(await getWithBody(edge.urls[(round + i) % ISOLATES]!, `/${GET_WITH_BODY}/x`, `10.88.0.${i + 1}`));
        await sleep(300);
      }
    });
    const records: RequestRecord[] = [];
    const legitimate = (async () => {
      for (let i = 0; Date.now() - startedAt < 6_000; i++) {
        records.push(
          await driver.send(i % ISOLATES, "10.89.0.1", { method: "POST", path: `/${GET_WITH_BODY}/x` }).done,
        );
        await sleep(250);
      }
    })();
    await Promise.all([...attacking, legitimate]);
    expect(lines.length).toBeGreaterThan(30);
    expect(new Set(lines)).toEqual(new Set(["HTTP/1.1 400 Bad Request"]));
    expect(records.filter((r) => r.status !== 200).map((r) => r.status)).toEqual([]);
    expect(records.map(quotaOf).filter((q) => q !== LIMIT)).toEqual([]);
  });

  it("a GET that declares an empty body (Content-Length: 0, as some clients send) is forwarded as any GET", async () => {
    expect(await getWithBody(edge.urls[0]!, `/${GET_WITH_BODY}/x`, "10.88.1.1", 0)).toBe("HTTP/1.1 200 OK");
  });
});
