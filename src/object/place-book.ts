/**
 * @module
 * A key's concurrent-request places, per concurrency rule: the places held
 * and the requests waiting for one (see `core/places.ts`), stored in SQLite
 * so that after a crash and restart every place is still counted until it
 * expires, and the callers awaiting a place. The line of waiting requests
 * does not outlive a restart: each waits through a call the restart cuts.
 *
 * A place given to a waiting request whose caller is not there to take it
 * (it has not called `awaitPlace` yet, or it vanished) is kept for that
 * request's ticket; if nobody collects it, it expires like any place not
 * renewed. Nothing here reads the clock: the object passes its instant in.
 */
import {
  acquire,
  EMPTY_LINE,
  enqueue,
  type Grant,
  type Line,
  liveAt,
  nextChangeMs,
  type Place,
  release,
  renew,
  serve,
  type Ticket,
  withdraw,
} from "../core/places.ts";
import { Callers } from "./callers.ts";
import type { PlaceAcquired, PlaceAnswer, PlaceRefused, PlaceWait, Renewal } from "./protocol.ts";

const PLACES = `CREATE TABLE IF NOT EXISTS places (
  id TEXT PRIMARY KEY,
  rule TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  timeout_ms INTEGER NOT NULL,
  ticket TEXT
)`;
const TICKETS = `CREATE TABLE IF NOT EXISTS tickets (
  id TEXT PRIMARY KEY,
  rule TEXT NOT NULL,
  seq INTEGER NOT NULL,
  deadline INTEGER NOT NULL,
  limit_n INTEGER NOT NULL,
  timeout_ms INTEGER NOT NULL
)`;

/**
 * What a request asks of a rule's places, once overrides have given its
 * limit; `check`, the rule as the caller asked, from which an admin change
 * plans a waiting request again.
 */
export type PlaceAsk = { limit: number; timeoutMs: number; maxDelayMs?: number; maxHeld: number; check?: unknown };

/** How an admin change applies a rule to a request waiting for a place: its number of places (Infinity: unlimited), or a refusal. */
export type ReplannedPlaces = number | "deny";

/** A place given to a waiting request, not collected yet: what `awaitPlace` answers it. */
type Unclaimed = { rule: string; place: Place; free: number };

export class PlaceBook {
  private readonly sql: SqlStorage;
  /** Each concurrency rule's places and tickets, by rule id. */
  private readonly lines = new Map<string, Line>();
  /** The rule of every place and ticket known. */
  private readonly ruleOf = new Map<string, string>();
  /** Places given to tickets and not collected, by ticket. */
  private readonly unclaimed = new Map<string, Unclaimed>();
  /** Callers awaiting a place, by ticket. */
  private readonly waiting = new Callers<PlaceWait>();
  /** Each waiting request's rule as it asked (see {@link PlaceAsk.check}), by ticket. */
  private readonly checks = new Map<string, unknown>();
  /** Tickets refused by an admin change (a deny) before their caller came for the answer. */
  private readonly denied = new Set<string>();
  private schemaReady = false;
  private lastSeq = 0;

  /** A place given to a waiting request, in the terms that apply to its client when it is given (from its stored check). */
  private readonly terms: (check: unknown, granted: PlaceAcquired, nowMs: number) => PlaceAcquired;

  constructor(sql: SqlStorage, terms: (check: unknown, granted: PlaceAcquired, nowMs: number) => PlaceAcquired) {
    this.sql = sql;
    this.terms = terms;
  }

