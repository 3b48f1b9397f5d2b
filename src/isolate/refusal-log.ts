/**
 * @module
 * How often a refusal is logged: under attack one key is refused over and
 * over, by the object and by this isolate alike. One line per key and rule
 * per interval says so, with `repeats`, the refusals since the previous line.
 */

import { LruMap } from "../core/lru.ts";
import type { Rule } from "../core/rules.ts";
import { ruleUid } from "./rule-ids.ts";

export const DEFAULT_LOG_EVERY_MS = 10_000;

type Logged = { atMs: number; repeats: number };

export class RefusalLog {
  private readonly entries: LruMap<string, Logged>;
  readonly everyMs: number;

  constructor(maxKeys: number, everyMs: number = DEFAULT_LOG_EVERY_MS) {
    this.entries = new LruMap(maxKeys);
    this.everyMs = everyMs;
  }

  /**
   * Notes one refusal of this key under this rule. Returns the repeats to log
   * with it, or null when a line for this key went out less than `everyMs` ago.
   */
  note(rule: Rule, digest: string, nowMs: number): { repeats: number } | null {
    const key = `${ruleUid(rule)}:${digest}`;
    // Not moved on a quiet note: every line sets the entry anew, at least once per `everyMs` under attack.
    const logged = this.entries.peek(key);
    if (logged && nowMs - logged.atMs < this.everyMs) {
      logged.repeats++;
      return null;
    }
    this.entries.set(key, { atMs: nowMs, repeats: 0 });
    return { repeats: logged?.repeats ?? 0 };
  }
}
