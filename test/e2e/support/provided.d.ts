import type { JWK } from "jose";
import "vitest";

/** Values the end-to-end global setup provides to the tests. */
declare module "vitest" {
  interface ProvidedContext {
    /** Where `wrangler dev` serves the limiter, such as `http://127.0.0.1:41234`. */
    limiterUrl: string;
    /** The Node origin behind it, for asking what it saw. */
    e2eOriginUrl: string;
    /** The `wrangler dev` process; the Worker runs in `workerd` processes below it. */
    wranglerPid: number;
    /** The file that receives everything `wrangler dev` prints. */
    wranglerLogFile: string;
    /** The Worker's ADMIN_TOKEN, which turns its admin API on. */
    adminToken: string;
    /**
     * The private half (ES256, with its `kid` and `alg`) of the key pair whose
     * public half the Worker has in JWT_JWKS: tokens signed with it verify.
     */
    jwtPrivateJwk: JWK;
  }
}
