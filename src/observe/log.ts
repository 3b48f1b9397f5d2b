/**
 * @module
 * Structured logs: one JSON object per line, readable in `wrangler tail`.
 */

export type LogEvent = { event: string } & Record<string, unknown>;

/** Writes one event as a JSON line; errors go to the error stream. */
export function logEvent(entry: LogEvent, level: "info" | "warn" | "error" = "info"): void {
  const line = JSON.stringify({ level, ...entry });
  if (level === "error") console.error(line);
  else if (level === "warn") console.warn(line);
  else console.log(line);
}

/** The first 12 hex digits of a key hash: enough to correlate log lines, not to recover the key. */
export const keyHashPrefix = (hash: string): string => hash.slice(0, 12);
