/**
 * @module
 * One lifecycle, every kind of limit (docs/lifecycle.md), its crash cells
 * over real sockets: each registered kind, through its fixture in
 * test/edge/support/lifecycle.ts, has workerd killed (SIGKILL) and
 * restarted on its storage while a client's requests wait, and while they
 * are admitted and in flight. What each state becomes is the docs' column
 * "workerd is killed (kill -9) and restarts", written here once:
 *
 * | state | the isolate vanishes | kill -9 and restart |
 * | --- | --- | --- |
 * | held until its turn | its bookings stay, and go at their turns, counted: bounded by `max_delay` | the bookings nobody claims within 5 s of the restart are dropped and their counts given back: the next request waits at most that long behind them |
 * | in line for a place | a place given to its ticket is taken back after `place_timeout` | the line is dropped; places nobody renews are taken back after `place_timeout` |
 * | admitted, holding counts | the counts stay, and a lease's unspent units: the client stays refused | the counts stay (stored): the client stays refused |
 * | admitted, holding a place | places are taken back after `place_timeout` | places nobody renews are taken back after `place_timeout` |
 *
 * An isolate vanishes as production's do, with the objects and the other
 * isolates alive: the client's requests go through isolates in a second
 * workerd process (the harness's `vanishing`), killed alone, and the next
 * request through one of the first. The requests that died never reach the
 * origin afterwards, and count only as the docs say: a control client that
 * sent the same requests but the waiting ones, beside the first, is left
 * with the same counts where the docs drop them, and with fewer where they
 * go at their turns.
 */
import { describe, expect, it } from "vitest";
import { parseDurationMs } from "../../src/core/duration.ts";
import { KINDS } from "../../src/core/kinds/registry.ts";
import { type InFlight, outcomeOf, type RequestRecord } from "./support/driver.ts";
import { type AdminStatus, type Edge, startEdge } from "./support/harness.ts";
import { EDGE_LIFECYCLE, type EdgeLifecycleFixture, LIMIT } from "./support/lifecycle.ts";

const ISOLATES = 4;
/** The docs' bound: a booking nobody claims goes this long after the object's restart. */
const CLAIM_WITHIN_MS = 5_000;
/** What a bound is allowed past itself: the object's wake-up, the call's way back, a loaded machine. */
const SLACK_MS = 2_000;
/** Requests left waiting behind the {@link LIMIT} admitted ones. */
const WAITING = 6;
/** The origin answers a request in flight this long after it came: longer than any test here. */
const IN_FLIGHT_MS = 120_000;
/** Requests sent one after another through one isolate, for it to be leased units. */
const LEASE_REQUESTS = 20;
const CLIENT = "198.51.100.70";
/** Beside CLIENT: the same requests, but none of the waiting ones. What it counts is what CLIENT must. */
const CONTROL = "198.51.100.71";

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

it("every registered kind has an edge lifecycle fixture: a kind is not done until it keeps the lifecycle through a crash", () => {
  expect(Object.keys(KINDS).filter((kind) => EDGE_LIFECYCLE[kind as keyof typeof KINDS] === undefined)).toEqual([]);
});

const kinds = Object.keys(KINDS).flatMap((name) => {
  const fixture = EDGE_LIFECYCLE[name as keyof typeof KINDS];
  return fixture === undefined ? [] : [[name, fixture] as [string, EdgeLifecycleFixture]];
});

/**
 * How the client's requests die: workerd killed (SIGKILL) and restarted on
 * its storage; or the isolates they went through vanishing, the objects and
 * the other isolates alive.
 */
type Crash = "kill" | "vanish";
const CRASHES: [string, Crash][] = [
  ["workerd killed (kill -9) and restarted", "kill"],
  ["the isolates vanish, the objects alive", "vanish"],
];

