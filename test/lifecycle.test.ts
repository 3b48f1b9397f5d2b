/**
 * One lifecycle, every kind of limit (docs/lifecycle.md): each registered
 * kind, through its fixture in test/support/lifecycle.ts, meets every admin
 * action (a reset, a deny, unlimited, a raise, a lower limit, a tier) in
 * every state a request can be in when it comes: refused, and waiting (held
 * until its turn, or in line for a place), through the Worker, its isolate
 * and real objects, in front of the real origin. A change applies at once,
 * to the waiting requests too, in the order they came:
 *
 * | state | reset | deny | unlimited | raise / tier | lower |
 * | --- | --- | --- | --- | --- | --- |
 * | refused | the next request goes | the next is 403 | the next goes | the next goes | the next is still refused |
 * | held | go at once, counted nowhere; the next request on empty counters | 403 at once, the origin untouched | go at once | move up, in order, before any later request | keep the turns they were given |
 * | in line | a place at once (the places are freed) | 403 at once, the origin untouched | a place at once | a place at once, as room allows | wait until in use is below the new limit |
 * | admitted | finishes; its end frees nothing twice | finishes; the next is 403 | finishes | finishes | finishes; the next is refused |
 *
 * And a client that hangs up: before its request is decided, it is counted
 * nowhere; while it waits, it is let go at once and the others go on; while
 * it is in flight, its count stays (a counted kind) or its place is freed (a
 * placed kind). The crashes (an isolate, a kill -9) are in the edge tier:
 * test/edge/lifecycle.edge.ts (every kind, from its fixture there).
 */
import { describe, expect, it } from "vitest";
import { KINDS } from "../src/core/kinds/registry.ts";
import { LIFECYCLE, type LifecycleFixture } from "./support/lifecycle.ts";
import { from, originHits, timedLimiter, uniqueIp, uniqueTag } from "./support/limiter.ts";

const TOKEN = "lifecycle-token";
const auth = { authorization: `Bearer ${TOKEN}`, "cf-connecting-ip": "198.51.100.9" };

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let rules = 0;
const uniqueRule = (name: string) => `${name}-${++rules}-${Date.now() % 100_000}`;

/** Limits the admin actions set: a raise (with room for the whole scenario), a lower limit of one, a tier `pro` as a raise. */
const RAISED = 20;
const LOWERED = 1;

