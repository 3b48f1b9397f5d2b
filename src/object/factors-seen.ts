/**
 * @module
 * What a key's object remembers of its adaptive rules' factors: per rule and
 * priority, the factor the last check carried here, so that a move of it is
 * met as an override's change is (docs/adaptive.md): a raise moves the held
 * requests up and serves the line at once, in the order they came, before
 * the request that brought it; a cut leaves the turns they were given. It
 * decides which waiting checks take the new factor, and never calls, waits
 * or reads a clock: the object plans them again (booking-book, place-book).
 * In memory only: after a restart, the first check counts as a move.
 */
import type { RuleCheck } from "./protocol.ts";

/** A waiting request's stored check as a move makes it: with the new factor, or as it was. */
export type CheckNow = (check: RuleCheck) => RuleCheck;

const samePriority = (a: RuleCheck, b: RuleCheck): boolean => (a.priority ?? "") === (b.priority ?? "");

export class FactorsSeen {
  /** Per adaptive rule and priority, the factor its checks last carried here. */
  private readonly seen = new Map<string, number>();

  /**
   * Notes the factor a check carries: the factor before when it moved
   * (undefined when none was seen yet, as after a restart); null when it did
   * not, or the rule is not adaptive.
   */
  moved(check: RuleCheck): { before: number | undefined } | null {
    if (check.factor === undefined) return null;
    const key = `${check.id}|${check.priority ?? ""}`;
    const before = this.seen.get(key);
    if (before === check.factor) return null;
    this.seen.set(key, check.factor);
    return { before };
  }

  /**
   * The rules among a request's checks whose factor rose (or was first seen)
   * here, with what their held requests' checks become under it: only those
   * of the same priority, and only up (a held request never takes a lower
   * factor than it was booked under); undefined when none rose. Each check's
   * factor is noted, so `anyHeld` false only notes them.
   */
  raised(checks: RuleCheck[], anyHeld: boolean): { ruleIds: Set<string>; checkNow: CheckNow } | undefined {
    let raised: Map<string, RuleCheck> | undefined;
    for (const check of checks) {
      const moved = this.moved(check);
      if (moved === null || !anyHeld) continue;
      if (moved.before !== undefined && check.factor! < moved.before) continue;
      raised ??= new Map();
      raised.set(check.id, check);
    }
    if (raised === undefined) return undefined;
    const under = raised;
    return {
      ruleIds: new Set(under.keys()),
      checkNow: (held) => {
        const now = under.get(held.id)!;
        return samePriority(held, now) && (held.factor ?? 1) < now.factor! ? { ...held, factor: now.factor } : held;
      },
    };
  }

  /**
   * For a request for a place: when its factor moved, what the requests in
   * line under its rule become under it (those of its priority take it, up
   * or down: the line waits for places under the new number); null when it
   * did not move.
   */
  lineUnder(check: RuleCheck): CheckNow | null {
    if (this.moved(check) === null) return null;
    return (waiting) => (samePriority(waiting, check) ? { ...waiting, factor: check.factor } : waiting);
  }
}
