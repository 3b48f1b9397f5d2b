/**
 * Admin changes meet requests already waiting: every admin action (a reset,
 * a deny, unlimited, a raise, a lower limit, a tier) against every state a
 * request can wait in (held until its turn under a rate rule's `max_delay`;
 * in line for a concurrency rule's place), through the Worker, its isolate
 * and real objects, in front of the real origin. A change applies to the
 * waiting requests at once, in the order they came:
 *
 * | waiting | reset | deny | unlimited | raise / tier | lower |
 * | --- | --- | --- | --- | --- | --- |
 * | held | go at once, counted nowhere; the next request on empty counters | 403 at once, the origin untouched | go at once | move up, in order, before any later request | keep the turns they were given |
 * | in line | a place at once (the places are freed) | 403 at once, the origin untouched | a place at once | a place at once, as room allows | wait until in use is below the new limit |
 */
import { describe, expect, it } from "vitest";
import { from, originHits, timedLimiter, uniqueIp, uniqueTag } from "./support/limiter.ts";

const TOKEN = "waiting-meets-admin-token";
const auth = { authorization: `Bearer ${TOKEN}`, "cf-connecting-ip": "198.51.100.9" };
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let rules = 0;
const uniqueRule = (name: string) => `${name}-${++rules}-${Date.now() % 100_000}`;

