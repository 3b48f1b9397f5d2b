/**
 * @module
 * Concurrent-request places: at most `limit` of a key's requests in flight
 * under a rule, and a line of requests waiting for a place, first come
 * first served.
 *
 * A place is held from when a request is forwarded until it is released.
 * Its holder (an isolate) renews it while the request is in flight; a place
 * not renewed within its timeout is taken back, so a place held by an
 * isolate that vanished comes back after at most that long. A request that
 * may wait takes a ticket; each place freed goes to the oldest ticket whose
 * deadline has not passed.
 *
 * Pure: a line and an instant in, a line and what changed out. No I/O, no
 * clock; place ids are given by the caller.
 */

/** A request in flight: until `expiresAtMs` unless renewed (by `timeoutMs` from the renewal). */
export type Place = { id: string; expiresAtMs: number; timeoutMs: number };

/** A request waiting for a place until `deadlineMs`, under the limit and timeout it asked with. */
export type Ticket = { id: string; deadlineMs: number; limit: number; timeoutMs: number };

/** One rule's places and waiting tickets (oldest first). */
export type Line = { places: readonly Place[]; tickets: readonly Ticket[] };

export const EMPTY_LINE: Line = { places: [], tickets: [] };

/** The places not yet taken back at `nowMs`. */
export const liveAt = (places: readonly Place[], nowMs: number): Place[] =>
  places.filter((place) => place.expiresAtMs > nowMs);

/** What a request asks of a line. */
export type Ask = { nowMs: number; limit: number; timeoutMs: number; placeId: string };

/** A place given, with the places left free after it; or a refusal, with the places in use. */
export type Acquisition = { line: Line; place: Place; free: number } | { line: Line; place: null; inUse: number };

/**
 * A place, if fewer than `limit` are held and no ticket waits (those came
 * first). Places past their timeout are taken back first.
 */
export function acquire(line: Line, ask: Ask): Acquisition {
  const places = liveAt(line.places, ask.nowMs);
  if (places.length >= ask.limit || line.tickets.length > 0) {
    return { line: { places, tickets: line.tickets }, place: null, inUse: places.length };
  }
  const place = { id: ask.placeId, expiresAtMs: ask.nowMs + ask.timeoutMs, timeoutMs: ask.timeoutMs };
  return { line: { places: [...places, place], tickets: line.tickets }, place, free: ask.limit - places.length - 1 };
}

/** The line with a ticket at its end. */
export const enqueue = (line: Line, ticket: Ticket): Line => ({
  places: line.places,
  tickets: [...line.tickets, ticket],
});

/** The line without these places, and which of them it held. */
export function release(line: Line, placeIds: readonly string[]): { line: Line; released: string[] } {
  const gone = new Set(placeIds);
  const released = line.places.filter((place) => gone.has(place.id)).map((place) => place.id);
  if (released.length === 0) return { line, released };
  return { line: { places: line.places.filter((place) => !gone.has(place.id)), tickets: line.tickets }, released };
}

/** The line without this ticket. */
export const withdraw = (line: Line, ticketId: string): Line => ({
  places: line.places,
  tickets: line.tickets.filter((ticket) => ticket.id !== ticketId),
});

/**
 * Extends each of these places still held at `nowMs` to `nowMs` plus its
 * timeout. Ids of places not held (released, or taken back) are returned as
 * unknown: their requests are no longer counted.
 */
export function renew(
  line: Line,
  placeIds: readonly string[],
  nowMs: number,
): { line: Line; renewed: Place[]; unknown: string[] } {
  const asked = new Set(placeIds);
  const renewed: Place[] = [];
  const places = liveAt(line.places, nowMs).map((place) => {
    if (!asked.has(place.id)) return place;
    const extended = { ...place, expiresAtMs: nowMs + place.timeoutMs };
    renewed.push(extended);
    return extended;
  });
  const held = new Set(renewed.map((place) => place.id));
  return { line: { places, tickets: line.tickets }, renewed, unknown: placeIds.filter((id) => !held.has(id)) };
}

/** A ticket served: the place it got, with the places left free after it. */
export type Grant = { ticket: Ticket; place: Place; free: number };

/**
 * The line at `nowMs`: places past their timeout taken back, tickets past
 * their deadline dropped (`lapsed`), and free places given to the oldest
 * tickets in order (`granted`; `newId` names each place). The oldest ticket
 * waits while the places held are at its limit: no later one goes first.
 */
export function serve(
  line: Line,
  nowMs: number,
  newId: () => string,
): { line: Line; granted: Grant[]; lapsed: Ticket[] } {
  const places = liveAt(line.places, nowMs);
  const lapsed = line.tickets.filter((ticket) => ticket.deadlineMs <= nowMs);
  const waiting = line.tickets.filter((ticket) => ticket.deadlineMs > nowMs);
  const granted: Grant[] = [];
  while (waiting.length > 0 && places.length < waiting[0]!.limit) {
    const ticket = waiting.shift()!;
    const place = { id: newId(), expiresAtMs: nowMs + ticket.timeoutMs, timeoutMs: ticket.timeoutMs };
    places.push(place);
    granted.push({ ticket, place, free: ticket.limit - places.length });
  }
  return { line: { places, tickets: waiting }, granted, lapsed };
}

/**
 * When the line next changes by itself, or null: while tickets wait, the
 * earliest of their deadlines and of the places' expiries (a place taken
 * back goes to the oldest ticket). Without tickets, expiries change nothing
 * until the next call, which takes them back itself.
 */
export function nextChangeMs(line: Line): number | null {
  if (line.tickets.length === 0) return null;
  let next = Number.POSITIVE_INFINITY;
  for (const ticket of line.tickets) next = Math.min(next, ticket.deadlineMs);
  for (const place of line.places) next = Math.min(next, place.expiresAtMs);
  return next;
}
