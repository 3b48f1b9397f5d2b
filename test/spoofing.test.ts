import { describe, expect, it } from "vitest";
import { from, limiter, statuses, uniqueIp, uniqueTag } from "./support/limiter.ts";

const perIp = [{ id: "per-ip", limit: 5, period: "1m", key: ["ip"] }];

describe("a client cannot walk around its limit", () => {
  it.each(["x-forwarded-for", "x-real-ip", "true-client-ip", "forwarded"])(
    "rotating %s with the same CF-Connecting-IP stays in one bucket",
    async (name) => {
      const send = limiter(perIp);
      const ip = uniqueIp();
      let n = 0;
      const result = await statuses(8, () => {
        n++;
        const value = name === "forwarded" ? `for=192.0.2.${n}` : `192.0.2.${n}`;
        return send("/x", from(ip, { [name]: value }));
      });
      expect(result).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
    },
  );

  it("rotating IPv6 addresses within one /56 stays in one bucket", async () => {
    const send = limiter(perIp);
    const prefix = `2001:db8:${Math.floor(Math.random() * 0xffff).toString(16)}:ab`;
    let n = 0;
    const result = await statuses(8, () => {
      n++;
      return send("/x", from(`${prefix}${(n * 17).toString(16).padStart(2, "0")}:${n.toString(16)}::${n}`));
    });
    expect(result).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
  });

  it("::ffff:1.2.3.4 is the same client as 1.2.3.4", async () => {
    const send = limiter(perIp);
    const ip = uniqueIp();
    const result = await statuses(6, () => send("/x", from(Math.random() < 0.5 ? ip : `::ffff:${ip}`)));
    expect(result.at(-1)).toBe(429);
  });

  it("leaving out the API key header puts the request in one shared bucket, not a free one", async () => {
    const rule = [{ id: "per-key", limit: 3, period: "1m", key: ["header:x-api-key"] }];
    const send = limiter(rule);
    const result = await statuses(4, () => send("/x", from(uniqueIp())));
    expect(result).toEqual([200, 200, 200, 429]);
  });

  it('"header:x-api-key|ip" counts a client without a key by its IP', async () => {
    const send = limiter([{ id: "key-or-ip", limit: 2, period: "1m", key: ["header:x-api-key|ip"] }]);
    const [a, b] = [uniqueIp(), uniqueIp()];
    expect(await statuses(3, () => send("/x", from(a)))).toEqual([200, 200, 429]);
    expect(await statuses(1, () => send("/x", from(b)))).toEqual([200]);
    expect(await statuses(1, () => send("/x", from(a, { "x-api-key": uniqueTag("k") })))).toEqual([200]);
  });

  it("spelling the path differently does not escape a path rule", async () => {
    const send = limiter([{ id: "api", path: "/api/*", limit: 2, period: "1m" }]);
    const ip = uniqueIp();
    const spellings = ["/%61pi/x", "//api//x", "/api/x", "/%61%70%69/x"];
    const result = await statuses(4, () => send(spellings.shift()!, from(ip)));
    expect(result).toEqual([200, 200, 429, 429]);
  });

  it("a 100 KB header value as the key is hashed, not refused, and still counted", async () => {
    const send = limiter([{ id: "huge", limit: 1, period: "1m", key: ["header:x-api-key"] }]);
    const key = `${uniqueTag("huge")}${"k".repeat(100_000)}`;
    expect(await statuses(2, () => send("/x", from(uniqueIp(), { "x-api-key": key })))).toEqual([200, 429]);
  });
});
