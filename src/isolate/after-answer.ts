/**
 * @module
 * What happens to an admitted request once it goes on, in one object that
 * the Worker and `rateLimit()` drive the same way: `begin` when it is
 * forwarded (or its handler runs), then `answered` with the response, or
 * `failed` when there is none. It holds the request's places while it is
 * in flight and releases them when its response has ended, its client hangs
 * up, or it fails; settles what a rule counts by the response (`count`,
 * `cost_header`) and sets the rate-limit headers; and tells the request's
 * adaptive rules how the origin answered, timed from the body's last byte.
 * Its work past the answer goes to the sink `begin` is given (the
 * request's `waitUntil`).
 */
import type { CountedRule } from "../core/rules.ts";
import type { Policy, Reported } from "../http/rate-limit-headers.ts";
import { withHeaders, withoutHeaders } from "../http/set-headers.ts";
import { type Ending, untilSent } from "../http/until-sent.ts";
import { contentLengthOf, passedOn } from "../http/upload.ts";
import { HealthWatch, type ReportContext } from "./adaptive.ts";
import { type AfterContext, type AfterResponse, afterResponse } from "./after-response.ts";
import { type EndedBy, type HeldPlace, holdPlaces, type InFlight } from "./effects.ts";
import type { HealthReporter } from "./health-reporter.ts";
import type { Part } from "./vocabulary.ts";
import type { Sink } from "./work.ts";

/** What an admitted request's answer needs from its decision, besides where its work goes. */
export type AnswerContext = Omit<AfterContext, "work"> & Omit<ReportContext, "work">;

/** What an admitted request does once it goes on, as its decision made it. */
export type AfterParts = {
  context: AnswerContext;
  /** The headers its response gets when the response's status changes nothing (`Server-Timing` included). */
  headers: Record<string, string>;
  /** `Server-Timing` for a request held before it went on. */
  timing?: string;
  /** Its counted parts, when a rule of them settles its count by the response, and what its headers say before. */
  settles?: { parts: readonly Part<CountedRule>[]; reading: { policies: Policy[]; reports: Reported[] } };
  /** The places it holds until its response has ended. */
  places?: HeldPlace[];
  /** The adaptive rules it is forwarded under, and the client key each counted it under. */
  watched?: { reporters: HealthReporter[]; keyOf: (ruleId: string) => string | undefined };
};

/**
 * A HEAD's answer goes without its body (the runtime, and Hono, drop it): so
 * made at once, its body cancelled, so that what waits for the body to be
 * sent (a place) ends as the answer goes rather than at its timeout.
 */
function bodilessForHead(response: Response, request: Request | null): Response {
  if (request?.method !== "HEAD" || response.body === null || response.webSocket) return response;
  response.body.cancel().catch(() => undefined);
  return new Response(null, response);
}

/** How a request in flight ended, as its response's end says: a client cut short hung up; a failed body is the origin's. */
const ENDED_BY: Record<Ending, EndedBy> = {
  sent: "sent",
  closed: "closed",
  "cut short": "hung up",
  failed: "origin failed",
};

export class AfterAnswer {
  private readonly parts: AfterParts;
  private request: Request | null = null;
  private origin: AbortController | undefined;
  private inFlight: InFlight | undefined;
  private health: HealthWatch | undefined;
  private settle: AfterResponse | undefined;
  /** Its response is on its way: from then on its end, not the request's signal, says when the client went. */
  private answering = false;
  /** Its client broke its upload off (watched for a rule that counts by the response, when no adaptive rule watches). */
  private brokeUpload = false;

  constructor(parts: AfterParts) {
    this.parts = parts;
  }

  /** Whether the request holds places while in flight: then its connection to the origin is closed as they go. */
  get holdsPlaces(): boolean {
    return this.parts.places !== undefined;
  }

