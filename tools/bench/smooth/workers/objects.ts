/**
 * @module
 * The `objects` service of the smoothing bench: the shipped `RateLimiter`,
 * with every call counted by its method, read back (and reset) at
 * `GET /calls`.
 */
import type {
  Cancellation,
  CheckOptions,
  CheckResult,
  PlaceAnswer,
  PlaceRequest,
  PlaceWait,
  Renewal,
  RuleCheck,
  TurnAnswer,
} from "../../../../src/object/protocol.ts";
import { RateLimiter as ShippedRateLimiter } from "../../../../src/object/rate-limiter.ts";

/** Calls received since the last read, by method. */
let calls: Record<string, number> = {};
const counted = (method: string) => {
  calls[method] = (calls[method] ?? 0) + 1;
};

export class RateLimiter extends ShippedRateLimiter {
  override check(rules: RuleCheck[], options?: CheckOptions): CheckResult {
    counted(options?.hold ? "check (can hold)" : "check");
    return super.check(rules, options);
  }
  override awaitTurn(bookingId: string): TurnAnswer | Promise<TurnAnswer> {
    counted("awaitTurn");
    return super.awaitTurn(bookingId);
  }
  override cancelBooking(bookingId: string): Cancellation {
    counted("cancelBooking");
    return super.cancelBooking(bookingId);
  }
  override acquire(ruleId: string, request: PlaceRequest): PlaceAnswer {
    counted("acquire");
    return super.acquire(ruleId, request);
  }
  override awaitPlace(ticketId: string): PlaceWait | Promise<PlaceWait> {
    counted("awaitPlace");
    return super.awaitPlace(ticketId);
  }
  override cancelTicket(ticketId: string): Cancellation {
    counted("cancelTicket");
    return super.cancelTicket(ticketId);
  }
  override release(placeIds: string[]): { nowMs: number; released: string[]; unknown: string[] } {
    counted("release");
    return super.release(placeIds);
  }
  override renew(placeIds: string[]): Renewal {
    counted("renew");
    return super.renew(placeIds);
  }
}

export default {
  fetch: (request: Request): Response => {
    if (new URL(request.url).pathname !== "/calls") return new Response("objects of the smoothing bench\n");
    const taken = calls;
    calls = {};
    return Response.json(taken);
  },
};
