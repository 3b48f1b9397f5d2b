/**
 * Adaptive rules through the Worker, its isolate and real Durable Objects,
 * in front of the real origin: an origin turning slow, or answering fast
 * with errors, makes the rule's limit fall within the bound; the heaviest
 * client is shed with a 503 while a light one keeps getting through; the
 * limit comes back once the origin is healthy; too few answers change
 * nothing; and a rule that does not ask never moves.
 */
import { describe, expect, it, vi } from "vitest";
import { noCounts } from "../src/core/health.ts";
import { createIsolate, defaultIsolate } from "../src/isolate/isolate.ts";
import { type LimiterNamespace, readController, reportHealth } from "../src/object/client.ts";
import type { ControllerView } from "../src/object/controller-protocol.ts";
import type { Env } from "../src/worker/env.ts";
import { env } from "./support/env.ts";
import { decider, requestFrom, settingsFor, statusOf } from "./support/isolate.ts";
import { downOriginUrl, from, limiter, uniqueIp } from "./support/limiter.ts";
import { expectErrorLogs, expectOriginDownReports } from "./support/logs.ts";

const REDUCED = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

let rules = 0;
/** A rule id no other test uses: its controller object is its own (storage is shared by a file's tests). */
const uniqueRule = (name: string) => `${name}-${++rules}-${Date.now()}`;

/** Each client 200 a minute; the origin should answer within 40 ms at the 99th percentile. */
const adaptiveRule = (id: string, over: Record<string, unknown> = {}) => ({
  id,
  limit: 200,
  period: "1m",
  key: ["ip"],
  adaptive: { latency: "40ms", floor: 2 },
  ...over,
});

/** The factor this isolate applies to a rule (1 before it learned any), and its version. */
const learned = (id: string) => {
  const reporter = defaultIsolate().adaptive.get(id);
  return { factor: reporter?.factor ?? 1, version: reporter?.version ?? 0 };
};

const controllerOf = async (id: string): Promise<ControllerView | null> => {
  const answer = await readController(env.RATE_LIMITER, id, 0, 5_000);
  if (!answer.ok) throw new Error(answer.message);
  return answer.value;
};

/** Time goes on in workerd only across I/O: a loop answered from the isolate's memory alone waits a little. */
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `n` requests at once; their statuses, bodies read. */
async function burst(n: number, send: () => Promise<Response>): Promise<Response[]> {
  const responses = await Promise.all(Array.from({ length: n }, send));
  await Promise.all(responses.map((r) => r.clone().arrayBuffer()));
  return responses;
}

