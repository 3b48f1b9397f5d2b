/**
 * No client steers an adaptive rule: the limit falls only while the origin
 * is slow or failing. Through the Worker, its isolate and real Durable
 * Objects, in front of the real origin, which answers in a few
 * milliseconds: clients that take their time sending a body, or that hang
 * up mid-upload, one or five of them, while a legitimate client sends
 * steadily far below its limit. The factor stays 1, and the legitimate
 * client gets only 200. Beside them, an origin that is truly slow for
 * every client still cuts as fast as before.
 */
import { Hono } from "hono";
import { afterAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../src/core/rules.ts";
import { defaultIsolate } from "../src/isolate/isolate.ts";
import { rateLimit } from "../src/lib.ts";
import { readController } from "../src/object/client.ts";
import type { Echo } from "./support/echo.ts";
import { env } from "./support/env.ts";
import { from, limiter, uniqueIp } from "./support/limiter.ts";
import { expectRuntimeReports } from "./support/logs.ts";

let rules = 0;
const uniqueRule = (name: string) => `${name}-${++rules}-${Date.now()}`;

/**
 * The rule: each client 600 a minute, the origin within 300 ms at the 99th percentile (which the
 * origin here, answering in milliseconds, meets even while the machine runs the rest of the suite).
 */
const rule = (id: string): RuleInput => ({
  id,
  limit: 600,
  period: "1m",
  key: ["ip"],
  adaptive: { latency: "300ms", percentile: 99, errors: "5%" },
});

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A claim about an origin that answers the other clients within the rule's 300 ms target, tried on one: a run in
 * which the busy host made one of their answers take 300 ms or more (as they timed it, from sending to the last
 * byte) tried the claim on another origin, and is run again, three runs at most. CI, busy with other test files,
 * once cut the slow-endpoint case to 0.4 at 64bb499, and eight adaptive test files run at once cut the flood case
 * to 0.4 at 9ee1d1f; those runs' timings were not kept, and a failure now shows the controller's history.
 */
async function withCalmOthers<T extends { longestOthersMs: number }>(run: () => Promise<T>): Promise<T> {
  const longest: number[] = [];
  for (let attempt = 0; attempt < 3; attempt++) {
    const result = await run();
    if (result.longestOthersMs < 300) return result;
    longest.push(result.longestOthersMs);
  }
  throw new Error(`in each of 3 runs, an answer to the other clients took 300 ms or more: ${longest.join(", ")} ms`);
}

/** The controller's history of a rule, for a failure's message. */
async function historyOf(id: string): Promise<string> {
  const view = await readController(env.RATE_LIMITER, id, 0, 5_000);
  return JSON.stringify(view.ok ? view.value?.history : view.message);
}

/**
 * What a claim that some clients cannot move the limit checks of a run: the factor still 1 in the isolate and the
 * controller (the history in the message), and every one of the others' `atLeast` answers or more a 200.
 */
function expectUnmoved(
  run: { factors: { isolate: number; controller: number }; statuses: number[]; history: string },
  atLeast: number,
): void {
  expect(run.factors, run.history).toEqual({ isolate: 1, controller: 1 });
  expect(run.statuses.length).toBeGreaterThan(atLeast);
  expect(run.statuses.filter((s) => s !== 200)).toEqual([]);
}

/**
 * Groups of clients under one new adaptive rule, each client POSTing to its group's path again and again, pausing
 * `pauseMs` after each answer, until `untilMs` after the start. The `others` group's answers are the ones a claim
 * is about: their statuses are kept, and the longest any took as they timed it (sending to the last byte). Returns
 * those, the factors after, and the controller's history.
 */
async function traffic(
  name: string,
  groups: { keys: number; path: string; pauseMs: number; untilMs: number; others?: true }[],
) {
  const id = uniqueRule(name);
  const send = limiter([rule(id)]);
  const startedAt = Date.now();
  const statuses: number[] = [];
  let longestOthersMs = 0;
  const client = async (ip: string, group: (typeof groups)[number]) => {
    while (Date.now() - startedAt < group.untilMs) {
      const sentAt = Date.now();
      const response = await send(group.path, { method: "POST", body: "{}", ...from(ip) });
      await response.arrayBuffer();
      if (group.others) {
        longestOthersMs = Math.max(longestOthersMs, Date.now() - sentAt);
        statuses.push(response.status);
      }
      await pause(group.pauseMs);
    }
  };
  await Promise.all(groups.flatMap((group) => Array.from({ length: group.keys }, () => client(uniqueIp(), group))));
  return { factors: await factors(id), statuses, longestOthersMs, history: await historyOf(id) };
}

/** The factor this isolate applies to a rule, and the controller's. */
async function factors(id: string): Promise<{ isolate: number; controller: number }> {
  const view = await readController(env.RATE_LIMITER, id, 0, 5_000);
  if (!view.ok) throw new Error(view.message);
  return { isolate: defaultIsolate().adaptive.get(id)?.factor ?? 1, controller: view.value?.factor ?? 1 };
}

/** A body that sends its first byte at once and the second `ms` later: a client slow to upload. */
function trickled(ms: number): ReadableStream<Uint8Array> {
  return new ReadableStream({
    async start(controller) {
      controller.enqueue(new Uint8Array([123]));
      await pause(ms);
      controller.enqueue(new Uint8Array([125]));
      controller.close();
    },
  });
}

/** A client that sends one byte and resets its connection `ms` later: its body fails, and its request is aborted. */
function resetAfter(ms: number): { body: ReadableStream<Uint8Array>; signal: AbortSignal } {
  const hangUp = new AbortController();
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      controller.enqueue(new Uint8Array([123]));
      await pause(ms);
      hangUp.abort();
      controller.error(new Error("connection reset by peer"));
    },
  });
  return { body, signal: hangUp.signal };
}