  /** Reads the stored places (the object's constructor calls it when the tables exist); the line of tickets is dropped. */
  load(): void {
    this.schemaReady = true;
    const places = this.sql.exec<Record<string, string | number | null>>("SELECT * FROM places");
    const byRule = new Map<string, { places: Place[]; tickets: Ticket[] }>();
    const lineOf = (rule: string) => {
      const line = byRule.get(rule) ?? { places: [], tickets: [] };
      byRule.set(rule, line);
      return line;
    };
    for (const row of places) {
      const rule = String(row.rule);
      const place = { id: String(row.id), expiresAtMs: Number(row.expires_at), timeoutMs: Number(row.timeout_ms) };
      lineOf(rule).places.push(place);
      this.ruleOf.set(place.id, rule);
      if (row.ticket !== null) this.unclaimed.set(String(row.ticket), { rule, place, free: 0 });
    }
    // The line is not kept: a request waits in it through a call to `awaitPlace`, and a restart of the
    // object cuts every such call (a place given to a ticket nobody came for would sit idle until it
    // expired). A caller that comes back for its ticket is answered `unknown`, and asks again.
    if (this.sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'tickets'").toArray().length > 0) {
      this.sql.exec("DELETE FROM tickets");
    }
    for (const [rule, line] of byRule) this.lines.set(rule, line);
  }

  /** Whether nothing is held or waiting: the object may then delete its storage. */
  get empty(): boolean {
    return this.lines.size === 0 && this.unclaimed.size === 0;
  }

  /**
   * A place under `rule`, if one is free and nobody waits; else a ticket to
   * wait for one, if the request may wait and fewer than `maxHeld` do; else
   * a refusal with the places in use.
   */
  acquire(rule: string, ask: PlaceAsk, nowMs: number, newId: () => string): PlaceAnswer {
    this.serveLine(rule, nowMs, newId);
    const line = this.lines.get(rule) ?? EMPTY_LINE;
    const got = acquire(line, { nowMs, limit: ask.limit, timeoutMs: ask.timeoutMs, placeId: newId() });
    if (got.place !== null) {
      this.commit(rule, line, got.line);
      return { status: "acquired", nowMs, placeId: got.place.id, expiresAtMs: got.place.expiresAtMs, free: got.free };
    }
    if (ask.maxDelayMs === undefined || got.line.tickets.length >= ask.maxHeld) {
      this.commit(rule, line, got.line);
      return { status: "refused", nowMs, free: 0, inUse: got.inUse };
    }
    const ticket = { id: newId(), deadlineMs: nowMs + ask.maxDelayMs, limit: ask.limit, timeoutMs: ask.timeoutMs };
    this.commit(rule, line, enqueue(got.line, ticket));
    if (ask.check !== undefined) this.checks.set(ticket.id, ask.check);
    return {
      status: "queued",
      nowMs,
      ticketId: ticket.id,
      deadlineMs: ticket.deadlineMs,
      ahead: got.line.tickets.length,
    };
  }

  /** A ticket's place: at once if it has one, when one frees, or refused at its deadline; unknown if no such ticket. */
  wait(ticketId: string, nowMs: number, newId: () => string): PlaceWait | Promise<PlaceWait> {
    if (this.denied.delete(ticketId)) return deniedAnswer(nowMs);
    const rule = this.ruleOf.get(ticketId);
    const ticket = rule === undefined ? undefined : this.lines.get(rule)?.tickets.find((t) => t.id === ticketId);
    if (rule !== undefined) this.serveLine(rule, nowMs, newId);
    if (rule !== undefined && ticket !== undefined && !this.inLine(rule, ticketId) && !this.unclaimed.has(ticketId)) {
      // Its deadline passed before its caller came for it.
      const inUse = liveAt(this.lines.get(rule)?.places ?? [], nowMs).length;
      return { status: "refused", nowMs, free: 0, inUse, limit: ticket.limit };
    }
    const given = this.unclaimed.get(ticketId);
    if (given !== undefined) {
      const check = this.checks.get(ticketId);
      this.unclaimed.delete(ticketId);
      this.checks.delete(ticketId);
      this.sql.exec("UPDATE places SET ticket = NULL WHERE id = ?", given.place.id);
      if (liveAt([given.place], nowMs).length === 0) return { status: "unknown", nowMs };
      const answer = acquired(given.place, given.free, nowMs);
      return check === undefined ? answer : this.terms(check, answer, nowMs);
    }
    if (!this.ruleOf.has(ticketId)) return { status: "unknown", nowMs };
    return this.waiting.wait(ticketId);
  }