describe("an adaptive rule in front of a real origin", () => {
  it("a slow origin: the limit falls within the bound, the heavy client gets 503 while a light one keeps getting through", async () => {
    const id = uniqueRule("slow");
    const send = limiter([adaptiveRule(id)]);
    const heavy = uniqueIp();
    const light = uniqueIp();
    const startedAt = Date.now();
    let cutAt: number | null = null;
    let shed: Response | null = null;
    const lightStatuses: number[] = [];
    // The origin takes 80 ms, twice the target: the heavy client sends 8 at a time, the light one 1.
    while (Date.now() - startedAt < 8_000 && shed === null) {
      const [heavyAnswers, lightAnswer] = await Promise.all([
        burst(8, () => send("/slow/80", from(heavy))),
        send("/slow/80", from(light)),
      ]);
      lightStatuses.push(lightAnswer.status);
      await pause(10);
      if (cutAt === null && learned(id).factor < 1) cutAt = Date.now();
      shed = heavyAnswers.find((r) => r.status === 503) ?? null;
    }
    expect(cutAt).not.toBeNull();
    // The controller needs 20 answers over 500 ms; a report goes at once, then every 250 ms when it breaches.
    expect(cutAt! - startedAt).toBeLessThan(3_000);
    expect(shed).not.toBeNull();
    const body = (await shed!.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ type: REDUCED, title: "Temporary Reduced Capacity", status: 503 });
    expect(body["violated-policies"]).toEqual([id]);
    expect(shed!.headers.get("content-type")).toBe("application/problem+json");
    expect(Number(shed!.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // RateLimit-Policy shows the current quota, below the configured 200.
    const quota = Number(/;q=(\d+);/.exec(shed!.headers.get("ratelimit-policy") ?? "")?.[1]);
    expect(quota).toBeLessThan(200);
    expect(quota).toBe((await controllerOf(id))!.limit);
    // The light client stays within its fair share of the reduced capacity: it keeps getting through.
    expect(lightStatuses.every((s) => s === 200)).toBe(true);
    expect((await send("/slow/80", from(light))).status).toBe(200);
  });

  it("recovers once the origin is healthy again: the limit is back at the configured one within 10 s, each change of mode logged once", async () => {
    const lines = [vi.spyOn(console, "log"), vi.spyOn(console, "warn")];
    const id = uniqueRule("recovers");
    // At the 95th percentile: a healthy answer here now and then takes tens of ms while other tests run.
    const send = limiter([adaptiveRule(id, { adaptive: { latency: "100ms", percentile: 95 } })]);
    const startedAt = Date.now();
    while (learned(id).factor === 1 && Date.now() - startedAt < 8_000) {
      await burst(8, () => send("/slow/200", from(uniqueIp())));
    }
    expect(learned(id).factor).toBeLessThan(1);
    const healthyAt = Date.now();
    while (learned(id).factor < 1 && Date.now() - healthyAt < 12_000) {
      // Light traffic from many clients, none near the reduced limit: the reduction binds no one.
      await burst(8, () => send("/x", from(uniqueIp())));
      await pause(20);
    }
    expect(learned(id).factor).toBe(1);
    expect(Date.now() - healthyAt).toBeLessThan(10_000);
    const view = (await controllerOf(id))!;
    expect(view).toMatchObject({ factor: 1, mode: "full", configured: 200, limit: 200 });
    // Its history shows the limit going down and back up.
    const limits = view.history.map((p) => p.limit);
    expect(Math.min(...limits)).toBeLessThan(200);
    expect(limits.at(-1)).toBe(200);
    // Each change of the controller's mode is logged once: full → reducing → … → full, none twice in a row.
    const changes = lines
      .flatMap((spy) =>
        spy.mock.calls.map(([line], i) => ({ line: String(line), at: spy.mock.invocationCallOrder[i]! })),
      )
      .sort((a, b) => a.at - b.at)
      .map(({ line }) => line)
      .filter((line) => line.includes('"adaptive_changed"'))
      .map((line) => JSON.parse(line) as { rule: string; from: string; to: string; limit: number })
      .filter((change) => change.rule === id);
    for (const spy of lines) spy.mockRestore();
    expect(changes.length).toBeGreaterThanOrEqual(2);
    expect(changes[0]).toMatchObject({ from: "full", to: "reducing" });
    expect(changes.at(-1)).toMatchObject({ to: "full", limit: 200 });
    changes.forEach((change, i) => {
      expect(change.from).not.toBe(change.to);
      if (i > 0) expect(change.from).toBe(changes[i - 1]!.to);
    });
  });

  it("comes back though every client is over the reduced limit: an origin sent nothing is no evidence against it", async () => {
    const id = uniqueRule("starved");
    // A period of 10 minutes: a client's count stays over the reduced limit for as long as this test runs.
    const send = limiter([
      adaptiveRule(id, { period: "10m", adaptive: { latency: "100ms", percentile: 95, floor: 2 } }),
    ]);
    const clients = [uniqueIp(), uniqueIp(), uniqueIp(), uniqueIp()];
    const startedAt = Date.now();
    while (learned(id).factor === 1 && Date.now() - startedAt < 8_000) {
      await Promise.all(clients.map((client) => burst(4, () => send("/slow/200", from(client)))));
    }
    const low = learned(id).factor;
    expect(low).toBeLessThan(1);
    // The same clients only, each over its reduced limit, against an origin that is fast again: the limit rises
    // (by a probe a window) until they are admitted, and then on their answers.
    const healthyAt = Date.now();
    let admitted = 0;
    while ((admitted < 8 || learned(id).factor < 2 * low) && Date.now() - healthyAt < 12_000) {
      for (const client of clients) if ((await send("/x", from(client))).status === 200) admitted++;
      await pause(20);
    }
    expect(admitted).toBeGreaterThanOrEqual(8);
    expect(learned(id).factor).toBeGreaterThanOrEqual(2 * low);
    expect((await controllerOf(id))!.mode).toBe("recovering");
  });

  it("a hanging origin, before any answer taught the controller its calm latency: the requests late in flight cut the limit", async () => {
    const id = uniqueRule("hanging");
    const send = limiter([adaptiveRule(id, { adaptive: { latency: "100ms", floor: 2 } })]);
    const startedAt = Date.now();
    const pending: Promise<unknown>[] = [];
    // Ten clients, each a request every 50 ms to an origin that answers none of them for 4 s: cut within 3 s.
    while (learned(id).factor === 1 && Date.now() - startedAt < 3_000) {
      for (let c = 0; c < 10; c++) {
        pending.push(send("/slow/4000", from(`10.77.0.${c + 1}`)).catch(() => null));
      }
      await pause(50);
    }
    // Cut before any answer came back: by the requests found late in flight alone.
    const cutBeforeAnswers = learned(id).factor;
    await Promise.all(pending);
    expect(cutBeforeAnswers).toBeLessThan(1);
  });

  it.each([
    ["a fast 503", "/status/503", {}],
    ["a fast 500", "/status/500", {}],
    ["an unreachable origin (502)", "/x", { ORIGIN_URL: downOriginUrl() }],
  ] as [string, string, Partial<Env>][])(
    "counts %s as unhealthy, not as fast: the limit falls",
    async (name, path, vars) => {
      const id = uniqueRule("errors");
      const send = limiter([adaptiveRule(id)], vars);
      const startedAt = Date.now();
      let sent = 0;
      while (learned(id).factor === 1 && Date.now() - startedAt < 8_000) {
        await burst(8, () => send(path, from(uniqueIp())));
        sent += 8;
      }
      expect(learned(id).factor, name).toBeLessThan(1);
      expect((await controllerOf(id))!.mode).toBe("reducing");
      if (vars.ORIGIN_URL !== undefined) {
        expect(expectErrorLogs("origin_unreachable")).toHaveLength(sent);
        await expectOriginDownReports(sent);
      }
    },
  );

  // Failures spread over every client, each with an answer or two a report: by chance alone, a third of the clients
  // see mostly failures in a report; they are not a few clients' trouble but the origin's, and the limit falls.
  it.each([
    { percent: 30, count: 20 },
    { percent: 50, count: 20 },
    { percent: 50, count: 5 },
    { percent: 30, count: 5 },
    { percent: 50, count: 2 },
  ])(
    "an origin failing $percent % of every client's requests with fast 500s, at random, from $count clients: the limit falls, and stays down while it fails",
    async ({ percent, count }) => {
      const id = uniqueRule("spread-errors");
      const send = limiter([adaptiveRule(id)]);
      const clients = Array.from({ length: count }, () => uniqueIp());
      const startedAt = Date.now();
      let cutAtMs: number | null = null;
      for (let i = 0; (cutAtMs === null || Date.now() - cutAtMs < 4_000) && Date.now() - startedAt < 12_000; i++) {
        if (cutAtMs === null && learned(id).factor < 1) cutAtMs = Date.now();
        // One client a turn, every 50 ms: each client one request a second, `percent` of them failing (a fixed draw).
        const failing = Math.imul(i + 1, 2654435761) >>> 0 < (percent / 100) * 2 ** 32;
        const res = await send(failing ? "/status/500" : "/x", from(clients[i % clients.length]!));
        await res.arrayBuffer();
        await pause(50);
      }
      expect(cutAtMs).not.toBeNull();
      // Four seconds on, the origin failing all the while: still reduced.
      expect(learned(id).factor).toBeLessThan(1);
    },
  );

  it("decides nothing on too few answers: 10 failures leave the limit where it is", async () => {
    const id = uniqueRule("few");
    const send = limiter([adaptiveRule(id)]);
    for (let i = 0; i < 10; i++) {
      expect((await send("/status/503", from(uniqueIp()))).status).toBe(503);
      await pause(120);
    }
    expect(learned(id).factor).toBe(1);
    expect(await controllerOf(id)).toMatchObject({ factor: 1, version: 0, mode: "full" });
  });

  it("is off unless a rule asks: a rule without adaptive never reports, and admits as configured behind a slow origin", async () => {
    const id = uniqueRule("fixed");
    const send = limiter([{ id, limit: 200, period: "1m", key: ["ip"] }]);
    const client = uniqueIp();
    const answers: number[] = [];
    for (let round = 0; round < 6; round++) {
      for (const r of await burst(8, () => send("/slow/80", from(client)))) answers.push(r.status);
    }
    expect(answers.filter((s) => s === 200)).toHaveLength(48);
    expect(defaultIsolate().adaptive.get(id)).toBeUndefined();
    expect(await controllerOf(id)).toBeNull();
  });
});

describe("an isolate's reports to a controller that fails to answer", () => {
  it("lose nothing: the counts of a failed report reach the controller with the next, and the failure is logged once", async () => {
    const warnings = vi.spyOn(console, "warn");
    const id = uniqueRule("failing-reports");
    let failing = true;
    // The real namespace, whose controller calls fail while `failing` is set.
    const ns: LimiterNamespace = {
      idFromName: (name) => env.RATE_LIMITER.idFromName(name),
      get: (objectId) => {
        const real = env.RATE_LIMITER.get(objectId);
        return new Proxy(real, {
          get: (target, property) =>
            property === "reportHealth" && failing
              ? () => Promise.reject(new Error("induced failure"))
              : Reflect.get(target, property),
        });
      },
    };
    const isolate = createIsolate();
    const { run, background, answer } = decider(settingsFor([adaptiveRule(id)]), ns, isolate);
    /** `n` requests admitted, each answered by the origin with a fast 503, as the Worker tells it. */
    const failures = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const request = requestFrom(uniqueIp());
        const outcome = await run(request);
        if (outcome.kind !== "allow" || outcome.after === undefined) throw new Error("not forwarded under the rule");
        answer(request, outcome, new Response(null, { status: 503 }));
      }
      await background.settled();
    };
    // 20 failures: the first is reported at once and the report fails; the rest wait for the next interval.
    await failures(20);
    await pause(1_050);
    await failures(1); // the next report, failing too
    const logged = warnings.mock.calls
      .map(([line]) => String(line))
      .filter((l) => l.includes("adaptive_report_failed"));
    expect(logged).toHaveLength(1);
    expect(JSON.parse(logged[0]!)).toMatchObject({ event: "adaptive_report_failed", rule: id });
    // The controller answers again: the next report carries all 21 answers, all failures. At the configured
    // limit a window that clear is judged at once (the onset): a cut. Had the failed reports' counts been lost,
    // its one answer would have decided nothing.
    failing = false;
    await pause(1_050);
    await failures(1);
    warnings.mockRestore();
    expect(isolate.adaptive.get(id)!.factor).toBeLessThan(1);
  });
});

