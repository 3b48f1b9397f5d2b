/**
 * @module
 * A request's body passed on to the origin as it arrives from the client,
 * telling as it goes when each piece came, when the last did, and whether
 * the client broke it off. An adaptive rule times the origin from the
 * request's last byte, not from its first: a client slow to upload is not
 * a slow origin. A body of known length keeps its `Content-Length` (a
 * `FixedLengthStream`); one sent in chunks is passed on in chunks.
 */

/** What a body's passage tells. */
export type UploadEvents = {
  /** A piece of the body arrived and went on. */
  piece(): void;
  /** The body ended: every byte went on. */
  ended(): void;
  /** The client broke the body off (it hung up, or sent less than it said). */
  broke(): void;
};

/**
 * `body`, passed on as it arrives (nothing read ahead of what the origin
 * takes), with `events` told of each piece, its end, or its breaking off.
 * `length`: the request's `Content-Length`, if it had one.
 */
export function passedOn(
  body: ReadableStream<Uint8Array>,
  length: number | null,
  events: UploadEvents,
): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  const passing = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let read: ReadableStreamReadResult<Uint8Array>;
        try {
          read = await reader.read();
        } catch (error) {
          events.broke();
          controller.error(error);
          return;
        }
        if (read.done) {
          events.ended();
          controller.close();
          return;
        }
        events.piece();
        controller.enqueue(read.value);
      },
      cancel(reason) {
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
  if (length === null) return passing;
  // Sent with its length, as the client sent it: some origins refuse a chunked upload.
  const fixed = new FixedLengthStream(length);
  passing.pipeTo(fixed.writable).catch(() => {
    // The client broke the body off: the origin's request fails, and `broke` was told.
  });
  return fixed.readable;
}

/** A request's `Content-Length`, when it states a whole number of bytes. */
export function contentLengthOf(headers: Headers): number | null {
  const value = headers.get("content-length");
  if (value === null || !/^\d{1,15}$/.test(value.trim())) return null;
  return Number(value.trim());
}
