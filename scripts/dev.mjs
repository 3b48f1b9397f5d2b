/**
 * `npm run dev`: the limiter under `wrangler dev`, in front of a local demo
 * origin that starts with it. Ctrl-C stops both.
 */
import { spawn } from "node:child_process";
import { startDemoOrigin } from "./demo-origin.mjs";

const port = process.env.PORT ?? "8787";
const { server, port: originPort } = await startDemoOrigin(Number(process.env.DEMO_ORIGIN_PORT ?? 0));
console.log(`demo origin listening on http://127.0.0.1:${originPort}`);
console.log(`limiter starting on http://127.0.0.1:${port} (try: curl -i http://127.0.0.1:${port}/api/hello)`);

const wrangler = spawn(
  "wrangler",
  [
    "dev",
    "--port",
    port,
    "--ip",
    "127.0.0.1",
    "--var",
    `ORIGIN_URL:http://127.0.0.1:${originPort}`,
    ...process.argv.slice(2),
  ],
  { stdio: "inherit", env: { ...process.env, WRANGLER_SEND_METRICS: "false" } },
);

const stop = () => {
  wrangler.kill("SIGINT");
  server.close();
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
wrangler.on("exit", (code) => {
  server.close();
  process.exit(code ?? 0);
});