type Attack = (send: ReturnType<typeof limiter>, ip: string) => Promise<unknown>;

const attacks: [string, Attack][] = [
  [
    "a body trickled over 600 ms",
    (send, ip) =>
      send("/echo", { method: "POST", body: trickled(600), duplex: "half", ...from(ip) } as RequestInit).then((r) =>
        r.arrayBuffer(),
      ),
  ],
  [
    "one byte, then a reset 50 ms later",
    (send, ip) => {
      const { body, signal } = resetAfter(50);
      return send("/echo", { method: "POST", body, signal, duplex: "half", ...from(ip) } as RequestInit).then(
        (r) => r.arrayBuffer(),
        () => undefined,
      );
    },
  ],
];

describe.concurrent("clients that cannot move an adaptive rule's limit", () => {
  // The runtime reports each body broken off mid-upload (three lines each), though the Worker handles it.
  afterAll(async () => {
    expect(await expectRuntimeReports("connection reset by peer", "all")).toBeGreaterThan(0);
  });

  // Eight keys are more than the five a decision leaves out: only what is timed, and what is in flight, keeps them out.
  it.each(
    attacks.flatMap(([name, attack]) => [1, 5, 8].map((keys) => [name, keys, attack] as [string, number, Attack])),
  )(
    "%s, from %i key(s), every 200 ms each: the factor stays 1 and a legitimate client gets only 200",
    async (_name, keys, attack) => {
      const id = uniqueRule("steer");
      const send = limiter([rule(id)]);
      const attackers = Array.from({ length: keys }, uniqueIp);
      const legitimate = uniqueIp();
      const statuses: number[] = [];
      const startedAt = Date.now();
      const attacking = (async () => {
        while (Date.now() - startedAt < 4_000) {
          await Promise.all([...attackers.map((ip) => attack(send, ip)), pause(200)]);
        }
      })();
      // The legitimate client: 4 POSTs a second, bodies sent at once, far under 600 a minute.
      while (Date.now() - startedAt < 4_500) {
        const response = await send("/echo", { method: "POST", body: "{}", ...from(legitimate) });
        await response.arrayBuffer();
        statuses.push(response.status);
        await pause(250);
      }
      await attacking;
      expect(await factors(id)).toEqual({ isolate: 1, controller: 1 });
      expect(statuses.length).toBeGreaterThan(10);
      expect(statuses.filter((s) => s !== 200)).toEqual([]);
    },
  );
});