  /** A waiting request hung up: its ticket is dropped, or the place it was given and never collected is freed. */
  cancelTicket(ticketId: string, nowMs: number, newId: () => string): "cancelled" | "released" | "unknown" {
    const given = this.unclaimed.get(ticketId);
    if (given !== undefined) {
      this.unclaimed.delete(ticketId);
      this.checks.delete(ticketId);
      this.release([given.place.id], nowMs, newId);
      return "released";
    }
    const rule = this.ruleOf.get(ticketId);
    const line = rule === undefined ? undefined : this.lines.get(rule);
    if (rule === undefined || line === undefined || !line.tickets.some((t) => t.id === ticketId)) return "unknown";
    this.commit(rule, line, withdraw(line, ticketId));
    this.checks.delete(ticketId);
    this.waiting.answer(ticketId, { status: "unknown", nowMs });
    return "cancelled";
  }

  /** Frees places (the requests ended); each freed place goes to the oldest waiting request. */
  release(placeIds: readonly string[], nowMs: number, newId: () => string): { released: string[]; unknown: string[] } {
    const released: string[] = [];
    for (const [rule, ids] of this.byRule(placeIds)) {
      const line = this.lines.get(rule) ?? EMPTY_LINE;
      const freed = release(line, ids);
      released.push(...freed.released);
      this.commit(rule, line, freed.line);
      this.serveLine(rule, nowMs, newId);
    }
    return { released, unknown: placeIds.filter((id) => !released.includes(id)) };
  }

  /**
   * Frees every place held under `rule` (an operator's reset of the client);
   * the waiting requests get them, oldest first. A place just given to a
   * waiting request is its, and stays. The requests that held the freed
   * places release or renew ids no longer known, which changes nothing.
   * Returns how many were freed.
   */
  releaseAll(rule: string, nowMs: number, newId: () => string): number {
    const line = this.lines.get(rule);
    if (line === undefined) return 0;
    const given = new Set([...this.unclaimed.values()].map(({ place }) => place.id));
    const held = line.places.filter((place) => !given.has(place.id)).map((place) => place.id);
    return this.release(held, nowMs, newId).released.length;
  }

  /**
   * An admin change to the client's rule: each request waiting in line is
   * planned again from the rule as it asked, at once and in order. Denied,
   * it is refused (a place already given to it and not collected goes back);
   * otherwise it waits for a place under its new number, and is served at
   * once where that leaves room. Places held stay held: their requests are
   * in flight, and finish.
   */
  replan(rule: string, planOf: (check: never) => ReplannedPlaces, nowMs: number, newId: () => string): void {
    const line = this.lines.get(rule);
    if (line !== undefined && line.tickets.length > 0) {
      const refused: string[] = [];
      const tickets = line.tickets.flatMap((ticket): Ticket[] => {
        const check = this.checks.get(ticket.id);
        if (check === undefined) return [ticket];
        const plan = planOf(check as never);
        if (plan === "deny") {
          refused.push(ticket.id);
          return [];
        }
        return plan === ticket.limit ? [ticket] : [{ ...ticket, limit: plan }];
      });
      this.commit(rule, line, { places: line.places, tickets });
      for (const id of refused) {
        this.checks.delete(id);
        if (this.waiting.has(id)) this.waiting.answer(id, deniedAnswer(nowMs));
        else this.denied.add(id);
      }
      this.serveLine(rule, nowMs, newId);
    }
    // A place given to a request that has not collected it: under a deny, it goes back, and the request is refused.
    for (const [ticketId, given] of [...this.unclaimed]) {
      const check = this.checks.get(ticketId);
      if (given.rule !== rule || check === undefined || planOf(check as never) !== "deny") continue;
      this.unclaimed.delete(ticketId);
      this.checks.delete(ticketId);
      this.denied.add(ticketId);
      this.release([given.place.id], nowMs, newId);
    }
  }

