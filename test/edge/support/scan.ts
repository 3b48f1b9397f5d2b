/**
 * @module
 * Reads workerd's output for requests the runtime gave up on or that threw:
 * what a client may never see (its connection was gone) but is still a bug.
 */

/**
 * What the runtime prints when a request hung, was cancelled by it, or threw.
 * `hung` as a word, so that it does not match inside an unrelated one.
 */
export const FAILURE_PATTERNS: RegExp[] = [
  /\bhung\b/,
  /Uncaught/,
  /canceled this request/,
  /Worker threw exception/,
  /internal error/,
  /different request context/,
];

/** The lines of `output` that match any of `patterns`, in order. */
export function scanForFailures(output: string, patterns: RegExp[] = FAILURE_PATTERNS): string[] {
  return output.split("\n").filter((line) => patterns.some((pattern) => pattern.test(line)));
}
