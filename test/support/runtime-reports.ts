/**
 * @module
 * What workerd itself reports while the tests run, such as "uncaught
 * exception … Network connection lost" for every fetch to an origin that is
 * down. The pool prints each report from this (the main) process, on its
 * standard output or error; here they are kept instead, for the tests that
 * cause them to claim through the test origin (`/__runtime-reports`). What
 * no test claimed is printed at the end, and fails the run.
 */
import type { IncomingMessage, ServerResponse } from "node:http";

/** A report of the runtime's: an exception it logged, not a line a test or the Worker printed. */
const REPORT = /^(uncaught exception;|exception = )/;
/**
 * A warning of the runtime's that tests cause on purpose and that says nothing about the Worker: a request
 * a test sends with a UTF-8 header value (the hostile-input and key tests do). Not printed.
 */
const EXPECTED_WARNING = /^A header value for "[^"]*" contains non-ASCII characters/;

type Report = { text: string; claimed: boolean };

export type RuntimeReports = {
  /**
   * Answers `GET /__runtime-reports?match=<text>&count=<n>`: claims `n` reports containing the text, waiting
   * up to 5 s for them; `count=all` claims every one, once no more come.
   */
  serve: (url: URL, req: IncomingMessage, res: ServerResponse) => Promise<boolean>;
  /** Stops keeping reports; returns those no test claimed. */
  stop: () => string[];
};

export function captureRuntimeReports(): RuntimeReports {
  const reports: Report[] = [];
  const streams = [process.stdout, process.stderr];
  const writes = streams.map((stream) => stream.write);
  for (const [i, stream] of streams.entries()) {
    const write = writes[i]!.bind(stream) as (...args: unknown[]) => boolean;
    stream.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
      const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
      if (REPORT.test(text)) {
        reports.push({ text, claimed: false });
        return true;
      }
      if (EXPECTED_WARNING.test(text)) return true;
      return write(chunk, ...rest);
    }) as typeof stream.write;
  }

  const claim = (match: string, count: number): number => {
    const found = unclaimed(match).slice(0, count);
    if (found.length < count) return found.length;
    for (const report of found) report.claimed = true;
    return count;
  };

  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  const unclaimed = (match: string) => reports.filter((r) => !r.claimed && r.text.includes(match));

  /** `count` reports, once that many have come, or none if they have not within 5 s. */
  const claimSome = async (match: string, count: number): Promise<number> => {
    const deadline = Date.now() + 5_000;
    let claimed = claim(match, count);
    while (claimed < count && Date.now() < deadline) {
      await sleep(20);
      claimed = claim(match, count);
    }
    return claimed;
  };

  /** Every report, once 300 ms passed with no new one (at most 5 s). */
  const claimAll = async (match: string): Promise<number> => {
    const deadline = Date.now() + 5_000;
    let seen = -1;
    while (unclaimed(match).length !== seen && Date.now() < deadline) {
      seen = unclaimed(match).length;
      await sleep(300);
    }
    const found = unclaimed(match);
    for (const report of found) report.claimed = true;
    return found.length;
  };

  return {
    async serve(url, _req, res) {
      if (url.pathname !== "/__runtime-reports") return false;
      const match = url.searchParams.get("match") ?? "";
      const count = url.searchParams.get("count") ?? "1";
      const claimed = count === "all" ? await claimAll(match) : await claimSome(match, Number(count));
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ claimed }));
      return true;
    },
    stop() {
      for (const [i, stream] of streams.entries()) stream.write = writes[i]!;
      return reports.filter((r) => !r.claimed).map((r) => r.text);
    },
  };
}
