/**
 * @module
 * One adaptive rule as one isolate sees it: the counts of what it forwarded
 * under the rule and how each ended, sent to the rule's controller object at
 * most once per interval (never once per request, never two at once), and
 * the factor learned from its answers. The one owner of both: decisions are
 * returned as data (a report to send, what an answer changed), and the
 * caller carries them out (adaptive.ts). No I/O, no clock, no timers:
 * test/health-reporter.test.ts drives it on plain numbers.
 */
import { CONTROLLER_PARAMS, type ControlTarget, urgent } from "../core/controller.ts";
import {
  addCounts,
  addTroubled,
  BUSIEST_KEYS,
  busyCapOf,
  type HealthCounts,
  type HealthTarget,
  type KeyCounts,
  LATENCY_BUCKETS,
  type LatencyPairs,
  latencyBucketOf,
  mergeWorst,
  mostlyBad,
  noCounts,
  noKeyCounts,
  outcomeOf,
  type ReportedTarget,
  reportedTarget,
  slowShareOf,
  worstFirst,
} from "../core/health.ts";
import type { Factors, Priority } from "../core/priorities.ts";
import type { FactorAnswer, HealthReport } from "../object/controller-protocol.ts";
import { Crowd } from "./crowd.ts";

/** A failed report is logged at most once per this many milliseconds, per rule and isolate. */
export const REPORT_FAILURE_LOG_EVERY_MS = 60_000;

/**
 * The most client keys a reporter keeps counts of between reports: only
 * keys that had a slow or failed answer are kept, so a flood of clients
 * with fast answers takes none of the room.
 */
export const MAX_KEYS_COUNTED = 64;

/**
 * The most client keys a reporter counts answers of between reports: past
 * it, further keys are not counted among the clients (which can only make a
 * few clients' trouble look like more of them).
 */
export const MAX_CLIENTS_COUNTED = 1024;

/**
 * A key's bad answers (and requests found late) are its own only when they
 * recur: at least this many over its recent reports ({@link BAD_HALF_LIFE_MS}).
 * One bad answer of a key is what failures spread over every client give
 * it by chance, as often as not: judged apart, such keys would hide an
 * origin failing a share of every client's requests.
 */
export const RECURRING_BAD = 2;

/** A key's recent bad answers count half as much this long after: a few seconds of its history. */
export const BAD_HALF_LIFE_MS = 2_000;

/**
 * Among the few worst keys a judgement leaves out (at most
 * `CONTROLLER_PARAMS.leaveOut`), a key may also be one whose failed answers
 * add up to this many over a longer memory ({@link WORST_HALF_LIFE_MS}): a
 * second failure within about 10 s. So a few clients cannot pace their own
 * failures just past {@link BAD_HALF_LIFE_MS} to keep them from ever
 * recurring (found from outside: five keys failing one request each every
 * 2.2 s held the limit at its floor). Failures spread over every client
 * give many keys that much too, but no more than five are left out so, and
 * the rest still show the origin failing. Slow and late answers are not
 * remembered so long: a queue slows every client, and a key slow by its own
 * endpoint is found late in flight and slow, which recurs at once.
 */
export const WORST_BAD = 1.5;

/** The longer memory of a key's failed answers, for the worst keys: half as much this long after. */
export const WORST_HALF_LIFE_MS = 10_000;

/**
 * How many times every answer's share of failures (over the longer memory)
 * a key's own share must be for its failures to be its own: an origin
 * failing a share of every client's requests fails each key about as often
 * as all of them, and those keys are not left out, however few the clients
 * (with six clients failing 30 %, leaving out the 5 worst hid it in 6 of 10
 * simulated runs).
 */
export const OWN_SHARE_OVER = 2;

/**
 * A key whose answers failed this often, over the longer memory and over at
 * least {@link MOSTLY_FAILED_ANSWERS} of them, fails on its own, whatever
 * everyone's share: a few clients whose requests always fail are most of the
 * rule's answers when they send more than the rest (found from outside:
 * three keys failing every request, three quarters of the answers, cut the
 * limit from 100 to 10), and an origin failing a share of everyone's
 * requests fails few keys so often.
 */
export const MOSTLY_FAILED = 0.9;
export const MOSTLY_FAILED_ANSWERS = 5;

/** The most client keys whose recent bad answers a reporter remembers. */
export const MAX_KEYS_REMEMBERED = 256;

