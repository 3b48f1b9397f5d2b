/**
 * `cost_header`: the origin says what a request cost (an AI API's tokens).
 * The request is admitted at its `cost`; the difference is charged to the
 * same window afterwards, in the background, and may push the count past the
 * limit: the client is then refused until the window has room again.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { from, limiter, uniqueIp } from "./support/limiter.ts";

let rules = 0;
const id = () => `tokens-${++rules}`;

/** A token budget: `limit` tokens a minute per IP, as `/tokens/<n>` reports them. */
function budget(limit: number, extra: Record<string, unknown> = {}) {
  const send = limiter([{ id: id(), path: "/tokens/*", limit, period: "1m", cost_header: "x-tokens-used", ...extra }]);
  return async (ip: string, tokens: number | string) => {
    const res = await send(`/tokens/${encodeURIComponent(String(tokens))}`, from(ip));
    await res.arrayBuffer();
    return res;
  };
}

afterEach(() => {
  vi.useRealTimers();
});

describe("the origin reports what a request cost", () => {
  it("charges the difference: 400 + 400 + 400 tokens pass a budget of 1000, and then the client is refused", async () => {
    const call = budget(1_000);
    const ip = uniqueIp();
    const first = await call(ip, 400);
    expect(first.status).toBe(200);
    expect(first.headers.get("x-tokens-used")).toBeNull(); // stripped: the client never sees it
    expect(first.headers.get("ratelimit")).toMatch(/;r=600;/); // 1000 − 400, after the charge
    expect((await call(ip, 400)).status).toBe(200);
    expect((await call(ip, 400)).status).toBe(200); // 800 + 1 fits; the answer then costs 400
    const refused = await call(ip, 1);
    expect(refused.status).toBe(429);
  });

  it("refuses exactly until the debt has slid out: admitted at now + Retry-After, refused 1 ms before", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = Date.UTC(2032, 0, 1, 0, 0, 30); // half way through a minute's window
    vi.setSystemTime(start);
    const call = budget(100);
    const ip = uniqueIp();
    expect((await call(ip, 250)).status).toBe(200); // 250 in a budget of 100: 150 over
    const refused = await call(ip, 1);
    expect(refused.status).toBe(429);
    // 250 × (1 − f) < 100 once f > 60% of the next window: 36 001 ms into it, 66 001 ms from now.
    expect(refused.headers.get("retry-after")).toBe("67");
    vi.setSystemTime(start + 66_000);
    expect((await call(ip, 1)).status).toBe(429);
    vi.setSystemTime(start + 66_001);
    expect((await call(ip, 1)).status).toBe(200);
  });

  it("gives back what was admitted beyond the reported cost", async () => {
    const call = budget(10, { cost: 5 });
    const ip = uniqueIp();
    // Admitted at 5 each (what is counted plus 5 must fit 10), each answer reports 1: 4 back each time.
    // So the count grows by 1 a request, and the 7th, at 6 + 5 > 10, is refused.
    const statuses = [];
    for (let i = 0; i < 8; i++) statuses.push((await call(ip, 1)).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 429, 429]);
  });

  it("lets the client see the header when the rule keeps it", async () => {
    const call = budget(1_000, { keep_cost_header: true });
    expect((await call(uniqueIp(), 7)).headers.get("x-tokens-used")).toBe("7");
  });

  it.each([["-5"], ["1.5"], ["lots"], ["99999999999"], [""]])(
    "ignores and logs a value it cannot trust: %o",
    async (value) => {
      const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
      try {
        const call = budget(3);
        const ip = uniqueIp();
        const statuses = [];
        for (let i = 0; i < 4; i++) statuses.push((await call(ip, value)).status);
        expect(statuses).toEqual([200, 200, 200, 429]); // counted at 1 each, as admitted
        const lines = warn.mock.calls.map(([line]) => JSON.parse(String(line)));
        expect(lines.filter((l) => l.event === "cost_header_ignored")).toHaveLength(1); // once per key per 10 s
        expect(lines[0]).toMatchObject({ event: "cost_header_ignored", header: "x-tokens-used", value });
      } finally {
        warn.mockRestore();
      }
    },
  );

  it("with leases, asks the object again after a charge: a budget of 5000 passes within one request", async () => {
    const call = budget(5_000);
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await call(ip, 1_000)).status);
    // 1000 a request: admitted while what was counted fits, then refused from the object on.
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429, 429, 429, 429, 429]);
  });
});

describe("a charge and the lease its own call brought", () => {
  it("retires that lease: the next request asks the object, which refuses a client over its budget", async () => {
    const call = budget(2_000);
    const ip = uniqueIp();
    expect((await call(ip, 1)).status).toBe(200); // a key seen once: no lease
    expect((await call(ip, 5_000)).status).toBe(200); // its call brings a lease; then 5 000 tokens are charged
    expect((await call(ip, 1)).status).toBe(429); // not admitted from the lease granted before the charge
  });
});

describe("a token budget under random answers", () => {
  it("admits while the budget has room, charges every answer, and ends within one answer of the budget", async () => {
    const call = budget(5_000);
    const ip = uniqueIp();
    let seed = 7;
    const random = () => {
      seed = (seed * 48_271) % 2_147_483_647;
      return 1 + (seed % 500); // 1–500 tokens an answer
    };
    let used = 0;
    let admitted = 0;
    for (let i = 0; i < 60; i++) {
      const tokens = random();
      const res = await call(ip, tokens);
      if (res.status === 429) break;
      admitted++;
      used += tokens;
      expect(used - tokens).toBeLessThan(5_000); // admitted only while what was used left room for 1 more
    }
    expect(used).toBeGreaterThanOrEqual(5_000); // the budget was spent, and the client then refused
    expect(used).toBeLessThan(5_000 + 500); // over by less than one answer
    expect((await call(ip, 1)).status).toBe(429);
    expect(admitted).toBeGreaterThan(5);
  });
});
