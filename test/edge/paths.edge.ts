/**
 * @module
 * Request targets that reach the origin other than as they were sent, in
 * the runtime Cloudflare runs: `workerd serve` hands the Worker the path as
 * the client wrote it (wrangler dev's proxy resolves it first:
 * test/e2e/passthrough.e2e.ts), and the Worker's forwarding resolves `.` and
 * `..` segments, their `%2e` spellings and backslashes, as the URL standard
 * does. The rules count such a request by the path the origin receives, so
 * none of these spellings walks around a rule, nor into an exclude.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Edge, startEdge } from "./support/harness.ts";

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({
    isolates: 1,
    rules: [
      { id: "q", path: "/q/*", limit: 2, period: "1h", key: ["ip"] },
      { id: "api", path: "/api/*", exclude: ["/api/public/*"], limit: 1, period: "1h", key: ["ip"] },
    ],
  });
});
afterAll(async () => {
  await edge?.stop();
});

let clients = 0;
const client = () => `10.41.${Math.floor(++clients / 250)}.${clients % 250}`;

describe("a path with dot segments or a backslash, in workerd", () => {
  it.each([
    ["a .. segment", "/x/../q/a"],
    ["a . segment", "/./q/a"],
    ["an encoded .. segment", "/x/%2e%2E/q/a"],
    ["a .. segment with a backslash", "/x\\..\\q/a"],
    ["a backslash", "/q\\a"],
    ["a .. segment at the end", "/q/a/b/.."],
  ])("%s is counted under the rule of the path the origin receives", async (_, path) => {
    const driver = edge.driver();
    const ip = client();
    const first = await driver.send(0, ip, { path }).done;
    expect(first.status).toBe(200);
    // The origin got the path resolved, under /q/: the rule for /q/* counted it.
    expect(edge.origin.arrivals().find((a) => a.tag === first.tag)?.path).toMatch(/^\/q\//);
    const statuses = [];
    for (let i = 0; i < 2; i++) statuses.push((await driver.send(0, ip, { path: "/q/a" }).done).status);
    expect(statuses).toEqual([200, 429]);
  });

  it.each([["/api/public/../private"], ["/api/public/%2e%2e/private"], ["/api/public\\..\\private"]])(
    "%s is not exempt as /api/public/*: the origin receives /api/private, which the rule counts",
    async (path) => {
      const driver = edge.driver();
      const ip = client();
      const statuses = [];
      for (let i = 0; i < 2; i++) statuses.push((await driver.send(0, ip, { path }).done).status);
      expect(statuses).toEqual([200, 429]);
    },
  );
});