describe("a change of factor in an isolate", () => {
  it("drops the rule's leases at once: a client over the reduced limit is refused by its next request, not admitted from a lease granted before the cut", async () => {
    const id = uniqueRule("leases");
    const rule = adaptiveRule(id, { limit: 100, adaptive: { latency: "1s", floor: 1 } });
    const isolate = createIsolate();
    const { run, background, answer } = decider(settingsFor([rule]), env.RATE_LIMITER, isolate);
    const heavy = uniqueIp();
    const send = async (ip: string, status = 200) => {
      const request = requestFrom(ip);
      const outcome = await run(request);
      answer(request, outcome, new Response(null, { status }));
      await background.settled();
      return statusOf(outcome);
    };
    // At least 60 admitted, until the client's key holds units leased ahead (each lease lasting up to 1 s): how
    // many it takes depends on how fast they came, as a lease is sized by the demand seen.
    const leased = () => [...isolate.keys.digests()].some((d) => isolate.keys.heldUnits(d) > 0);
    for (let i = 0; i < 90 && (i < 60 || !leased()); i++) expect(await send(heavy)).toBe(200);
    const leasedAtMs = Date.now();
    expect(leased()).toBe(true);
    // The controller cuts the limit by half (to 50), as reports of a slow origin from elsewhere would make it.
    const target = { latencyMs: 1_000, percentile: 99, errorShare: 0.05, floor: 1 };
    const counts = { ...noCounts(), forwarded: 100, answered: 50, slow: 50, shed: 1, peak: 1 };
    const report = () => reportHealth(env.RATE_LIMITER, { rule: id, limit: 100, target, version: 0, counts }, 5_000);
    await report();
    await pause(520);
    const cut = await report();
    expect(cut.ok && cut.value.limit).toBe(50);
    // This isolate sees failures (10 fast 503s: it reports early) and learns the cut.
    for (let i = 0; i < 10; i++) await send(uniqueIp(), 503);
    expect(isolate.adaptive.get(id)!.factor).toBe(0.5);
    // Within the second a lease would have lasted, the client's next request is refused by the reduction.
    expect(Date.now() - leasedAtMs).toBeLessThan(1_000);
    expect(await send(heavy)).toBe(503);
  });
});
