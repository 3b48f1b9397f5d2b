import { env as runtimeEnv } from "cloudflare:workers";
import type { Env } from "../../src/worker/env.ts";

/** The Worker's bindings as wrangler.toml and the vitest config declare them, typed. */
export const env = runtimeEnv as unknown as Env;
