/**
 * Priorities under an adaptive rule, through the Worker, its isolate and
 * real Durable Objects: while capacity is reduced, sheddable requests are
 * refused first (503 temporary-reduced-capacity), then default ones, and
 * critical ones only when nothing else is left; a share can be kept for
 * critical ones; and what the isolate remembers of one priority (a
 * refusal, a lease) never answers a request of another.
 */
import { describe, expect, it } from "vitest";
import { type HealthCounts, noCounts, type PriorityCounts, type PriorityPlan } from "../src/core/health.ts";
import { type Flight, type HealthReporter, newFlight } from "../src/isolate/health-reporter.ts";
import { createIsolate, defaultIsolate } from "../src/isolate/isolate.ts";
import { reportHealth } from "../src/object/client.ts";
import type { FactorAnswer } from "../src/object/controller-protocol.ts";
import { env } from "./support/env.ts";
import { decider, requestFrom, settingsFor, statusOf } from "./support/isolate.ts";
import { from, limiter, uniqueIp } from "./support/limiter.ts";

const REDUCED = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

let rules = 0;
const uniqueRule = (name: string) => `${name}-${++rules}-${Date.now()}`;
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const CRITICAL = { "x-priority": "critical" };
const SHEDDABLE = { "x-priority": "sheddable" };

/** Each client 10 an hour, floor 1; critical and sheddable requests named by a header. */
const rule = (id: string, over: Record<string, unknown> = {}) => ({
  id,
  limit: 10,
  period: "1h",
  key: ["ip"],
  adaptive: {
    latency: "100ms",
    floor: 1,
    critical: ["header:x-priority=critical"],
    sheddable: ["header:x-priority=sheddable"],
    ...over,
  },
});

/**
 * Pushes the rule's controller to a cut, as isolates' reports of an origin
 * that failed half of what it was sent would: the priorities that sent
 * requests are `byPriority`'s. The cut halves the factor of the first of
 * them in the order sheddable, default, critical.
 */
async function cut(id: string, byPriority: PriorityCounts, plan: PriorityPlan): Promise<FactorAnswer> {
  const target = { latencyMs: 100, percentile: 99, errorShare: 0.05, floor: 1, priorities: plan };
  const counts: HealthCounts = {
    ...noCounts(),
    forwarded: 100,
    answered: 100,
    errors: 50,
    shed: 0,
    peak: 1,
    byPriority,
  };
  const report = () => reportHealth(env.RATE_LIMITER, { rule: id, limit: 10, target, version: 0, counts }, 5_000);
  await report();
  await pause(550);
  const answer = await report();
  if (!answer.ok) throw new Error(answer.message);
  return answer.value;
}

/** One request at a time: each status. */
async function sequence(send: () => Promise<Response>, n: number): Promise<Response[]> {
  const responses: Response[] = [];
  for (let i = 0; i < n; i++) {
    const response = await send();
    await response.clone().arrayBuffer();
    responses.push(response);
  }
  return responses;
}

/** A first request from a client of its own: the isolate reports, and learns the controller's factors. */
async function learn(send: (path: string, init?: RequestInit) => Promise<Response>, id: string) {
  await (await send("/x", from(uniqueIp()))).arrayBuffer();
  for (let i = 0; i < 50 && defaultIsolate().adaptive.get(id)?.factors == null; i++) await pause(20);
  expect(defaultIsolate().adaptive.get(id)?.factors).not.toBeNull();
}

const both = { critical: true, sheddable: true, reserve: 0 };