/** The Worker under one rule, the admin API on, the tier `pro` raising the rule to RAISED. */
function worker(rule: Record<string, unknown>) {
  const send = timedLimiter([rule], { ADMIN_TOKEN: TOKEN, TIERS: { pro: { [rule.id as string]: RAISED } } });
  const admin = async (method: string, path: string, body?: unknown) => {
    const { response } = await send(`/__ratelimit${path}`, {
      method,
      headers: { ...auth, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  return { send, admin };
}

type Action = "reset" | "deny" | "unlimited" | "raise" | "tier" | "lower";

/** Carries out an admin action on one client under one rule. */
async function act(admin: ReturnType<typeof worker>["admin"], action: Action, rule: string, ip: string) {
  const query = `?rule=${rule}&key=${ip}`;
  const override = {
    deny: { deny: true },
    unlimited: { unlimited: true },
    raise: { limit: RAISED },
    tier: { tier: "pro" },
    lower: { limit: LOWERED },
  };
  const done =
    action === "reset"
      ? await admin("DELETE", `/status${query}`)
      : await admin("PUT", `/overrides${query}`, override[action]);
  expect(done.status, JSON.stringify(done.body)).toBe(200);
}

/** What the client's next request gets after each admin action, its limit at 2 and one used or two: the table's first row. */
const NEXT_AFTER: [Action, number][] = [
  ["reset", 200],
  ["deny", 403],
  ["unlimited", 200],
  ["raise", 200],
  ["tier", 200],
  ["lower", 429],
];

it("every registered kind has a lifecycle fixture: a kind is not done until it keeps the lifecycle", () => {
  expect(Object.keys(KINDS).filter((kind) => LIFECYCLE[kind as keyof typeof KINDS] === undefined)).toEqual([]);
});

const kinds = Object.keys(KINDS).flatMap((name) => {
  const fixture = LIFECYCLE[name as keyof typeof KINDS];
  return fixture === undefined ? [] : [[name, fixture] as [string, LifecycleFixture]];
});

describe.each(kinds)("a %s rule", (kind, fixture) => {
  // Each test is a client and a rule of its own: they run side by side.
  describe.concurrent("a refused client, when an admin change comes", () => {
    it.each(NEXT_AFTER)("%s: its next request is %i", async (action, status) => {
      const id = uniqueRule(`${kind}-refused-${action}`);
      const { send, admin } = worker(fixture.rule(id) as Record<string, unknown>);
      const ip = uniqueIp();
      const { beside } = await fixture.fill(send, ip, id);
      const refused = await send(fixture.path(id), from(ip));
      await refused.response.arrayBuffer();
      expect(refused.response.status).toBe(429);
      await act(admin, action, id, ip);
      const tag = uniqueTag(id);
      const next = await send(fixture.path(id), from(ip, { "x-test-tag": tag }));
      await next.response.arrayBuffer();
      expect(next.response.status).toBe(status);
      expect(await originHits(tag)).toBe(status === 200 ? 1 : 0);
      await Promise.all(beside);
    });
  });

  describe.concurrent("a client that hangs up", () => {
    it("before its request is decided: it is counted nowhere, and the origin never sees it", async () => {
      const id = uniqueRule(`${kind}-gone-before`);
      const { send } = worker(fixture.rule(id) as Record<string, unknown>);
      const ip = uniqueIp();
      const tag = uniqueTag(id);
      const gone = new AbortController();
      gone.abort();
      await send(fixture.path(id), { ...from(ip, { "x-test-tag": tag }), signal: gone.signal })
        .then(({ response }) => response.arrayBuffer())
        .catch(() => null);
      // The client's whole limit is still there.
      const { statuses, beside } = await fixture.fill(send, ip, id);
      expect(statuses).toEqual([200, 200]);
      expect(await originHits(tag)).toBe(0);
      await Promise.all(beside);
    });

    it(`while admitted, before the origin answers: its request is ${fixture.hungUp === "counted" ? "still counted" : "counted nowhere, its place freed"}`, async () => {
      const id = uniqueRule(`${kind}-gone-admitted`);
      const { send } = worker(fixture.rule(id) as Record<string, unknown>);
      const ip = uniqueIp();
      const gone = new AbortController();
      const inFlight = send(fixture.slow(id, 3_000), { ...from(ip), signal: gone.signal })
        .then(({ response }) => response.arrayBuffer())
        .catch(() => null);
      await pause(300);
      gone.abort();
      await inFlight;
      await pause(300);
      const { statuses, beside } = await fixture.fill(send, ip, id);
      expect(statuses).toEqual(fixture.hungUp === "counted" ? [200, 429] : [200, 200]);
      await Promise.all(beside);
    });
  });

  describe.concurrent("a request admitted and in flight, when an admin change comes", () => {
    it.each(NEXT_AFTER)("%s: it finishes, whole, and the next request is %i", async (action, status) => {
      const id = uniqueRule(`${kind}-admitted-${action}`);
      const { send, admin } = worker(fixture.rule(id) as Record<string, unknown>);
      const ip = uniqueIp();
      const tag = uniqueTag(id);
      // One request admitted, its answer 1.5 s on; the client has room for one more, so that a change shows in the next.
      const inFlight = send(fixture.slow(id, 1_500), from(ip, { "x-test-tag": tag })).then(async ({ response }) => ({
        status: response.status,
        body: await response.text(),
      }));
      await pause(300);
      await act(admin, action, id, ip);
      const next = await send(fixture.path(id), from(ip, { "x-test-tag": tag }));
      await next.response.arrayBuffer();
      expect(next.response.status).toBe(status);
      // A change refuses what comes after it; it never cuts what is on its way.
      const first = await inFlight;
      expect(first.status).toBe(200);
      expect(first.body).toMatch(/"slow":true|^first\nlast\n$/);
      expect(await originHits(tag)).toBe(status === 200 ? 2 : 1);
    });

    if (fixture.hungUp !== "freed") return;

    it("reset, then it ends: its end frees nothing twice, so the places the reset left stay the new requests'", async () => {
      const id = uniqueRule(`${kind}-admitted-reset-end`);
      const { send, admin } = worker(fixture.rule(id) as Record<string, unknown>);
      const ip = uniqueIp();
      const old = send(fixture.slow(id, 800), from(ip)).then(({ response }) => response.text());
      await pause(300);
      await act(admin, "reset", id, ip);
      // The reset freed every place: two new streams take both, and outlast the old one.
      const { statuses, beside } = await fixture.fill(send, ip, id);
      expect(statuses).toEqual([200, 200]);
      await old;
      await pause(300);
      const { response } = await send(fixture.path(id), from(ip));
      await response.arrayBuffer();
      expect(response.status).toBe(429);
      await Promise.all(beside);
    });
  });

  const waiting = fixture.waiting;
  if (waiting === null) return;

  describe.concurrent(`a request ${waiting.state === "held" ? "held until its turn" : "waiting in line for a place"}, when an admin change comes`, () => {
    it.each([
      ["reset", 200],
      ["unlimited", 200],
      ["raise", 200],
      ["tier", 200],
      ["deny", 403],
    ] as [Action, number][])(
      "%s: the waiting requests are answered at once (%i), and the origin sees only those that go",
      async (action, status) => {
        const id = uniqueRule(`${kind}-waiting-${action}`);
        const { send, admin } = worker(waiting.rule(id) as Record<string, unknown>);
        const ip = uniqueIp();
        const tag = uniqueTag(id);
        const put = await waiting.put(send, ip, tag, id);
        const changedAtMs = put.at();
        await act(admin, action, id, ip);
        const answered = await Promise.all(put.waiting);
        const waited = answered.filter((a) => a.atMs > changedAtMs);
        expect(waited.length).toBeGreaterThan(0);
        for (const a of waited) {
          expect(a.status).toBe(status);
          expect(a.atMs - changedAtMs).toBeLessThan(500);
          // A rule lifted for the client has no RateLimit headers, on what waited under it too.
          if (action === "unlimited") expect(`${a.policy} ${a.rateLimit}`).not.toContain(`"${id}"`);
        }
        // Those answered before the change went; of the waiting, only those that now go reach the origin.
        const went = answered.filter((a) => a.status === 200).length;
        expect(answered.length - went).toBe(status === 200 ? 0 : waited.length);
        expect(await originHits(tag)).toBe(went);
        if (action === "raise" || action === "tier") {
          // Their headers state the limit that admitted them, as a request after the change is told it.
          const { response } = await send(fixture.path(id), from(ip));
          await response.arrayBuffer();
          for (const a of waited) expect(a.policy).toBe(response.headers.get("ratelimit-policy"));
        }
        await Promise.all(put.beside);
      },
    );

    it("hang-up: the request is let go at once, never reaches the origin, and the others still go", async () => {
      const id = uniqueRule(`${kind}-waiting-gone`);
      const { send } = worker(waiting.rule(id) as Record<string, unknown>);
      const ip = uniqueIp();
      const tag = uniqueTag(id);
      const gone = new AbortController();
      const put = await waiting.put(send, ip, tag, id, gone.signal);
      const goneAtMs = put.at();
      gone.abort();
      const answered = await Promise.all(put.waiting);
      const last = answered.at(-1)!;
      expect(last.status).not.toBe(200);
      expect(last.atMs - goneAtMs).toBeLessThan(500);
      expect(answered.slice(0, -1).map((a) => a.status)).toEqual(answered.slice(0, -1).map(() => 200));
      expect(await originHits(tag)).toBe(answered.length - 1);
      await Promise.all(put.beside);
    });

    it("lower: the waiting requests keep waiting, for their turns or for in use to fall below the new limit", async () => {
      const id = uniqueRule(`${kind}-waiting-lower`);
      const { send, admin } = worker(waiting.rule(id) as Record<string, unknown>);
      const ip = uniqueIp();
      const tag = uniqueTag(id);
      const put = await waiting.put(send, ip, tag, id);
      const changedAtMs = put.at();
      await act(admin, "lower", id, ip);
      const answered = await Promise.all(put.waiting);
      const waited = answered.filter((a) => a.atMs > changedAtMs);
      expect(waited.length).toBeGreaterThan(0);
      for (const a of waited) {
        expect(a.status).toBe(200);
        expect(a.atMs - changedAtMs).toBeGreaterThan(500);
      }
      expect(await originHits(tag)).toBe(answered.length);
      if (waiting.state === "in line") {
        // Not when the first stream beside it ended (one still in flight, at a limit of one): once both had.
        const endedAtMs = (await Promise.all(put.beside)) as number[];
        for (const a of waited) expect(a.atMs).toBeGreaterThanOrEqual(Math.max(...endedAtMs) - 50);
      }
      await Promise.all(put.beside);
    });

    if (waiting.state !== "held") return;

    it("reset: the client is as a client never seen; its next request is decided on empty counters", async () => {
      const id = uniqueRule(`${kind}-held-reset-after`);
      const { send, admin } = worker(waiting.rule(id) as Record<string, unknown>);
      const ip = uniqueIp();
      const put = await waiting.put(send, ip, uniqueTag(id), id);
      await act(admin, "reset", id, ip);
      await Promise.all(put.waiting);
      const status = await admin("GET", `/status?rule=${id}&key=${ip}`);
      expect(status.body).toMatchObject({ allowed: true, retryAfterSeconds: 0 });
      const { response } = await send(fixture.path(id), from(ip));
      expect(response.status).toBe(200);
      expect(response.headers.get("server-timing")).toBeNull();
      // One of the limit used: nothing from before the reset.
      expect(response.headers.get("ratelimit")).toMatch(new RegExp(`^"${id}";r=1;`));
    });

    const raisedRemaining = waiting.raisedRemaining;
    it.skipIf(raisedRemaining === null)(
      "raise: the held requests are counted before a request sent after the change",
      async () => {
        const id = uniqueRule(`${kind}-held-raise-order`);
        const { send, admin } = worker(waiting.rule(id) as Record<string, unknown>);
        const ip = uniqueIp();
        const put = await waiting.put(send, ip, uniqueTag(id), id);
        await act(admin, "raise", id, ip);
        const { response } = await send(fixture.path(id), from(ip));
        expect(response.status).toBe(200);
        // Every request sent before it, then this one, counted against the raised limit.
        const left = raisedRemaining!(RAISED, put.waiting.length);
        expect(response.headers.get("ratelimit")).toMatch(new RegExp(`^"${id}";r=${left};`));
        await Promise.all(put.waiting);
      },
    );
  });
});
