/**
 * Each blocked or shadow decision writes one JSON line, which shows in what
 * `wrangler dev` prints (and in `wrangler tail` when deployed).
 */
import { readFileSync } from "node:fs";
import { describe, expect, inject, it } from "vitest";
import { canonicalKey, hashKey, type RequestFacts } from "../../src/core/keys.ts";
import { eventually, send, uniqueIp } from "./support/client.ts";

/** The JSON objects among wrangler's output lines: the Worker's structured logs. */
function loggedEvents(): Record<string, unknown>[] {
  const events: Record<string, unknown>[] = [];
  for (const line of readFileSync(inject("wranglerLogFile"), "utf8").split("\n")) {
    const start = line.indexOf("{");
    if (start < 0) continue;
    try {
      events.push(JSON.parse(line.slice(start)));
    } catch {
      // Not a JSON line: wrangler's own output.
    }
  }
  return events;
}

/** The key hash prefix a log line carries for a rule keyed on `ip`, computed as the limiter does. */
async function ipKeyPrefix(ip: string): Promise<string> {
  const facts: RequestFacts = {
    method: "GET",
    path: "/",
    host: () => "",
    ip: () => ip,
    header: () => null,
    cookie: () => null,
    query: () => null,
    network: () => null,
    claim: () => null,
  };
  return (await hashKey(canonicalKey([[{ kind: "ip" }]], facts))).slice(0, 12);
}

const logged = (match: Record<string, unknown>) =>
  eventually(`a log line like ${JSON.stringify(match)}`, async () => {
    const found = loggedEvents().filter((e) => Object.entries(match).every(([k, v]) => e[k] === v));
    return found.length > 0 ? found : undefined;
  });

describe("structured log lines in wrangler dev's output", () => {
  it("logs a blocked decision with the rule, the key's hash prefix, the weighted count and the limit", async () => {
    const ip = uniqueIp();
    const headers = { "cf-connecting-ip": ip };
    await Promise.all(Array.from({ length: 50 }, () => send("/api/fill", { headers })));
    expect((await send("/api/one-too-many", { headers })).status).toBe(429);

    const key = await ipKeyPrefix(ip);
    const lines = await logged({ event: "ratelimit_blocked", key });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: "info",
      event: "ratelimit_blocked",
      rule: "e2e",
      key,
      weighted: 50,
      limit: 50,
      decision: "blocked",
    });
    expect(readFileSync(inject("wranglerLogFile"), "utf8")).not.toContain(ip);
  });

  it('logs a shadow ("log") rule\'s would-be block, and lets the request through', async () => {
    const ip = uniqueIp();
    const headers = { "cf-connecting-ip": ip };
    expect((await send("/shadow/first", { headers })).status).toBe(200);
    expect((await send("/shadow/second", { headers })).status).toBe(200);

    const key = await ipKeyPrefix(ip);
    const lines = await logged({ event: "ratelimit_shadow", key });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: "info",
      event: "ratelimit_shadow",
      rule: "e2e-shadow",
      key,
      weighted: 1,
      limit: 1,
      decision: "would_block",
    });
  });
});
