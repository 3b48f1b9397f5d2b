/**
 * @module
 * How each kind of limit puts a request in each state of the lifecycle
 * (docs/lifecycle.md), for the edge tier's crash cells
 * (test/edge/lifecycle.edge.ts), which run every registered kind through
 * the same table over real sockets: a kill -9 and restart of workerd, and
 * isolates that vanish while the objects live, each while a client's
 * requests wait and while they are in flight. A kind is not registered
 * without its fixture here; the test fails for one without.
 *
 * A fixture only says what its kind is: its rule, the path of a slow answer,
 * what a request in flight holds and where a request waits. What each state
 * becomes after a crash is the docs' column, written once in the test.
 */
import type { KindName } from "../../../src/core/kinds/kind.ts";
import type { QuotaRuleInput, RuleInput } from "../../../src/core/rules.ts";

/** How many requests in flight put a client at its limit, under every fixture's rules. */
export const LIMIT = 2;

export type EdgeLifecycleFixture = {
  /**
   * An enforcing rule of the kind, on the paths of {@link slow}, under which
   * a client with {@link LIMIT} requests admitted is refused the next, and
   * stays refused for a minute unless what they hold is given back.
   */
  rule(id: string): RuleInput;
  /** The path of a request under the rules that the origin answers `ms` later (its answer streams, if the kind counts what is in flight). */
  slow(ms: number): string;
  /**
   * What a request admitted and in flight holds: counts, stored with the
   * key's object; or a place, which its isolate renews and the object takes
   * back `placeTimeoutMs` after the last renewal (the rule's `place_timeout`).
   */
  admitted:
    | {
        holds: "counts";
        /**
         * A rule under which an isolate that sees a client's requests one
         * after another is leased units ahead (counted, not yet spent), if
         * the kind leases: a limit far above 20 requests, over an hour or more.
         */
        leased: ((id: string) => RuleInput) | null;
        /**
         * How fast a count under {@link rule} (and under `leased`'s, with
         * `leasedPerMs`) gives itself back with time, in units per
         * millisecond: a token bucket refills; 0 for a count that stays
         * until its window rotates out.
         */
        refill: { perMs: number; leasedPerMs: number };
      }
    | { holds: "a place"; placeTimeoutMs: number };
  /** How the kind makes a request wait with `max_delay`, if it does: held until its turn, or in line for a place. */
  waiting: {
    state: "held" | "in line";
    /**
     * A rule with `max_delay` under which, of requests sent at once, the
     * first {@link LIMIT} are admitted and the rest wait: until turns 10 s
     * or more away, or for places the first hold while in flight (for as
     * long as `place_timeout`, if that is what they hold). Once the waiting
     * ones are gone and the first are over, the client's next request goes
     * within the docs' bound for its state (its own turn, if any, is nearer).
     */
    rule(id: string): Exclude<RuleInput, QuotaRuleInput>;
    /** Waits, if need be, until the requests may be sent: for a window, just after a period starts (the objects' clock is this one). */
    start?: () => Promise<void>;
  } | null;
};

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Every registered kind's fixture: test/edge/lifecycle.edge.ts fails for a kind without one. */
export const EDGE_LIFECYCLE: Partial<Record<KindName, EdgeLifecycleFixture>> = {
  window: {
    rule: (id) => ({ id, path: "/slow/*", limit: LIMIT, period: "1h", key: ["ip"] }),
    slow: (ms) => `/slow/${ms}`,
    admitted: {
      holds: "counts",
      leased: (id) => ({ id, path: "/slow/*", limit: 1_000, period: "1h", key: ["ip"] }),
      refill: { perMs: 0, leasedPerMs: 0 },
    },
    waiting: {
      state: "held",
      // 2 every 4 s, held up to 30 s: of 8 at once, 2 go, and 6 are held until turns 2 to 12 s away.
      rule: (id) => ({ id, path: "/slow/*", limit: LIMIT, period: "4s", max_delay: "30s", key: ["ip"] }),
      start: () => pause(4_000 - (Date.now() % 4_000) + 5),
    },
  },
  concurrency: {
    rule: (id) => ({ id, path: "/stream/*", concurrency: LIMIT, place_timeout: "5s", key: ["ip"] }),
    slow: (ms) => `/stream/${ms}`,
    admitted: { holds: "a place", placeTimeoutMs: 5_000 },
    waiting: {
      state: "in line",
      // 2 in flight at once, each renewing its place; the others wait up to 30 s in line for one.
      rule: (id) => ({ id, path: "/stream/*", concurrency: LIMIT, max_delay: "30s", place_timeout: "5s", key: ["ip"] }),
    },
  },
  bucket: {
    rule: (id) => ({ id, path: "/slow/*", limit: LIMIT, period: "1h", burst: LIMIT, key: ["ip"] }),
    slow: (ms) => `/slow/${ms}`,
    admitted: {
      holds: "counts",
      leased: (id) => ({ id, path: "/slow/*", limit: 1_000, period: "1h", burst: 1_000, key: ["ip"] }),
      // It refills its limit an hour: what was counted gives itself back by that much a millisecond.
      refill: { perMs: LIMIT / 3_600_000, leasedPerMs: 1_000 / 3_600_000 },
    },
    waiting: {
      state: "held",
      // 1 every 2 s in bursts of 2, held up to 30 s: of 8 at once, 2 go, and 6 are held until turns 2 to 12 s away.
      rule: (id) => ({ id, path: "/slow/*", limit: LIMIT, period: "4s", burst: LIMIT, max_delay: "30s", key: ["ip"] }),
    },
  },
  quota: {
    rule: (id) => ({ id, path: "/slow/*", quota: LIMIT, per: "day", key: ["ip"] }),
    slow: (ms) => `/slow/${ms}`,
    // A quota leases nothing: every request is decided by its object.
    admitted: { holds: "counts", leased: null, refill: { perMs: 0, leasedPerMs: 0 } },
    // A quota never holds a request (`max_delay` is refused on it); a window beside it does, under its own fixture.
    waiting: null,
  },
};