  /** Extends each place still held to `nowMs` plus its timeout; the rest are unknown (released, or taken back). */
  renew(placeIds: readonly string[], nowMs: number, newId: () => string): Renewal {
    const renewed: Renewal["renewed"] = [];
    for (const [rule, ids] of this.byRule(placeIds)) {
      this.serveLine(rule, nowMs, newId);
      const line = this.lines.get(rule) ?? EMPTY_LINE;
      const extended = renew(line, ids, nowMs);
      for (const place of extended.renewed) renewed.push({ placeId: place.id, expiresAtMs: place.expiresAtMs });
      this.commit(rule, line, extended.line);
    }
    const held = new Set(renewed.map((r) => r.placeId));
    return { nowMs, renewed, unknown: placeIds.filter((id) => !held.has(id)) };
  }

  /** A rule's places held now (expired ones left out) and the requests waiting for one, without changing anything. */
  peek(rule: string, nowMs: number): { inUse: number; waiting: number } {
    const line = this.lines.get(rule);
    if (line === undefined) return { inUse: 0, waiting: 0 };
    return {
      inUse: liveAt(line.places, nowMs).length,
      waiting: line.tickets.filter((t) => t.deadlineMs > nowMs).length,
    };
  }

  /** Takes back expired places, drops lapsed tickets and serves the waiting ones, in every line (the timer, the alarm). */
  serveAll(nowMs: number, newId: () => string): void {
    for (const rule of [...this.lines.keys()]) this.serveLine(rule, nowMs, newId);
    for (const [ticketId, given] of [...this.unclaimed]) {
      if (given.place.expiresAtMs > nowMs) continue;
      this.unclaimed.delete(ticketId);
      this.checks.delete(ticketId);
      this.ruleOf.delete(ticketId);
    }
  }

  /** Whether any request waits in line for a place. */
  get anyWaiting(): boolean {
    for (const line of this.lines.values()) if (line.tickets.length > 0) return true;
    return false;
  }

  /** When a line next changes by itself while requests wait in it, or null: the object's timer wakes then. */
  nextWakeMs(): number | null {
    let next: number | null = null;
    for (const line of this.lines.values()) {
      const at = nextChangeMs(line);
      if (at !== null) next = Math.min(next ?? at, at);
    }
    return next;
  }

  /** When every place will have expired and every ticket lapsed, or null with none: the cleanup alarm waits for it. */
  lastExpiry(): number | null {
    let latest: number | null = null;
    for (const line of this.lines.values()) {
      for (const place of line.places) latest = Math.max(latest ?? 0, place.expiresAtMs);
      for (const ticket of line.tickets) latest = Math.max(latest ?? 0, ticket.deadlineMs);
    }
    return latest;
  }

  /** Forgets everything (the object's storage is being deleted); callers still waiting are answered unknown. */
  clear(nowMs: number): void {
    this.waiting.answerAll({ status: "unknown", nowMs });
    this.lines.clear();
    this.ruleOf.clear();
    this.unclaimed.clear();
    this.checks.clear();
    this.denied.clear();
    this.schemaReady = false;
  }

  /** A line brought to `nowMs`: expired places taken back, lapsed tickets refused, free places given in order. */
  private serveLine(rule: string, nowMs: number, newId: () => string): void {
    const line = this.lines.get(rule);
    if (line === undefined) return;
    const served = serve(line, nowMs, newId);
    if (served.line.places.length === line.places.length && served.line.tickets.length === line.tickets.length) return;
    this.commit(rule, line, served.line);
    for (const ticket of served.lapsed) {
      this.checks.delete(ticket.id);
      const inUse = liveAt(served.line.places, nowMs).length;
      // The places it waited for, which an override, a tier or a factor may have made other than the rule's.
      this.waiting.answer(ticket.id, {
        status: "refused",
        nowMs,
        free: 0,
        inUse,
        limit: ticket.limit,
      } satisfies PlaceRefused);
    }
    for (const grant of served.granted) this.give(rule, grant, nowMs);
  }

  private inLine(rule: string, ticketId: string): boolean {
    return this.lines.get(rule)?.tickets.some((ticket) => ticket.id === ticketId) ?? false;
  }