  /**
   * The request goes on: its places are held from now, and its client's
   * hang-up watched. `origin` closes its connection to the origin, aborted
   * before its places go, so that the origin sees it go first. Returns the
   * body to forward instead of the request's own (an adaptive rule times
   * the origin from its last byte), or undefined to forward it as it is.
   */
  begin(request: Request, sink: Sink, origin?: AbortController): ReadableStream<Uint8Array> | null | undefined {
    this.request = request;
    this.origin = origin;
    const context = { ...this.parts.context, work: sink };
    const { places, settles, watched } = this.parts;
    if (settles !== undefined) this.settle = afterResponse(settles.parts, settles.reading, context);
    const signal = request.signal as AbortSignal | undefined;
    if (places !== undefined) {
      this.inFlight = holdPlaces(places, context);
      // Once its response is on its way, the response's end says when the client went, after the origin's body
      // was cancelled: a place freed before would let another request reach the origin while this one is open
      // there. A WebSocket handshake is a request like any other until it is upgraded; then the socket's close ends it.
      whenAborted(signal, () => {
        if (this.answering) return;
        this.origin?.abort();
        this.inFlight?.end("hung up");
      });
    }
    if (watched === undefined) return settles === undefined ? undefined : this.watchUpload(request);
    const health = new HealthWatch(watched.reporters, context, watched.keyOf);
    this.health = health;
    // Its client hanging up before the origin's headers is neither a success nor a failure of the origin.
    whenAborted(signal, () => health.gone());
    return health.body(request);
  }

  /** Whether the client broke its upload off: a failed forward is then the client's doing, not the origin's. */
  get broke(): boolean {
    return this.brokeUpload || (this.health?.broke ?? false);
  }

  /**
   * The request's body passed on, watched for its client breaking it off,
   * under a rule that counts by the response: a broken upload is the
   * client's hang-up, which keeps its count, not an origin's failure, which
   * `count` may give back. Undefined (forwarded as it is) without a body.
   */
  private watchUpload(request: Request): ReadableStream<Uint8Array> | undefined {
    const { body, method } = request;
    if (body === null || method === "GET" || method === "HEAD") return undefined;
    // Only a body of declared length: the runtime ends a chunked body broken off before its last chunk as if it
    // were whole, which passed on would reach the origin as complete (forwarded as it is, the origin sees it fail).
    const length = contentLengthOf(request.headers);
    if (length === null) return undefined;
    return passedOn(body, length, {
      piece: () => undefined,
      ended: () => undefined,
      broke: () => {
        this.brokeUpload = true;
      },
    });
  }

  /**
   * The origin (or the handler) answered: the adaptive rules are told how,
   * what counts by the response is settled, and the response gets its
   * headers; with places, they are held until it has ended.
   */
  answered(response: Response): Response {
    this.tell(response.status);
    const finished = bodilessForHead(this.finish(response), this.request);
    const inFlight = this.inFlight;
    if (inFlight === undefined) return finished;
    this.answering = true;
    const origin = this.origin;
    return untilSent(finished, (how) => inFlight.end(ENDED_BY[how]), origin && (() => origin.abort()));
  }

  /**
   * Refused after all, by something behind the decision (another
   * `rateLimit()`): the handler never ran, so the adaptive rules hear
   * nothing of it, nothing is settled by its status (its counts go back,
   * see `turnedAway`), and its places go back as its answer goes.
   */
  refusedAfter(): void {
    this.health?.gone();
    this.inFlight?.end("sent");
  }

  /** No answer: the origin could not be reached, or the handler threw. Its places go back. */
  failed(): void {
    this.tell(0);
    this.inFlight?.end("origin failed");
  }

  /** Tells the adaptive rules how the origin answered: not at all when the client went first (that is its own doing). */
  private tell(status: number): void {
    const health = this.health;
    if (health === undefined) return;
    if (health.broke || (this.request?.signal as AbortSignal | undefined)?.aborted) health.gone();
    else health.answered(status);
  }

  private finish(response: Response): Response {
    // A client that broke its upload off hung up: its counts stay as they are, whatever `count` says of the status.
    if (this.settle === undefined || this.broke) return withHeaders(response, this.parts.headers);
    const changes = this.settle({ status: response.status, headers: response.headers });
    const stripped = changes.strip.some((name) => response.headers.has(name))
      ? withoutHeaders(response, changes.strip)
      : response;
    const { timing } = this.parts;
    return withHeaders(
      stripped,
      timing === undefined ? changes.headers : { ...changes.headers, "Server-Timing": timing },
    );
  }
}

function whenAborted(signal: AbortSignal | undefined, then: () => void): void {
  if (signal === undefined) return;
  if (signal.aborted) then();
  else signal.addEventListener("abort", then, { once: true });
}
