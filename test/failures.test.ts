import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from "vitest";
import type { Env } from "../src/env.ts";
import { type Failure, flakyNamespace, hangObject } from "./support/chaos.ts";
import { from, limiter, originHits, uniqueIp, uniqueTag } from "./support/limiter.ts";

/** When the limiter cannot decide, each rule's on_error decides for it. */
describe("when the Durable Object does not answer in time", () => {
  let errors: MockInstance;
  beforeEach(() => {
    errors = vi.spyOn(console, "error").mockImplementation(() => {});
  });
  afterEach(() => errors.mockRestore());
  const logged = () => errors.mock.calls.map(([line]) => JSON.parse(String(line)));

  it('forwards the request with on_error = "open", and logs why', async () => {
    const send = limiter([{ id: "open-rule", limit: 10, period: "1m", on_error: "open" }], {
      LIMITER_TIMEOUT_MS: "100",
    });
    const ip = uniqueIp();
    const tag = uniqueTag("fail-open");
    const hang = await hangObject(ip, 500);
    const started = Date.now();
    const res = await send("/api/x", from(ip, { "x-test-tag": tag }));
    const elapsed = Date.now() - started;
    expect(res.status).toBe(200);
    expect(res.headers.has("ratelimit")).toBe(false);
    expect(await originHits(tag)).toBe(1);
    expect(elapsed).toBeLessThan(100 + 400);
    expect(logged()).toContainEqual(
      expect.objectContaining({
        event: "limiter_unavailable",
        rule: "open-rule",
        reason: "timeout",
        attempts: 1,
        outcome: "forwarded",
      }),
    );
    await hang.over;
  });

  it('answers 503 problem+json with on_error = "closed", and the origin is not contacted', async () => {
    const send = limiter([{ id: "closed-rule", limit: 10, period: "1m", on_error: "closed" }], {
      LIMITER_TIMEOUT_MS: "100",
    });
    const ip = uniqueIp();
    const tag = uniqueTag("fail-closed");
    const hang = await hangObject(ip, 500);
    const res = await send("/login", { ...from(ip, { "x-test-tag": tag }), method: "POST", body: "user=a" });
    expect(res.status).toBe(503);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(await res.json()).toEqual({
      type: "urn:edge-rate-limiter:limiter-unavailable",
      title: "Service Unavailable",
      status: 503,
      detail: "The rate limiter could not decide, and this endpoint does not go on without a decision.",
      "failed-policies": ["closed-rule"],
    });
    expect(await originHits(tag)).toBe(0);
    expect(logged()).toContainEqual(
      expect.objectContaining({ rule: "closed-rule", reason: "timeout", outcome: "refused" }),
    );
    await hang.over;
  });

  it("decides again normally once the object answers", async () => {
    const send = limiter([{ id: "recovers", limit: 10, period: "1m", on_error: "closed" }], {
      LIMITER_TIMEOUT_MS: "100",
    });
    const ip = uniqueIp();
    const hang = await hangObject(ip, 300);
    expect((await send("/x", from(ip))).status).toBe(503);
    await hang.over;
    const res = await send("/x", from(ip));
    expect(res.status).toBe(200);
    expect(res.headers.get("ratelimit")).toMatch(/^"recovers";r=\d;t=\d+$/);
  });
});

describe("when the Durable Object call throws", () => {
  let errors: MockInstance;
  beforeEach(() => {
    errors = vi.spyOn(console, "error").mockImplementation(() => {});
  });
  afterEach(() => errors.mockRestore());

  const withFailure = (kind: Failure, onError: "open" | "closed", failures?: number) => {
    const { ns, calls } = flakyNamespace(kind, failures);
    const send = limiter([{ id: `fail-${kind}-${onError}`, limit: 10, period: "1m", on_error: onError }], {
      RATE_LIMITER: ns as Env["RATE_LIMITER"],
      LIMITER_TIMEOUT_MS: "200",
    });
    return { send, calls };
  };

  it.each([
    ["throw", "open", 200],
    ["throw", "closed", 503],
    ["overloaded", "open", 200],
    ["overloaded", "closed", 503],
  ] as const)("an error (%s) with on_error = %s gives %i", async (kind, onError, status) => {
    const { send } = withFailure(kind, onError);
    const tag = uniqueTag(`throw-${kind}-${onError}`);
    expect((await send("/x", from(uniqueIp(), { "x-test-tag": tag }))).status).toBe(status);
    expect(await originHits(tag)).toBe(status === 200 ? 1 : 0);
  });
});
