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
export type Answer = { status: number; atMs: number; held: boolean; policy: string | null; rateLimit: string | null };

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
  /**
   * Sends the client of `ip` the 2 requests that put it at its limit under
   * `rule(id)`, and keeps them there (in flight, where the kind counts what
   * is in flight); returns their statuses, and what must finish before the
   * test ends.
   */
  fill(send: Send, ip: string, id: string): Promise<{ statuses: number[]; beside: Promise<unknown>[] }>;
  /** The path a request under the rule is sent to. */
  path(id: string): string;
  /** The path of a request under the rule that the origin answers `ms` later. */
  slow(id: string, ms: number): string;
  /** What a request admitted and in flight leaves behind when its client hangs up: its count, or nothing (its place freed). */
  hungUp: "counted" | "freed";
  /** How the kind makes a request wait with `max_delay`, if it does: held until its turn, or in line for a place. */
  waiting: {
    state: "held" | "in line";
    rule(id: string): RuleInput;
    /**
     * Leaves waiting requests of `ip` (each tagged `tag` for the origin), 300 ms or more after they came;
     * the last of them hangs up on `hangUp`.
     */
    put(send: Send, ip: string, tag: string, id: string, hangUp?: AbortSignal): Promise<Waiting>;
    /**
     * What a request sent just after a raise to `raised` has left, once the
     * `before` requests sent before it are counted ahead of it; null when
     * the kind refills meanwhile, so that only the order says it.
     */
    raisedRemaining: ((raised: number, before: number) => number) | null;
  } | null;
};

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until just after the start of a 2-second window (the objects' clock is this one). */
const windowStart = () => pause(2_000 - (Date.now() % 2_000) + 5);

/** A request's answer, timed from `startedAt`, its body read. */
async function answer(
  send: Send,
  path: string,
  ip: string,
  tag: string,
  startedAt: number,
  signal?: AbortSignal,
): Promise<Answer> {
  try {
    const { response } = await send(path, { ...from(ip, { "x-test-tag": tag }), signal });
    await response.arrayBuffer();
    return {
      status: response.status,
      atMs: Date.now() - startedAt,
      held: response.headers.has("server-timing"),
      policy: response.headers.get("ratelimit-policy"),
      rateLimit: response.headers.get("ratelimit"),
    };
  } catch {
    // Its client hung up, and the runtime let it go with no answer.
    return { status: 0, atMs: Date.now() - startedAt, held: false, policy: null, rateLimit: null };
  }
}

/** Two requests of `ip` to `path`, one after another, each answered in full: what a counted kind counts. */
async function oneAfterAnother(send: Send, ip: string, path: string) {
  const statuses: number[] = [];
  for (let i = 0; i < 2; i++) {
    const { response } = await send(path, from(ip));
    await response.arrayBuffer();
    statuses.push(response.status);
  }
  return { statuses, beside: [] };
}

/** Five requests of `ip` at once to `/slow/0`, the last hanging up on `hangUp`; returned 300 ms on. */
async function fiveAtOnce(send: Send, ip: string, tag: string, hangUp: AbortSignal | undefined): Promise<Waiting> {
  const startedAt = Date.now();
  const waiting = Array.from({ length: 5 }, (_, i) =>
    answer(send, "/slow/0", ip, tag, startedAt, i === 4 ? hangUp : undefined),
  );
  await pause(300);
  return { waiting, beside: [], at: () => Date.now() - startedAt };
}

/** Every registered kind's fixture: test/lifecycle.test.ts fails for a kind without one. */
export const LIFECYCLE: Partial<Record<KindName, LifecycleFixture>> = {
  window: {
    rule: (id) => ({ id, path: "/slow/*", limit: 2, period: "1h", key: ["ip"] }),
    path: () => "/slow/0",
    slow: (_id, ms) => `/slow/${ms}`,
    hungUp: "counted",
    fill: (send, ip) => oneAfterAnother(send, ip, "/slow/0"),
    waiting: {
      state: "held",
      // 2 per 2 s, held up to 10 s: of 5 requests at once, 2 go, and 3 are held until turns 1 to 4 s away.
      rule: (id) => ({ id, path: "/slow/*", limit: 2, period: "2s", max_delay: "10s", key: ["ip"] }),
      async put(send, ip, tag, _id, hangUp) {
        await windowStart();
        return fiveAtOnce(send, ip, tag, hangUp);
      },
      // Counted in the window: every request sent before, then this one.
      raisedRemaining: (raised, before) => raised - before - 1,
    },
  },
  bucket: {
    // 2 an hour in bursts of 2: two at once empty it, and it refills one request each half hour.
    rule: (id) => ({ id, path: "/slow/*", limit: 2, period: "1h", burst: 2, key: ["ip"] }),
    path: () => "/slow/0",
    slow: (_id, ms) => `/slow/${ms}`,
    hungUp: "counted",
    fill: (send, ip) => oneAfterAnother(send, ip, "/slow/0"),
    waiting: {
      state: "held",
      // 1 a second in bursts of 2, held up to 10 s: of 5 requests at once, 2 go, and 3 are held until 1, 2 and 3 s on.
      rule: (id) => ({ id, path: "/slow/*", limit: 2, period: "2s", burst: 2, max_delay: "10s", key: ["ip"] }),
      put: (send, ip, tag, _id, hangUp) => fiveAtOnce(send, ip, tag, hangUp),
      // Raised to 20 a second-pair, it refills 10 a second: what it has left after is not the window's exact count.
      raisedRemaining: null,
    },
  },
  quota: {
    rule: (id) => ({ id, path: "/slow/*", quota: 2, per: "day", key: ["ip"] }),
    path: () => "/slow/0",
    slow: (_id, ms) => `/slow/${ms}`,
    hungUp: "counted",
    fill: (send, ip) => oneAfterAnother(send, ip, "/slow/0"),
    // A quota never holds a request (`max_delay` is refused on it); a window beside it does, under its own fixture.
    waiting: null,
  },
  concurrency: {
    rule: (id) => ({ id, path: "/stream/*", concurrency: 2, key: ["ip"] }),
    path: () => "/stream/0",
    slow: (_id, ms) => `/stream/${ms}`,
    hungUp: "freed",
    async fill(send, ip) {
      // Two streams in flight for the test's length: the client's two places are held.
      const sent = [0, 1].map(() => send("/stream/4000", from(ip)));
      const statuses = (await Promise.all(sent)).map(({ response }) => response.status);
      const beside = sent.map(async (answer) => (await answer).response.text());
      await pause(300);
      return { statuses, beside };
    },
    waiting: {
      state: "in line",
      // 2 in flight at once, a request waits up to 10 s for a place.
      rule: (id) => ({ id, path: "/stream/*", concurrency: 2, max_delay: "10s", place_timeout: "6s", key: ["ip"] }),
      async put(send, ip, tag, _id, hangUp) {
        const startedAt = Date.now();
        const stream = async (ms: number) => {
          const { response } = await send(`/stream/${ms}`, from(ip));
          await response.text();
          return Date.now() - startedAt;
        };
        // Two streams in flight (1.5 s and 3 s long), and a third request in line.
        const beside = [stream(1_500), stream(3_000)];
        await pause(200);
        const waiting = [answer(send, "/stream/0", ip, tag, startedAt, hangUp)];
        await pause(300);
        return { waiting, beside, at: () => Date.now() - startedAt };
      },
      raisedRemaining: null,
    },
  },
};