describe("an adaptive rule with priorities, its capacity reduced", () => {
  it("refuses sheddable requests first: over their reduced limit they get 503, while the same client's critical requests get 200", async () => {
    const id = uniqueRule("shed-first");
    const send = limiter([rule(id)]);
    const answer = await cut(id, { sheddable: [60, 0], critical: [40, 0] }, both);
    expect(answer.factors).toEqual({ critical: 1, default: 1, sheddable: 0.5 });
    await learn(send, id);
    const client = uniqueIp();
    const sheddable = await sequence(() => send("/x", from(client, SHEDDABLE)), 7);
    expect(sheddable.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 503, 503]);
    const refusal = (await sheddable[5]!.json()) as { type: string };
    expect(refusal.type).toBe(REDUCED);
    // The refusals the isolate now remembers are the sheddable variant's: a critical request is not one of them.
    const critical = await sequence(() => send("/x", from(client, CRITICAL)), 6);
    expect(critical.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429]);
  });

  it("refuses default requests before critical ones, and critical ones last: with nothing left for the others, they get 503, counted nowhere", async () => {
    const id = uniqueRule("default-next");
    const send = limiter([rule(id)]);
    // Only critical requests were sent: the stages of the others are passed at once, and critical is halved.
    const answer = await cut(id, { critical: [100, 0] }, both);
    expect(answer.factors).toEqual({ critical: 0.5, default: 0, sheddable: 0 });
    await learn(send, id);
    const client = uniqueIp();
    // Nothing is left for default and sheddable requests: refused (the first by the client's object, the next
    // by the isolate, which remembers that refusal for its second), counted nowhere.
    const plain = await sequence(() => send("/x", from(client)), 2);
    const sheddable = await sequence(() => send("/x", from(client, SHEDDABLE)), 2);
    expect([...plain, ...sheddable].map((r) => r.status)).toEqual([503, 503, 503, 503]);
    expect(((await plain[0]!.json()) as { type: string }).type).toBe(REDUCED);
    expect(plain[0]!.headers.get("retry-after")).toBe("1");
    const critical = await sequence(() => send("/x", from(client, CRITICAL)), 6);
    expect(critical.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 503]);
  });

  describe("a priority with nothing left, and the client's own override", () => {
    const TOKEN = "priorities-admin-token";
    /** The rule with nothing left for default and sheddable requests, critical ones halved; and a way to set overrides. */
    async function nothingLeft(name: string) {
      const id = uniqueRule(name);
      const send = limiter([rule(id)], { ADMIN_TOKEN: TOKEN });
      const answer = await cut(id, { critical: [100, 0] }, both);
      expect(answer.factors).toEqual({ critical: 0.5, default: 0, sheddable: 0 });
      await learn(send, id);
      const override = async (client: string, body: unknown) =>
        (
          await send(`/__ratelimit/overrides?rule=${id}&key=${client}`, {
            method: "PUT",
            headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
            body: JSON.stringify(body),
          })
        ).status;
      const reset = async (client: string) =>
        (
          await send(`/__ratelimit/status?rule=${id}&key=${client}`, {
            method: "DELETE",
            headers: { authorization: `Bearer ${TOKEN}` },
          })
        ).status;
      return { send, override, reset };
    }

    it("unlimited: the rule no longer applies to the client, so its requests of that priority reach the origin", async () => {
      const { send, override } = await nothingLeft("nothing-left-unlimited");
      const client = uniqueIp();
      expect(await override(client, { unlimited: true })).toBe(200);
      const sheddable = await sequence(() => send("/x", from(client, SHEDDABLE)), 3);
      const plain = await sequence(() => send("/x", from(client)), 3);
      expect([...sheddable, ...plain].map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    });

    it("deny: its requests of that priority get 403, as every request of a denied client does", async () => {
      const { send, override } = await nothingLeft("nothing-left-deny");
      const client = uniqueIp();
      expect(await override(client, { deny: true })).toBe(200);
      const sheddable = await sequence(() => send("/x", from(client, SHEDDABLE)), 3);
      expect(sheddable.map((r) => r.status)).toEqual([403, 403, 403]);
    });

    it("an override set after its requests were refused applies to its very next request", async () => {
      const { send, override } = await nothingLeft("nothing-left-then-unlimited");
      const client = uniqueIp();
      const before = await sequence(() => send("/x", from(client, SHEDDABLE)), 2);
      expect(before.map((r) => r.status)).toEqual([503, 503]);
      expect(before[1]!.headers.get("retry-after")).toBe("1");
      expect(await override(client, { unlimited: true })).toBe(200);
      expect((await send("/x", from(client, SHEDDABLE))).status).toBe(200);
    });

    it("a reset: the reduction is no count, so its next request of that priority is refused again; its critical ones go", async () => {
      const { send, reset } = await nothingLeft("nothing-left-reset");
      const client = uniqueIp();
      expect((await send("/x", from(client, SHEDDABLE))).status).toBe(503);
      expect(await reset(client)).toBe(200);
      expect((await send("/x", from(client, SHEDDABLE))).status).toBe(503);
      expect((await send("/x", from(client, CRITICAL))).status).toBe(200);
    });

    it("another limit: still nothing left for that priority (the reduction applies to any limit), 503 and never a 429", async () => {
      const { send, override } = await nothingLeft("nothing-left-limit");
      const client = uniqueIp();
      expect(await override(client, { limit: 1000 })).toBe(200);
      const sheddable = await sequence(() => send("/x", from(client, SHEDDABLE)), 3);
      expect(sheddable.map((r) => r.status)).toEqual([503, 503, 503]);
      const critical = await sequence(() => send("/x", from(client, CRITICAL)), 3);
      expect(critical.map((r) => r.status)).toEqual([200, 200, 200]);
    });
  });

  it("keeps the reserve for critical requests: default ones get at most the rest of the limit in force", async () => {
    const id = uniqueRule("reserve");
    const send = limiter([rule(id, { reserve: "40%" })]);
    // Only default requests were sent (no sheddable ones): default is cut, and the reserve caps it at 60 %.
    const answer = await cut(id, { default: [100, 0] }, { ...both, reserve: 0.4 });
    expect(answer.factors).toEqual({ critical: 1, default: 0.5, sheddable: 0 });
    await learn(send, id);
    const client = uniqueIp();
    const plain = await sequence(() => send("/x", from(client)), 6);
    expect(plain.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 503]);
    const critical = await sequence(() => send("/x", from(client, CRITICAL)), 6);
    expect(critical.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429]);
  });

  it("counts what each priority forwarded and shed, for the controller and the statistics", async () => {
    const id = uniqueRule("counted");
    const send = limiter([rule(id)]);
    await cut(id, { sheddable: [60, 0], critical: [40, 0] }, both);
    await learn(send, id);
    const client = uniqueIp();
    await sequence(() => send("/x", from(client, SHEDDABLE)), 7);
    await sequence(() => send("/x", from(client, CRITICAL)), 2);
    const reporter = defaultIsolate().adaptive.get(id)!;
    const pending = (reporter as unknown as { counts: HealthCounts }).counts;
    // The first request (before the factors were learned) went with the first report; the rest are here.
    expect(pending.byPriority?.sheddable).toEqual([5, 2]);
    expect(pending.byPriority?.critical).toEqual([2, 0]);
  });
});

