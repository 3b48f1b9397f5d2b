/**
 * A calendar quota end to end, through `wrangler dev`: the e2e config's rule
 * "e2e-quota" allows 5 requests a month per `x-api-key` under /quota/, in
 * New York's months. A client runs out, reads its usage with the `limits`
 * CLI, is topped up by it, and goes on. Every test uses its own keys.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, inject, it } from "vitest";
import { formatInstant, parseCalendar, periodAt } from "../../src/core/calendar.ts";
import { limiterUrl, send, uniqueIp, uniqueTag } from "./support/client.ts";

const RULE = "e2e-quota";
const QUOTA = 5;
const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Runs `node tools/limits.ts …` against the Worker under test, with its admin token. */
function limits(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, LIMITS_URL: limiterUrl(), ADMIN_TOKEN: inject("adminToken") };
  delete env.ADMIN_PREFIX;
  return new Promise((resolve) => {
    execFile(process.execPath, ["tools/limits.ts", ...args], { cwd: ROOT, env }, (error, stdout, stderr) => {
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** The instant this month ends in New York, as the problem's detail writes it (Node's time zone data). */
function resetsAt(): string {
  const calendar = parseCalendar({ period: "month", timeZone: "America/New_York" });
  if (!calendar.ok) throw new Error(calendar.errors.join("\n"));
  return formatInstant(periodAt(Date.now(), calendar.value).endMs, "America/New_York");
}

describe("a calendar quota over real HTTP, and the limits CLI's usage and credit", () => {
  it("refuses the 6th request of the month with the plan's words, and a top-up from the CLI lets the client go on", async () => {
    const key = uniqueTag("quota-e2e");
    const headers = { "x-api-key": key, "cf-connecting-ip": uniqueIp() };
    for (let i = 0; i < QUOTA; i++) expect((await send(`/quota/${i}`, { headers })).status).toBe(200);
    const refused = await send("/quota/over", { headers });
    expect(refused.status).toBe(429);
    const { detail } = refused.json<{ detail: string }>();
    expect(detail).toContain(`"${RULE}" (5 per month, resets ${resetsAt()})`);
    expect(Number(refused.headers["retry-after"])).toBe(
      Number(/"e2e-quota";r=0;t=(\d+)/.exec(String(refused.headers.ratelimit))?.[1]),
    );

    const usage = await limits("usage", RULE, `header:x-api-key=${key}`);
    expect(usage, usage.stderr).toMatchObject({ code: 0 });
    expect(usage.stdout).toContain(`${RULE} header:x-api-key=${key}`);
    expect(usage.stdout).toContain(`quota     5 per month, resets ${resetsAt()}`);
    expect(usage.stdout).toMatch(/now\s+used 5, credit 0, left 0/);

    const credit = await limits("credit", RULE, `header:x-api-key=${key}`, "--add", "2", "--note", "ticket 42");
    expect(credit, credit.stderr).toMatchObject({ code: 0 });
    expect(credit.stdout).toMatch(/change\s+add 2, "ticket 42"/);
    expect(credit.stdout).toMatch(/before\s+used 5, credit 0, left 0/);
    expect(credit.stdout).toMatch(/after\s+used 5, credit \+2, left 2/);
    expect((await send("/quota/a", { headers })).status).toBe(200);
    expect((await send("/quota/b", { headers })).status).toBe(200);
    expect((await send("/quota/c", { headers })).status).toBe(429);

    const json = await limits("credit", RULE, `header:x-api-key=${key}`, "--set", "1", "--json");
    expect(JSON.parse(json.stdout)).toMatchObject({ rule: RULE, change: { set: 1 }, used: 7, credit: 3, remaining: 1 });
  });

  it("refuses a credit without exactly one change before asking the Worker, and names a bad amount from the API", async () => {
    const key = `header:x-api-key=${uniqueTag("quota-e2e-bad")}`;
    const none = await limits("credit", RULE, key);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("credit: give exactly one of --add N, --take N or --set N");
    const bad = await limits("credit", RULE, key, "--take", "1.5");
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("take: must be an integer from 1 to 1000000000");
    const window = await limits("usage", "e2e", "ip=203.0.113.1");
    expect(window.code).toBe(1);
    expect(window.stderr).toContain("keeps no periods");
  });
});