/** What the reporter needs of its rule: its id, its configured limit (or concurrency), and its target. */
export type ReportedRule = { id: string; limit: number; adaptive: HealthTarget };

/**
 * A forwarded request under the rule as its reporter follows it: in flight
 * at the origin from its last byte passed on to its response's headers (or
 * its client's hang-up). The reporter keeps those not yet found late in a
 * list, oldest first, and finds the late ones at its reports.
 */
export type Flight = {
  /** Its client's key, when known. */
  readonly key: string | undefined;
  /** When its last byte went on to the origin. */
  startMs: number;
  prev: Flight | null;
  next: Flight | null;
  /** In the list: in flight, and not found late yet. */
  listed: boolean;
  /** In flight, late or not: its end is the crowd's. */
  aloft: boolean;
  /** How many of the reporter's requests were in flight when it started, itself included. */
  level: number;
  /** Its place in the order the reporter's requests started. */
  seq: number;
};

/** A request of client `key` (when known) about to go to the origin: followed from {@link HealthReporter.started}. */
export const newFlight = (key: string | undefined): Flight => ({
  key,
  startMs: 0,
  prev: null,
  next: null,
  listed: false,
  aloft: false,
  level: 0,
  seq: 0,
});

/** What an answer changed: nothing, a raise, or a cut (the factor fell). */
export type Learned = { changed: false } | { changed: true; fell: boolean; from: number; to: number };

export class HealthReporter {
  readonly ruleId: string;
  /** The factor the isolate applies, as last learned: 1 until an answer says otherwise (under priorities, the default priority's). */
  factor = 1;
  /** Under a rule with priorities, each priority's factor as last learned; null: every request gets {@link factor}. */
  factors: Factors | null = null;
  /** The controller's version of {@link factor}; 0 before any answer. */
  version = 0;
  /** Answers, and requests in flight, later than this are late (the controller's late mark); null before it gave one. */
  lateMs: number | null = null;
  /** The controller says the origin is slower than the target when calm: slow answers alone are not urgent. */
  drift = false;
  private rule: ReportedRule;
  private control: ControlTarget;
  /** The rule's target as its reports carry it. */
  private target: ReportedTarget;
  private reportInMs = CONTROLLER_PARAMS.steadyReportMs;
  private counts: HealthCounts = noCounts();
  /** Per client key that had a slow, failed or late answer since the last report: its answers since then. */
  private keys = new Map<string, KeyCounts>();
  /**
   * Each client key's answers since the last report, of them its successful
   * ones and their busy time: how many clients there were, how much of each
   * one's was bad, and what its busiest keys were.
   */
  private answers = new Map<string, { n: number; ok: number; busyMs: number }>();
  /**
   * Per client key, its bad answers and requests found late over its recent
   * reports, halving every {@link BAD_HALF_LIFE_MS} (`recent`), and its
   * failed answers, halving every {@link WORST_HALF_LIFE_MS} (`longer`).
   */
  private readonly recentBad = new Map<string, { recent: number; longer: number; answers: number }>();
  private recentAtMs: number | null = null;
  /** Every key's answers and failed answers over the longer memory: the share a key's own must stand out from. */
  private longerAnswers = 0;
  private longerErrors = 0;
  /** Of the counts, those a failed report gave back: already in the longer memory. */
  private givenBack = { answered: 0, errors: 0 };
  /** Requests in flight not found late yet, oldest first. */
  private oldest: Flight | null = null;
  private newest: Flight | null = null;
  /** The requests in flight, and whether they crowd the origin (crowd.ts). */
  readonly crowd = new Crowd();
  private readonly latency = new Array<number>(LATENCY_BUCKETS).fill(0);
  private latencyCount = 0;
  /** When the last report was sent; none yet: the first counts go at once. */
  private lastSentMs = Number.NEGATIVE_INFINITY;
  /** The report on its way, if one is: its counts come back into the next one if it fails. */
  private sending: { counts: HealthCounts; latency: LatencyPairs; version: number } | null = null;
  private lastFailureLogMs = Number.NEGATIVE_INFINITY;

  constructor(rule: ReportedRule) {
    this.ruleId = rule.id;
    this.rule = rule;
    this.control = controlOf(rule);
    this.target = reportedTarget(rule.adaptive);
  }

  /** The rule as the settings now have it (a new deploy may change its limit or target). */
  update(rule: ReportedRule): void {
    if (rule === this.rule) return;
    this.rule = rule;
    this.control = controlOf(rule);
    this.target = reportedTarget(rule.adaptive);
  }