/** Runs `scenario` against a workerd of its own, under `rule` alone, and stops it after; for `vanish`, half the isolates in a second process. */
async function withEdge<T>(
  rule: ReturnType<EdgeLifecycleFixture["rule"]>,
  crash: Crash,
  scenario: (edge: Edge) => Promise<T>,
) {
  const edge = await startEdge({
    rules: [rule],
    isolates: ISOLATES,
    ...(crash === "vanish" ? { vanishing: ISOLATES / 2 } : {}),
  });
  try {
    return await scenario(edge);
  } finally {
    await edge.stop();
  }
}

/** Resolves once `ready()` holds, checked every 50 ms; fails after `withinMs`. */
async function until(what: string, ready: () => boolean, withinMs = 10_000): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`not within ${withinMs} ms: ${what}`);
    await pause(50);
  }
}

/** The isolates the client's requests die with: every one for a kill, the vanishing ones else. */
const doomed = (edge: Edge): number[] => edge.vanishing?.isolates ?? Array.from({ length: edge.isolates }, (_, i) => i);

/** An isolate that lives through the crash (after a restart, for a kill), for the requests after it. */
const surviving = (edge: Edge, i: number): number => i % (edge.isolates - (edge.vanishing?.isolates.length ?? 0));

/** Sends `count` requests for `key` at once to `path`, round the isolates that die. */
const burst = (edge: Edge, driver: ReturnType<Edge["driver"]>, key: string, count: number, path: string) =>
  Array.from({ length: count }, (_, i) => driver.send(doomed(edge)[i % doomed(edge).length]!, key, { path }));

/** A request that got its whole answer; one cut off by the kill got none, or only its start. */
const answered = (r: RequestRecord) => r.status !== null && r.error === null;

/** What the object counts for a client under the rule, to set against another client's. */
const counts = (s: AdminStatus) => ({
  weighted: Math.round(s.weighted * 10) / 10,
  inUse: s.inUse,
  waiting: s.waiting,
});

/**
 * Kills workerd (SIGKILL) and starts it again on the same storage and
 * ports, or kills the vanishing isolates' process alone; when it happened,
 * and when workerd was back (the kill's instant, for a vanish).
 */
async function crashNow(edge: Edge, crash: Crash): Promise<{ killedAtMs: number; restartedAtMs: number }> {
  if (crash === "vanish") {
    await edge.vanishing!.workerd.kill();
    const killedAtMs = Date.now();
    return { killedAtMs, restartedAtMs: killedAtMs };
  }
  await edge.workerd.kill();
  const killedAtMs = Date.now();
  await edge.workerd.restart();
  return { killedAtMs, restartedAtMs: Date.now() };
}

/**
 * Has the process that stays run the objects of these clients: an object
 * runs in the process that first asks for it, and the admin API's status
 * reads it.
 */
async function objectsInFirstProcess(edge: Edge, id: string, keys: string[]): Promise<void> {
  for (const key of keys) await edge.status(id, key, 0);
}

/** Every request died with workerd, without a whole answer. */
async function allCut(sent: InFlight[]): Promise<RequestRecord[]> {
  const records = await Promise.all(sent.map((r) => r.done));
  expect(records.filter(answered).map(outcomeOf)).toEqual([]);
  return records;
}

