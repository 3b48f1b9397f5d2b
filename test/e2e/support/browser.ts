/**
 * @module
 * A real browser for the end-to-end suite: Debian's headless Chromium
 * (`apt-get install -y chromium`; .ci/run installs it), driven by
 * playwright-core, which never downloads a browser of its own.
 */
import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";

/** Where Debian puts Chromium; `CHROMIUM_PATH` names another. */
export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/** Launches headless Chromium, or fails saying how to install it. */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) {
    throw new Error(
      `No Chromium at ${CHROMIUM_PATH}: apt-get install -y chromium (or set CHROMIUM_PATH). ` +
        "E2E_SKIP_BROWSER=1 skips the browser tests.",
    );
  }
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  return chromium.launch({ executablePath: CHROMIUM_PATH, args: ["--no-sandbox"] });
}

/** Whether the browser tests are to be skipped (E2E_SKIP_BROWSER=1), for a machine without Chromium. */
export const skipBrowser = process.env.E2E_SKIP_BROWSER === "1";
