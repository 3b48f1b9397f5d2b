/**
 * @module
 * Reads the statistics object of variants (j), (k) from a service of its
 * own, so that the bench can check that flushes arrived: `read()` on the
 * object, straight, with no flush forced first (the admin `/stats` route
 * sends the isolate's counts before reading, which would hide a Worker that
 * never flushed by itself).
 */

import { STATS_OBJECT } from "../../../src/isolate/stats.ts";
import type { StatsObject } from "../../../src/object/stats.ts";

type Env = { STATS: DurableObjectNamespace<StatsObject> };

export default {
  async fetch(_request: Request, env: Env): Promise<Response> {
    const stub = env.STATS.get(env.STATS.idFromName(STATS_OBJECT));
    return Response.json(await stub.read({ minutes: 1440, rawKeys: false }));
  },
};
