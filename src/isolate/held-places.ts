/**
 * @module
 * The places this isolate's requests in flight hold at one client key's
 * object, and when each was last renewed: a place nobody renews is taken
 * back `place_timeout` after its last renewal, so each is renewed every
 * third of it, and the key's places due about then go together, with one
 * call. Isolate time; the timers and the calls are `effects.ts`'s.
 */

/** A place a request in flight holds: its rule, its timeout, and when it was last renewed (isolate time). */
export type PlaceHeld = { rule: string; timeoutMs: number; renewedAtMs: number };

export class HeldPlaces {
  /** By place id. */
  private places: Map<string, PlaceHeld> | null = null;

  /** A request in flight holds this place, renewed at `nowMs` (when it was given). */
  hold(placeId: string, rule: string, timeoutMs: number, nowMs: number): void {
    this.places ??= new Map();
    this.places.set(placeId, { rule, timeoutMs, renewedAtMs: nowMs });
  }

  /** Whether a request in flight still holds this place. */
  holds(placeId: string): boolean {
    return this.places?.has(placeId) ?? false;
  }

  /** The request that held this place ended (or the object took it back): what was kept of it. */
  drop(placeId: string): PlaceHeld | undefined {
    const held = this.places?.get(placeId);
    if (held === undefined) return undefined;
    this.places!.delete(placeId);
    if (this.places!.size === 0) this.places = null;
    return held;
  }

  /**
   * The places to renew with one call now that `placeId`'s renewal is due:
   * every place held here whose last renewal is a sixth of its timeout old
   * or more (so the key's requests in flight share one call), or null when
   * `placeId`'s own was renewed less than a third of its timeout ago (another
   * request's call renewed it). They count as renewed now: a request whose
   * renewal comes due while that call is on its way does not send another
   * (one that fails is sent again a third later, two thirds before expiry).
   */
  toRenew(placeId: string, nowMs: number): string[] | null {
    const own = this.places?.get(placeId);
    if (own === undefined || nowMs - own.renewedAtMs < own.timeoutMs / 3) return null;
    const due: string[] = [];
    for (const [id, held] of this.places!) {
      if (nowMs - held.renewedAtMs < held.timeoutMs / 6) continue;
      due.push(id);
      held.renewedAtMs = nowMs;
    }
    return due;
  }

  /** When `placeId` is next due for renewal: a third of its timeout after its last one (`nowMs` when none is held). */
  nextRenewalMs(placeId: string, nowMs: number): number {
    const held = this.places?.get(placeId);
    return held === undefined ? nowMs : held.renewedAtMs + held.timeoutMs / 3;
  }
}
