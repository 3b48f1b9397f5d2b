/**
 * @module
 * An isolate's adaptive rules (docs/adaptive.md): a reporter per rule
 * (health-reporter.ts), the factor each check and place request carries,
 * what decisions and forwarded requests tell the reporters, and the reports
 * sent to the rules' controller objects in the background. On a change of
 * a rule's factor the isolate drops its leases and known refusals of the
 * rule at once, so none outlives the change by more than the time it took
 * to learn it. Nothing here runs for a configuration without adaptive
 * rules: the map stays empty, and every entry point looks at it first.
 */
import { type CountedRule, isCounted, type PlacedRule, type Rule } from "../core/rules.ts";
import type { Reported } from "../http/rate-limit-headers.ts";
import { contentLengthOf, passedOn } from "../http/upload.ts";
import { type LimiterNamespace, reportHealth } from "../object/client.ts";
import type { FactorAnswer } from "../object/controller-protocol.ts";
import { type PlaceRequest, type RuleCheck, ruleCheckOf } from "../object/protocol.ts";
import { logEvent } from "../observe/log.ts";
import type { ClientKeys } from "./client-keys.ts";
import { type Flight, HealthReporter, newFlight, type ReportedRule } from "./health-reporter.ts";
import { crowdedVariant } from "./rule-ids.ts";
import type { RuleRefusal } from "./vocabulary.ts";
import type { Sink } from "./work.ts";

/** How long a report may take before it counts as failed. */
export const REPORT_TIMEOUT_MS = 2_000;

/** An isolate's adaptive rules, by rule id. */
export class AdaptiveRules {
  private readonly reporters = new Map<string, HealthReporter>();
  /** Per rule object (a tier variant is one): its check with the factor of the version it was made for. */
  private readonly checks = new WeakMap<CountedRule, { version: number; check: RuleCheck }>();
  private readonly places = new WeakMap<PlacedRule, { version: number; request: PlaceRequest }>();

  /** How many adaptive rules this isolate has seen: 0 means nothing here runs. */
  get size(): number {
    return this.reporters.size;
  }

  /** The reporter of a rule id, if the isolate has seen the rule. */
  get(ruleId: string): HealthReporter | undefined {
    return this.reporters.get(ruleId);
  }

  /** The reporter of an adaptive rule, made on first use; the rule's own (not a tier's) limit is what it reports. */
  of(rule: Rule & ReportedRule): HealthReporter {
    let reporter = this.reporters.get(rule.id);
    if (reporter === undefined) {
      reporter = new HealthReporter(rule);
      this.reporters.set(rule.id, reporter);
    } else if (rule.tier === undefined) reporter.update(rule);
    return reporter;
  }

  /** Every reporter, for inspection. */
  all(): HealthReporter[] {
    return [...this.reporters.values()];
  }

  /** What the object is sent for a rule: an adaptive rule's check carries the factor last learned. */
  readonly checkOf = (rule: CountedRule): RuleCheck => {
    if (rule.adaptive === undefined) return ruleCheckOf(rule);
    const reporter = this.of(rule as Rule & ReportedRule);
    const made = this.checks.get(rule);
    if (made !== undefined && made.version === reporter.version) return made.check;
    const check: RuleCheck = {
      ...ruleCheckOf(rule),
      factor: reporter.factorOf(rule.priority),
      ...(rule.priority === undefined ? {} : { priority: rule.priority }),
      ...(rule.crowded === true ? { crowded: true as const } : {}),
    };
    this.checks.set(rule, { version: reporter.version, check });
    return check;
  };

  /**
   * The request's rules, each sheddable one whose isolate's requests in
   * flight crowd the origin now as its crowded variant (refused by its
   * client's object after its override); the rules themselves otherwise.
   */
  crowdedIn(rules: Rule[], nowMs: number): Rule[] {
    if (this.reporters.size === 0) return rules;
    let crowded: Rule[] | undefined;
    for (let i = 0; i < rules.length; i++) {
      const rule = rules[i]!;
      // Which priorities a crowd refuses is the reporter's to say.
      if (rule.priority === undefined || !isCounted(rule)) continue;
      if (this.reporters.get(rule.id)?.crowded(rule.priority, nowMs) !== true) continue;
      crowded ??= rules.slice();
      crowded[i] = crowdedVariant(rule);
    }
    return crowded ?? rules;
  }