  /** The factor a request of this priority gets (undefined: the rule has no priorities). */
  factorOf(priority: Priority | undefined): number {
    return priority === undefined || this.factors === null ? this.factor : this.factors[priority];
  }

  /** A request admitted under the rule and forwarded to the origin, of `priority` under a rule with priorities. */
  forwarded(priority?: Priority): void {
    this.counts.forwarded++;
    if (priority !== undefined) this.byPriority(priority)[0]++;
  }

  private byPriority(priority: Priority): [number, number] {
    this.counts.byPriority ??= {};
    const counts = this.counts.byPriority;
    let entry = counts[priority];
    if (entry === undefined) {
      entry = [0, 0];
      counts[priority] = entry;
    }
    return entry;
  }

  /** A forwarded request's last byte went on to the origin at `nowMs`: it is in flight from now. */
  started(flight: Flight, nowMs: number): void {
    flight.startMs = nowMs;
    flight.listed = true;
    flight.aloft = true;
    const start = this.crowd.started(flight.key);
    flight.level = start.level;
    flight.seq = start.seq;
    flight.prev = this.newest;
    flight.next = null;
    if (this.newest === null) this.oldest = flight;
    else this.newest.next = flight;
    this.newest = flight;
  }

  /** A request in flight got its headers, or its client hung up: no longer in flight (nor in the crowd, at {@link answered} or {@link gone}). */
  ended(flight: Flight): void {
    if (!flight.listed) return;
    flight.listed = false;
    if (flight.prev === null) this.oldest = flight.next;
    else flight.prev.next = flight.next;
    if (flight.next === null) this.newest = flight.prev;
    else flight.next.prev = flight.prev;
    flight.prev = flight.next = null;
  }

  /**
   * How a forwarded request ended: its status (0 when the origin could not
   * be reached), how long the origin took (from the request's last byte to
   * the response's headers), when known, its client's key, and the request
   * as the reporter followed it in flight.
   */
  answered(status: number, durationMs: number, key?: string, flight?: Flight): void {
    const { slow, error } = outcomeOf(this.rule.adaptive, status, durationMs);
    if (flight?.aloft === true) {
      flight.aloft = false;
      this.crowd.answered(flight, !error && this.inTime(slow, durationMs), flight.startMs + durationMs);
    }
    const late = this.lateMs !== null && durationMs > this.lateMs;
    const busyMs = error ? 0 : Math.min(Math.max(0, durationMs), this.busyCapMs());
    const c = this.counts;
    c.answered++;
    if (slow) c.slow++;
    if (error) c.errors++;
    if (late) c.late++;
    c.busyMs += busyMs;
    c.busySq += busyMs * busyMs;
    this.latency[latencyBucketOf(Math.max(0, durationMs))]!++;
    this.latencyCount++;
    if (key !== undefined) this.countKey(key, slow, error, late, busyMs);
  }

  /**
   * A forwarded request whose client hung up (or broke off its upload)
   * before the origin's headers: neither a success nor a failure. When the
   * origin had already kept it `waitedMs` past its last byte, longer than
   * the target, it is known slow, and counts so.
   */
  gone(waitedMs: number | null, key?: string, flight?: Flight): void {
    if (flight?.aloft === true) {
      flight.aloft = false;
      this.crowd.left(flight, flight.startMs + (waitedMs ?? 0));
    }
    const c = this.counts;
    c.gone++;
    if (waitedMs === null || !outcomeOf(this.rule.adaptive, 200, waitedMs).slow) return;
    const late = this.lateMs !== null && waitedMs > this.lateMs;
    const busyMs = Math.min(waitedMs, this.busyCapMs());
    c.goneSlow++;
    c.answered++;
    c.slow++;
    if (late) c.late++;
    c.busyMs += busyMs;
    c.busySq += busyMs * busyMs;
    if (key !== undefined) this.countKey(key, true, false, late, busyMs);
  }

  /**
   * Whether a request of `priority` is refused at `nowMs` because the
   * isolate's requests in flight under the rule crowd the origin: only a
   * sheddable one, and only before the controller's reports could say so.
   */
  crowded(priority: Priority | undefined, nowMs: number): boolean {
    if (priority !== "sheddable" || !this.crowd.crowded(nowMs)) return false;
    this.counts.crowded = (this.counts.crowded ?? 0) + 1;
    return true;
  }

