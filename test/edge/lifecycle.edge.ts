/**
 * @module
 * One lifecycle, every kind of limit (docs/lifecycle.md), its crash cells
 * over real sockets: each registered kind, through its fixture in
 * test/edge/support/lifecycle.ts, has workerd killed (SIGKILL) and
 * restarted on its storage while a client's requests wait, and while they
 * are admitted and in flight. What each state becomes is the docs' column
 * "workerd is killed (kill -9) and restarts", written here once:
 *
 * | state | kill -9 and restart |
 * | --- | --- |
 * | held until its turn | the bookings nobody claims within 5 s of the restart are dropped and their counts given back: the next request waits at most that long behind them |
 * | in line for a place | the line is dropped; places nobody renews are taken back after `place_timeout` |
 * | admitted, holding counts | the counts stay (stored): the client stays refused |
 * | admitted, holding a place | places nobody renews are taken back after `place_timeout` |
 *
 * The requests that died never reach the origin afterwards, and count
 * nowhere: a second client that sent the same requests but the waiting
 * ones, beside the first, is left with the same counts. An isolate that
 * vanishes while the object lives is not here: see docs/testing.md.
 */
import { describe, expect, it } from "vitest";
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

/** Runs `scenario` against a workerd of its own, under `rule` alone, and stops it after. */
async function withEdge<T>(rule: ReturnType<EdgeLifecycleFixture["rule"]>, scenario: (edge: Edge) => Promise<T>) {
  const edge = await startEdge({ rules: [rule], isolates: ISOLATES });
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

/** Sends `count` requests for `key` at once to `path`, round the isolates. */
const burst = (edge: Edge, driver: ReturnType<Edge["driver"]>, key: string, count: number, path: string) =>
  Array.from({ length: count }, (_, i) => driver.send(i % edge.isolates, key, { path }));

/** A request that got its whole answer; one cut off by the kill got none, or only its start. */
const answered = (r: RequestRecord) => r.status !== null && r.error === null;

/** What the object counts for a client under the rule, to set against another client's. */
const counts = (s: AdminStatus) => ({
  weighted: Math.round(s.weighted * 10) / 10,
  inUse: s.inUse,
  waiting: s.waiting,
});

/** Kills workerd (SIGKILL) and starts it again on the same storage and ports; when each happened. */
async function killAndRestart(edge: Edge): Promise<{ killedAtMs: number; restartedAtMs: number }> {
  await edge.workerd.kill();
  const killedAtMs = Date.now();
  await edge.workerd.restart();
  return { killedAtMs, restartedAtMs: Date.now() };
}

/** Every request died with workerd, without a whole answer. */
async function allCut(sent: InFlight[]): Promise<RequestRecord[]> {
  const records = await Promise.all(sent.map((r) => r.done));
  expect(records.filter(answered).map(outcomeOf)).toEqual([]);
  return records;
}

describe.each(kinds)("a %s rule, workerd killed (kill -9) and restarted", (kind, fixture) => {
  const { waiting, admitted } = fixture;
  const placeTimeoutMs = admitted.holds === "a place" ? admitted.placeTimeoutMs : null;

  const waitingTitle =
    waiting?.state === "held"
      ? "while requests are held until their turns: the bookings nobody claims go within 5 s of the restart, so the client's next request is answered by then; none of the held reaches the origin, and they count nowhere"
      : "while requests are in line for a place: the line is dropped, and the places nobody renews are taken back after place_timeout, so the client's next request gets one by then; none in line reaches the origin, and they count nowhere";

  it.skipIf(waiting === null)(waitingTitle, async () => {
    if (waiting === null) return;
    if (waiting.state === "in line" && placeTimeoutMs === null) {
      throw new Error(
        `${kind}: a request waits in line for a place its admitted requests hold; say how long one lasts`,
      );
    }
    const id = `${kind}-waiting-killed`;
    await withEdge(waiting.rule(id), async (edge) => {
      const driver = edge.driver(IN_FLIGHT_MS);
      const path = fixture.slow(IN_FLIGHT_MS);
      const arrivals = (key: string) => edge.origin.arrivals().filter((a) => a.key === key);
      const sentAtMs = Date.now();
      const before = burst(edge, driver, CLIENT, LIMIT + WAITING, path);
      const beside = burst(edge, driver, CONTROL, LIMIT, path);
      await until(`${LIMIT} of each client's at the origin`, () =>
        [CLIENT, CONTROL].every((key) => arrivals(key).length >= LIMIT),
      );
      await pause(200);
      // The first went on and are in flight; the others wait, unanswered and not at the origin.
      expect(arrivals(CLIENT).map((a) => `+${Math.round(a.atMs - sentAtMs)} ms`)).toHaveLength(LIMIT);
      expect(before.filter((r) => r.record.endedAtMs !== null).map((r) => outcomeOf(r.record))).toEqual([]);
      const waitingTags = before.map((r) => r.record.tag).filter((tag) => edge.origin.hits(tag) === 0);
      expect(waitingTags).toHaveLength(WAITING);

      const { killedAtMs, restartedAtMs } = await killAndRestart(edge);
      await allCut([...before, ...beside]);
      const next = await driver.send(0, CLIENT, { path: fixture.slow(0) }).done;
      const answeredAtMs = Date.now();
      // Beside it, the control client's next, sent as the client's is answered.
      const control = await driver.send(1, CONTROL, { path: fixture.slow(0) }).done;
      await pause(500);
      const [mine, theirs] = await Promise.all([edge.status(id, CLIENT), edge.status(id, CONTROL)]);
      console.log(kind, waiting.state, {
        restartTookMs: restartedAtMs - killedAtMs,
        answeredAfterRestartMs: answeredAtMs - restartedAtMs,
        answeredAfterKillMs: answeredAtMs - killedAtMs,
        next: outcomeOf(next),
        counts: counts(mine),
        control: counts(theirs),
      });

      expect(outcomeOf(next)).toBe(200);
      if (waiting.state === "held") {
        // Held at most the claim's 5 s (and the call's way), not behind the dead bookings' turns.
        expect(answeredAtMs - restartedAtMs).toBeLessThan(CLAIM_WITHIN_MS + SLACK_MS);
      } else {
        // The places the dead requests held were last renewed before the kill; the line's tickets got none.
        expect(answeredAtMs - killedAtMs).toBeLessThan(placeTimeoutMs! + SLACK_MS);
      }
      // None of the waiting ever reached the origin; after the kill, only the next did.
      expect(waitingTags.filter((tag) => edge.origin.hits(tag) > 0)).toEqual([]);
      expect(
        arrivals(CLIENT)
          .filter((a) => a.atMs > killedAtMs)
          .map((a) => a.tag),
      ).toEqual([next.tag]);
      // They count nowhere: the client is left with what the control client, which sent none of them, is.
      expect(outcomeOf(control)).toBe(200);
      expect({ inUse: mine.inUse, waiting: mine.waiting }).toEqual({ inUse: theirs.inUse, waiting: theirs.waiting });
      expect(mine.weighted === undefined).toBe(theirs.weighted === undefined);
      if (mine.weighted !== undefined) expect(Math.abs(mine.weighted - theirs.weighted)).toBeLessThan(0.05);
    });
  });

  const inFlightTitle =
    admitted.holds === "counts"
      ? "while requests are admitted and in flight: their counts stay, stored, so the client's next request is still refused"
      : "while requests are admitted and in flight: their places are kept, and taken back after place_timeout since nobody renews them, so the client's next request gets one by then";

  it(inFlightTitle, async () => {
    const id = `${kind}-in-flight-killed`;
    await withEdge(fixture.rule(id), async (edge) => {
      const driver = edge.driver(IN_FLIGHT_MS);
      const arrivals = () => edge.origin.arrivals().filter((a) => a.key === CLIENT);
      const before = burst(edge, driver, CLIENT, LIMIT, fixture.slow(IN_FLIGHT_MS));
      await until(`the ${LIMIT} admitted at the origin`, () => arrivals().length >= LIMIT);
      await pause(300);

      const { killedAtMs, restartedAtMs } = await killAndRestart(edge);
      await allCut(before);
      const first = await driver.send(0, CLIENT, { path: fixture.slow(0) }).done;
      const firstAtMs = Date.now();
      const afterRestart = await edge.status(id, CLIENT);
      // Asked again until admitted (every 500 ms, round the isolates), for as long as the docs' bound and some.
      const tries: RequestRecord[] = [first];
      if (placeTimeoutMs !== null) {
        while (outcomeOf(tries.at(-1)!) !== 200 && Date.now() - killedAtMs < placeTimeoutMs + 2 * SLACK_MS) {
          await pause(500);
          tries.push(await driver.send(tries.length % edge.isolates, CLIENT, { path: fixture.slow(0) }).done);
        }
      }
      const admittedAgain = arrivals().filter((a) => a.atMs > killedAtMs);
      console.log(kind, "in flight", {
        restartTookMs: restartedAtMs - killedAtMs,
        firstAfterKillMs: firstAtMs - killedAtMs,
        afterRestart: counts(afterRestart),
        tries: tries.map(outcomeOf),
        admittedAfterKillMs: admittedAgain.map((a) => Math.round(a.atMs - killedAtMs)),
      });

      // Right after the restart, what the dead requests held is still held: the next is refused.
      expect(outcomeOf(first)).toBe(429);
      if (placeTimeoutMs === null) {
        // Their counts stay.
        expect(afterRestart.weighted).toBeCloseTo(LIMIT, 5);
        expect(admittedAgain).toEqual([]);
      } else {
        expect(afterRestart.inUse).toBe(LIMIT);
        // Nobody renews the places: they are taken back within place_timeout of the last renewal, before the kill.
        expect(outcomeOf(tries.at(-1)!)).toBe(200);
        expect(admittedAgain.map((a) => a.tag)).toEqual([tries.at(-1)!.tag]);
        expect(admittedAgain[0]!.atMs - killedAtMs).toBeLessThan(placeTimeoutMs + SLACK_MS);
      }
    });
  });
});