  /** What `acquire` is sent for a concurrency rule: an adaptive one's carries the factor last learned. */
  placeRequestOf(rule: PlacedRule, base: PlaceRequest): PlaceRequest {
    if (rule.adaptive === undefined) return base;
    const reporter = this.of(rule as Rule & ReportedRule);
    const made = this.places.get(rule);
    if (made !== undefined && made.version === reporter.version && made.request.concurrency === base.concurrency) {
      return made.request;
    }
    const request = {
      ...base,
      factor: reporter.factorOf(rule.priority),
      ...(rule.priority === undefined ? {} : { priority: rule.priority }),
    };
    this.places.set(rule, { version: reporter.version, request });
    return request;
  }
}

/** What sending a report needs: the namespace, where work past the answer goes, the isolate's clock and keys. */
export type ReportContext = {
  ns: LimiterNamespace;
  work: Sink;
  isolate: { clock: () => number; keys: ClientKeys; adaptive: AdaptiveRules };
};

/**
 * What a decided request tells its adaptive rules: a refusal only the
 * reduction made (`shed`), and how close the client is to its configured
 * limit (the busiest client's share). Returns the reporters of the rules it
 * is forwarded under, when it was admitted, or undefined when it has none.
 */
export function noteDecision(
  reports: Reported[],
  admitted: boolean,
  context: ReportContext,
): HealthReporter[] | undefined {
  const { adaptive } = context.isolate;
  if (adaptive.size === 0) return undefined;
  let forwarded: HealthReporter[] | undefined;
  for (const r of reports) {
    const reporter = adaptive.get(r.id);
    if (reporter === undefined) continue;
    const v = r.verdict;
    const factor = reporter.factorOf(r.priority);
    // The limit before the factor: the verdict names the current quota only when the factor changed it.
    const configured = v.limit !== undefined && factor > 0 ? r.limit / factor : r.limit;
    if (configured > 0) reporter.peak(Math.max(v.weighted, r.limit - v.remaining) / configured);
    if (admitted) {
      forwarded ??= [];
      if (!forwarded.includes(reporter)) {
        forwarded.push(reporter);
        reporter.forwarded(r.priority);
      }
    } else {
      if (v.reduced === true && !v.ruleAllows) reporter.shed(r.priority);
      sendIfDue(reporter, context);
    }
  }
  if (forwarded !== undefined) {
    for (const reporter of forwarded) {
      // The onset of a queue shows first in requests still in flight: checked as requests go on, too.
      sendIfDue(reporter, context);
    }
  }
  return forwarded;
}

/** What refusals the isolate knew of tell their adaptive rules: each that only the reduction made is shed. */
export function noteKnown(known: RuleRefusal[], context: ReportContext): void {
  const { adaptive } = context.isolate;
  if (adaptive.size === 0) return;
  for (const k of known) {
    if (k.refusal.applied.reduced !== true) continue;
    const reporter = adaptive.get(k.rule.id);
    reporter?.shed(k.rule.priority);
    sendIfDue(reporter, context);
  }
}

/** How many characters of a key's object name a report names it by: enough to tell clients apart, no client data. */
export const KEY_PREFIX_LENGTH = 16;

/** One rule's reporter, and the request as that reporter follows it. */
type Watched = Flight & { readonly reporter: HealthReporter };

/**
 * An admitted request forwarded under adaptive rules, watched until its
 * response's headers arrive ({@link answered}), or its client goes first
 * ({@link gone}): each of its rules counts it once, under its client's key.
 * The origin is timed from the request's last byte passed on to it (see
 * {@link body}), so that a client slow to upload is not a slow origin; and
 * the request is in flight at the origin, for each rule's reporter, from
 * that byte on, so that neither is a client's upload a queue at the origin.
 */