  /**
   * Whether an answer tells the crowd the origin kept up: within the target;
   * or, while the controller says the origin drifted (slower than the target
   * when calm, so that nothing is within it), within `cutAt` times its calm
   * latency (the late mark over `lateOver`), where the controller would see a
   * queue. Else an origin that drifted would teach the crowd nothing, and its
   * sheddable requests would be refused past 8 in flight for as long as it
   * stayed slow (found from outside).
   */
  private inTime(slow: boolean, durationMs: number): boolean {
    if (!this.drift || this.lateMs === null) return !slow;
    return durationMs <= (this.lateMs / CONTROLLER_PARAMS.lateOver) * CONTROLLER_PARAMS.cutAt;
  }

  private busyCapMs(): number {
    return busyCapOf(this.rule.adaptive.latencyMs, this.lateMs);
  }

  /** One answer of a client key: kept once the key has had a slow, failed or late one. */
  private countKey(key: string, slow: boolean, error: boolean, late: boolean, busyMs: number): void {
    let answers = this.answers.get(key);
    if (answers === undefined && this.answers.size < MAX_CLIENTS_COUNTED) {
      answers = { n: 0, ok: 0, busyMs: 0 };
      this.answers.set(key, answers);
    }
    if (answers !== undefined) {
      answers.n++;
      if (!error) {
        answers.ok++;
        answers.busyMs += busyMs;
      }
    }
    const counts = this.keyCounts(key, slow || error || late);
    if (counts === undefined) return;
    counts[1]++;
    if (slow) counts[2]++;
    if (error) counts[3]++;
    if (late) counts[4]++;
    counts[5] += busyMs;
    counts[7] += busyMs * busyMs;
  }

  /** A key's counts: made when `bad` and there is room. */
  private keyCounts(key: string, bad: boolean): KeyCounts | undefined {
    let counts = this.keys.get(key);
    if (counts === undefined && bad && this.keys.size < MAX_KEYS_COUNTED) {
      counts = noKeyCounts(key);
      this.keys.set(key, counts);
    }
    return counts;
  }

  /**
   * The requests in flight past the late mark at `nowMs`, counted once
   * each (`stuck`), and out of the list: the oldest are first, so the walk
   * stops at the first that is not late.
   */
  private findStuck(nowMs: number): void {
    const lateMs = this.lateMs;
    if (lateMs === null) return;
    for (let f = this.oldest; f !== null && nowMs - f.startMs > lateMs; f = this.oldest) {
      this.ended(f);
      this.counts.stuck++;
      if (f.key !== undefined) {
        const counts = this.keyCounts(f.key, true);
        if (counts !== undefined) counts[6]++;
      }
    }
  }

  /** A request refused only because of the reduction. */
  shed(priority?: Priority): void {
    this.counts.shed++;
    if (priority !== undefined) this.byPriority(priority)[1]++;
  }

  /** A client's count as a share of its configured limit, as a verdict showed it. */
  peak(share: number): void {
    if (share > this.counts.peak) this.counts.peak = share;
  }

  /**
   * The report to send now, or null: none is on its way, there is something
   * to say, and its interval has passed (the controller's `reportInMs`), or
   * a quarter of a second has and these counts alone breach the target.
   * A report returned is on its way until {@link landed} or {@link failed}.
   */
  due(nowMs: number): HealthReport | null {
    if (this.sending !== null) return null;
    this.findStuck(nowMs);
    const c = this.counts;
    if (c.forwarded === 0 && c.answered === 0 && c.shed === 0 && c.stuck === 0) return null;
    const sinceMs = nowMs - this.lastSentMs;
    // Only counts with something wrong in them can be urgent: the judgement is not made for healthy ones.
    const troubled = c.slow + c.errors + c.late + c.stuck > 0;
    const early =
      troubled &&
      sinceMs >= CONTROLLER_PARAMS.earliestReportMs &&
      urgent(c, this.control, CONTROLLER_PARAMS, this.drift);
    if (sinceMs < this.reportInMs && !early) return null;
    const latency = this.takeLatency();
    const counts = this.counts;
    // Only keys whose trouble recurs may be judged apart from the rest: the worst (over a longer memory), and those
    // mostly bad.
    const { recurring, worstable } = this.recurring(nowMs, counts);
    // Named: keys whose trouble recurs, and keys with a failed answer from their first (so that a window spanning
    // reports has all of a key's counts once its failures make it one that may be left out, `worstable`). A failed
    // report's worst keys came back into the counts: merged with those since.
    const named = [...this.keys.values()].filter((k) => worstable.has(k[0]) || k[3] > 0);
    const worst = mergeWorst(counts.worst, worstFirst(named));
    if (worst.length > 0) {
      counts.worst = worst;
      const may = new Set([...(counts.worstable ?? []), ...worstable]);
      counts.worstable = worst.map((k) => k[0]).filter((key) => may.has(key));
    }
    this.spread(counts, recurring);
    this.counts = noCounts();
    this.keys = new Map();
    this.answers = new Map();
    this.lastSentMs = nowMs;
    this.sending = { counts, latency, version: this.version };
    const { id, limit } = this.rule;
    return {
      rule: id,
      limit,
      target: this.target,
      version: this.version,
      counts,
      ...(latency.length > 0 ? { latency } : {}),
      lateMs: this.lateMs,
    };
  }