/** The Worker under one rule, the admin API on, the tier `pro` giving the rule `pro`. */
function worker(rule: Record<string, unknown>, pro: number) {
  const send = timedLimiter([rule], { ADMIN_TOKEN: TOKEN, TIERS: { pro: { [rule.id as string]: pro } } });
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

/** Carries out an admin action on one client under one rule; `raise` and `lower` give it `limits`. */
async function act(
  admin: ReturnType<typeof worker>["admin"],
  action: Action,
  rule: string,
  ip: string,
  limits: { raise: number; lower: number },
) {
  const query = `?rule=${rule}&key=${ip}`;
  const override = {
    deny: { deny: true },
    unlimited: { unlimited: true },
    raise: { limit: limits.raise },
    tier: { tier: "pro" },
    lower: { limit: limits.lower },
  };
  const done =
    action === "reset"
      ? await admin("DELETE", `/status${query}`)
      : await admin("PUT", `/overrides${query}`, override[action]);
  expect(done.status, JSON.stringify(done.body)).toBe(200);
}

/** Waits until just after the start of a 2-second window (the objects' clock is this one). */
async function windowStart(): Promise<void> {
  await pause(2_000 - (Date.now() % 2_000) + 5);
}

// Each test is a client and a rule of its own: they run side by side.
describe.concurrent("requests held until their turn, when an admin change comes", () => {
  // 2 per 2 s, held up to 10 s: of 5 requests at once, 2 go, and 3 are held until turns 1 to 4 s away.
  const heldRule = (id: string) => ({ id, path: "/held/*", limit: 2, period: "2s", max_delay: "10s", key: ["ip"] });

  /** Five requests of one client at once, tagged for the origin; each one's status, and when it was answered. */
  async function fiveHeld(send: ReturnType<typeof worker>["send"], ip: string, tag: string) {
    await windowStart();
    const startedAt = Date.now();
    const answers = Array.from({ length: 5 }, async () => {
      const { response } = await send("/held/x", from(ip, { "x-test-tag": tag }));
      await response.arrayBuffer();
      return { status: response.status, atMs: Date.now() - startedAt, timing: response.headers.get("server-timing") };
    });
    await pause(300);
    return { answers, startedAt };
  }

  it.each([
    ["reset", 200],
    ["unlimited", 200],
    ["raise", 200],
    ["tier", 200],
  ] as [Action, number][])("%s: the held requests go at once", async (action, status) => {
    const id = uniqueRule(`held-${action}`);
    const { send, admin } = worker(heldRule(id), 20);
    const ip = uniqueIp();
    const tag = uniqueTag(id);
    const { answers, startedAt } = await fiveHeld(send, ip, tag);
    const changedAtMs = Date.now() - startedAt;
    await act(admin, action, id, ip, { raise: 20, lower: 1 });
    const answered = await Promise.all(answers);
    expect(answered.map((a) => a.status)).toEqual([status, status, status, status, status]);
    // The three that were held went within half a second of the change, not at their turns 1 to 4 s on.
    const held = answered.filter((a) => a.timing !== null);
    expect(held).toHaveLength(3);
    for (const a of held) expect(a.atMs - changedAtMs).toBeLessThan(500);
    expect(await originHits(tag)).toBe(5);
  });

  it("reset: the client is as a client never seen; its next request is decided on empty counters", async () => {
    const id = uniqueRule("held-reset-after");
    const { send, admin } = worker(heldRule(id), 20);
    const ip = uniqueIp();
    const { answers } = await fiveHeld(send, ip, uniqueTag(id));
    await act(admin, "reset", id, ip, { raise: 20, lower: 1 });
    await Promise.all(answers);
    const status = await admin("GET", `/status?rule=${id}&key=${ip}`);
    expect(status.body).toMatchObject({ allowed: true, retryAfterSeconds: 0, weighted: 0 });
    const { response } = await send("/held/x", from(ip));
    expect(response.status).toBe(200);
    expect(response.headers.get("server-timing")).toBeNull();
    expect(response.headers.get("ratelimit")).toBe(`"${id}";r=1;t=2`);
  });

  it("raise: the held requests are counted before a request sent after the change", async () => {
    const id = uniqueRule("held-raise-order");
    const { send, admin } = worker(heldRule(id), 20);
    const ip = uniqueIp();
    const { answers } = await fiveHeld(send, ip, uniqueTag(id));
    await act(admin, "raise", id, ip, { raise: 20, lower: 1 });
    const { response } = await send("/held/x", from(ip));
    expect(response.status).toBe(200);
    // 2 admitted, the 3 held, then this one: 6 of 20.
    expect(response.headers.get("ratelimit")).toMatch(new RegExp(`^"${id}";r=14;`));
    await Promise.all(answers);
  });

  it("deny: the held requests are refused with 403 at once, and the origin never sees them", async () => {
    const id = uniqueRule("held-deny");
    const { send, admin } = worker(heldRule(id), 20);
    const ip = uniqueIp();
    const tag = uniqueTag(id);
    const { answers, startedAt } = await fiveHeld(send, ip, tag);
    const changedAtMs = Date.now() - startedAt;
    await act(admin, "deny", id, ip, { raise: 20, lower: 1 });
    const answered = await Promise.all(answers);
    expect(answered.map((a) => a.status).sort()).toEqual([200, 200, 403, 403, 403]);
    for (const a of answered.filter((a) => a.status === 403)) expect(a.atMs - changedAtMs).toBeLessThan(500);
    expect(await originHits(tag)).toBe(2);
  });

  it("lower: the held requests keep the turns they were given", async () => {
    const id = uniqueRule("held-lower");
    const { send, admin } = worker(heldRule(id), 20);
    const ip = uniqueIp();
    const tag = uniqueTag(id);
    const { answers, startedAt } = await fiveHeld(send, ip, tag);
    const changedAtMs = Date.now() - startedAt;
    await act(admin, "lower", id, ip, { raise: 20, lower: 1 });
    const answered = await Promise.all(answers);
    expect(answered.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
    // Still held until their turns, the first of which was a second and more away.
    for (const a of answered.filter((a) => a.timing !== null)) expect(a.atMs - changedAtMs).toBeGreaterThan(500);
    expect(await originHits(tag)).toBe(5);
  });
});

describe.concurrent("a request waiting in line for a place, when an admin change comes", () => {
  // 2 in flight at once, a request waits up to 10 s for a place.
  const lineRule = (id: string) => ({
    id,
    path: "/stream/*",
    concurrency: 2,
    max_delay: "10s",
    place_timeout: "6s",
    key: ["ip"],
  });

  /** Two streams in flight (1.5 s and 3 s long), and a third request in line; when each ended or was answered. */
  async function lineOfThree(send: ReturnType<typeof worker>["send"], ip: string, tag: string) {
    const startedAt = Date.now();
    const at = () => Date.now() - startedAt;
    const stream = async (ms: number) => {
      const { response } = await send(`/stream/${ms}`, from(ip));
      expect(response.status).toBe(200);
      await response.text();
      return at();
    };
    const short = stream(1_500);
    const long = stream(3_000);
    await pause(200);
    const third = send("/stream/0", from(ip, { "x-test-tag": tag })).then(async ({ response }) => {
      const answeredAtMs = at();
      await response.arrayBuffer();
      return { status: response.status, answeredAtMs };
    });
    await pause(300);
    return { short, long, third, at };
  }

  it.each([
    ["reset", 200],
    ["unlimited", 200],
    ["raise", 200],
    ["tier", 200],
    ["deny", 403],
  ] as [Action, number][])("%s: it is answered at once (%i)", async (action, status) => {
    const id = uniqueRule(`line-${action}`);
    const { send, admin } = worker(lineRule(id), 5);
    const ip = uniqueIp();
    const tag = uniqueTag(id);
    const { short, long, third, at } = await lineOfThree(send, ip, tag);
    const changedAtMs = at();
    await act(admin, action, id, ip, { raise: 3, lower: 1 });
    const answer = await third;
    expect(answer.status).toBe(status);
    expect(answer.answeredAtMs - changedAtMs).toBeLessThan(500);
    expect(await originHits(tag)).toBe(status === 200 ? 1 : 0);
    await Promise.all([short, long]);
  });

  it("lower: it waits until fewer than the new limit are in flight, never two under a limit of one", async () => {
    const id = uniqueRule("line-lower");
    const { send, admin } = worker(lineRule(id), 5);
    const ip = uniqueIp();
    const { short, long, third, at } = await lineOfThree(send, ip, uniqueTag(id));
    expect(at()).toBeLessThan(1_000);
    await act(admin, "lower", id, ip, { raise: 3, lower: 1 });
    const [shortEndedAtMs, longEndedAtMs, answer] = await Promise.all([short, long, third]);
    expect(answer.status).toBe(200);
    expect(shortEndedAtMs).toBeLessThan(answer.answeredAtMs);
    // Not when the short stream ended (one still in flight): once the long one had.
    expect(answer.answeredAtMs).toBeGreaterThanOrEqual(longEndedAtMs - 50);
  });
});