describe("an endpoint slow by nature, called by a few clients", () => {
  /**
   * `slowKeys` clients, each asking an endpoint that takes a second (over the 300 ms target, and ten times the
   * others' answers) again and again, beside `fastKeys` clients each asking for 100 ms answers 4 times a second, for
   * 4 s. The origin has no queue: its slow answers are the endpoint's, and only its callers see them. Returns the
   * factors after, the fast clients' statuses, the longest any of their answers took as they timed it (the
   * controller's timing is within it), and the controller's history.
   */
  const slowEndpoint = (slowKeys: number, fastKeys: number) =>
    traffic("slow-endpoint", [
      { keys: slowKeys, path: "/slow/1000", pauseMs: 100, untilMs: 4_000 },
      { keys: fastKeys, path: "/slow/100", pauseMs: 150, untilMs: 4_000, others: true },
    ]);

  // Five keys, and eight: more than the five worst a judgement leaves out, fewer than half of the clients.
  it.each([5, 8])(
    "%i keys beside twenty others: their slow answers are the endpoint's, the factor stays 1, and the others get only 200",
    async (slowKeys) => {
      expectUnmoved(await withCalmOthers(() => slowEndpoint(slowKeys, 20)), 100);
    },
  );

  it("called by most of the clients, it is the origin as they see it: the limit is cut", async () => {
    const { factors } = await slowEndpoint(12, 4);
    expect(factors.controller).toBeLessThan(1);
  });
});

describe("a few clients pacing fast errors", () => {
  /**
   * Five keys each asking an endpoint that fails at once (500 in a few ms), one request every 2.2 s, for 7 s,
   * beside a legitimate client sending 4 a second to an endpoint that answers 200 in a few ms. Found from outside:
   * paced a little over 2 s apart, no key's failures ever added up to 2 over its recent reports (each counting
   * half as much 2 s on), so none was its own trouble, none was left out, and the limit stayed at its floor for as
   * long as they went on, the legitimate clients refused about half the time.
   */
  const paced = () =>
    traffic("paced-errors", [
      { keys: 5, path: "/status/500", pauseMs: 2_200, untilMs: 7_000 },
      { keys: 1, path: "/echo", pauseMs: 250, untilMs: 7_500, others: true },
    ]);

  it("cannot move the limit: each key's failures are its own from its second, the factor stays 1, and the legitimate client gets only 200", async () => {
    expectUnmoved(await withCalmOthers(paced), 20);
  });
});

describe("a few clients failing on purpose, most of the rule's answers", () => {
  /**
   * Three keys send requests that always fail (fast 500s), eight a second each, from the start; three others send
   * requests the origin answers, four a second each. The failing keys' answers are most of the rule's: their share of
   * failures cannot be twice everyone's, but every one of their requests fails, where the others' never do (found
   * from outside: the limit fell from 100 to 10, and the others got 503).
   */
  const failing = () =>
    traffic("failing-majority", [
      { keys: 3, path: "/status/500", pauseMs: 125, untilMs: 6_000 },
      { keys: 3, path: "/echo", pauseMs: 250, untilMs: 6_500, others: true },
    ]);

  it("cannot move the limit: their failures are their own, the factor stays 1, and the others get only 200", async () => {
    expectUnmoved(await withCalmOthers(failing), 40);
  });
});

describe("a few clients flooding the rule with fast requests", () => {
  /**
   * Twenty clients each ask for 100 ms answers about twice a second; five more flood the same rule with answers
   * that take no time, ten a second each, for 4 s, then stop. Had their answers set the calm latency (the lowest
   * mean), the others' usual 100 ms would read as a queue once they stopped.
   */
  const flood = () =>
    traffic("fast-flood", [
      { keys: 20, path: "/slow/100", pauseMs: 400, untilMs: 9_000, others: true },
      { keys: 5, path: "/x", pauseMs: 100, untilMs: 4_000 },
    ]);

  it("cannot set the calm latency: once they stop, the others' usual latency is no queue, and the factor stays 1", async () => {
    expectUnmoved(await withCalmOthers(flood), 200);
  });
});