describe("sheddable requests while the isolate's requests in flight crowd the origin, before any report", () => {
  const TOKEN = "priorities-crowd-token";
  /** `n` requests of the rule in flight at the origin, as the isolate's reporter follows them. */
  const inFlight = (reporter: HealthReporter, n: number): Flight[] =>
    Array.from({ length: n }, () => {
      const f = newFlight(undefined);
      reporter.started(f, Date.now());
      return f;
    });

  /** The isolate's reporter of the rule, at its configured limit, once a first request made it. */
  async function reporterOf(send: (path: string, init?: RequestInit) => Promise<Response>, id: string) {
    await (await send("/x", from(uniqueIp()))).arrayBuffer();
    const reporter = defaultIsolate().adaptive.get(id)!;
    expect(reporter.factor).toBe(1);
    return reporter;
  }

  it("refuses them at once (503, counted nowhere), admits default and critical ones, and lets a client's override decide first", async () => {
    const id = uniqueRule("crowd");
    const send = limiter([rule(id)], { ADMIN_TOKEN: TOKEN });
    const reporter = await reporterOf(send, id);
    // One request answered within the target with 2 in flight: from 8 in flight (the least) the origin is crowded. 50 are.
    const [first, second] = inFlight(reporter, 2);
    reporter.ended(second!);
    reporter.answered(200, 5, undefined, second!);
    const crowd = inFlight(reporter, 49);
    expect(reporter.crowd.flying).toBe(50);
    const override = async (client: string, body: unknown) => {
      const response = await send(`/__ratelimit/overrides?rule=${id}&key=${client}`, {
        method: "PUT",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      await response.arrayBuffer();
      return response.status;
    };
    const client = uniqueIp();
    const shed = await sequence(() => send("/x", from(client, SHEDDABLE)), 2);
    expect(shed.map((r) => r.status)).toEqual([503, 503]);
    expect(((await shed[0]!.json()) as { type: string }).type).toBe(REDUCED);
    expect(shed[0]!.headers.get("retry-after")).toBe("1");
    // The quota it names is its priority's limit, here the configured one: a crowd is no reduction to nothing.
    expect(shed[0]!.headers.get("ratelimit-policy")).toMatch(/;q=10;/);
    // A denied client is denied, as every request of it is.
    const denied = uniqueIp();
    expect(await override(denied, { deny: true })).toBe(200);
    expect((await sequence(() => send("/x", from(denied, SHEDDABLE)), 2)).map((r) => r.status)).toEqual([403, 403]);
    // A client the rule is lifted off is admitted.
    const lifted = uniqueIp();
    expect(await override(lifted, { unlimited: true })).toBe(200);
    // (Its answer, in time with 51 in flight, teaches the isolate the origin is not crowded at 51: ended at once.)
    for (const f of crowd) {
      reporter.ended(f);
      reporter.answered(503, 5, undefined, f);
    }
    reporter.ended(first!);
    reporter.answered(503, 5, undefined, first!);
    expect(reporter.crowd.flying).toBe(0);
    expect((await sequence(() => send("/x", from(lifted, SHEDDABLE)), 1)).map((r) => r.status)).toEqual([200]);
    // The crowd gone, the refused client's sheddable requests are admitted at once: its count was never touched.
    const after = await sequence(() => send("/x", from(client, SHEDDABLE)), 10);
    expect(after.map((r) => r.status)).toEqual([...Array(10).fill(200)]);
    expect((await send("/x", from(client, SHEDDABLE))).status).toBe(429);
  });

  it("is not made by one client holding slow requests at the origin: others' sheddable requests go on", async () => {
    const id = uniqueRule("crowd-held");
    const send = limiter([rule(id)]);
    const reporter = await reporterOf(send, id);
    const [first, second] = inFlight(reporter, 2);
    reporter.ended(second!);
    reporter.answered(200, 5, undefined, second!);
    // One client holds 12 requests at the origin (the origin takes 15 s over them, say): 13 in flight, bound 8.
    const held = Array.from({ length: 12 }, () => {
      const f = newFlight("holder");
      reporter.started(f, Date.now());
      return f;
    });
    expect(reporter.crowd.flying).toBe(13);
    const statuses = (await sequence(() => send("/x", from(uniqueIp(), SHEDDABLE)), 3)).map((r) => r.status);
    expect(statuses).toEqual([200, 200, 200]);
    for (const f of [...held, first!]) {
      reporter.ended(f);
      reporter.answered(200, 5, f.key, f);
    }
  });

  it("meets an admin reset: the crowd is no count, so a reset lifts nothing while it lasts, and the client's count is whole after it", async () => {
    const id = uniqueRule("crowd-reset");
    const send = limiter([rule(id)], { ADMIN_TOKEN: TOKEN });
    const reporter = await reporterOf(send, id);
    const [one] = inFlight(reporter, 1);
    reporter.ended(one!);
    reporter.answered(200, 5, undefined, one!);
    const crowd = inFlight(reporter, 40);
    const client = uniqueIp();
    expect((await sequence(() => send("/x", from(client, SHEDDABLE)), 2)).map((r) => r.status)).toEqual([503, 503]);
    const reset = await send(`/__ratelimit/status?rule=${id}&key=${client}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(reset.status).toBe(200);
    await reset.arrayBuffer();
    // While the crowd lasts, a reset lifts nothing: the refusal was no count.
    expect((await sequence(() => send("/x", from(client, SHEDDABLE)), 1)).map((r) => r.status)).toEqual([503]);
    for (const f of crowd) {
      reporter.ended(f);
      reporter.answered(503, 5, undefined, f);
    }
    const after = await sequence(() => send("/x", from(client, SHEDDABLE)), 11);
    expect(after.map((r) => r.status)).toEqual([...Array(10).fill(200), 429]);
  });

  it("never refuses default or critical ones, however crowded", async () => {
    const id = uniqueRule("crowd-others");
    const send = limiter([rule(id)]);
    const reporter = await reporterOf(send, id);
    const [one] = inFlight(reporter, 1);
    reporter.ended(one!);
    reporter.answered(200, 5, undefined, one!);
    inFlight(reporter, 40);
    expect(reporter.crowded("sheddable", Date.now())).toBe(true);
    const client = uniqueIp();
    const plain = await sequence(() => send("/x", from(client)), 3);
    const critical = await sequence(() => send("/x", from(client, CRITICAL)), 3);
    expect([...plain, ...critical].map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
  });
});

describe("an adaptive rule with priorities at its configured limit", () => {
  it("admits every priority alike: all of them up to the limit, none refused with a 503", async () => {
    const id = uniqueRule("calm");
    const send = limiter([rule(id)]);
    const client = uniqueIp();
    const statuses = [
      ...(await sequence(() => send("/x", from(client, SHEDDABLE)), 4)),
      ...(await sequence(() => send("/x", from(client)), 3)),
      ...(await sequence(() => send("/x", from(client, CRITICAL)), 4)),
    ].map((r) => r.status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429]);
  });
});

describe("what an isolate holds for one priority", () => {
  it("is never spent by another: units leased under critical requests' limit admit no sheddable request over its own", async () => {
    const id = uniqueRule("leases");
    const isolate = createIsolate();
    const { run, background, answer } = decider(settingsFor([{ ...rule(id), limit: 100 }]), env.RATE_LIMITER, isolate);
    const send = async (ip: string, headers: Record<string, string> = {}) => {
      const request = requestFrom(ip, "/x", headers);
      const outcome = await run(request);
      answer(request, outcome, new Response(null, { status: 200 }));
      await background.settled();
      return statusOf(outcome);
    };
    // Sheddable requests' limit halved (to 50 of 100); critical requests' whole.
    const target = { latencyMs: 100, percentile: 99, errorShare: 0.05, floor: 1, priorities: both };
    const counts = {
      ...noCounts(),
      forwarded: 100,
      answered: 100,
      errors: 50,
      peak: 1,
      byPriority: { sheddable: [100, 0] },
    };
    const report = () =>
      reportHealth(env.RATE_LIMITER, { rule: id, limit: 100, target, version: 0, counts } as never, 5_000);
    await report();
    await pause(550);
    await report();
    await send(uniqueIp());
    expect(isolate.adaptive.get(id)?.factors).toEqual({ critical: 1, default: 1, sheddable: 0.5 });
    // 55 critical requests: the client's key leases units ahead under critical requests' limit (100).
    const client = uniqueIp();
    for (let i = 0; i < 55; i++) expect(await send(client, CRITICAL)).toBe(200);
    expect([...isolate.keys.digests()].some((d) => isolate.keys.heldUnits(d) > 0)).toBe(true);
    // The client's count is over sheddable requests' limit (50): none is admitted, leased units or not.
    const sheddable: number[] = [];
    for (let i = 0; i < 5; i++) sheddable.push(await send(client, SHEDDABLE));
    expect(sheddable).toEqual([503, 503, 503, 503, 503]);
    // Critical requests go on up to theirs.
    expect(await send(client, CRITICAL)).toBe(200);
  });
});

describe("an admin reset of a client under a rule with priorities", () => {
  it("forgets what the isolate knew of every priority: a sheddable request refused before it is admitted again at once", async () => {
    const id = uniqueRule("reset");
    const token = "test-admin-token-priorities";
    const send = limiter([rule(id)], { ADMIN_TOKEN: token });
    await cut(id, { sheddable: [60, 0], critical: [40, 0] }, both);
    await learn(send, id);
    const client = uniqueIp();
    const before = await sequence(() => send("/x", from(client, SHEDDABLE)), 6);
    expect(before.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 503]);
    const reset = await send(`/__ratelimit/status?rule=${id}&key=${client}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${token}`, "cf-connecting-ip": "198.51.100.1" },
    });
    expect(reset.status).toBe(200);
    await reset.arrayBuffer();
    // The isolate remembered the sheddable refusal: the reset forgets it, with the client's count.
    const after = await sequence(() => send("/x", from(client, SHEDDABLE)), 6);
    expect(after.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 503]);
  });
});
