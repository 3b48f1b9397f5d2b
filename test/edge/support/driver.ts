/**
 * @module
 * The clients of the multi-isolate tests: requests over real sockets to a
 * chosen edge isolate, each with its own client key (`cf-connecting-ip`),
 * any of which can hang up before its answer comes. Every request is
 * recorded, answered or not.
 *
 * One connection per request (`agent: false`), as separate clients on the
 * internet have: hanging up closes exactly that request's connection, and
 * concurrent requests never queue behind one another on a shared one (HTTP/1.1
 * does not multiplex). A TCP handshake on loopback costs next to nothing at
 * these rates.
 */
import { type IncomingHttpHeaders, request } from "node:http";
import { TAG_HEADER } from "./origin.ts";

/** What happened to one request. */
export type RequestRecord = {
  /** Its place in the driver's sequence, from 0. */
  id: number;
  /** The edge isolate it was sent to. */
  isolate: number;
  /** The client key: the `cf-connecting-ip` it carried. */
  key: string;
  /** Its `x-edge-tag`, unique per request: the origin counts what arrived by it. */
  tag: string;
  method: string;
  path: string;
  /** When it was sent, in ms since the driver was made: for reading a run, never for asserting. */
  sentAtMs: number;
  /** When it was answered, failed, aborted or given up on; null while in flight. */
  endedAtMs: number | null;
  /** The status of the answer, or null when none came. */
  status: number | null;
  headers: IncomingHttpHeaders | null;
  /** The answer's body (its first 4 KB), for the message of a failure. */
  body: string;
  /** Why no whole answer came: a socket error, or the driver's own hang-up or give-up. */
  error: string | null;
  /** True when the driver hung up before the answer came (or, with `cutAfterMs`, before its body ended), as asked. */
  aborted: boolean;
  /** True when no answer came within the driver's timeout, and it hung up. */
  gaveUp: boolean;
};

/**
 * How a client hangs up. `reset` (TCP RST) is what workerd takes for a client
 * gone: it cancels the request. After a `close` (FIN) it keeps the request
 * running, since HTTP/1.1 lets a client stop sending and still read the answer.
 */
export type HangUp = "reset" | "close";

export type SendOptions = {
  /** Default `/`. */
  path?: string;
  method?: string;
  headers?: Record<string, string>;
  /** Hang up this many ms after sending, unless the answer came first. */
  abortAfterMs?: number;
  /** Hang up this many ms after the answer began to come, before its body has ended: a client leaving mid-stream. */
  cutAfterMs?: number;
  /** How to hang up, for `abortAfterMs`, `abort()` and giving up; default `reset`. */
  hangUp?: HangUp;
  /** Give up (and hang up) when no answer came this long after sending; default the driver's. */
  timeoutMs?: number;
};

/** A request on its way. */
export type InFlight = {
  /** Filled in as the request goes; the same object `done` resolves to. */
  record: RequestRecord;
  /** Resolves once the request is answered, failed, aborted or given up on; never rejects. */
  done: Promise<RequestRecord>;
  /** Hangs up now, unless the answer has begun to come: then it does nothing. */
  abort: () => void;
};

const BODY_CHARS = 4096;

/** A request's outcome in one value, for assertions whose diff reads at a glance. */
export const outcomeOf = (r: RequestRecord): number | "aborted" | "no answer" | "in flight" | `error: ${string}` =>
  r.aborted
    ? "aborted"
    : r.gaveUp
      ? "no answer"
      : r.error !== null
        ? `error: ${r.error}`
        : r.status !== null && r.endedAtMs !== null
          ? r.status
          : "in flight";

export class Driver {
  readonly records: RequestRecord[] = [];
  private readonly started = performance.now();
  private readonly pending = new Set<Promise<RequestRecord>>();
  private readonly urls: string[];
  private readonly timeoutMs: number;
  private readonly runTag: string;

  /**
   * @param urls the edge isolates' base URLs, by index
   * @param timeoutMs a request unanswered this long is given up on, so that a hung one cannot hang the test
   * @param runTag prefixes every request's tag, so runs never share one
   */
  constructor(urls: string[], timeoutMs = 60_000, runTag = `run-${process.pid}-${Date.now().toString(36)}`) {
    this.urls = urls;
    this.timeoutMs = timeoutMs;
    this.runTag = runTag;
  }

