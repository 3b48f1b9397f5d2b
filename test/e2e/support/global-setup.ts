/**
 * @module
 * Starts what a user runs: the Node origin, then `wrangler dev` in front of
 * it with the e2e config and fresh storage. Stops both afterwards.
 */
import { randomBytes } from "node:crypto";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { exportJWK, generateKeyPair } from "jose";
import type { TestProject } from "vitest/node";
import { startOrigin } from "./origin.ts";
import { startWrangler } from "./wrangler.ts";

const CONFIG = fileURLToPath(new URL("../wrangler.e2e.toml", import.meta.url));
const ENTRY = fileURLToPath(new URL("../../../src/index.ts", import.meta.url));

export default async function setup(project: TestProject) {
  const dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-e2e-"));
  const logFile = join(dir, "wrangler-dev.log");
  // A copy of the config in the run's directory, so wrangler's `.wrangler/` build output lands
  // there and leaves with it, instead of in the source tree where a killed run would strand it.
  const configPath = join(dir, "wrangler.toml");
  copyFileSync(CONFIG, configPath);
  const origin = await startOrigin();
  // A fresh admin token per run: it turns the admin API on, for overrides.e2e.ts.
  const adminToken = randomBytes(16).toString("hex");
  // A fresh ES256 key pair per run, for jwt.e2e.ts: the Worker gets the public half as
  // JWT_JWKS, the tests the private half to sign tokens with. No key is ever checked in.
  const signing = await signingKey();
  const started = Date.now();
  const worker = await startWrangler({
    configPath,
    entryPath: ENTRY,
    vars: {
      ORIGIN_URL: origin.url,
      ADMIN_TOKEN: adminToken,
      JWT_JWKS: JSON.stringify({ keys: [signing.publicJwk] }),
    },
    persistTo: join(dir, "state"),
    logFile,
  }).catch(async (error: unknown) => {
    await origin.close();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  });
  console.log(`e2e: wrangler dev ready on ${worker.url} in ${Date.now() - started} ms; origin ${origin.url}`);
  console.log(`e2e: wrangler dev output goes to ${logFile}`);

  project.provide("limiterUrl", worker.url);
  project.provide("e2eOriginUrl", origin.url);
  project.provide("wranglerPid", worker.pid);
  project.provide("wranglerLogFile", logFile);
  project.provide("adminToken", adminToken);
  project.provide("jwtPrivateJwk", signing.privateJwk);

  return async () => {
    await worker.stop();
    await origin.close();
    // E2E_KEEP_LOGS=1 keeps wrangler's output and storage for a look after a failure.
    if (process.env.E2E_KEEP_LOGS) console.log(`e2e: kept ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  };
}

/** An ES256 key pair as JSON Web Keys, both naming the same fresh `kid` and the algorithm. */
async function signingKey() {
  const { publicKey, privateKey } = await generateKeyPair("ES256", { extractable: true });
  const named = { kid: `e2e-${randomBytes(4).toString("hex")}`, alg: "ES256", use: "sig" };
  return {
    publicJwk: { ...(await exportJWK(publicKey)), ...named },
    privateJwk: { ...(await exportJWK(privateKey)), ...named },
  };
}
