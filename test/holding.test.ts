/**
 * Held requests (`max_delay`) through the isolate and the Worker, with
 * real objects, the real origin and the real clock: a request over its
 * limit whose wait is within the delay is held and sent on at its turn, in
 * the order it came; beyond the delay it is refused at once with its exact
 * Retry-After; a client that hangs up while held gives its place to the
 * next in line; a request refused by another key, or by a concurrency
 * rule's place, gives its booking back.
 */
import { describe, expect, it } from "vitest";
import { hashKey } from "../src/core/keys.ts";
import { decide } from "../src/isolate/decide.ts";
import type { RuleCheck } from "../src/object/protocol.ts";
import { env } from "./support/env.ts";
import { createIsolate, requestFrom, settingsFor, statusOf, windows } from "./support/isolate.ts";
import { from, limiter, uniqueIp } from "./support/limiter.ts";

/** 2 per second, a request held up to 1.2 s. */
const SMOOTH = { id: "smooth", path: "/x*", limit: 2, period: "1s", max_delay: "1200ms", key: ["ip"] };

/**
 * Waits until just after a second begins (the objects' clock is this one):
 * a burst then fills the current second's window, and the next request's
 * turn is when the next second's window begins, 1 s on.
 */
async function secondStart(): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 1_000 - (Date.now() % 1_000) + 5));
}

/** The object's view of `ip` under SMOOTH, counting nothing. */
async function peekSmooth(ip: string, rule: Record<string, unknown> = SMOOTH) {
  const settings = settingsFor([rule]);
  const name = await hashKey(JSON.stringify([["ip", ip]]));
  const check: RuleCheck = {
    id: settings.rules[0]!.id,
    limit: settings.rules[0]!.limit,
    periodMs: windows(settings.rules)[0]!.periodMs,
    precision: 1,
    strict: false,
    enforce: true,
  };
  return (await env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(name)).peek([check])).verdicts[0]!;
}

/** Decides `n` requests of `ip` at once in one isolate; each one's status and when it was answered, from the start. */
function burst(rules: unknown[], ip: string, n: number, signals: (AbortSignal | undefined)[] = []) {
  const settings = settingsFor(rules);
  const isolate = createIsolate();
  const tasks: Promise<unknown>[] = [];
  const started = Date.now();
  const answers = Array.from({ length: n }, async (_, i) => {
    const request = new Request("http://limiter.test/x", {
      headers: { "cf-connecting-ip": ip },
      ...(signals[i] ? { signal: signals[i] } : {}),
    });
    const decided = decide(request, { settings, ns: env.RATE_LIMITER, isolate });
    if (decided.pending !== undefined) tasks.push(decided.pending);
    const outcome = await decided;
    return { status: statusOf(outcome), atMs: Date.now() - started, outcome };
  });
  const settled = async () => {
    while (tasks.length > 0) await Promise.all(tasks.splice(0));
  };
  return { answers, settled };
}

