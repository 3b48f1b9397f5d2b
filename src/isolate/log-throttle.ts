/**
 * @module
 * How often one client key's log lines go out: under attack, at most one
 * line of a kind per key and rule per interval, the lines held back since
 * counted and logged with the next (`repeats`).
 */

/** The lines throttled: a refusal, and an ignored `cost_header` value. */
export type LogLine = "refusal" | "cost";

/** When a line last went out, and the lines held back since. */
type Logged = { atMs: number; repeats: number };

/** The lines of one key, per kind of line and rule (`K`: a rule, or anything that names one). */
export class LogThrottle<K> {
  private refusal: Map<K, Logged> | null = null;
  private cost: Map<K, Logged> | null = null;

  /**
   * Notes one `line` under `rule` at `nowMs`. Returns the repeats to log
   * with it, or null when such a line went out less than `everyMs` ago.
   */
  note(line: LogLine, rule: K, nowMs: number, everyMs: number): { repeats: number } | null {
    if (line === "refusal") this.refusal ??= new Map();
    else this.cost ??= new Map();
    const lines = (line === "refusal" ? this.refusal : this.cost)!;
    const logged = lines.get(rule);
    if (logged && nowMs - logged.atMs < everyMs) {
      logged.repeats++;
      return null;
    }
    lines.set(rule, { atMs: nowMs, repeats: 0 });
    return { repeats: logged?.repeats ?? 0 };
  }
}
