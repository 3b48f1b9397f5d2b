/**
 * `npm run dev`: the limiter under `wrangler dev`, in front of a local demo
 * origin that starts with it. Ctrl-C stops both. The port is 8787, or
 * `npm run dev -- --port N`, or `PORT=N npm run dev`; other arguments go on
 * to wrangler.
 *
 * wrangler dev reads `.dev.vars` (secrets such as ADMIN_TOKEN) only when it
 * starts; until a restart, an admin request would go to the origin with the
 * token in it. So wrangler is restarted whenever `.dev.vars` changes.
 */
import { spawn } from "node:child_process";
import { watch } from "node:fs";
import { startDemoOrigin } from "./demo-origin.mjs";

/** `--port N` or `--port=N` from the command line (`npm run dev -- --port 8831`), taken out of what goes on to wrangler. */
function portArgument(args) {
  const rest = [];
  let port;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--port" && i + 1 < args.length) port = args[++i];
    else if (arg.startsWith("--port=")) port = arg.slice("--port=".length);
    else rest.push(arg);
  }
  return { port, rest };
}

const { port: portArg, rest: wranglerArgs } = portArgument(process.argv.slice(2));
const port = portArg ?? process.env.PORT ?? "8787";
if (!/^\d{1,5}$/.test(port) || Number(port) > 65535) {
  console.error(`npm run dev: the port must be a number from 0 to 65535; got ${JSON.stringify(port)}`);
  process.exit(2);
}
const { server, port: originPort } = await startDemoOrigin(Number(process.env.DEMO_ORIGIN_PORT ?? 0));
console.log(`demo origin listening on http://127.0.0.1:${originPort}`);
console.log(`limiter starting on http://127.0.0.1:${port} (try: curl -i http://127.0.0.1:${port}/api/hello)`);

const args = ["dev", "--port", port, "--ip", "127.0.0.1", "--var", `ORIGIN_URL:http://127.0.0.1:${originPort}`];
let wrangler = start();
let stopping = false;
let restarting = false;

function start() {
  const child = spawn("wrangler", [...args, ...wranglerArgs], {
    stdio: "inherit",
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
  });
  child.on("exit", (code) => {
    if (restarting) {
      restarting = false;
      wrangler = start();
      return;
    }
    server.close();
    process.exit(stopping ? 0 : (code ?? 0));
  });
  return child;
}

// The directory, not the file: .dev.vars may not exist yet, and editors replace files rather than write them.
let pending;
watch(process.cwd(), (_event, file) => {
  if (file !== ".dev.vars" || stopping) return;
  clearTimeout(pending);
  pending = setTimeout(() => {
    console.log("\n.dev.vars changed: restarting wrangler dev so that it reads it");
    restarting = true;
    wrangler.kill("SIGINT");
  }, 300);
});

const stop = () => {
  stopping = true;
  wrangler.kill("SIGINT");
  server.close();
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
