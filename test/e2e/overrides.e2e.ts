/**
 * Per-client overrides end to end: the `limits` CLI (tools/limits.ts) puts an
 * API key in a tier through the admin API of `wrangler dev`, and that key's
 * traffic gets the tier's limit. The e2e config's rule "e2e-per-key" allows 3
 * requests a day per `x-api-key` under /keyed/; its tier "plus" allows 6.
 * Every test uses its own keys and IP, so reruns and other tests never meet.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, inject, it } from "vitest";
import { limiterUrl, send, uniqueIp, uniqueTag } from "./support/client.ts";

const RULE = "e2e-per-key";
const DEFAULT_LIMIT = 3;
const TIER = "plus";
const TIER_LIMIT = 6;

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

type CliResult = { code: number; stdout: string; stderr: string };

/** Runs `node tools/limits.ts …` against the Worker under test, with its admin token. */
function limits(...args: string[]): Promise<CliResult> {
  const env: NodeJS.ProcessEnv = { ...process.env, LIMITS_URL: limiterUrl(), ADMIN_TOKEN: inject("adminToken") };
  delete env.ADMIN_PREFIX;
  return new Promise((resolve) => {
    execFile(process.execPath, ["tools/limits.ts", ...args], { cwd: ROOT, env }, (error, stdout, stderr) => {
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** Runs the CLI and expects it to succeed. */
async function limitsOk(...args: string[]): Promise<string> {
  const result = await limits(...args);
  expect(result, `limits ${args.join(" ")}: ${result.stderr}`).toMatchObject({ code: 0 });
  return result.stdout;
}

/** An API key no other test or run uses, and a client IP of its own (so the IP rule "e2e" never interferes). */
const newClient = (name: string) => {
  const key = uniqueTag(name);
  return { key, arg: `header:x-api-key=${key}`, headers: { "x-api-key": key, "cf-connecting-ip": uniqueIp() } };
};

/** Sends requests with `headers` until one is refused (at most `max`); the statuses, and the refusal. */
async function untilRefused(headers: Record<string, string>, max: number) {
  const statuses: number[] = [];
  for (let i = 0; i < max; i++) {
    const reply = await send(`/keyed/${i}`, { headers });
    statuses.push(reply.status);
    if (reply.status !== 200) return { admitted: statuses.length - 1, refusal: reply, statuses };
  }
  throw new Error(`no refusal in ${max} requests: ${statuses.join(", ")}`);
}

const policyOf = (limit: number) => `"${RULE}";q=${limit};w=86400`;

describe("per-client overrides, set with the limits CLI", () => {
  it("gives a key put in a tier the tier's limit, and leaves another key at the rule's", async () => {
    const tiered = newClient("tiered");
    const plain = newClient("plain");

    const out = await limitsOk("set", RULE, tiered.arg, "--tier", TIER, "--note", "e2e");
    expect(out).toContain(`${RULE} ${tiered.arg}`);
    expect(out).toMatch(/after\s+tier plus, "e2e"/);
    expect(out).toMatch(/state\s+applied/);

    const up = await untilRefused(tiered.headers, TIER_LIMIT + 2);
    expect(up.admitted).toBe(TIER_LIMIT);
    expect(up.refusal.status).toBe(429);
    expect(up.refusal.headers["ratelimit-policy"]).toContain(policyOf(TIER_LIMIT));
    expect(up.refusal.json()).toMatchObject({ "violated-policies": [RULE] });

    const down = await untilRefused(plain.headers, DEFAULT_LIMIT + 2);
    expect(down.admitted).toBe(DEFAULT_LIMIT);
    expect(down.refusal.status).toBe(429);
    expect(down.refusal.headers["ratelimit-policy"]).toContain(policyOf(DEFAULT_LIMIT));
  });

  it("gives a client of a token bucket a burst of its own (--limit with --burst), and refuses --burst beside --tier", async () => {
    // e2e-dash-bucket: 1 a minute in bursts of 2, per x-dash-client; this client: 1 a minute in bursts of 5. The
    // numbers as a shell passes them quoted with spaces (a CSV import reads them so too).
    const client = uniqueTag("burst");
    const out = await limitsOk(
      "set",
      "e2e-dash-bucket",
      `header:x-dash-client=${client}`,
      "--limit",
      " 1",
      "--burst",
      "5 ",
    );
    expect(out).toMatch(/after\s+limit 1, burst 5/);
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const reply = await send(`/dash-bucket/${i}`, {
        headers: { "x-dash-client": client, "cf-connecting-ip": uniqueIp() },
      });
      statuses.push(reply.status);
      if (i === 5) expect(reply.headers["ratelimit-policy"]).toContain('"e2e-dash-bucket";q=5;w=300');
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
    const refused = await limits(
      "set",
      "e2e-dash-bucket",
      `header:x-dash-client=${client}`,
      "--tier",
      TIER,
      "--burst",
      "5",
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('field "burst": goes with "limit"');
  });

  it("lists the override as applied, in JSON and as a table", async () => {
    const client = newClient("listed");
    await limitsOk("set", RULE, client.arg, "--tier", TIER);

    const page = JSON.parse(await limitsOk("list", "--rule", RULE, "--tier", TIER, "--all", "--json")) as {
      overrides: { rule: string; key: unknown; tier?: string; state: string }[];
      next: string | null;
    };
    expect(page.next).toBeNull();
    const entry = page.overrides.find(
      (o) => JSON.stringify(o.key) === JSON.stringify([["header:x-api-key", client.key]]),
    );
    expect(entry).toMatchObject({ rule: RULE, tier: TIER, expires: null, state: "applied" });

    const table = await limitsOk("list", "--rule", RULE, "--all");
    expect(table.split("\n")[0]).toMatch(/^RULE\s+KEY\s+SETTING\s+EXPIRES\s+NOTE\s+STATE$/);
    const row = table.split("\n").find((line) => line.includes(client.arg));
    expect(row).toMatch(new RegExp(`^${RULE}\\s+${client.arg}\\s+tier plus\\s+never\\s+applied$`));
  });

  it("prints a note's control characters and bidirectional overrides escaped, never to the terminal as they are", async () => {
    const client = newClient("noted");
    const note = "paid\u001b[31m late\u202e\u0007";
    const set = await limitsOk("set", RULE, client.arg, "--tier", TIER, "--note", note);
    const got = await limitsOk("get", RULE, client.arg);
    const listed = await limitsOk("list", "--rule", RULE, "--all");
    // Nothing a terminal acts on but the line breaks.
    const raw = (out: string) => [...out].filter((c) => (c < " " && c !== "\n") || c === "\u202e");
    for (const out of [set, got, listed]) expect(raw(out)).toEqual([]);
    for (const out of [got, listed]) expect(out).toContain("\\u{001b}[31m");
    // In JSON, the note as it was stored.
    const json = JSON.parse(await limitsOk("get", RULE, client.arg, "--json")) as { note: string };
    expect(json.note).toBe(note);
  });

  it("restores the rule's limit once the override is deleted", async () => {
    const client = newClient("deleted");
    await limitsOk("set", RULE, client.arg, "--tier", TIER);
    expect(await limitsOk("get", RULE, client.arg)).toContain("tier plus");

    const out = await limitsOk("delete", RULE, client.arg);
    expect(out).toMatch(/before\s+tier plus/);
    expect(out).toMatch(/after\s+none/);
    expect(await limitsOk("get", RULE, client.arg)).toBe(`No override for ${RULE} ${client.arg}.\n`);

    const after = await untilRefused(client.headers, DEFAULT_LIMIT + 2);
    expect(after.admitted).toBe(DEFAULT_LIMIT);
    expect(after.refusal.headers["ratelimit-policy"]).toContain(policyOf(DEFAULT_LIMIT));
  });

  it("prints the API's errors and exits 1 when the API refuses", async () => {
    const client = newClient("refused");
    const badTier = await limits("set", RULE, client.arg, "--tier", "gold");
    expect(badTier.code).toBe(1);
    expect(badTier.stderr).toContain('field "tier": must be a tier of TIERS: "plus"; got "gold"');

    const badRule = await limits("get", "no-such-rule", client.arg);
    expect(badRule.code).toBe(1);
    expect(badRule.stderr).toContain('rule: no rule "no-such-rule"');
  });
});