  /** A place given to a ticket: to its caller if one awaits it, else kept for it. */
  private give(rule: string, { ticket, place, free }: Grant, nowMs: number): void {
    if (this.waiting.has(ticket.id)) {
      const check = this.checks.get(ticket.id);
      this.checks.delete(ticket.id);
      const answer = acquired(place, free, nowMs);
      this.waiting.answer(ticket.id, check === undefined ? answer : this.terms(check, answer, nowMs));
      return;
    }
    this.unclaimed.set(ticket.id, { rule, place, free });
    this.ruleOf.set(ticket.id, rule);
    this.sql.exec("UPDATE places SET ticket = ? WHERE id = ?", ticket.id, place.id);
  }

  /** Place ids grouped by their rule; ids of no known place are left out. */
  private byRule(placeIds: readonly string[]): Map<string, string[]> {
    const groups = new Map<string, string[]>();
    for (const id of placeIds) {
      const rule = this.ruleOf.get(id);
      if (rule === undefined) continue;
      const ids = groups.get(rule);
      if (ids) ids.push(id);
      else groups.set(rule, [id]);
    }
    return groups;
  }

  /** Stores what changed between a line's two versions, and keeps the later. */
  private commit(rule: string, before: Line, after: Line): void {
    if (before === after) return;
    this.ensureSchema();
    const kept = new Map(after.places.map((place) => [place.id, place]));
    for (const place of before.places) {
      if (kept.has(place.id)) continue;
      this.sql.exec("DELETE FROM places WHERE id = ?", place.id);
      this.ruleOf.delete(place.id);
    }
    const had = new Map(before.places.map((place) => [place.id, place]));
    for (const place of after.places) {
      const old = had.get(place.id);
      if (old === undefined) {
        this.sql.exec(
          "INSERT INTO places (id, rule, expires_at, timeout_ms, ticket) VALUES (?, ?, ?, ?, NULL)",
          place.id,
          rule,
          place.expiresAtMs,
          place.timeoutMs,
        );
        this.ruleOf.set(place.id, rule);
      } else if (old.expiresAtMs !== place.expiresAtMs) {
        this.sql.exec("UPDATE places SET expires_at = ? WHERE id = ?", place.expiresAtMs, place.id);
      }
    }
    const waiting = new Set(after.tickets.map((ticket) => ticket.id));
    for (const ticket of before.tickets) {
      if (waiting.has(ticket.id)) continue;
      this.sql.exec("DELETE FROM tickets WHERE id = ?", ticket.id);
      if (!this.unclaimed.has(ticket.id)) this.ruleOf.delete(ticket.id);
    }
    const queued = new Set(before.tickets.map((ticket) => ticket.id));
    for (const ticket of after.tickets) {
      if (queued.has(ticket.id)) continue;
      this.sql.exec(
        "INSERT INTO tickets (id, rule, seq, deadline, limit_n, timeout_ms) VALUES (?, ?, ?, ?, ?, ?)",
        ticket.id,
        rule,
        ++this.lastSeq,
        ticket.deadlineMs,
        ticket.limit,
        ticket.timeoutMs,
      );
      this.ruleOf.set(ticket.id, rule);
    }
    if (after.places.length === 0 && after.tickets.length === 0) this.lines.delete(rule);
    else this.lines.set(rule, after);
  }

  private ensureSchema(): void {
    if (this.schemaReady) return;
    this.sql.exec(PLACES);
    this.sql.exec(TICKETS);
    this.schemaReady = true;
  }
}

/** The answer to a request an admin change refused while it waited: denied. */
const deniedAnswer = (nowMs: number): PlaceRefused => ({
  status: "refused",
  nowMs,
  free: 0,
  inUse: 0,
  override: "deny",
});

const acquired = (place: Place, free: number, nowMs: number): PlaceAcquired => ({
  status: "acquired",
  nowMs,
  placeId: place.id,
  expiresAtMs: place.expiresAtMs,
  free,
});
