/**
 * @module
 * Benchmark variant (a): the same Hono proxy with no limiter, the physical
 * limit for the allowed path.
 */
import { Hono } from "hono";
import { forward } from "../../../src/http/proxy.ts";

type Env = { ORIGIN_URL: string };
const app = new Hono<{ Bindings: Env }>();
let origin: URL | undefined;
app.all("*", (c) => {
  origin ??= new URL(c.env.ORIGIN_URL);
  return forward(c.req.raw, { origin });
});
export default app;