export class HealthWatch {
  private readonly watched: Watched[];
  private readonly context: ReportContext;
  /** When the request's last byte went on to the origin so far: when it was forwarded, for a request with no body. */
  private lastByteAtMs: number;
  /** Whether its body is still on its way from the client. */
  private uploading = false;
  /** Whether its client broke its body off. */
  private broken = false;
  private done = false;

  /** `keyOf`: the client key (a prefix of its object's name) each rule counted the request under, when known. */
  constructor(reporters: HealthReporter[], context: ReportContext, keyOf: (ruleId: string) => string | undefined) {
    this.watched = reporters.map((reporter) => ({ ...newFlight(keyOf(reporter.ruleId)), reporter }));
    this.context = context;
    this.lastByteAtMs = context.isolate.clock();
  }

  /**
   * The request's body as the origin is to be sent it: passed on as it
   * arrives, each piece noted, so that the origin is timed from the last
   * one; null for a request without a body, which is in flight from now.
   */
  body(request: Request): ReadableStream<Uint8Array> | null {
    const { body } = request;
    // A GET or a HEAD is forwarded without a body (fetch takes none): in flight from now.
    if (body === null || request.method === "GET" || request.method === "HEAD") {
      this.inFlight();
      return null;
    }
    this.uploading = true;
    const { clock } = this.context.isolate;
    return passedOn(body, contentLengthOf(request.headers), {
      piece: () => {
        this.lastByteAtMs = clock();
      },
      ended: () => {
        this.lastByteAtMs = clock();
        this.uploading = false;
        this.inFlight();
      },
      broke: () => {
        this.broken = true;
      },
    });
  }

  /** Its last byte is at the origin: in flight for each rule, unless it already ended. */
  private inFlight(): void {
    if (this.done) return;
    for (const w of this.watched) if (!w.aloft) w.reporter.started(w, this.lastByteAtMs);
  }

  /** Whether the client broke its body off before it ended: whatever the origin's answer says then is the client's doing. */
  get broke(): boolean {
    return this.broken;
  }

  /** The origin answered with `status` (0: it could not be reached). Once; later calls do nothing. */
  answered(status: number): void {
    if (this.done) return;
    this.done = true;
    const durationMs = this.context.isolate.clock() - this.lastByteAtMs;
    for (const w of this.watched) {
      w.reporter.ended(w);
      w.reporter.answered(status, durationMs, w.key, w);
      sendIfDue(w.reporter, this.context);
    }
  }

  /**
   * Its client hung up, or broke its upload off, before the origin's
   * headers: neither a success nor a failure, unless the whole request had
   * reached the origin and it had kept it longer than the target since.
   * Once; later calls do nothing.
   */
  gone(): void {
    if (this.done) return;
    this.done = true;
    const waitedMs = this.uploading || this.broken ? null : this.context.isolate.clock() - this.lastByteAtMs;
    for (const w of this.watched) {
      w.reporter.ended(w);
      w.reporter.gone(waitedMs, w.key, w);
      sendIfDue(w.reporter, this.context);
    }
  }
}

/** Sends the rule's report in the background if one is due, and applies the answer. */
export function sendIfDue(reporter: HealthReporter | undefined, context: ReportContext): void {
  if (reporter === undefined) return;
  const { isolate } = context;
  const report = reporter.due(isolate.clock());
  if (report === null) return;
  context.work.add(
    reportHealth(context.ns, report, REPORT_TIMEOUT_MS).then(
      (outcome) => {
        if (outcome.ok) learned(reporter, outcome.value, isolate);
        else failed(reporter, outcome.message, isolate.clock());
      },
      (error: unknown) => failed(reporter, String((error as Error)?.message ?? error), isolate.clock()),
    ),
  );
}

/** Applies an answer: on a change of the factor, the rule's leases and known refusals go at once. */
function learned(reporter: HealthReporter, answer: FactorAnswer, isolate: ReportContext["isolate"]): void {
  const change = reporter.landed(answer);
  if (change.changed) isolate.keys.dropRule(reporter.ruleId, isolate.clock());
}

function failed(reporter: HealthReporter, message: string, nowMs: number): void {
  if (reporter.failed(nowMs).log) {
    logEvent({ event: "adaptive_report_failed", rule: reporter.ruleId, message }, "warn");
  }
}
