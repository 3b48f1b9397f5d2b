/**
 * When a response has ended, as the client sees it (src/http/until-sent.ts):
 * on plain streams, each way a body ends is told once, and told apart: sent
 * in full, cut short by the client, or failed at the origin (what it held
 * may then go at once: the origin knows).
 */
import { describe, expect, it } from "vitest";
import { type Ending, untilSent } from "../src/http/until-sent.ts";

/** A body of `chunks`, then its end, or an error where `failAt` says. */
function originBody(chunks: string[], failAt?: number): ReadableStream<Uint8Array> {
  let i = 0;
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        if (i === failAt) controller.error(new Error("connection reset by the origin"));
        else if (i < chunks.length) controller.enqueue(new TextEncoder().encode(chunks[i]!));
        else controller.close();
        i++;
      },
    },
    { highWaterMark: 0 },
  );
}

function watched(body: ReadableStream<Uint8Array> | null) {
  const told: Ending[] = [];
  const closed: string[] = [];
  const response = untilSent(
    new Response(body, { status: 200 }),
    (how) => told.push(how),
    () => closed.push("origin"),
  );
  return { response, told, closed };
}

describe("the end of a response", () => {
  it("with no body: sent, at once", () => {
    expect(watched(null).told).toEqual(["sent"]);
  });

  it("read to its last byte: sent, once", async () => {
    const { response, told } = watched(originBody(["first\n", "last\n"]));
    expect(told).toEqual([]);
    expect(await response.text()).toBe("first\nlast\n");
    expect(told).toEqual(["sent"]);
  });

  it("cancelled by its client: cut short, once the origin's body is closed", async () => {
    const { response, told, closed } = watched(originBody(["first\n", "more\n", "last\n"]));
    const reader = response.body!.getReader();
    await reader.read();
    await reader.cancel();
    expect(closed).toEqual(["origin"]);
    expect(told).toEqual(["cut short"]);
  });

  it("failed at the origin mid-body: failed, told before the client sees the error", async () => {
    const { response, told, closed } = watched(originBody(["first\n", "more\n"], 1));
    const reader = response.body!.getReader();
    await reader.read();
    const seen: Ending[][] = [];
    await reader.read().catch(() => seen.push([...told]));
    expect(seen).toEqual([["failed"]]);
    expect(closed).toEqual([]);
  });
});