describe.each(kinds)("a %s rule", (kind, fixture) => {
  const { waiting, admitted } = fixture;
  const placeTimeoutMs = admitted.holds === "a place" ? admitted.placeTimeoutMs : null;

  describe.each(CRASHES)("%s", (_, crash) => {
    const waitingTitle = {
      kill: {
        held: "while requests are held until their turns: the bookings nobody claims go within 5 s of the restart, so the client's next request is answered by then; none of the held reaches the origin, and they count nowhere",
        "in line":
          "while requests are in line for a place: the line is dropped, and the places nobody renews are taken back after place_timeout, so the client's next request gets one by then; none in line reaches the origin, and they count nowhere",
      },
      vanish: {
        held: "while requests are held until their turns: their bookings stay and go at their turns, counted, so the client's next request waits behind them, bounded by max_delay; none of the held reaches the origin",
        "in line":
          "while requests are in line for a place: each place given to their tickets is taken back after place_timeout, so the client's next request gets one after theirs lapse; none in line reaches the origin, and they hold nothing after",
      },
    }[crash][waiting?.state ?? "held"];

    it.skipIf(waiting === null)(waitingTitle, async () => {
      if (waiting === null) return;
      if (waiting.state === "in line" && placeTimeoutMs === null) {
        throw new Error(
          `${kind}: a request waits in line for a place its admitted requests hold; say how long one lasts`,
        );
      }
      const id = `${kind}-waiting-${crash}`;
      const rule = waiting.rule(id);
      const maxDelay = parseDurationMs(rule.max_delay);
      if (!maxDelay.ok) throw new Error(`${kind}: the waiting rule's max_delay: ${maxDelay.errors.join("; ")}`);
      await withEdge(rule, crash, async (edge) => {
        const driver = edge.driver(IN_FLIGHT_MS);
        const path = fixture.slow(IN_FLIGHT_MS);
        const arrivals = (key: string) => edge.origin.arrivals().filter((a) => a.key === key);
        await objectsInFirstProcess(edge, id, [CLIENT, CONTROL]);
        await waiting.start?.();
        const before = burst(edge, driver, CLIENT, LIMIT + WAITING, path);
        const beside = burst(edge, driver, CONTROL, LIMIT, path);
        const sentAtMs = Date.now();
        await until(`${LIMIT} of each client's at the origin`, () =>
          [CLIENT, CONTROL].every((key) => arrivals(key).length >= LIMIT),
        );
        await pause(200);
        // The first went on and are in flight; the others wait, unanswered and not at the origin.
        expect(arrivals(CLIENT).map((a) => `+${Math.round(a.atMs - sentAtMs)} ms`)).toHaveLength(LIMIT);
        expect(before.filter((r) => r.record.endedAtMs !== null).map((r) => outcomeOf(r.record))).toEqual([]);
        const waitingTags = before.map((r) => r.record.tag).filter((tag) => edge.origin.hits(tag) === 0);
        expect(waitingTags).toHaveLength(WAITING);

        const { killedAtMs, restartedAtMs } = await crashNow(edge, crash);
        await allCut([...before, ...beside]);
        // The client's next; and the control client's, sent as the client's is answered, so that each counts
        // its next at the same instant.
        const nextSentAtMs = Date.now();
        const send = (isolate: number, key: string) =>
          driver.send(isolate, key, { path: fixture.slow(0) }).done.then((r) => ({ r, atMs: Date.now() }));
        const next = await send(surviving(edge, 0), CLIENT);
        const control = await send(surviving(edge, 1), CONTROL);
        await pause(500);
        const [mine, theirs] = await Promise.all([edge.status(id, CLIENT), edge.status(id, CONTROL)]);
        console.log(kind, waiting.state, crash, {
          restartTookMs: restartedAtMs - killedAtMs,
          answeredAfterRestartMs: next.atMs - restartedAtMs,
          answeredAfterKillMs: next.atMs - killedAtMs,
          controlAfterKillMs: control.atMs - killedAtMs,
          next: outcomeOf(next.r),
          counts: counts(mine),
          control: counts(theirs),
        });

        expect(outcomeOf(next.r)).toBe(200);
        expect(outcomeOf(control.r)).toBe(200);
        // None of the waiting ever reached the origin; after the kill, only the next did.
        expect(waitingTags.filter((tag) => edge.origin.hits(tag) > 0)).toEqual([]);
        expect(
          arrivals(CLIENT)
            .filter((a) => a.atMs > killedAtMs)
            .map((a) => a.tag),
        ).toEqual([next.r.tag]);
        const sameInFlight = () =>
          expect({ inUse: mine.inUse, waiting: mine.waiting }).toEqual({
            inUse: theirs.inUse,
            waiting: theirs.waiting,
          });
        const sameCounts = () => {
          sameInFlight();
          expect(mine.weighted === undefined).toBe(theirs.weighted === undefined);
          if (mine.weighted !== undefined) expect(Math.abs(mine.weighted - theirs.weighted)).toBeLessThan(0.05);
        };
        const T = placeTimeoutMs!;
        const rounds = Math.ceil(WAITING / LIMIT);
        if (crash === "kill" && waiting.state === "held") {
          // Held at most the claim's 5 s (and the call's way), not behind the dead bookings' turns.
          expect(next.atMs - restartedAtMs).toBeLessThan(CLAIM_WITHIN_MS + SLACK_MS);
          sameCounts();
        } else if (crash === "kill") {
          // The places the dead requests held were last renewed before the kill; the line's tickets got none.
          expect(next.atMs - killedAtMs).toBeLessThan(T + SLACK_MS);
          sameCounts();
        } else if (waiting.state === "held") {
          // The object cannot tell their calls died: their bookings were claimed, so they are not dropped as
          // after a restart; the next waits behind their turns, within its own max_delay.
          expect(next.atMs - killedAtMs).toBeGreaterThan(CLAIM_WITHIN_MS + SLACK_MS);
          expect(next.atMs - nextSentAtMs).toBeLessThan(maxDelay.value + SLACK_MS);
          // Counted at their turns: the client counts more than the control client.
          expect(mine.weighted).toBeGreaterThan(theirs.weighted);
        } else {
          // The admitted ones' places lapse within place_timeout of their last renewal (a third of it or less
          // before the vanish); then each round of dead tickets is given the places freed, which lapse
          // place_timeout later, nobody there to take them.
          expect(next.atMs - killedAtMs).toBeGreaterThan((2 / 3 + rounds) * T - SLACK_MS);
          expect(next.atMs - killedAtMs).toBeLessThan((1 + rounds) * T + SLACK_MS);
          sameInFlight();
        }
      });
    });

    const inFlightTitle =
      admitted.holds === "counts"
        ? "while requests are admitted and in flight: their counts stay, so the client's next request is still refused"
        : "while requests are admitted and in flight: their places are kept, and taken back after place_timeout since nobody renews them, so the client's next request gets one by then";

    it(inFlightTitle, async () => {
      const id = `${kind}-in-flight-${crash}`;
      await withEdge(fixture.rule(id), crash, async (edge) => {
        const driver = edge.driver(IN_FLIGHT_MS);
        const arrivals = () => edge.origin.arrivals().filter((a) => a.key === CLIENT);
        await objectsInFirstProcess(edge, id, [CLIENT]);
        const before = burst(edge, driver, CLIENT, LIMIT, fixture.slow(IN_FLIGHT_MS));
        await until(`the ${LIMIT} admitted at the origin`, () => arrivals().length >= LIMIT);
        await pause(300);
        // Taken before the read, so that the object's instant of each read lies between beforeAtMs and afterAtMs.
        const beforeAtMs = Date.now();
        const beforeCrash = await edge.status(id, CLIENT);

        const { killedAtMs, restartedAtMs } = await crashNow(edge, crash);
        await allCut(before);
        const first = await driver.send(surviving(edge, 0), CLIENT, { path: fixture.slow(0) }).done;
        const firstAtMs = Date.now();
        const afterCrash = await edge.status(id, CLIENT);
        const afterAtMs = Date.now();
        // Asked again until admitted (every 500 ms, round the isolates), for as long as the docs' bound and some.
        const tries: RequestRecord[] = [first];
        if (placeTimeoutMs !== null) {
          while (outcomeOf(tries.at(-1)!) !== 200 && Date.now() - killedAtMs < placeTimeoutMs + 2 * SLACK_MS) {
            await pause(500);
            tries.push(await driver.send(surviving(edge, tries.length), CLIENT, { path: fixture.slow(0) }).done);
          }
        }
        const admittedAgain = arrivals().filter((a) => a.atMs > killedAtMs);
        console.log(kind, "in flight", crash, {
          restartTookMs: restartedAtMs - killedAtMs,
          firstAfterKillMs: firstAtMs - killedAtMs,
          beforeCrash: counts(beforeCrash),
          afterCrash: counts(afterCrash),
          tries: tries.map(outcomeOf),
          admittedAfterKillMs: admittedAgain.map((a) => Math.round(a.atMs - killedAtMs)),
        });

        // Right after the crash, what the dead requests held is still held: the next is refused.
        expect(outcomeOf(first)).toBe(429);
        if (placeTimeoutMs === null) {
          // Their counts stay: as they were, less what the kind gives back with time (a bucket's refill).
          const refilled = admitted.holds === "counts" ? admitted.refill.perMs * (afterAtMs - beforeAtMs + 1) : 0;
          expect(LIMIT - beforeCrash.weighted!).toBeLessThan(1e-3);
          expect(beforeCrash.weighted! - afterCrash.weighted!).toBeGreaterThanOrEqual(0);
          expect(beforeCrash.weighted! - afterCrash.weighted!).toBeLessThanOrEqual(refilled + 1e-9);
          expect(admittedAgain).toEqual([]);
        } else {
          expect(afterCrash.inUse).toBe(LIMIT);
          // Nobody renews the places: they are taken back within place_timeout of the last renewal, before the crash.
          expect(outcomeOf(tries.at(-1)!)).toBe(200);
          expect(admittedAgain.map((a) => a.tag)).toEqual([tries.at(-1)!.tag]);
          expect(admittedAgain[0]!.atMs - killedAtMs).toBeLessThan(placeTimeoutMs + SLACK_MS);
        }
      });
    });

    const leased = admitted.holds === "counts" ? admitted.leased : null;
    it.skipIf(crash !== "vanish" || leased === null)(
      "after requests admitted from a lease: its unspent units stay counted (until their bucket rotates out)",
      async () => {
        if (leased === null) return;
        const id = `${kind}-leased-${crash}`;
        await withEdge(leased(id), crash, async (edge) => {
          const driver = edge.driver(IN_FLIGHT_MS);
          await objectsInFirstProcess(edge, id, [CLIENT]);
          // One after another through one vanishing isolate: it sees the demand, and is leased units ahead.
          const sent: RequestRecord[] = [];
          for (let i = 0; i < LEASE_REQUESTS; i++) {
            sent.push(await driver.send(doomed(edge)[0]!, CLIENT, { path: fixture.slow(0) }).done);
          }
          const beforeAtMs = Date.now();
          const beforeCrash = await edge.status(id, CLIENT);
          await crashNow(edge, crash);
          await pause(500);
          const afterCrash = await edge.status(id, CLIENT);
          const refilled =
            admitted.holds === "counts" ? admitted.refill.leasedPerMs * (Date.now() - beforeAtMs + 1) : 0;
          console.log(kind, "leased", crash, {
            sent: sent.map(outcomeOf).join(" "),
            beforeCrash: counts(beforeCrash),
            afterCrash: counts(afterCrash),
          });

          expect(sent.filter((r) => outcomeOf(r) !== 200).map(outcomeOf)).toEqual([]);
          // Units were leased ahead: the object counted more than the requests served.
          expect(beforeCrash.weighted).toBeGreaterThan(LEASE_REQUESTS);
          // Nobody hands them back: they stay counted (less what the kind gives back with time).
          expect(beforeCrash.weighted! - afterCrash.weighted!).toBeGreaterThanOrEqual(0);
          expect(beforeCrash.weighted! - afterCrash.weighted!).toBeLessThanOrEqual(refilled + 1e-9);
        });
      },
    );
  });
});