  private now(): number {
    return performance.now() - this.started;
  }

  /** Sends one request for client `key` to edge isolate `isolate`. */
  send(isolate: number, key: string, options: SendOptions = {}): InFlight {
    const base = this.urls[isolate];
    if (base === undefined) throw new Error(`no edge isolate ${isolate}; there are ${this.urls.length}`);
    const { hostname, port } = new URL(base);
    const id = this.records.length;
    const record: RequestRecord = {
      id,
      isolate,
      key,
      tag: `${this.runTag}-${id}`,
      method: options.method ?? "GET",
      path: options.path ?? "/",
      sentAtMs: this.now(),
      endedAtMs: null,
      status: null,
      headers: null,
      body: "",
      error: null,
      aborted: false,
      gaveUp: false,
    };
    this.records.push(record);

    const req = request({
      hostname,
      port,
      method: record.method,
      path: record.path,
      headers: { ...options.headers, "cf-connecting-ip": key, [TAG_HEADER]: record.tag },
      agent: false,
    });
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    let finish: (error?: Error) => void = () => {};
    const hangUp = (why: string) => {
      // Recorded first: the socket's own error ("socket hang up") follows, and is not the reason.
      record.error = why;
      if ((options.hangUp ?? "reset") === "reset") req.socket?.resetAndDestroy();
      req.destroy();
      finish();
    };
    const abort = () => {
      if (record.status !== null || record.endedAtMs !== null) return;
      record.aborted = true;
      hangUp("aborted by the driver");
    };
    let cutTimer: ReturnType<typeof setTimeout> | undefined;
    const done = new Promise<RequestRecord>((resolve) => {
      finish = (error?: Error) => {
        if (record.endedAtMs !== null) return;
        record.endedAtMs = this.now();
        if (error && record.error === null) record.error = error.message;
        clearTimeout(abortTimer);
        clearTimeout(giveUpTimer);
        clearTimeout(cutTimer);
        resolve(record);
      };
      req.on("error", finish);
      req.on("response", (res) => {
        record.status = res.statusCode ?? null;
        record.headers = res.headers;
        if (options.cutAfterMs !== undefined) {
          cutTimer = setTimeout(() => {
            if (record.endedAtMs !== null) return;
            record.aborted = true;
            hangUp("cut off mid-body by the driver");
          }, options.cutAfterMs);
        }
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          if (record.body.length < BODY_CHARS) record.body += chunk.slice(0, BODY_CHARS - record.body.length);
        });
        res.on("error", finish);
        res.on("end", () => finish());
      });
      const abortTimer = options.abortAfterMs === undefined ? undefined : setTimeout(abort, options.abortAfterMs);
      const giveUpTimer = setTimeout(() => {
        record.gaveUp = true;
        hangUp(`no answer within ${timeoutMs} ms`);
      }, timeoutMs);
      req.end();
    });
    this.pending.add(done);
    void done.then(() => this.pending.delete(done));
    return { record, done, abort };
  }

  /** Waits for every request sent so far to end; the records of all of them. */
  async settled(): Promise<RequestRecord[]> {
    while (this.pending.size > 0) await Promise.all(this.pending);
    return this.records;
  }
}

/** One line per request, for a failure message or the test output. */
export const describeRecords = (records: RequestRecord[]): string =>
  records
    .map((r) => {
      const ended = r.endedAtMs === null ? "" : `, ended +${r.endedAtMs.toFixed(0)} ms`;
      const body = r.status !== null && r.status >= 500 ? ` ${JSON.stringify(r.body.slice(0, 300))}` : "";
      return `#${r.id} edge-${r.isolate} key ${r.key}: sent +${r.sentAtMs.toFixed(0)} ms${ended}: ${outcomeOf(r)}${body}`;
    })
    .join("\n");

/** The quota `q` a response's `RateLimit-Policy` shows for its first policy; null without one. */
export const quotaOf = (r: RequestRecord): number | null => {
  const policy = r.headers?.["ratelimit-policy"];
  const match = typeof policy === "string" ? /;q=(\d+);/.exec(policy) : null;
  return match ? Number(match[1]) : null;
};