  /**
   * The keys whose bad answers (and requests found late) recur: this
   * report's added to what is left of their recent ones, at least
   * {@link RECURRING_BAD}; and those that may be left out among the worst:
   * those, and keys whose failures reach {@link WORST_BAD} over the longer
   * memory while their share of its answers stands out, at least
   * {@link OWN_SHARE_OVER} times the share of every answer's (a key failing
   * as often as everyone is the origin's failure, not its own). Those of
   * keys with none for a while are forgotten.
   */
  private recurring(nowMs: number, counts: HealthCounts): { recurring: Set<string>; worstable: Set<string> } {
    const sinceMs = this.recentAtMs === null ? 0 : Math.max(0, nowMs - this.recentAtMs);
    const decay = 0.5 ** (sinceMs / BAD_HALF_LIFE_MS);
    const longerDecay = 0.5 ** (sinceMs / WORST_HALF_LIFE_MS);
    this.recentAtMs = nowMs;
    // A failed report's counts, given back into these, were added when it was made.
    this.longerAnswers = this.longerAnswers * longerDecay + counts.answered - this.givenBack.answered;
    this.longerErrors = this.longerErrors * longerDecay + counts.errors - this.givenBack.errors;
    this.givenBack = { answered: 0, errors: 0 };
    for (const [key, bad] of this.recentBad) {
      if (bad.recent * decay < 0.25 && bad.longer * longerDecay < 0.25) this.recentBad.delete(key);
      else {
        const answers = bad.answers * longerDecay + (this.answers.get(key)?.n ?? 0);
        this.recentBad.set(key, { recent: bad.recent * decay, longer: bad.longer * longerDecay, answers });
      }
    }
    const everyone = this.longerAnswers > 0 ? this.longerErrors / this.longerAnswers : 0;
    const recurring = new Set<string>();
    const worstable = new Set<string>();
    for (const [key, k] of this.keys) {
      const was = this.recentBad.get(key);
      const bad = {
        recent: (was?.recent ?? 0) + Math.max(k[2], k[3], k[4]) + k[6],
        longer: (was?.longer ?? 0) + k[3],
        // Its answers were added above when it was remembered; else this report's are its first.
        answers: was?.answers ?? this.answers.get(key)?.n ?? k[1],
      };
      if (was !== undefined || this.recentBad.size < MAX_KEYS_REMEMBERED) this.recentBad.set(key, bad);
      const ownShare = bad.answers > 0 ? bad.longer / bad.answers : 0;
      const failingOwn =
        ownShare >= OWN_SHARE_OVER * everyone || (ownShare >= MOSTLY_FAILED && bad.answers >= MOSTLY_FAILED_ANSWERS);
      // Failed answers alone recur for every key of an origin failing a share of everyone's requests: they are a
      // key's own only where they stand out. Were they not, the keys left out would be those that failed this time,
      // and the rest the lucky ones (found from outside: five clients, each failing half its requests, left the
      // limit at full).
      const onlyFailed = k[2] === 0 && k[4] === 0 && k[6] === 0;
      const recurs = bad.recent >= RECURRING_BAD && (!onlyFailed || failingOwn);
      if (recurs) recurring.add(key);
      if (recurs || (bad.longer >= WORST_BAD && failingOwn)) worstable.add(key);
    }
    return { recurring, worstable };
  }

