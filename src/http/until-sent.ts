/**
 * @module
 * When a response has ended, as the client sees it: its body fully sent,
 * the client gone before that, or the origin failing mid-body; a WebSocket
 * when either side closes it. A request holding a concurrency rule's place
 * holds it until then.
 *
 * The body is passed on through a stream of the Worker's own, which reads
 * the origin's only as the client takes it (no chunk is queued ahead): its
 * last read says the client has taken the last byte; its cancel says the
 * client hung up (the runtime cancels the body), told once the origin's
 * body has been cancelled in turn; an error reading the
 * origin's body says the origin failed. That costs one small step of
 * JavaScript per chunk. A WebSocket is relayed through a pair of the
 * Worker's own, so its close can be seen (frames then cost the Worker a
 * little CPU each).
 */

/** How a response ended: sent in full, cut short by its client (it hung up), failed (the origin, mid-body), or closed (a WebSocket). */
export type Ending = "sent" | "cut short" | "failed" | "closed";

/**
 * `response`, whose end `ended` is told of, once: at once for a response
 * with no body. Keeps the status and headers (a copy, with mutable
 * headers). `closeOrigin` closes the connection the body comes from: called
 * first when the client hangs up, so that the origin sees it go before the
 * end is told (the runtime would otherwise keep it open until the request's
 * work in the background is done).
 */
export function untilSent(response: Response, ended: (how: Ending) => void, closeOrigin?: () => void): Response {
  let told = false;
  const tell = (how: Ending) => {
    if (told) return;
    told = true;
    ended(how);
  };
  if (response.webSocket) return relayed(response, () => tell("closed"));
  const { body } = response;
  if (body === null) {
    tell("sent");
    return response;
  }
  const reader = body.getReader();
  const passed = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let read: ReadableStreamReadResult<Uint8Array>;
        try {
          read = await reader.read();
        } catch (error) {
          // The origin failed mid-body: it knows, so what it held may go at once, before the client sees the cut.
          tell("failed");
          controller.error(error);
          return;
        }
        if (read.done) {
          controller.close();
          tell("sent");
        } else {
          controller.enqueue(read.value);
        }
      },
      // The origin's body is cancelled first: its connection is then gone before the end is told (and
      // a place freed for another request to reach the origin).
      cancel(reason) {
        closeOrigin?.();
        return reader.cancel(reason).finally(() => tell("cut short"));
      },
    },
    { highWaterMark: 0 },
  );
  return new Response(passed, { status: response.status, statusText: response.statusText, headers: response.headers });
}

/** A WebSocket's upgrade, relayed through a pair of the Worker's own so that its close is seen; `closed` when either side closes or fails. */
function relayed(response: Response, closed: () => void): Response {
  const origin = response.webSocket!;
  const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
  origin.accept();
  server.accept();
  const pipe = (from: WebSocket, to: WebSocket) => {
    from.addEventListener("message", (event) => {
      try {
        to.send(event.data);
      } catch {
        closeQuietly(from, 1011, "relay failed");
      }
    });
    from.addEventListener("close", (event) => {
      closeQuietly(to, event.code, event.reason);
      closed();
    });
    from.addEventListener("error", () => {
      closeQuietly(to, 1011, "the other side failed");
      closed();
    });
  };
  pipe(origin, server);
  pipe(server, origin);
  return new Response(null, { status: 101, webSocket: client, headers: response.headers });
}

/** Closes a socket with the other side's code where a close frame may carry it (1005 and 1006 may not), else plainly; never throws. */
function closeQuietly(socket: WebSocket, code: number, reason: string): void {
  try {
    if (code === 1000 || (code >= 3000 && code <= 4999)) socket.close(code, reason);
    else socket.close(1000, reason);
  } catch {
    // already closed
  }
}
