/**
 * @module
 * How each kind of limit puts a request in each state of the lifecycle
 * (docs/lifecycle.md), for test/lifecycle.test.ts, which runs every
 * registered kind through the same table: a kind is not registered without
 * its fixture here.
 */
import type { KindName } from "../../src/core/kinds/kind.ts";
import type { RuleInput } from "../../src/core/rules.ts";
import { from, type timedLimiter } from "./limiter.ts";

export type Send = ReturnType<typeof timedLimiter>;

/** A request's answer: its status, when it came (from the scenario's start), and whether the limiter held it. */
export type Answer = { status: number; atMs: number; held: boolean };

/** Requests of one client left waiting (held until their turns, or in line for a place), and what else runs beside them. */
export type Waiting = {
  /** The waiting requests' answers, to come. */
  waiting: Promise<Answer>[];
  /** The requests beside them that made them wait (streams in flight), to finish before the test ends. */
  beside: Promise<unknown>[];
  /** Milliseconds since the scenario's start. */
  at: () => number;
};

export type LifecycleFixture = {
  /**
   * An enforcing rule of the kind under which a client at 2 requests (or
   * places) is refused the next, and stays refused for the test's length.
   */
  rule(id: string): RuleInput;
  /** Puts the client of `ip` at its limit under `rule(id)`; returns what must finish before the test ends. */
  fill(send: Send, ip: string, path: (id: string) => string, id: string): Promise<Promise<unknown>[]>;
  /** The path a request under the rule is sent to. */
  path(id: string): string;
  /** How the kind makes a request wait with `max_delay`, if it does: held until its turn, or in line for a place. */
  waiting: {
    state: "held" | "in line";
    rule(id: string): RuleInput;
    /** Leaves waiting requests of `ip` (each tagged `tag` for the origin), 300 ms or more after they came. */
    put(send: Send, ip: string, tag: string, id: string): Promise<Waiting>;
  } | null;
};

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until just after the start of a 2-second window (the objects' clock is this one). */
const windowStart = () => pause(2_000 - (Date.now() % 2_000) + 5);

/** A request's answer, timed from `startedAt`, its body read. */
async function answer(send: Send, path: string, ip: string, tag: string | null, startedAt: number): Promise<Answer> {
  const { response } = await send(path, from(ip, tag === null ? {} : { "x-test-tag": tag }));
  await response.arrayBuffer();
  return { status: response.status, atMs: Date.now() - startedAt, held: response.headers.has("server-timing") };
}

/** Every registered kind's fixture: test/lifecycle.test.ts fails for a kind without one. */
export const LIFECYCLE: Partial<Record<KindName, LifecycleFixture>> = {
  window: {
    rule: (id) => ({ id, path: `/${id}/*`, limit: 2, period: "1h", key: ["ip"] }),
    path: (id) => `/${id}/x`,
    async fill(send, ip, path, id) {
      for (let i = 0; i < 2; i++) await (await send(path(id), from(ip))).response.arrayBuffer();
      return [];
    },
    waiting: {
      state: "held",
      // 2 per 2 s, held up to 10 s: of 5 requests at once, 2 go, and 3 are held until turns 1 to 4 s away.
      rule: (id) => ({ id, path: `/${id}/*`, limit: 2, period: "2s", max_delay: "10s", key: ["ip"] }),
      async put(send, ip, tag, id) {
        await windowStart();
        const startedAt = Date.now();
        const waiting = Array.from({ length: 5 }, () => answer(send, `/${id}/x`, ip, tag, startedAt));
        await pause(300);
        return { waiting, beside: [], at: () => Date.now() - startedAt };
      },
    },
  },
  concurrency: {
    rule: (id) => ({ id, path: "/stream/*", concurrency: 2, key: ["ip"] }),
    path: () => "/stream/0",
    async fill(send, ip) {
      // Two streams in flight for the test's length: the client's two places are held.
      const streams = [0, 1].map(async () => {
        const { response } = await send("/stream/4000", from(ip));
        await response.text();
      });
      await pause(300);
      return streams;
    },
    waiting: {
      state: "in line",
      // 2 in flight at once, a request waits up to 10 s for a place.
      rule: (id) => ({ id, path: "/stream/*", concurrency: 2, max_delay: "10s", place_timeout: "6s", key: ["ip"] }),
      async put(send, ip, tag) {
        const startedAt = Date.now();
        const stream = async (ms: number) => {
          const { response } = await send(`/stream/${ms}`, from(ip));
          await response.text();
          return Date.now() - startedAt;
        };
        // Two streams in flight (1.5 s and 3 s long), and a third request in line.
        const beside = [stream(1_500), stream(3_000)];
        await pause(200);
        const waiting = [answer(send, "/stream/0", ip, tag, startedAt)];
        await pause(300);
        return { waiting, beside, at: () => Date.now() - startedAt };
      },
    },
  },
};