  /**
   * Adds to `counts` the client keys since the last report, and those of
   * them whose answers were mostly bad with their counts (a key found only
   * late in flight is a client too).
   */
  private spread(counts: HealthCounts, recurring: ReadonlySet<string>): void {
    let clients = this.answers.size;
    let troubled = counts.troubled;
    let fresh = counts.fresh;
    for (const [key, k] of this.keys) {
      const answered = this.answers.get(key)?.n;
      if (answered === undefined) clients++;
      if (!mostlyBad(k, answered ?? 0)) continue;
      const own = {
        keys: 1,
        answered: k[1],
        slow: k[2],
        errors: k[3],
        late: k[4],
        busyMs: k[5],
        stuck: k[6],
        busySq: k[7],
      };
      // Its trouble recurs: its own. Not yet: apart, for the controller to leave out at the onset or beside recurring ones.
      if (recurring.has(key)) troubled = addTroubled(troubled, own);
      else fresh = addTroubled(fresh, own);
    }
    if (clients > 0 || counts.clients !== undefined) counts.clients = (counts.clients ?? 0) + clients;
    // Among many clients, the busiest few's successful answers: the calm latency is measured without them.
    if (this.answers.size > 2 * BUSIEST_KEYS) {
      const top = [...this.answers.values()].sort((a, b) => b.n - a.n).slice(0, BUSIEST_KEYS);
      const busiest = counts.busiest ?? { ok: 0, busyMs: 0 };
      for (const own of top) {
        busiest.ok += own.ok;
        busiest.busyMs += own.busyMs;
      }
      counts.busiest = busiest;
    }
    if (troubled !== undefined) counts.troubled = troubled;
    if (fresh !== undefined) counts.fresh = fresh;
  }

  /** Whether a report is on its way. */
  get inFlight(): boolean {
    return this.sending !== null;
  }

  /** The controller's answer to the report on its way: its factor is applied when its version is another. */
  landed(answer: FactorAnswer): Learned {
    this.sending = null;
    this.reportInMs = answer.reportInMs > 0 ? answer.reportInMs : CONTROLLER_PARAMS.steadyReportMs;
    this.drift = answer.drift === true;
    const lateMs = typeof answer.lateMs === "number" && answer.lateMs > 0 ? answer.lateMs : null;
    if (lateMs !== this.lateMs) {
      // Late counts are counted against one mark: those against the old one go.
      this.lateMs = lateMs;
      this.counts.late = 0;
      this.counts.stuck = 0;
      for (const key of this.keys.values()) key[4] = key[6] = 0;
    }
    if (answer.version === this.version) return { changed: false };
    const from = this.factor;
    this.factor = answer.factor;
    this.factors = answer.factors ?? null;
    this.version = answer.version;
    // Counts gathered under the old factor are no evidence about the new one: the controller would ignore them.
    this.counts = noCounts();
    this.keys = new Map();
    this.answers = new Map();
    this.latency.fill(0);
    this.latencyCount = 0;
    return { changed: true, fell: answer.factor < from, from, to: answer.factor };
  }

  /**
   * The report on its way failed: its counts go back into the next one
   * (nothing is lost), which goes at the next interval. Whether to log it:
   * at most once per {@link REPORT_FAILURE_LOG_EVERY_MS}.
   */
  failed(nowMs: number): { log: boolean } {
    const lost = this.sending;
    this.sending = null;
    if (lost !== null && lost.version === this.version) {
      this.counts = addCounts(lost.counts, this.counts);
      this.givenBack = {
        answered: this.givenBack.answered + lost.counts.answered,
        errors: this.givenBack.errors + lost.counts.errors,
      };
      for (const [k, n] of lost.latency) this.latency[k]! += n;
      this.latencyCount += lost.latency.reduce((sum, [, n]) => sum + n, 0);
    }
    if (nowMs - this.lastFailureLogMs < REPORT_FAILURE_LOG_EVERY_MS) return { log: false };
    this.lastFailureLogMs = nowMs;
    return { log: true };
  }

  private takeLatency(): LatencyPairs {
    if (this.latencyCount === 0) return [];
    const pairs: LatencyPairs = [];
    for (let k = 0; k < LATENCY_BUCKETS; k++) {
      const n = this.latency[k]!;
      if (n > 0) pairs.push([k, n]);
    }
    this.latency.fill(0);
    this.latencyCount = 0;
    return pairs;
  }
}

/** The target as shares, for the early report. */
const controlOf = (rule: ReportedRule): ControlTarget => ({
  slowShare: slowShareOf(rule.adaptive),
  errorShare: rule.adaptive.errorShare,
  minFactor: Math.min(1, rule.adaptive.floor / Math.max(1, rule.limit)),
});