describe("the requests an isolate counts in flight at the origin", () => {
  it("are counted from their last byte: twenty clients trickling bodies over a second make no queue, and the factor stays 1", async () => {
    const id = uniqueRule("in-flight");
    const send = limiter([rule(id)]);
    const legitimate = uniqueIp();
    const statuses: number[] = [];
    // The origin takes 100 ms for these: its calm latency stands well above a busy host's noise, which a calm of a
    // few ms would take for a queue forming (with 50 ms, CI at 1af0e7e, busy with other test files, found the
    // attackers' echoes answered past the late mark of 150 ms after their last byte, and cut to 0.1).
    const ask = async (ip = legitimate) => {
      const response = await send("/slow/100", { method: "POST", body: "{}", ...from(ip) });
      await response.arrayBuffer();
      if (ip === legitimate) statuses.push(response.status);
    };
    // The controller measures the origin's calm latency (a few ms) and gives the isolate its late mark: from
    // clients of their own, each far under its limit, so that the legitimate client's stays whole.
    const startedAt = Date.now();
    while (defaultIsolate().adaptive.get(id)?.lateMs == null && Date.now() - startedAt < 5_000) {
      await Promise.all([ask(uniqueIp()), ask(uniqueIp()), ask(uniqueIp())]);
      await pause(20);
    }
    expect(defaultIsolate().adaptive.get(id)?.lateMs).toBeGreaterThan(0);
    // Twenty clients, each trickling a body over a second, again and again; had their uploads counted as in
    // flight at the origin, each would be found late, far more than a fifth of the requests: a queue.
    const attackers = Array.from({ length: 20 }, uniqueIp);
    const attackStartedAt = Date.now();
    const attacking = Promise.all(
      attackers.map(async (ip) => {
        while (Date.now() - attackStartedAt < 3_000) {
          const init = { method: "POST", body: trickled(1_000), duplex: "half", ...from(ip) } as RequestInit;
          await (await send("/echo", init)).arrayBuffer();
        }
      }),
    );
    while (Date.now() - attackStartedAt < 3_500) {
      await ask();
      await pause(100);
    }
    await attacking;
    expect(await factors(id)).toEqual({ isolate: 1, controller: 1 });
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  });
});

describe("a request forwarded under an adaptive rule", () => {
  it.each([
    ["with a Content-Length, keeps it", "fixed"],
    ["sent in chunks, is passed on in chunks", "chunked"],
  ])("passes its body on byte for byte: a body %s", async (_name, how) => {
    const send = limiter([rule(uniqueRule("body"))]);
    const bytes = new Uint8Array(200_000).map((_, i) => (i * 7) % 251);
    const body =
      how === "fixed"
        ? bytes
        : new ReadableStream<Uint8Array>({
            start(controller) {
              for (let at = 0; at < bytes.length; at += 50_000) controller.enqueue(bytes.slice(at, at + 50_000));
              controller.close();
            },
          });
    // As a client's request arrives: with the length it declared, if it declared one.
    const declared: Record<string, string> = how === "fixed" ? { "content-length": String(bytes.length) } : {};
    const init = { method: "POST", body, duplex: "half", ...from(uniqueIp(), declared) } as RequestInit;
    const response = await send("/echo", init);
    const echo = (await response.json()) as Echo;
    expect(echo.bodyBytes).toBe(bytes.length);
    expect(echo.bodySha256).toBe(await sha256(bytes));
    const header = (name: string) => echo.headers.find(([n]) => n === name)?.[1];
    if (how === "fixed") expect(header("content-length")).toBe(String(bytes.length));
    else expect(header("transfer-encoding")).toBe("chunked");
  });
});

describe("rateLimit() with an adaptive rule in your own Hono app", () => {
  it("times your handler from the body's last byte: clients trickling their bodies do not move the limit", async () => {
    const id = uniqueRule("library");
    const app = new Hono<{ Bindings: typeof env }>();
    app.post("/echo", rateLimit({ rules: rule(id) }), async (c) => c.json({ read: (await c.req.text()).length }));
    const call = (ip: string, init: RequestInit) =>
      app.request("/echo", { method: "POST", ...init, headers: { "cf-connecting-ip": ip } }, env);
    // Six of them: more than the few clients a decision leaves out, so only the timing keeps the limit where it is.
    const attackers = Array.from({ length: 6 }, uniqueIp);
    const legitimate = uniqueIp();
    const statuses: number[] = [];
    const startedAt = Date.now();
    while (Date.now() - startedAt < 4_000) {
      const [trickles, plain] = await Promise.all([
        Promise.all(attackers.map((ip) => call(ip, { body: trickled(600), duplex: "half" } as RequestInit))),
        call(legitimate, { body: "{}" }),
      ]);
      for (const trickle of trickles) expect(await trickle.json()).toEqual({ read: 2 });
      await plain.arrayBuffer();
      statuses.push(plain.status);
    }
    expect(await factors(id)).toEqual({ isolate: 1, controller: 1 });
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  });
});

async function sha256(bytes: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
}
