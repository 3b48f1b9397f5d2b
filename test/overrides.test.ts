/**
 * Per-client limits without a redeploy: an override for one client under one
 * rule, set through the admin API, enforced by that client's own object on
 * its very next request, and listed by the registry.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env as workerEnv } from "cloudflare:workers";
import { Hono } from "hono";
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { parseSettings } from "../src/config/settings.ts";
import { hashKey } from "../src/core/keys.ts";
import type { Override } from "../src/core/overrides.ts";
import { createIsolate } from "../src/isolate/isolate.ts";
import type { OverrideRegistry } from "../src/object/registry.ts";
import { adminApi } from "../src/worker/admin/api.ts";
import { adminKey } from "../src/worker/admin/key.ts";
import type { Env } from "../src/worker/env.ts";
import { rateLimit } from "../src/worker/middleware.ts";
import { chunked, escapedJson } from "./support/bodies.ts";
import { env } from "./support/env.ts";
import { from, limiter, statuses, uniqueIp } from "./support/limiter.ts";
import { bearer, keySet, type SigningKey, signingKey, tokenFor } from "./support/tokens.ts";

const TOKEN = "test-admin-token-overrides-5d1e";
const auth = { authorization: `Bearer ${TOKEN}` };

let rules = 0;
/** A rule of its own per test (`limit` a minute per IP), and a `pro` tier that gives it `pro` a minute. */
function setup(limit: number, pro = 3 * limit) {
  const id = `ovr-${++rules}`;
  const send = limiter([{ id, limit, period: "1m", path: "/api/*" }], {
    ADMIN_TOKEN: TOKEN,
    TIERS: { pro: { [id]: pro }, gold: { [id]: 5 * limit } },
  });
  const admin = async (method: string, query: string, body?: unknown, type = "application/json") => {
    const res = await send(`/__ratelimit/overrides${query}`, {
      method,
      headers: { ...auth, "content-type": type },
      ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const set = (ip: string, override: unknown) => admin("PUT", `?rule=${id}&key=${ip}`, override);
  const api = (ip: string) => send("/api/x", from(ip));
  const run = (n: number, ip: string) => statuses(n, () => api(ip));
  return { id, send, admin, set, api, run };
}

afterEach(() => {
  vi.useRealTimers();
});

describe("an override changes one client's limit, from its very next request", () => {
  it("raises it: the client gets the new limit, in the headers too, and others keep the rule's", async () => {
    const { set, api, run } = setup(2);
    const [client, other] = [uniqueIp(), uniqueIp()];
    expect(await run(3, client)).toEqual([200, 200, 429]);
    expect((await set(client, { limit: 5 })).status).toBe(200);
    const next = await api(client);
    expect(next.status).toBe(200);
    expect(next.headers.get("ratelimit-policy")).toMatch(/;q=5;w=60$/);
    expect(await run(3, client)).toEqual([200, 200, 429]); // 5 in all: 2 before the change, 3 after
    expect(await run(3, other)).toEqual([200, 200, 429]);
  });

  it("lowers it: a client already past the new limit is refused at once", async () => {
    const { set, run } = setup(10);
    const client = uniqueIp();
    expect(await run(4, client)).toEqual([200, 200, 200, 200]);
    expect((await set(client, { limit: 3 })).status).toBe(200);
    expect(await run(2, client)).toEqual([429, 429]);
  });

  it("lifts it (unlimited): never refused, never counted, and no RateLimit headers for the rule", async () => {
    const { set, api, run, admin, id } = setup(2);
    const client = uniqueIp();
    expect(await run(3, client)).toEqual([200, 200, 429]);
    expect((await set(client, { unlimited: true })).status).toBe(200);
    const next = await api(client);
    expect([next.status, next.headers.get("ratelimit-policy"), next.headers.get("ratelimit")]).toEqual([
      200,
      null,
      null,
    ]);
    expect(await run(20, client)).toEqual(Array(20).fill(200));
    // Nothing was counted while lifted: deleting the override leaves the 2 of before.
    expect((await admin("DELETE", `?rule=${id}&key=${client}`)).status).toBe(200);
    expect(await run(1, client)).toEqual([429]);
  });

  it("denies it: 403 problem+json of its own type, the origin untouched, from the next request on", async () => {
    const { set, api } = setup(100);
    const client = uniqueIp();
    expect((await api(client)).status).toBe(200);
    expect((await set(client, { deny: true, note: "abuse ticket 4411" })).status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const res = await api(client);
      expect(res.status).toBe(403);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(res.headers.get("x-origin")).toBeNull();
      expect(res.headers.get("retry-after")).toBeNull();
      const body = (await res.json()) as Record<string, unknown>;
      expect(body.type).toBe("urn:edge-rate-limiter:denied");
      expect(JSON.stringify(body)).not.toContain("abuse"); // the note is for operators only
    }
  });

  it("restores the rule's limit when deleted", async () => {
    const { set, admin, run, id } = setup(2);
    const client = uniqueIp();
    expect((await set(client, { limit: 4 })).status).toBe(200);
    expect(await run(4, client)).toEqual([200, 200, 200, 200]);
    const deleted = await admin("DELETE", `?rule=${id}&key=${client}`);
    expect(deleted.body).toMatchObject({ before: { limit: 4 }, after: null, applied: true });
    expect(await run(1, client)).toEqual([429]); // 4 counted, the rule's 2 again
    const shown = await admin("GET", `?rule=${id}&key=${client}`);
    expect(shown.body.override).toBeNull();
  });
});

describe("tiers", () => {
  it("applies the tier's limit, and names the tier in the 429", async () => {
    const { set, api, run } = setup(2, 4);
    const client = uniqueIp();
    expect((await set(client, { tier: "pro" })).status).toBe(200);
    expect(await run(4, client)).toEqual([200, 200, 200, 200]);
    const refused = await api(client);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("ratelimit-policy")).toMatch(/;q=4;w=60$/);
    expect(((await refused.json()) as { detail: string }).detail).toMatch(/\(4 per minute, tier "pro"\)/);
    const cached = await api(client); // answered from the isolate's cache: the same limit and tier
    expect(cached.headers.get("ratelimit-policy")).toMatch(/;q=4;w=60$/);
    expect(((await cached.json()) as { detail: string }).detail).toMatch(/tier "pro"/);
  });

  it("carries the client's counts over when its tier changes", async () => {
    const { set, run } = setup(2, 4);
    const client = uniqueIp();
    expect((await set(client, { tier: "pro" })).status).toBe(200);
    expect(await run(4, client)).toEqual([200, 200, 200, 200]);
    expect((await set(client, { tier: "gold" })).status).toBe(200); // gold: 10 a minute
    expect(await run(7, client)).toEqual([200, 200, 200, 200, 200, 200, 429]);
  });
});

/** The clock stood still at noon on 2030-01-01, whose time this returns. */
function atStart(): number {
  vi.useFakeTimers({ toFake: ["Date"] });
  const start = Date.UTC(2030, 0, 1, 12, 0, 0);
  vi.setSystemTime(start);
  return start;
}

describe("expiry", () => {
  it("ends an override at its expiry, to the millisecond, and the rule's limit applies again", async () => {
    const { set, api, run } = setup(1);
    const client = uniqueIp();
    const start = atStart();
    expect((await set(client, { limit: 3, expires: start + 30_000 })).status).toBe(200);
    expect(await run(3, client)).toEqual([200, 200, 200]);
    vi.setSystemTime(start + 29_999);
    expect((await api(client)).status).toBe(429); // still 3
    vi.setSystemTime(start + 30_000);
    const after = await api(client);
    expect(after.status).toBe(429); // the rule's 1 again, with 3 counted
    expect(after.headers.get("ratelimit-policy")).toMatch(/;q=1;w=60$/);
  });

  it("tells a refusal under a lower limit the wait to its expiry, where the rule's own limit admits the request then", async () => {
    const { set, api } = setup(10);
    const client = uniqueIp();
    const start = atStart();
    expect((await set(client, { limit: 1, expires: start + 15_000 })).status).toBe(200);
    expect((await api(client)).status).toBe(200);
    // Refused under the override's 1 a minute; at its expiry the rule's 10 a minute admit it: 15 s, not 60.
    const refused = await api(client);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("15");
    vi.setSystemTime(start + 15_000);
    expect((await api(client)).status).toBe(200);
  });

  it("tells a refusal under a lower limit its own wait when the rule's limit would refuse at the expiry too", async () => {
    const { set, api, run } = setup(2);
    const client = uniqueIp();
    const start = atStart();
    expect(await run(2, client)).toEqual([200, 200]);
    expect((await set(client, { limit: 1, expires: start + 15_000 })).status).toBe(200);
    // 2 counted: refused under the override's 1 and under the rule's 2 at the expiry alike; the wait is the rule's.
    const refused = await api(client);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(15);
  });

  it("tells a refusal under a raise that ends before its wait the rule's wait from the end: neither sooner nor later", async () => {
    const { set, api, run } = setup(10);
    const client = uniqueIp();
    const start = atStart();
    expect((await set(client, { limit: 20, expires: start + 15_000 })).status).toBe(200);
    expect(await run(20, client)).toEqual(Array(20).fill(200));
    // Refused under the raise's 20; it ends in 15 s, and the rule's 10 a minute, with 20 counted, refuse until the
    // window has slid far enough: the wait told is the rule's, from the raise's end on.
    const refused = await api(client);
    expect(refused.status).toBe(429);
    const waitS = Number(refused.headers.get("retry-after"));
    expect(waitS).toBeGreaterThan(15);
    vi.setSystemTime(start + (waitS - 1) * 1_000);
    expect((await api(client)).status).toBe(429);
    vi.setSystemTime(start + waitS * 1_000);
    expect((await api(client)).status).toBe(200);
  });

  it("ends a far higher limit at its expiry though the isolate holds a lease under it: no lease outlives the override", async () => {
    const { set, api, run } = setup(5);
    const client = uniqueIp();
    const start = atStart();
    expect((await set(client, { limit: 1_000_000_000, expires: start + 3_000 })).status).toBe(200);
    vi.setSystemTime(start + 1); // a lease from a call sent at the instant of a change is written off as sent before it
    // Far below the limit: the isolate is leased units, spent without asking.
    expect(await run(2, client)).toEqual([200, 200]);
    vi.setSystemTime(start + 3_000);
    const statuses: number[] = [];
    const policies = new Set<string | null>();
    for (let i = 0; i < 6; i++) {
      const res = await api(client);
      statuses.push(res.status);
      policies.add(res.headers.get("ratelimit-policy")?.replace(/^"[^"]*"/, "") ?? null);
    }
    // The rule's 5 a minute, with the 2 counted under the override: 3 more, then refused; all under q=5.
    expect(statuses).toEqual([200, 200, 200, 429, 429, 429]);
    expect(policies).toEqual(new Set([";q=5;w=60"]));
  });
});

describe("concurrency", () => {
  it("300 concurrent requests across a change from 50 to 100 never admit more than 100", async () => {
    const { set, api } = setup(50);
    const client = uniqueIp();
    const requests = Array.from({ length: 300 }, (_, i) =>
      i === 100 ? set(client, { limit: 100 }).then(() => 0) : api(client).then((r) => r.status),
    );
    const all = await Promise.all(requests);
    const admitted = all.filter((s) => s === 200).length;
    expect(admitted).toBeGreaterThanOrEqual(50);
    expect(admitted).toBeLessThanOrEqual(100);
  });
});

describe("the index", () => {
  it("lists exactly what the objects enforce, filtered by rule, tier and note, a page at a time", async () => {
    const { id, admin, send } = setup(5);
    const clients = Array.from({ length: 7 }, () => uniqueIp());
    const items = clients.map((ip, i) => ({
      rule: id,
      key: ip,
      ...(i % 2 === 0 ? { tier: "pro" } : { limit: 10 + i }),
      note: i < 3 ? `migration ${i}` : "",
    }));
    const imported = await admin("POST", "/import", items);
    expect(imported.body).toEqual({ created: 7, updated: 0, unchanged: 0, deleted: 0 });
    expect((await admin("POST", "/import", items)).body).toEqual({ created: 0, updated: 0, unchanged: 7, deleted: 0 });
    await settled();
    const listed: Record<string, unknown>[] = [];
    let cursor: string | null = null;
    do {
      const page = await admin("GET", `?rule=${id}&limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      listed.push(...(page.body.overrides as Record<string, unknown>[]));
      cursor = page.body.next as string | null;
    } while (cursor !== null);
    expect(listed).toHaveLength(7);
    expect(listed.every((entry) => entry.state === "applied")).toBe(true);
    // `total` counts what the filter matches, on every page (other tests' overrides are in the same index).
    expect((await admin("GET", `?rule=${id}&limit=3`)).body.total).toBe(7);
    const tiered = await admin("GET", `?rule=${id}&tier=pro`);
    expect((tiered.body.overrides as unknown[]).length).toBe(4);
    expect(tiered.body.total).toBe(4);
    const noted = await admin("GET", `?rule=${id}&note=MIGRATION`);
    expect((noted.body.overrides as unknown[]).length).toBe(3);
    expect(noted.body.total).toBe(3);
    // What each client's object enforces (read from the object itself) is what the index says.
    for (const [i, ip] of clients.entries()) {
      const res = await send(`/__ratelimit/status?rule=${id}&key=${ip}`, { headers: auth });
      const enforced = await res.json();
      expect(enforced).toMatchObject(i % 2 === 0 ? { limit: 15, tier: "pro" } : { limit: 10 + i, override: "limit" });
    }
  });

  it("reads a spreadsheet's CSV, where every column is filled and false means no", async () => {
    const { id, admin } = setup(1);
    const ip = uniqueIp();
    const csv = `rule,key,limit,tier,unlimited,deny,expires,note,delete\n${id},${ip},3,,FALSE,false,,,false\n`;
    expect((await admin("POST", "/import", csv, "text/csv")).body).toEqual({
      created: 1,
      updated: 0,
      unchanged: 0,
      deleted: 0,
    });
  });

  it("imports CSV, deletes with it, and the index and the objects agree after", async () => {
    const { id, admin, run } = setup(1);
    const [a, b] = [uniqueIp(), uniqueIp()];
    const csv = `rule,key,limit,tier,note\n${id},${a},3,,"a, quoted ""note"""\n${id},${b},,pro,\n`;
    expect((await admin("POST", "/import", csv, "text/csv")).body).toMatchObject({ created: 2 });
    await settled();
    expect(await run(4, a)).toEqual([200, 200, 200, 429]);
    const shown = await admin("GET", `?rule=${id}&key=${a}`);
    expect(shown.body).toMatchObject({ limit: 3, note: 'a, quoted "note"', state: "applied" });
    const removal = `rule,key,delete\n${id},${a},true\n`;
    expect((await admin("POST", "/import", removal, "text/csv")).body).toMatchObject({ deleted: 1 });
    await settled();
    expect((await admin("GET", `?rule=${id}`)).body.overrides).toHaveLength(1);
    expect(await run(1, a)).toEqual([429]); // the rule's 1, with 3 counted
  });
});

describe("the index names each client with the key= parameters that reach it", () => {
  const id = "ovr-shapes";
  const send = limiter(
    [
      { id, limit: 5, period: "1m", path: "/api/*", key: ["header:x-api-key|cookie:sid", "path"] },
      { id: `${id}-ip`, limit: 5, period: "1m", path: "/api/*" },
    ],
    { ADMIN_TOKEN: TOKEN },
  );
  const admin = async (method: string, rule: string, keys: string[] = [], body?: unknown) => {
    const query = new URLSearchParams([["rule", rule], ...keys.map((key): [string, string] => ["key", key])]);
    if (keys.length === 0) query.set("limit", "1000");
    const res = await send(`/__ratelimit/overrides?${query}`, {
      method,
      headers: { ...auth, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const tag = uniqueIp();
  // The client as an operator names it, and the key= parameters the index lists it with.
  const shapes: [rule: string, named: string[], listed: string[]][] = [
    [id, [`header:x-api-key=${tag}`, "path=/api/a"], [`header:x-api-key=${tag}`, "path=/api/a"]],
    [id, [`cookie:sid=${tag}`, "path=/api/a"], [`cookie:sid=${tag}`, "path=/api/a"]],
    [id, ["header:x-api-key=", "path=/API/a/"], ["header:x-api-key|cookie:sid=", "path=/api/a"]],
    [id, ["header:x-api-key=null", "path=/api/a"], ["header:x-api-key=null", "path=/api/a"]],
    [id, ["header:x-api-key|cookie:sid=", "path=/api/b"], ["header:x-api-key|cookie:sid=", "path=/api/b"]],
    [id, [`header:x-api-key=${tag}&key=x %41`, "path=/api/a"], [`header:x-api-key=${tag}&key=x %41`, "path=/api/a"]],
    [`${id}-ip`, [tag], [`ip=${tag}`]],
    [`${id}-ip`, ["ip="], ["ip=unknown"]],
  ];

  it.each(shapes)(
    "%s %j is listed as key=%j, and a DELETE with those removes it and no other",
    async (rule, named, listed) => {
      for (const [r, keys] of shapes) expect((await admin("PUT", r, keys, { limit: 9 })).status).toBe(200);
      const before = [
        ...((await admin("GET", id)).body.overrides as Listed[]),
        ...((await admin("GET", `${id}-ip`)).body.overrides as Listed[]),
      ];
      const entry = before.find((e) => e.rule === rule && JSON.stringify(e.keyParams) === JSON.stringify(listed));
      expect(entry, JSON.stringify(before.map((e) => e.keyParams))).toBeDefined();
      expect((await admin("GET", rule, entry!.keyParams)).body).toMatchObject({ keyParams: listed, limit: 9 });
      const deleted = await admin("DELETE", rule, entry!.keyParams);
      expect(deleted).toMatchObject({ status: 200, body: { keyParams: listed, before: { limit: 9 }, after: null } });
      const after = [
        ...((await admin("GET", id)).body.overrides as Listed[]),
        ...((await admin("GET", `${id}-ip`)).body.overrides as Listed[]),
      ];
      expect(after).toEqual(before.filter((e) => e !== entry));
      expect((await admin("GET", rule, named)).body).toMatchObject({ keyParams: listed, override: null });
    },
  );
});

/** An entry of the index, as far as these tests read it. */
type Listed = { rule: string; key: unknown; keyParams: string[] };

describe("the registry across a restart", () => {
  it("never numbers a change below one an object already has, so a set after a delete and a restart applies", async () => {
    const { id, set, admin, send } = setup(2);
    const client = uniqueIp();
    expect((await set(client, { limit: 7 })).body.applied).toBe(true);
    expect((await admin("DELETE", `?rule=${id}&key=${client}`)).body.applied).toBe(true);
    const ns = (workerEnv as unknown as { OVERRIDES: DurableObjectNamespace<OverrideRegistry> }).OVERRIDES;
    await evictDurableObject(ns.get(ns.idFromName("registry")));
    expect((await set(client, { limit: 9 })).body.applied).toBe(true);
    const enforced = await (await send(`/__ratelimit/status?rule=${id}&key=${client}`, { headers: auth })).json();
    expect(enforced).toMatchObject({ limit: 9, override: "limit" });
  });
});

describe("bad input gets a 400 that names the field, and changes nothing", () => {
  const { id, set, admin, run } = setup(2);
  const client = uniqueIp();

  it.each([
    ["an unknown rule", "?rule=nope&key=1.2.3.4", { limit: 5 }, /rule: no rule "nope"/],
    ["an unknown tier", null, { tier: "platinum" }, /field "tier": must be a tier of TIERS: "pro", "gold"/],
    ["a negative limit", null, { limit: -1 }, /field "limit": must be an integer from 1/],
    ["a malformed key", `?rule=${id}&key=not-an-ip`, { limit: 5 }, /key: /],
    [
      "an expiry in the past",
      null,
      { limit: 5, expires: "2001-01-01T00:00:00Z" },
      /field "expires": must be in the future/,
    ],
    ["a 1 MB note", null, { limit: 5, note: "x".repeat(1 << 20) }, /field "note": must be at most 1000 characters/],
    ["two settings", null, { limit: 5, deny: true }, /exactly one of "limit", "tier", "unlimited" or "deny"/],
    ["an unknown field", null, { limit: 5, limt: 6 }, /field "limt": unknown/],
  ])("%s", async (_, query, body, message) => {
    const res = await admin("PUT", query ?? `?rule=${id}&key=${client}`, body);
    expect(res.status).toBe(400);
    expect(res.body.type).toBe("urn:edge-rate-limiter:invalid-override");
    expect((res.body.errors as string[]).join("\n")).toMatch(message);
    expect((await admin("GET", `?rule=${id}&key=${client}`)).body.override).toBeNull();
  });

  it("rejects a whole import when one line is bad, naming the line", async () => {
    const res = await admin("POST", "/import", [
      { rule: id, key: uniqueIp(), limit: 5 },
      { rule: id, key: uniqueIp(), limit: 0 },
    ]);
    expect(res.status).toBe(400);
    expect(res.body.errors).toEqual(['item 2: field "limit": must be an integer from 1 to 1000000000; got 0']);
    expect((await admin("GET", `?rule=${id}`)).body.overrides).toEqual([]);
  });

  // Input an import cannot read one way only: refused whole, naming the line or item, and nothing changes.
  it.each([
    [
      "a deletion with a setting beside it",
      [{ key: "ip", limit: 7, delete: true }],
      'item 1: delete: true deletes the override; remove "limit", or "delete"',
    ],
    ["a CSV column named twice", "rule,key,limit,limit\n{id},{ip},5,6\n", 'body: CSV columns named twice: "limit"'],
    [
      "a CSV row with more cells than columns",
      "rule,key,limit\n{id},{ip},5,extra\n",
      "line 2: 4 cells, and the header names 3 columns",
    ],
    ["a CSV quote never closed", 'rule,key,note\n{id},{ip},"open\n', "line 2: a quote opened here is never closed"],
    [
      "one client twice",
      [
        { key: "ip", limit: 7 },
        { key: "ip", limit: 8 },
      ],
      'item 2: names the same client under "{id}" as item 1',
    ],
  ])("rejects %s", async (_, body, error) => {
    const ip = uniqueIp();
    const sent =
      typeof body === "string"
        ? await admin("POST", "/import", body.replaceAll("{id}", id).replaceAll("{ip}", ip), "text/csv")
        : await admin(
            "POST",
            "/import",
            body.map((item) => ({ rule: id, ...item, key: ip })),
          );
    expect(sent.status).toBe(400);
    expect(sent.body.errors).toEqual([error.replace("{id}", id)]);
    expect((await admin("GET", `?rule=${id}&key=${ip}`)).body.override).toBeNull();
  });

  it("reads a CSV note that holds a line break, quoted as RFC 4180 has it", async () => {
    const ip = uniqueIp();
    const csv = `rule,key,limit,note\n${id},${ip},5,"first line\nsecond line"\n`;
    expect((await admin("POST", "/import", csv, "text/csv")).status).toBe(200);
    expect((await admin("GET", `?rule=${id}&key=${ip}`)).body).toMatchObject({ note: "first line\nsecond line" });
    expect((await admin("DELETE", `?rule=${id}&key=${ip}`)).status).toBe(200);
  });

  it("left the client on the rule's own limit throughout", async () => {
    expect(await run(3, client)).toEqual([200, 200, 429]);
    expect((await set(client, { limit: 3 })).status).toBe(200);
  });
});

describe("an override's note is counted in characters, whatever they are and however JSON spells them", () => {
  const { id, admin } = setup(2);
  const emoji = "\u{1F600}";
  // Each body as sent: JSON.stringify keeps characters as themselves; "escaped" spells each as \\uXXXX.
  const escaped = (text: string) => `{"limit":5,"note":"${escapedJson(text)}"}`;
  it.each([
    ["1000 emoji", JSON.stringify({ limit: 5, note: emoji.repeat(1_000) }), null],
    ["1000 emoji, escaped", escaped(emoji.repeat(1_000)), null],
    ["1000 accented letters, escaped", escaped("\u00e9".repeat(1_000)), null],
    [
      "1001 emoji",
      JSON.stringify({ limit: 5, note: emoji.repeat(1_001) }),
      'field "note": must be at most 1000 characters; got 1001',
    ],
    [
      "1001 letters",
      JSON.stringify({ limit: 5, note: "x".repeat(1_001) }),
      'field "note": must be at most 1000 characters; got 1001',
    ],
  ])("%s", async (_, body, error) => {
    const client = uniqueIp();
    const res = await admin("PUT", `?rule=${id}&key=${client}`, body);
    if (error === null) {
      expect(res.status).toBe(200);
      const { note } = JSON.parse(body) as { note: string };
      expect((await admin("GET", `?rule=${id}&key=${client}`)).body).toMatchObject({ limit: 5, note });
    } else {
      expect(res.status).toBe(400);
      expect(res.body.errors).toEqual([error]);
    }
  });
});

describe("an override's limit out of range: the error states the rule's own range, and the value as sent", () => {
  const send = limiter(
    [
      { id: "rng-window", limit: 10, period: "1m", path: "/w/*" },
      { id: "rng-costly", limit: 100, period: "1m", cost: 5, path: "/c/*" },
      { id: "rng-places", concurrency: 5, path: "/p/*" },
      { id: "rng-bucket", limit: 10, period: "1h", burst: 20, path: "/b/*" },
      { id: "rng-quota", quota: 100, per: "month", path: "/q/*" },
    ],
    { ADMIN_TOKEN: TOKEN },
  );
  const admin = async (method: string, route: string, body: string, type = "application/json") => {
    const res = await send(`/__ratelimit/overrides${route}`, {
      method,
      headers: { ...auth, "content-type": type },
      body,
    });
    return { status: res.status, body: (await res.json()) as { type: string; errors: string[] } };
  };
  const range = {
    "rng-window": "from 1 to 1000000000",
    "rng-costly": "from 5 to 1000000000",
    "rng-places": "from 1 to 10000",
    "rng-bucket": "from 1 to 500000000",
    "rng-quota": "from 1 to 1000000000",
  };

  it.each(
    Object.keys(range).flatMap((rule) => ["0", "-1", "2.5", '"100"', "null"].map((json) => [rule, json] as const)),
  )('PUT under %s with {"limit": %s}', async (rule, json) => {
    const res = await admin("PUT", `?rule=${rule}&key=${uniqueIp()}`, `{"limit": ${json}}`);
    expect(res.status).toBe(400);
    expect(res.body.type).toBe("urn:edge-rate-limiter:invalid-override");
    expect(res.body.errors).toEqual([
      `field "limit": must be an integer ${range[rule as keyof typeof range]}; got ${json}`,
    ]);
  });

  it.each(
    Object.keys(range).flatMap((rule) =>
      ["abc", "12abc", "0x10", "1e3", "2.50", "-3", "0"].map((cell) => [rule, cell] as const),
    ),
  )("a CSV import under %s with limit %s", async (rule, cell) => {
    const csv = `rule,key,limit\n${rule},${uniqueIp()},5\n${rule},${uniqueIp()},${cell}\n`;
    const res = await admin("POST", "/import", csv, "text/csv");
    expect(res.status).toBe(400);
    const sent = cell === "0" ? "0" : JSON.stringify(cell);
    expect(res.body.errors).toEqual([
      `item 2: field "limit": must be an integer ${range[rule as keyof typeof range]}; got ${sent}`,
    ]);
  });

  it("keeps the reason for a whole number out of the rule's range", async () => {
    const key = uniqueIp();
    expect((await admin("PUT", `?rule=rng-places&key=${key}`, '{"limit": 10001}')).body.errors).toEqual([
      'field "limit": 10001 is above the most places rule "rng-places" may give a client (10000); must be at most 10000',
    ]);
    expect((await admin("PUT", `?rule=rng-costly&key=${key}`, '{"limit": 3}')).body.errors).toEqual([
      'field "limit": 3 is below the cost of rule "rng-costly" (5), so no request of this client could ever be admitted; must be at least 5',
    ]);
    expect((await admin("POST", "/import", `rule,key,limit\nrng-window,${key}, 7 \n`, "text/csv")).status).toBe(200);
  });
});

describe("a body past 8 MiB is refused with 413, counted in bytes, and read no further", () => {
  const MAX_BYTES = 8 * 1024 * 1024;
  const MiB = 1024 * 1024;
  /** 1 MiB of "é": 512 Ki characters, each 2 bytes in UTF-8. */
  const accents = "é".repeat(MiB / 2);

  /** Each route that reads a body, and the query and type it is sent with. */
  const routes: [string, string, string][] = [
    ["PUT /overrides", "PUT", "application/json"],
    ["POST /overrides/import, JSON", "POST", "application/json"],
    ["POST /overrides/import, CSV", "POST", "text/csv"],
  ];
  const path = (method: string, id: string) =>
    method === "PUT" ? `/__ratelimit/overrides?rule=${id}&key=${uniqueIp()}` : "/__ratelimit/overrides/import";

  it.each(routes)("%s: 9 MiB by its Content-Length, refused before its body is read", async (_, method, type) => {
    const { id, send } = setup(2);
    const { body, pulled } = chunked(" ".repeat(MiB), 9);
    const headers = { ...auth, "content-type": type, "content-length": String(9 * MiB) };
    await expectTooLarge(await send(path(method, id), { method, headers, body }));
    expect(pulled()).toBeLessThanOrEqual(1); // at most the one a stream makes ready before it is read
  });

  it.each(routes)("%s: 100 MiB sent chunked, of which at most 10 MiB are read", async (_, method, type) => {
    const { id, send } = setup(2);
    const { body, pulled } = chunked(" ".repeat(MiB), 100);
    const res = await send(path(method, id), { method, headers: { ...auth, "content-type": type }, body });
    await expectTooLarge(res);
    expect(pulled()).toBeLessThanOrEqual(10);
  });

  it.each(routes)("%s: 9 MiB in 4.5 M two-byte characters, sent chunked", async (_, method, type) => {
    const { id, send } = setup(2);
    expect(9 * accents.length).toBeLessThan(MAX_BYTES); // under the limit in characters, over it in bytes
    const { body } = chunked(accents, 9);
    await expectTooLarge(await send(path(method, id), { method, headers: { ...auth, "content-type": type }, body }));
  });

  it.each([
    ["with its Content-Length", { "content-length": String(MAX_BYTES) }, (text: string) => text],
    ["sent chunked", {}, (text: string) => chunked(text, 1).body],
  ])("reads an import of exactly 8 MiB, %s", async (_, length, bodyOf) => {
    const { send } = setup(2);
    const text = `[${" ".repeat(MAX_BYTES - 2)}]`;
    const res = await send("/__ratelimit/overrides/import", {
      method: "POST",
      headers: { ...auth, "content-type": "application/json", ...length },
      body: bodyOf(text),
    });
    expect([res.status, await res.json()]).toEqual([200, { created: 0, updated: 0, unchanged: 0, deleted: 0 }]);
  });

  async function expectTooLarge(res: Response): Promise<void> {
    expect([res.status, res.headers.get("content-type")]).toEqual([413, "application/problem+json"]);
    expect(await res.json()).toEqual({
      type: "urn:edge-rate-limiter:body-too-large",
      title: "Content Too Large",
      status: 413,
      detail: `A body may be at most ${MAX_BYTES} bytes; send a larger import in parts.`,
      maxBytes: MAX_BYTES,
    });
  }
});

describe("every time the API accepts round-trips through its listing", () => {
  const NOW = Date.UTC(2030, 0, 1, 12, 0, 0);
  /** The last millisecond an expiry may be. */
  const LAST = Date.UTC(2099, 11, 31, 23, 59, 59, 999);
  /** What an operator sends as `expires`, and what every answer and listing shows for it. */
  const accepted: [unknown, string | null][] = [
    [null, null],
    [NOW + 1, "2030-01-01T12:00:00.001Z"],
    ["2030-01-01T12:00:00.001Z", "2030-01-01T12:00:00.001Z"],
    ["2030-01-01T14:00:00.001+02:00", "2030-01-01T12:00:00.001Z"],
    ["2030-01-02", "2030-01-02T00:00:00.000Z"],
    [LAST, "2099-12-31T23:59:59.999Z"],
    ["2099-12-31T23:59:59.999Z", "2099-12-31T23:59:59.999Z"],
    ["+002099-12-31T23:59:59.999Z", "2099-12-31T23:59:59.999Z"],
    ["2100-01-01T01:00:00+02:00", "2099-12-31T23:00:00.000Z"],
  ];
  /** What is refused, with the 400's message. */
  const refused: [string, unknown, RegExp][] = [
    ["now", NOW, /field "expires": must be in the future; got 1893499200000/],
    ["the millisecond after 2099", LAST + 1, /field "expires": must be at most 2099-12-31T23:59:59.999Z/],
    ["2100 as ISO 8601", "2100-01-01T00:00:00Z", /field "expires": must be at most 2099-12-31T23:59:59.999Z/],
    ["the year 9999", "9999-12-31T23:59:59.999Z", /field "expires": must be at most 2099-12-31T23:59:59.999Z/],
    ["the year 10000", "+010000-01-01T00:00:00.000Z", /field "expires": must be at most 2099-12-31T23:59:59.999Z/],
    ["Unix microseconds", NOW * 1_000, /field "expires": must be at most 2099-12-31T23:59:59.999Z/],
    ["Unix nanoseconds", NOW * 1_000_000, /field "expires": must be at most 2099-12-31T23:59:59.999Z/],
    ["the last time a Date can hold", 8.64e15, /field "expires": must be at most 2099-12-31T23:59:59.999Z/],
    ["past what a Date can hold", 8.64e15 + 1, /field "expires": must be at most 2099-12-31T23:59:59.999Z/],
    ["1e300", 1e300, /field "expires": must be at most 2099-12-31T23:59:59.999Z/],
    ["a fraction of a millisecond", NOW + 0.5, /field "expires": must be an ISO 8601 time .* or Unix milliseconds/],
    ["a date that is not ISO 8601", "12/31/2099", /field "expires": must be an ISO 8601 time .* or Unix milliseconds/],
    // Days their months do not have: Date.parse moves them on (2030-02-30 to March 2) rather than refusing them.
    ["February 30", "2030-02-30T00:00:00Z", /field "expires": must be an ISO 8601 time .* or Unix milliseconds/],
    ["February 29 of a common year", "2031-02-29", /field "expires": must be an ISO 8601 time .* or Unix milliseconds/],
    ["April 31", "2030-04-31T12:00:00+02:00", /field "expires": must be an ISO 8601 time .* or Unix milliseconds/],
    ["day 00", "2030-05-00", /field "expires": must be an ISO 8601 time .* or Unix milliseconds/],
  ];

  /** A CSV cell for a value: an integer as its digits (as a spreadsheet writes it), anything else as text. */
  const cell = (value: unknown) =>
    typeof value === "number" && Number.isInteger(value) ? BigInt(value).toString() : String(value ?? "");
  /** Each way an override comes in; the answer, and for a PUT the `after` it shows. */
  const ways: [
    string,
    (s: ReturnType<typeof setup>, ip: string, expires: unknown) => ReturnType<ReturnType<typeof setup>["admin"]>,
  ][] = [
    ["PUT", (s, ip, expires) => s.set(ip, { limit: 5, expires })],
    ["import, JSON", (s, ip, expires) => s.admin("POST", "/import", [{ rule: s.id, key: ip, limit: 5, expires }])],
    [
      "import, CSV",
      (s, ip, expires) =>
        s.admin("POST", "/import", `rule,key,limit,expires\n${s.id},${ip},5,${cell(expires)}\n`, "text/csv"),
    ],
  ];
  const nowAt = () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(NOW);
  };

  it.each(ways.flatMap(([way, send]) => accepted.map(([expires, shown]) => ({ way, send, expires, shown }))))(
    "$way, expires $expires: shown as $shown by GET, the list and DELETE",
    async ({ send, expires, shown }) => {
      nowAt();
      const s = setup(2);
      const client = uniqueIp();
      const put = await send(s, client, expires);
      expect(put.status).toBe(200);
      if ("after" in put.body) expect(put.body.after).toMatchObject({ expires: shown });
      expect((await s.admin("GET", `?rule=${s.id}&key=${client}`)).body).toMatchObject({ limit: 5, expires: shown });
      const listed = await s.admin("GET", `?rule=${s.id}`);
      expect(listed.status).toBe(200);
      // Applied: the client's object took the expiry too.
      expect(listed.body.overrides).toEqual([expect.objectContaining({ limit: 5, expires: shown, state: "applied" })]);
      const deleted = await s.admin("DELETE", `?rule=${s.id}&key=${client}`);
      expect([deleted.status, deleted.body.before]).toEqual([200, expect.objectContaining({ expires: shown })]);
      if (shown === null) return;
      // What is shown, sent back, means the same time.
      expect((await send(s, client, shown)).status).toBe(200);
      expect((await s.admin("GET", `?rule=${s.id}&key=${client}`)).body).toMatchObject({ expires: shown });
    },
  );

  it.each(
    ways.flatMap(([way, send]) => refused.map(([name, expires, message]) => ({ way, send, name, expires, message }))),
  )(
    "$way refuses $name with a 400 naming the field and its range, and stores nothing",
    async ({ send, expires, message }) => {
      nowAt();
      const s = setup(2);
      const client = uniqueIp();
      const res = await send(s, client, expires);
      expect([res.status, res.body.type]).toEqual([400, "urn:edge-rate-limiter:invalid-override"]);
      expect((res.body.errors as string[]).join("\n")).toMatch(message);
      expect((await s.admin("GET", `?rule=${s.id}`)).body.overrides).toEqual([]);
    },
  );

  /** Stored expiries the API no longer accepts, as an index from before the bound may hold them; what it shows. */
  const stored: { name: string; expiresAtMs: number; shown: string | null }[] = [
    { name: "Unix nanoseconds", expiresAtMs: Date.UTC(2030, 0, 1) * 1_000_000, shown: null },
    { name: "past what a Date can hold", expiresAtMs: 8.64e15 + 1, shown: null },
    { name: "the year 9999", expiresAtMs: Date.UTC(9999, 11, 31), shown: "9999-12-31T00:00:00.000Z" },
  ];

  it.each(stored)(
    "an expiry stored before the bound ($name) is listed, read and deleted, shown as $shown with a warning",
    async ({ expiresAtMs, shown }) => {
      const s = setup(2);
      const client = uniqueIp();
      const key = JSON.stringify([["ip", client]]);
      const name = await hashKey(key);
      const override: Override = { kind: "limit", limit: 5, expiresAtMs, note: "", updatedAtMs: Date.now(), by: "old" };
      await runInDurableObject(registry(), (_, state) => {
        state.storage.sql.exec(
          "INSERT INTO entries (rule, key, name, value, version, applied) VALUES (?, ?, ?, ?, 0, 1)",
          s.id,
          key,
          name,
          JSON.stringify(override),
        );
      });
      const warning = expect.stringMatching(
        /^expires: \S+ is past the latest expiry the API accepts \(2099-12-31T23:59:59.999Z, Unix ms 4102444799999\): set the override again, or delete it$/,
      );
      const listed = await s.admin("GET", `?rule=${s.id}`);
      expect(listed.status).toBe(200);
      expect(listed.body.overrides).toEqual([expect.objectContaining({ limit: 5, expires: shown, warning })]);
      expect((await s.admin("GET", `?rule=${s.id}&key=${client}`)).body).toMatchObject({ expires: shown, warning });
      const deleted = await s.admin("DELETE", `?rule=${s.id}&key=${client}`);
      expect([deleted.status, deleted.body.before]).toEqual([
        200,
        expect.objectContaining({ expires: shown, warning }),
      ]);
      expect((await s.admin("GET", `?rule=${s.id}`)).body.overrides).toEqual([]);
    },
  );
});

/** The registry: one object for the whole deployment. */
function registry() {
  const ns = (workerEnv as unknown as { OVERRIDES: DurableObjectNamespace<OverrideRegistry> }).OVERRIDES;
  return ns.get(ns.idFromName("registry"));
}

/** Waits until the registry has no pending change: every object confirmed what the index says. */
async function settled(): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if ((await registry().counts()).pending === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error("the registry still has pending changes");
}

describe("several isolates: how long a cached refusal outlives a change", () => {
  /** Two isolates of one Worker, on clocks the test moves; the admin API is served by the first. */
  function twoIsolates(limit: number) {
    const id = `ovr-${++rules}`;
    const clock = { now: Date.now() };
    const isolates = [createIsolate({ clock: () => clock.now }), createIsolate({ clock: () => clock.now })];
    const testEnv = { ...env, ADMIN_TOKEN: TOKEN, RULES: [{ id, limit, period: "1h", path: "/api/*" }] };
    const apps = isolates.map((isolate) => {
      const app = new Hono<{ Bindings: Env }>();
      app.use(adminApi({ isolate }));
      app.use(rateLimit({ isolate }));
      app.all("*", (c) => c.text("ok"));
      return app;
    });
    const on =
      (i: number) =>
      (path: string, init: RequestInit = {}) =>
        apps[i]!.request(path, init, testEnv);
    return { id, clock, on };
  }

  it("the isolate that served the change forgets its refusal at once; another within its cap, 10 s", async () => {
    const { id, clock, on } = twoIsolates(1);
    const client = uniqueIp();
    const a = on(0);
    const b = on(1);
    expect((await a("/api/x", from(client))).status).toBe(200);
    expect((await a("/api/x", from(client))).status).toBe(429); // both isolates learn the refusal
    expect((await b("/api/x", from(client))).status).toBe(429);
    const raised = await a(`/__ratelimit/overrides?rule=${id}&key=${client}`, {
      method: "PUT",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ limit: 3 }),
    });
    expect(raised.status).toBe(200);
    expect((await a("/api/x", from(client))).status).toBe(200);
    expect((await b("/api/x", from(client))).status).toBe(429); // from b's cache, without asking
    clock.now += 9_999;
    expect((await b("/api/x", from(client))).status).toBe(429);
    clock.now += 1;
    expect((await b("/api/x", from(client))).status).toBe(200); // the cap: b asks the object again
  });
});

describe("the client's object keeps its overrides", () => {
  const object = () => env.RATE_LIMITER.get(env.RATE_LIMITER.newUniqueId());
  const override = (expiresAtMs: number | null) =>
    ({ kind: "limit", limit: 7, expiresAtMs, note: "", updatedAtMs: 0, by: "test" }) as const;
  const check = { id: "kept", limit: 2, periodMs: 60_000, precision: 1, strict: false, enforce: true };

  it("across its counters' cleanup: an override outlives the counters its alarm deletes", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.UTC(2031, 5, 1, 0, 0, 0);
    vi.setSystemTime(start);
    const stub = object();
    await stub.setOverride("kept", override(null), 1);
    expect((await stub.check([check])).verdicts[0]).toMatchObject({ limit: 7, override: "limit" });
    vi.setSystemTime(start + 3_600_000); // the counters have expired
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(Object.keys(await stub.listOverrides())).toEqual(["kept"]);
    expect((await stub.peek([check])).verdicts[0]).toMatchObject({ limit: 7, weighted: 0 });
  });

  it("deletes an expired override with its alarm, and then everything once nothing is left", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.UTC(2031, 6, 1, 0, 0, 0);
    vi.setSystemTime(start);
    const stub = object();
    await stub.setOverride("kept", override(start + 10 * 3_600_000), 1);
    await stub.check([check]);
    vi.setSystemTime(start + 10 * 3_600_000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await stub.listOverrides()).toEqual({});
    const tables = await runInDurableObject(stub, (_, state) =>
      state.storage.sql.exec("SELECT name FROM sqlite_master WHERE type = 'table'").toArray(),
    );
    expect(tables).toEqual([]);
  });

  it("leases a client every rule is lifted for units that count nowhere, so it need not be asked per request", async () => {
    const stub = object();
    await stub.setOverride("kept", { ...override(null), kind: "unlimited" }, 1);
    const { allowed, lease } = await stub.check([check], { lease: { units: 64, seen: 50, seenInMs: 1_000 } });
    expect([allowed, lease?.units, lease?.receipts]).toEqual([true, 64, [{ row: "", epoch: 0, bucket: 0 }]]);
    expect((await stub.peek([check])).verdicts[0]).toMatchObject({ override: "unlimited", weighted: 0 });
  });

  it("takes an override stored with an expiry later than the runtime's alarms can be set (an earlier version's)", async () => {
    // The API now refuses expiries after 2099; an override an earlier version stored may reach the object
    // with one in the year 33658. workerd refuses to set an alarm that late, so the change stayed pending.
    const stub = object();
    await stub.setOverride("kept", override(1e15), 1);
    expect((await stub.check([check])).verdicts[0]).toMatchObject({ limit: 7, override: "limit" });
    const alarm = await runInDurableObject(stub, (_, state) => state.storage.getAlarm());
    expect(alarm).not.toBeNull();
    expect(alarm!).toBeLessThanOrEqual(Date.UTC(2100, 0, 1));
  });

  it("ignores a change older than the one it has: a late or repeated send never undoes a newer one", async () => {
    const stub = object();
    await stub.setOverride("kept", override(null), 5);
    await stub.deleteOverride("kept", 4);
    await stub.setOverride("kept", { ...override(null), limit: 3 }, 5);
    expect((await stub.listOverrides()).kept).toMatchObject({ limit: 7 });
    await stub.deleteOverride("kept", 6);
    await stub.setOverride("kept", override(null), 5);
    expect(await stub.listOverrides()).toEqual({});
  });
});

describe("every admin change clears what the isolate that served it remembers of the client", () => {
  const ISSUER = "https://auth.example.test/";
  let signer: SigningKey;
  beforeAll(async () => {
    signer = await signingKey("ES256");
  });

  /** A client as a request shows it, and as an operator names it in `key`. */
  type Client = { init: RequestInit; key: string };
  /** How a rule counts its clients, and one client of it. */
  const clientKinds: [string, { key: string[]; tiered: boolean; client: () => Promise<Client> }][] = [
    [
      "a client by its IP",
      {
        key: ["ip"],
        tiered: false,
        client: async () => {
          const ip = uniqueIp();
          return { init: from(ip), key: ip };
        },
      },
    ],
    [
      "a token's user, in the tier its claim names",
      {
        key: ["jwt:sub|ip"],
        tiered: true,
        client: async () => {
          const sub = `user-${crypto.randomUUID()}`;
          const token = await tokenFor(signer, { sub, iss: ISSUER, aud: "api", plan: "pro" });
          return { init: from(uniqueIp(), bearer(token)), key: `jwt:sub=${sub}` };
        },
      },
    ],
  ];

  /**
   * One isolate of the Worker, serving both the admin API and the client, on
   * a clock that moves 1 ms per request: a cached refusal outlives the test,
   * and an answer to a call sent after a change is never taken for one sent before it.
   */
  function oneIsolate(limit: number, kind: (typeof clientKinds)[number][1]) {
    const id = `ovr-${++rules}`;
    const clock = { now: Date.now() };
    const isolate = createIsolate({ clock: () => clock.now });
    const testEnv = {
      ...env,
      ADMIN_TOKEN: TOKEN,
      RULES: [{ id, limit, period: "1h", path: "/api/*", key: kind.key }],
      // The tier gives the rule its own limit, so a request in it is decided under a rule of its own.
      ...(kind.tiered
        ? {
            TIERS: { pro: { [id]: limit } },
            JWT: { issuer: ISSUER, audience: "api", tier_claim: "plan" },
            JWT_JWKS: JSON.stringify(keySet(signer)),
          }
        : {}),
    };
    const app = new Hono<{ Bindings: Env }>();
    app.use(adminApi({ isolate }));
    app.use(rateLimit({ isolate }));
    app.all("*", (c) => c.text("ok"));
    const send = async (path: string, init: RequestInit = {}): Promise<Response> => {
      clock.now += 1;
      return app.request(path, init, testEnv);
    };
    const admin = (method: string, path: string, body?: unknown, type = "application/json") =>
      send(`/__ratelimit${path}`, {
        method,
        headers: { ...auth, "content-type": type },
        ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
      });
    const run = (n: number, client: Client) => statuses(n, () => send("/api/x", client.init));
    /** The client's canonical key under the rule, as the admin API makes it. */
    const canonical = (client: Client) => {
      const parsed = parseSettings(testEnv);
      if (!parsed.ok) throw new Error(parsed.errors.join("\n"));
      const key = adminKey(parsed.value.rules[0]!, [client.key], 56);
      if (!key.ok) throw new Error(key.errors.join("\n"));
      return key.value;
    };
    /** Units this isolate holds leased for the client, unspent. */
    const leased = (client: Client) => isolate.keys.heldUnits(isolate.digest(canonical(client)));
    return { id, admin, run, leased, canonical };
  }
  type Served = ReturnType<typeof oneIsolate>;

  /** The override as a CSV line, in the columns `rule,key,limit,unlimited,delete`. */
  const csvLine = (id: string, key: string, override: Record<string, unknown> | null) =>
    [id, key, override?.limit ?? "", override?.unlimited ? "true" : "", override === null ? "true" : ""].join(",");

  /** Each admin route that changes a client's override; `override` null deletes it. */
  const routes: [string, (s: Served, c: Client, override: Record<string, unknown> | null) => Promise<Response>][] = [
    [
      "PUT or DELETE /overrides",
      (s, c, override) =>
        override === null
          ? s.admin("DELETE", `/overrides?rule=${s.id}&key=${c.key}`)
          : s.admin("PUT", `/overrides?rule=${s.id}&key=${c.key}`, override),
    ],
    [
      "POST /overrides/import, JSON",
      (s, c, override) =>
        s.admin("POST", "/overrides/import", [{ rule: s.id, key: c.key, ...(override ?? { delete: true }) }]),
    ],
    [
      "POST /overrides/import, CSV",
      (s, c, override) =>
        s.admin(
          "POST",
          "/overrides/import",
          `rule,key,limit,unlimited,delete\n${csvLine(s.id, c.key, override)}\n`,
          "text/csv",
        ),
    ],
    [
      "the dashboard's Put form and its Delete button",
      async (s, c, override) => {
        if (override !== null) {
          // The form sends the expiry as ISO 8601.
          const expires = new Date(Date.now() + 3_600_000).toISOString();
          return s.admin("PUT", `/overrides?rule=${s.id}&key=${encodeURIComponent(c.key)}`, { ...override, expires });
        }
        // The button deletes the entry as the listing shows it, one `key` per [label, value].
        const listed = (await (await s.admin("GET", `/overrides?rule=${s.id}&limit=50`)).json()) as {
          overrides: { key: [string, string][] }[];
        };
        const entry = listed.overrides.find((o) => c.key.endsWith(o.key[0]![1]))!;
        const keys = entry.key.map(([label, value]) => `key=${encodeURIComponent(`${label}=${value}`)}`);
        return s.admin("DELETE", `/overrides?rule=${s.id}&${keys.join("&")}`);
      },
    ],
  ];
  const cases = clientKinds.flatMap(([who, kind]) => routes.map(([route, change]) => ({ who, kind, route, change })));

  it.each(cases)(
    "$route, $who: refused, then its limit raised: admitted on its very next request",
    async ({ kind, change }) => {
      const served = oneIsolate(2, kind);
      const client = await kind.client();
      expect(await served.run(3, client)).toEqual([200, 200, 429]); // the 429 is remembered by the isolate
      expect((await change(served, client, { limit: 5 })).status).toBe(200);
      expect(await served.run(4, client)).toEqual([200, 200, 200, 429]);
    },
  );

  it.each(cases)(
    "$route, $who: refused, then its lower limit deleted: admitted on its very next request",
    async ({ kind, change }) => {
      const served = oneIsolate(3, kind);
      const client = await kind.client();
      expect((await served.admin("PUT", `/overrides?rule=${served.id}&key=${client.key}`, { limit: 1 })).status).toBe(
        200,
      );
      expect(await served.run(2, client)).toEqual([200, 429]);
      expect((await change(served, client, null)).status).toBe(200);
      expect(await served.run(3, client)).toEqual([200, 200, 429]);
    },
  );

  it.each(cases)(
    "$route, $who: its `unlimited` deleted: counted under the rule's limit at once",
    async ({ kind, change }) => {
      const served = oneIsolate(2, kind);
      const client = await kind.client();
      const lifted = await served.admin("PUT", `/overrides?rule=${served.id}&key=${client.key}`, { unlimited: true });
      expect(lifted.status).toBe(200);
      expect(await served.run(20, client)).toEqual(Array(20).fill(200));
      expect(served.leased(client)).toBeGreaterThan(0); // units that count nowhere, spent without asking
      expect((await change(served, client, null)).status).toBe(200);
      // Its lease is no longer spent: its units go back with the next call (they count nowhere).
      expect(await served.run(5, client)).toEqual([200, 200, 429, 429, 429]);
      expect(served.leased(client)).toBe(0);
    },
  );

  it.each(routes.flatMap(([route, change]) => clientKinds.map(([who, kind]) => ({ route, who, kind, change }))))(
    "$route, $who: a raise spent from a lease, then a lower limit still above what was spent: the next request is admitted",
    async ({ kind, change }) => {
      const served = oneIsolate(2, kind);
      const client = await kind.client();
      expect((await change(served, client, { limit: 1_000 })).status).toBe(200);
      expect(await served.run(30, client)).toEqual(Array(30).fill(200));
      expect(served.leased(client)).toBeGreaterThan(0);
      // 30 counted; the lease's unspent units go back with the next call, not charged to the client.
      expect((await change(served, client, { limit: 40 })).status).toBe(200);
      expect(await served.run(10, client)).toEqual(Array(10).fill(200));
    },
  );

  it.each(
    clientKinds.flatMap(([who, kind]) => [
      { who, kind, by: "key (the CLI's reset)", named: async (_: Served, c: Client) => `key=${c.key}` },
      {
        who,
        kind,
        by: "hash (the dashboard's Reset)",
        named: async (s: Served, c: Client) => `hash=${await hashKey(s.canonical(c))}`,
      },
    ]),
  )(
    "DELETE /status by its $by, $who: refused, then reset: admitted on its very next request",
    async ({ kind, named }) => {
      const served = oneIsolate(2, kind);
      const client = await kind.client();
      expect(await served.run(3, client)).toEqual([200, 200, 429]);
      const reset = await served.admin("DELETE", `/status?rule=${served.id}&${await named(served, client)}`);
      expect(reset.status).toBe(200);
      expect(await served.run(3, client)).toEqual([200, 200, 429]);
    },
  );
});

describe("the ratelimit_blocked line names the limit that refused the client, not the rule's", () => {
  /** One isolate that logs every refusal; with `cache` it answers a known refusal itself, else it asks the object. */
  function loggingIsolate(cache: boolean) {
    const id = `ovr-${++rules}`;
    const isolate = createIsolate({ logEveryMs: 0, ...(cache ? {} : { maxRefusalMs: 0 }) });
    const testEnv = {
      ...env,
      ADMIN_TOKEN: TOKEN,
      RULES: [{ id, limit: 2, period: "1h", path: "/api/*" }],
      TIERS: { pro: { [id]: 4 } },
    };
    const app = new Hono<{ Bindings: Env }>();
    app.use(adminApi({ isolate }));
    app.use(rateLimit({ isolate }));
    app.all("*", (c) => c.text("ok"));
    const send = async (path: string, init: RequestInit = {}) => app.request(path, init, testEnv);
    return { id, send };
  }

  let lines: string[];
  afterEach(() => vi.restoreAllMocks());

  it.each([
    ["an override's limit", "the object", { limit: 3 }, { limit: 3, override: "limit" }],
    ["an override's limit", "the isolate's known refusal", { limit: 3 }, { limit: 3, override: "limit" }],
    ["a tier's limit", "the object", { tier: "pro" }, { limit: 4, override: "tier", tier: "pro" }],
    ["a tier's limit", "the isolate's known refusal", { tier: "pro" }, { limit: 4, override: "tier", tier: "pro" }],
  ])("%s, refused by %s", async (_, by, setting, logged) => {
    lines = [];
    vi.spyOn(console, "log").mockImplementation((line) => lines.push(String(line)));
    const { id, send } = loggingIsolate(by !== "the object");
    const client = uniqueIp();
    const put = await send(`/__ratelimit/overrides?rule=${id}&key=${client}`, {
      method: "PUT",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify(setting),
    });
    expect(put.status).toBe(200);
    const seen = await statuses(logged.limit + 2, () => send("/api/x", from(client)));
    expect(seen).toEqual([...Array(logged.limit).fill(200), 429, 429]);
    const blocked = lines.map((l) => JSON.parse(l)).filter((l) => l.event === "ratelimit_blocked");
    expect(blocked).toHaveLength(2);
    for (const line of blocked) expect(line).toMatchObject({ rule: id, decision: "blocked", ...logged });
  });

  it("a denied client: no limit refused it, and the line says it was the override", async () => {
    lines = [];
    vi.spyOn(console, "log").mockImplementation((line) => lines.push(String(line)));
    const { id, send } = loggingIsolate(false);
    const client = uniqueIp();
    await send(`/__ratelimit/overrides?rule=${id}&key=${client}`, {
      method: "PUT",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ deny: true }),
    });
    expect((await send("/api/x", from(client))).status).toBe(403);
    const blocked = lines.map((l) => JSON.parse(l)).filter((l) => l.event === "ratelimit_blocked");
    expect(blocked).toHaveLength(1);
    expect(blocked[0]).toMatchObject({ rule: id, override: "deny" });
    expect(blocked[0].limit).toBeUndefined();
  });
});