describe("a request over its limit, within max_delay", () => {
  it("is held and sent on at its turn, in the order it came, and says how long it was held", async () => {
    const send = limiter([SMOOTH]);
    const ip = uniqueIp();
    await secondStart();
    const started = Date.now();
    const sent = Array.from({ length: 3 }, () =>
      send("/x", from(ip)).then((res) => ({ res, atMs: Date.now() - started })),
    );
    const answers = await Promise.all(sent);
    expect(answers.map((a) => a.res.status)).toEqual([200, 200, 200]);
    // The third goes at its turn: when the first second's two weigh less than the limit, about 1 s on.
    const [, , third] = answers;
    expect(third!.atMs).toBeGreaterThanOrEqual(950);
    const timing = /^ratelimit;desc="held";dur=(\d+)$/.exec(third!.res.headers.get("server-timing") ?? "");
    expect(timing).not.toBeNull();
    expect(Number(timing![1])).toBeGreaterThanOrEqual(950);
    expect(answers[0]!.res.headers.get("server-timing")).toBeNull();
    // Its headers describe its admission at its turn: nothing left there.
    expect(third!.res.headers.get("ratelimit")).toMatch(/^"smooth";r=0;t=\d+$/);
    for (const { res } of answers) await res.arrayBuffer();
  });

  it("is refused at once beyond max_delay, with the exact Retry-After behind those held", async () => {
    await secondStart();
    const { answers, settled } = burst([SMOOTH], uniqueIp(), 4);
    const done = await Promise.all(answers);
    await settled();
    expect(done.map((a) => a.status)).toEqual([200, 200, 200, 429]);
    const refused = done[3]!;
    // The fourth's turn is 1.5 s away, behind the one held: past 1.2 s, refused at once.
    expect(refused.atMs).toBeLessThan(500);
    const response = refused.outcome.kind === "refuse" ? refused.outcome.response : null;
    expect(response?.headers.get("retry-after")).toBe("2");
  });

  it("whose client hangs up while held gives its place to the next in line, and is counted nowhere", async () => {
    const ip = uniqueIp();
    const hangUp = new AbortController();
    await secondStart();
    const { answers, settled } = burst([{ ...SMOOTH, max_delay: "2s" }], ip, 4, [
      undefined,
      undefined,
      hangUp.signal,
      undefined,
    ]);
    setTimeout(() => hangUp.abort(), 200);
    const done = await Promise.all(answers);
    await settled();
    expect(done.map((a) => a.status)).toEqual([200, 200, 499, 200]);
    // The fourth was booked 1.5 s on, behind the third; the third's place came to it, about 1 s on.
    expect(done[3]!.atMs).toBeLessThan(1_400);
    expect(done[3]!.atMs).toBeGreaterThanOrEqual(950);
    // Counted: the two at once, and the fourth at its turn. The third is not.
    expect((await peekSmooth(ip)).weighted).toBeLessThanOrEqual(3);
  });

  it("refused by another key meanwhile, gives its booking back at once and is refused without waiting", async () => {
    const ip = uniqueIp();
    const rules = [
      { ...SMOOTH, max_delay: "5s" },
      { id: "per-user", path: "/x*", limit: 2, period: "1h", key: ["header:x-user"] },
    ];
    const settings = settingsFor(rules);
    const isolate = createIsolate();
    const tasks: Promise<unknown>[] = [];
    const decideOne = async (user: string) => {
      const outcome = await decide(requestFrom(ip, "/x", { "x-user": user }), {
        settings,
        ns: env.RATE_LIMITER,
        isolate,
      });
      if (outcome.pending !== undefined) tasks.push(outcome.pending);
      return outcome;
    };
    const user = `user-${crypto.randomUUID()}`;
    await secondStart();
    // Two for this client pass both rules; two more from other users fill its second.
    expect(statusOf(await decideOne(user))).toBe(200);
    expect(statusOf(await decideOne(user))).toBe(200);
    const started = Date.now();
    // Held by the client's rule (its third this second), refused by the user's (its third this hour).
    const outcome = await decideOne(user);
    while (tasks.length > 0) await Promise.all(tasks.splice(0));
    expect(statusOf(outcome)).toBe(429);
    expect(Date.now() - started).toBeLessThan(500);
    // Its booking went back: the next request of the client, from another user, gets the turn it would have had.
    const next = decideOne(`other-${crypto.randomUUID()}`);
    const nextStarted = Date.now();
    expect(statusOf(await next)).toBe(200);
    expect(Date.now() - nextStarted).toBeLessThan(1_200);
    while (tasks.length > 0) await Promise.all(tasks.splice(0));
  });

  it("refused a concurrency rule's place after its turn, has its booking refunded", async () => {
    const ip = uniqueIp();
    const rules = [
      { ...SMOOTH, path: "/stream/*", max_delay: "2s" },
      { id: "two-at-a-time", path: "/stream/*", concurrency: 2, key: ["ip"] },
    ];
    const send = limiter(rules);
    await secondStart();
    const secondStartedAt = Date.now() - 5;
    // Two streams fill this second's window and both places.
    const streams = [await send("/stream/3000", from(ip)), await send("/stream/3000", from(ip))];
    expect(streams.map((s) => s.status)).toEqual([200, 200]);
    // Held until the next second (its turn, however long the two took to send), then refused a place:
    // both are still held.
    const third = await send("/stream/0", from(ip));
    expect(third.status).toBe(429);
    expect(Date.now() - secondStartedAt).toBeGreaterThanOrEqual(950);
    await new Promise((resolve) => setTimeout(resolve, 50));
    // Last second's two weigh just under 2; the third's count, taken at its turn, was given back.
    const { weighted } = await peekSmooth(ip, { ...SMOOTH, path: "/stream/*" });
    expect(weighted).toBeLessThan(2);
    for (const stream of streams) await stream.body!.cancel();
  });
});
