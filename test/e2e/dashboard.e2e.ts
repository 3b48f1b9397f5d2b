/**
 * The dashboard in a real browser (headless Chromium), against `wrangler dev`
 * with traffic running: an offender from a fixed IP is refused under the
 * e2e config's rule "e2e" (50 a day per IP), while other clients are
 * admitted and a shadow rule logs what it would refuse. The operator opens
 * the page, sees only the token form, signs in, sees the rules, a chart per
 * rule and the offender at the top of the refused clients, presses its Reset,
 * and the offender is admitted again. The overrides' Delete removes exactly
 * the override its row lists, for every shape a key can have. Read as a
 * person reads it: it opens on the period that shows the data, each tile
 * says what it counts, latencies are estimates within their bucket, each
 * client's state reads in words and a colour that agree, and clients are
 * shown by hash with how to show their keys (or, on a second Worker with
 * STATS_RAW_KEYS on, by their keys). And axe-core finds no serious or
 * critical accessibility violation with every state the page can show on
 * it, each made by the test itself.
 *
 * UPDATE_SCREENSHOT=1 writes the screenshot to docs/dashboard.png (the
 * README's); otherwise it goes to the OS temp directory.
 */
import { execFile } from "node:child_process";
import { randomInt } from "node:crypto";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { AxeResults } from "axe-core";
import { exportJWK, generateKeyPair } from "jose";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import WebSocket from "ws";
import { launchChromium, skipBrowser } from "./support/browser.ts";
import { limiterUrl, originUrl, send, uniqueIp, uniqueTag } from "./support/client.ts";
import { type RunningWorker, startWrangler } from "./support/wrangler.ts";

const PREFIX = "/__ratelimit";
const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const SCREENSHOT =
  process.env.UPDATE_SCREENSHOT === "1" ? join(ROOT, "docs/dashboard.png") : join(tmpdir(), "dashboard.e2e.png");

const bearer = () => ({ authorization: `Bearer ${inject("adminToken")}` });
const from = (ip: string, headers: Record<string, string> = {}) => ({
  headers: { "cf-connecting-ip": ip, ...headers },
});
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Admin API JSON, with the token; `base` names another Worker than the suite's. */
async function admin<T>(
  pathAndQuery: string,
  method = "GET",
  body?: unknown,
  base = limiterUrl(),
): Promise<{ status: number; body: T }> {
  const reply = await send(
    `${PREFIX}${pathAndQuery}`,
    {
      method,
      headers: { ...bearer(), ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    },
    base,
  );
  return { status: reply.status, body: reply.json<T>() };
}

/** What the tests read of `/stats`. */
type Quantile = { estimateMs: number | null; lowMs: number; highMs: number | null };
type Stats = {
  fromMinute: number;
  toMinute: number;
  rules: { id: string; series: { minute: number }[]; totals: Record<string, number> }[];
  latency: { counts: number[]; p50Ms: number | null; p99Ms: number | null; p50: Quantile | null; p99: Quantile | null };
  rawKeys: boolean;
};

/** The statistics of the last 24 hours, all the statistics object keeps. */
const dayOfStats = async (base = limiterUrl()) =>
  (await admin<Stats>("/stats?minutes=1440", "GET", undefined, base)).body;

/** The first minute with a decision under any rule in `stats`, or null. */
const firstMinuteWithData = (stats: Stats): number | null => {
  const firsts = stats.rules.flatMap((rule) => (rule.series.length > 0 ? [rule.series[0]!.minute] : []));
  return firsts.length === 0 ? null : Math.min(...firsts);
};

/** A latency quantile as the dashboard writes it: "≈ 35 ms", "≈ 4.2 ms", or "> 5 s" in the open bucket. */
const quantileText = (q: Quantile | null) =>
  q === null
    ? "–"
    : q.estimateMs === null
      ? `> ${q.lowMs / 1000} s`
      : `≈ ${q.estimateMs < 10 ? q.estimateMs.toFixed(1) : Math.round(q.estimateMs).toLocaleString("en-US")} ms`;

/** What a client's status says, and its colour (its class), must agree: each class and the words it may show. */
const STATUS_WORDS: Record<string, RegExp> = {
  admitted: /^admitted now( · [1-9][\d,]* left)?( · override| · tier \S+)?$|^[\d,]+ of [\d,]+ in flight/,
  limit: /^at its limit now( · override| · tier \S+)?$/,
  refused:
    /^refused now · retry in |^refused now · whatever the wait|^denied · override$|^blocked until \d\d:\d\d:\d\d|^[\d,]+ of [\d,]+ in flight/,
  shadow: /^would refuse now · for |^[\d,]+ of [\d,]+ in flight/,
  unknown: /^unknown$/,
};

/** axe-core's browser build, injected into the page for the accessibility check. */
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** An override as the listing shows it. */
type Listed = { rule: string; key: [string, string | null][]; keyHash: string; updated: string };

/** Every override the admin API lists, page after page. */
async function allOverrides(): Promise<Listed[]> {
  const all: Listed[] = [];
  let cursor: string | null = null;
  do {
    const query: string = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`;
    const page = await admin<{ overrides: Listed[]; next: string | null }>(`/overrides?limit=1000${query}`);
    expect(page.status).toBe(200);
    all.push(...page.body.overrides);
    cursor = page.body.next;
  } while (cursor !== null);
  return all;
}

/** An override's identity and its last change: what "untouched" compares. */
const identity = (entry: Listed) => `${entry.rule} ${JSON.stringify(entry.key)} ${entry.updated}`;

/** `rule=<id>&key=<k>…` for one client. */
const clientQuery = (rule: string, keys: string[]) =>
  new URLSearchParams([["rule", rule], ...keys.map((key): [string, string] => ["key", key])]).toString();

/**
 * Requests in the background, one after another, until stopped; bounded in
 * count and time all the same, so a failed test never leaves it running.
 */
type Planned = { path: string; ip: string; method?: string; headers?: Record<string, string> };

function traffic(name: string, next: (i: number) => Planned) {
  const statuses = new Map<number, number>();
  let stopped = false;
  const deadline = Date.now() + 150_000;
  const done = (async () => {
    for (let i = 0; !stopped && i < 3_000 && Date.now() < deadline; i++) {
      const { path, ip, method, headers } = next(i);
      try {
        const reply = await send(path, { method, headers: { "cf-connecting-ip": ip, ...headers } });
        statuses.set(reply.status, (statuses.get(reply.status) ?? 0) + 1);
      } catch {
        statuses.set(0, (statuses.get(0) ?? 0) + 1);
      }
      await sleep(25);
    }
  })();
  return {
    name,
    statuses,
    count: (status: number) => statuses.get(status) ?? 0,
    stop: async () => {
      stopped = true;
      await done;
    },
  };
}

describe("the dashboard's files", () => {
  it("embeds the current client.js, client.css and uPlot (assets.ts is what bundle.mjs writes)", async () => {
    const result = await new Promise<{ code: number; out: string }>((resolve) => {
      execFile(
        process.execPath,
        ["src/worker/admin/dashboard/bundle.mjs", "--check"],
        { cwd: ROOT },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, out: stdout + stderr }),
      );
    });
    expect(result, result.out).toMatchObject({ code: 0 });
  });

  it("serves the page and its files without the token, with the security headers, and nothing else", async () => {
    for (const path of ["", "/", "/dashboard.js", "/dashboard.css", "/uplot.js", "/uplot.css", "/favicon.svg"]) {
      const reply = await send(`${PREFIX}${path}`);
      expect([path, reply.status]).toEqual([path, 200]);
      expect(reply.headers["content-security-policy"]).toMatch(/^default-src 'self'; script-src 'self'; /);
      expect(reply.headers).toMatchObject({
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "x-frame-options": "DENY",
      });
    }
    for (const path of ["/rules", "/stats?minutes=60", "/metrics", "/overrides", "/status?rule=e2e&key=1.2.3.4"]) {
      const reply = await send(`${PREFIX}${path}`);
      expect([path, reply.status]).toEqual([path, 401]);
    }
  });
});

describe.skipIf(skipBrowser)("the dashboard in a browser", () => {
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];
  const requested: string[] = [];

  beforeAll(async () => {
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1280, height: 900 }, locale: "en-US", timezoneId: "UTC" });
    // A CSP violation, a failed load or an exception shows up here.
    page.on("console", (message) => {
      if (message.type() === "error") problems.push(`console: ${message.text()}`);
    });
    page.on("pageerror", (error) => problems.push(`page: ${error.message}`));
    page.on("request", (request) => requested.push(new URL(request.url()).pathname));
  });

  afterAll(async () => {
    await browser?.close();
  });

  /** Opens the dashboard with the token, unless this tab has it already. */
  async function signIn() {
    await page.goto(`${limiterUrl()}${PREFIX}/`);
    const token = page.locator("#token");
    await page.locator("#token:visible, #overrides").first().waitFor();
    if (await token.isVisible()) {
      await token.fill(inject("adminToken"));
      await page.click("#token-submit");
    }
    await page.locator("#overrides table, #overrides .empty").first().waitFor();
  }

  /** The overrides table's row for a listed entry, after "Show more" as often as it takes. */
  async function overrideRow(entry: Listed) {
    const row = page.locator(
      `#overrides tbody tr[data-rule=${JSON.stringify(entry.rule)}][data-hash=${JSON.stringify(entry.keyHash)}]`,
    );
    await expect
      .poll(
        async () => {
          if ((await row.count()) > 0) return true;
          const more = page.locator("#overrides button.link");
          if (await more.isVisible()) await more.click();
          return false;
        },
        { timeout: 15_000 },
      )
      .toBe(true);
    return row;
  }

  it("signs in with the token, shows the rules, their charts and the top offender, and resets it", async () => {
    const offender = uniqueIp();
    const shadowed = uniqueIp();
    const login = uniqueIp();
    const apiKey = uniqueTag("dash-key");
    const steady = Array.from({ length: 4 }, () => uniqueIp());
    const runs = [
      // Refused under "e2e" after its 50th request.
      traffic("offender", (i) => ({ path: `/dash/flood/${i}`, ip: offender })),
      // Admitted: 4 clients, 40 requests each, under the limit of 50.
      traffic("steady", (i) => ({ path: `/dash/shop/${i}`, ip: i < 160 ? steady[i % 4]! : uniqueIp() })),
      // Would be refused by the shadow rule (1 a day) from the 2nd on, and go through; 40 stay under "e2e".
      traffic("shadow", (i) => ({ path: `/shadow/${i}`, ip: i < 40 ? shadowed : uniqueIp() })),
      // Failed logins (401): 3 a minute, then 15 minutes out under "e2e-login".
      traffic("login", (i) => ({ path: "/status/401", method: "POST", ip: i < 12 ? login : uniqueIp() })),
      // An API key: 3 a day under "e2e-per-key", then refused.
      traffic("per-key", (i) =>
        i < 10
          ? { path: `/keyed/${i}`, ip: uniqueIp(), headers: { "x-api-key": apiKey } }
          : { path: `/dash/after-keyed/${i}`, ip: uniqueIp() },
      ),
    ];
    const [flood] = runs;
    try {
      const status = await admin<{ keyHash: string }>(`/status?rule=e2e&key=${offender}`);
      expect(status.status).toBe(200);
      const keyHash = status.body.keyHash;
      expect(keyHash).toMatch(/^[0-9a-f]{12}$/);
      const rules = (await admin<{ rules: { id: string; action: string }[] }>("/rules")).body.rules;

      // Without a token: the form, and nothing else; no data asked for.
      await page.goto(`${limiterUrl()}${PREFIX}/`);
      await page.locator("#token").waitFor({ state: "visible" });
      expect(await page.locator("#login").isVisible()).toBe(true);
      expect(await page.locator("#dashboard").isHidden()).toBe(true);
      expect(await page.locator("#dashboard > *").count()).toBe(0);
      expect(await page.locator("#controls").isHidden()).toBe(true);
      expect(requested.filter((path) => /\/(rules|stats|status|overrides|metrics)$/.test(path))).toEqual([]);

      // A wrong token is refused, and the page stays on the form.
      await page.fill("#token", "not-the-token");
      await page.click("#token-submit");
      await page.locator("#token-error").waitFor({ state: "visible" });
      expect(await page.locator("#token-error").textContent()).toContain("refused");
      expect(await page.locator("#dashboard").isHidden()).toBe(true);
      expect(await page.evaluate(() => sessionStorage.length)).toBe(0);

      // The token: the rules, each with a chart.
      await page.fill("#token", inject("adminToken"));
      await page.click("#token-submit");
      await page.locator('.rule[data-rule="e2e"] .chart canvas').first().waitFor({ state: "visible" });
      expect(await page.locator("#login").isHidden()).toBe(true);
      expect(
        await page.locator(".rule").evaluateAll((cards) => cards.map((c) => (c as HTMLElement).dataset.rule)),
      ).toEqual(rules.map((r) => r.id));
      expect(await page.locator('.rule[data-rule="e2e"] .rule-def').textContent()).toContain("50 per 1d");
      expect(await page.locator('.rule[data-rule="e2e-shadow"] .badge.shadow').textContent()).toContain("shadow");
      expect(await page.locator(".rule .chart canvas").count()).toBeGreaterThanOrEqual(rules.length);

      // The offender, by its key's hash prefix, at the top of the refused clients, refused now.
      const row = page.locator(`.rule[data-rule="e2e"] .top-refused tr[data-key="${keyHash}"]`);
      await row.waitFor({ state: "visible", timeout: 30_000 });
      await expect.poll(() => row.locator(".status").textContent(), { timeout: 20_000 }).toMatch(/^refused/);
      expect(flood!.count(429)).toBeGreaterThan(0);
      const firstKey = await page
        .locator('.rule[data-rule="e2e"] .top-refused tbody tr')
        .first()
        .getAttribute("data-key");
      expect(firstKey).toBe(keyHash);
      // The shadow rule's would-refuse, marked as such.
      await expect
        .poll(() => page.locator('.rule[data-rule="e2e-shadow"] .totals').textContent(), { timeout: 20_000 })
        .toMatch(/[1-9]\d* would refuse/);
      await expect.poll(() => page.locator("#live").textContent()).toMatch(/^Live/);

      // The picture, in the period the page opens with, once the charts and statuses have drawn;
      // tall enough for the tiles and two rows of rules.
      await expect
        .poll(() => page.locator('.rule[data-rule="e2e"] .totals').textContent(), { timeout: 20_000 })
        .toMatch(/[1-9][\d,]* refused/);
      await page.setViewportSize({ width: 1280, height: 1200 });
      await page.waitForTimeout(1_500);
      await page.mouse.move(1270, 1190);
      await page.screenshot({ path: SCREENSHOT });
      await page.setViewportSize({ width: 1280, height: 900 });
      console.log(`dashboard.e2e: screenshot at ${SCREENSHOT}`);

      // Reset: the offender stops, its Reset is pressed, and it is admitted again.
      await flood!.stop();
      expect((await send("/dash/before-reset", from(offender))).status).toBe(429);
      await row.locator("button.reset").click();
      await expect.poll(() => row.locator(".status").textContent(), { timeout: 15_000 }).toMatch(/^admitted/);
      expect(await page.locator(".toast").first().textContent()).toContain(`Reset ${keyHash} under e2e`);
      expect((await send("/dash/after-reset", from(offender))).status).toBe(200);

      // An override, put with the form and deleted from the list.
      const partner = uniqueTag("dash-partner");
      const overrideRow = page.locator(
        `#overrides tr[data-rule="e2e-per-key"][data-key="header:x-api-key=${partner}"]`,
      );
      await page.selectOption("#ov-rule", "e2e-per-key");
      await page.fill("#ov-keys input", partner);
      await page.selectOption("#ov-kind", "tier");
      await page.selectOption("#ov-tier", "plus");
      await page.fill("#ov-note", "dashboard e2e");
      await page.click('#override-form button[type="submit"]');
      await overrideRow.waitFor({ state: "visible" });
      expect(await overrideRow.textContent()).toMatch(/tier plus\s*never\s*dashboard e2e\s*applied/);
      const listed = await admin<{ overrides: { key: unknown; tier?: string }[] }>(
        "/overrides?rule=e2e-per-key&limit=1000",
      );
      expect(listed.body.overrides).toContainEqual(
        expect.objectContaining({ key: [["header:x-api-key", partner]], tier: "plus" }),
      );
      await overrideRow.locator("button.danger").click();
      await overrideRow.waitFor({ state: "detached" });
      expect((await admin(`/overrides?rule=e2e-per-key&key=${partner}`)).body).toMatchObject({ override: null });

      // The token lasts for the tab's session: a reload needs no form.
      await page.reload();
      await page.locator('.rule[data-rule="e2e"]').waitFor({ state: "visible" });
      expect(await page.locator("#login").isHidden()).toBe(true);
      // Signing out forgets it.
      await page.click("#signout");
      await page.locator("#token").waitFor({ state: "visible" });
      expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
      expect(await page.locator("#dashboard > *").count()).toBe(0);

      expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
    } finally {
      await Promise.all(runs.map((run) => run.stop()));
    }
  }, 150_000);
  it("shows an adaptive rule's limit now against the configured one, and a chart of both", async () => {
    // A request under the rule makes the isolate report to its controller: the limit is then known.
    const ip = uniqueIp();
    for (let i = 0; i < 3; i++) expect((await send("/adaptive/x", from(ip))).status).toBe(200);
    await signIn();
    const card = page.locator('.rule[data-rule="e2e-adaptive"]');
    await card.waitFor({ state: "visible" });
    expect(await card.locator(".badge.adaptive").textContent()).toBe("adaptive");
    await expect
      .poll(() => card.locator(".limit-now").textContent(), { timeout: 20_000 })
      .toBe("Limit now 100 of 100 configured (as configured, factor 1.00)");
    await card.locator(".limit-chart canvas").first().waitFor({ state: "visible" });
    expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
  });

  it("shows a concurrency rule's places: the rule as requests in flight at once, a refused client's places in use", async () => {
    const ip = uniqueIp();
    // A WebSocket holds the client's one place until it closes; a request beside it is refused.
    const ws = new WebSocket(`${limiterUrl().replace(/^http/, "ws")}/dash-one/echo`, {
      headers: { "cf-connecting-ip": ip },
    });
    await new Promise((resolve, reject) => {
      ws.once("open", resolve);
      ws.once("error", reject);
    });
    try {
      expect((await send("/dash-one/beside", from(ip))).status).toBe(429);
      const keyHash = (await admin<{ keyHash: string }>(`/status?rule=e2e-dash-one&key=${ip}`)).body.keyHash;
      await signIn();
      const card = page.locator('.rule[data-rule="e2e-dash-one"]');
      await card.waitFor({ state: "visible" });
      const row = card.locator(`.top-refused tr[data-key="${keyHash}"]`);
      await row.waitFor({ state: "visible", timeout: 30_000 });
      await expect.poll(() => row.locator(".status").textContent(), { timeout: 20_000 }).toBe("1 of 1 in flight");
      // Denied by an override: refused, in words and colour, not "0 of no limit" in green as under unlimited.
      const query = `?rule=e2e-dash-one&key=${ip}`;
      expect((await admin(`/overrides${query}`, "PUT", { deny: true })).status).toBe(200);
      try {
        await signIn();
        const denied = card.locator(`.top-refused tr[data-key="${keyHash}"] .status`);
        await expect.poll(() => denied.textContent(), { timeout: 20_000 }).toBe("denied · override");
        expect(await denied.getAttribute("class")).toBe("status refused");
      } finally {
        expect((await admin(`/overrides${query}`, "DELETE")).status).toBe(200);
      }
      // A concurrency rule counts no cost and says nothing of one ("counts undefined · cost undefined" before).
      expect(await card.locator(".rule-def").textContent()).toBe(
        "1 in flight at once · per ip · /dash-one/* · every method",
      );
      expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
    } finally {
      ws.close();
    }
  }, 60_000);

  it("shows a quota rule in its plan's words, reads a client's usage and tops it up: its next request is admitted", async () => {
    const key = uniqueTag("dash-quota");
    const headers = { "x-api-key": key };
    for (let i = 0; i < 6; i++) await send(`/quota/dash/${i}`, from(uniqueIp(), headers));
    await signIn();
    const card = page.locator('.rule[data-rule="e2e-quota"]');
    await card.waitFor({ state: "visible" });
    expect(await card.locator(".rule-def").textContent()).toContain(
      "5 per month (monthly on day 1 at 00:00 America/New_York) · per header:x-api-key",
    );
    await page.selectOption("#cr-rule", "e2e-quota");
    await page.fill("#cr-keys input", key);
    await page.click('#credit-form button[value="read"]');
    const usage = page.locator('#usage .usage[data-rule="e2e-quota"]');
    await usage.waitFor({ state: "visible" });
    expect(await usage.locator(".quota-words").textContent()).toMatch(
      /^5 per month, resets \d{4}-\d\d-01T00:00:00-0[45]:00$/,
    );
    expect(await usage.locator(".usage-now .total").allTextContents()).toEqual([
      "0 left",
      "used 5",
      "credit 0",
      expect.stringMatching(/^this period: \d{4}-\d\d-01 0[45]:00 UTC to \d{4}-\d\d-01 0[45]:00 UTC$/),
    ]);
    await page.selectOption("#cr-change", "add");
    await page.fill("#cr-amount", "2");
    await page.fill("#cr-note", "e2e top-up");
    await page.click('#credit-form button[value="credit"]');
    await page.locator(".toast:not(.bad)", { hasText: "0 left before, 2 now" }).waitFor();
    expect(await usage.locator(".usage-now .total").first().textContent()).toBe("2 left");
    expect((await admin<{ credit: number }>(`/credits?rule=e2e-quota&key=${key}`)).body.credit).toBe(2);
    expect((await send("/quota/dash/after", from(uniqueIp(), headers))).status).toBe(200);
    expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
  });

  it("opens on the period that shows the data: from its first minute (at least 5 minutes), not a sliver of an hour", async () => {
    const ip = uniqueIp();
    for (let i = 0; i < 3; i++) await send(`/dash/period/${i}`, from(ip));
    await signIn();
    expect(await page.locator("#range").inputValue()).toBe("fit");
    expect(await page.locator("#range option:checked").textContent()).toBe("Fit the data");
    const chart = page.locator('.rule[data-rule="e2e"] .chart').first();
    // What the page shows against the data as the statistics hold it, read again until the minute is the same.
    const shown = async () => {
      const stats = await dayOfStats();
      const first = firstMinuteWithData(stats)!;
      const from = Math.max(stats.toMinute - 1439, Math.min(first, stats.toMinute - 4));
      const range = await chart.evaluate((box) => [
        Number((box as HTMLElement).dataset.fromMinute),
        Number((box as HTMLElement).dataset.toMinute),
      ]);
      return { shown: range, expected: [from, stats.toMinute], first };
    };
    await expect
      .poll(async () => ((r) => JSON.stringify(r.shown) === JSON.stringify(r.expected))(await shown()), {
        timeout: 20_000,
      })
      .toBe(true);
    // The period in words: since the first minute with data, or the last 5 minutes while the data is younger.
    const { expected, first } = await shown();
    const since = new Date(expected[0]! * 60_000).toISOString().slice(11, 16);
    await expect
      .poll(() => page.locator('.rule[data-rule="e2e"] .total.muted').textContent())
      .toBe(expected[0] === first ? `since ${since}` : "in the last 5 min");
    // Another period is still a choice: the last hour, whether or not it has data.
    await page.selectOption("#range", "60");
    await expect
      .poll(async () => chart.evaluate((box) => Number((box as HTMLElement).dataset.fromMinute)), { timeout: 20_000 })
      .toBe((await dayOfStats()).toMinute - 59);
    expect(await page.locator('.rule[data-rule="e2e"] .total.muted').textContent()).toBe("in the last 1 h");
    expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
  });

  it("says in a line what each tile counts: admitted and refused once under each rule, held, shed, would refuse, failures, lost flushes", async () => {
    await signIn();
    const about: Record<string, RegExp> = {
      admitted: /once under each rule that matched it/,
      held: /waited for their turn \(max_delay\) or a place \(concurrency\)/,
      refused: /429 .*once under each rule that refused it/,
      shed: /503\b.*adaptive rule's limit .*cut while the origin recovers/,
      "would-refuse": /shadow rules \(action = log\) would have refused/,
      p50: /^median call to a Durable Object, (in the [\d,]+–[\d,]+ ms bucket|above \d+ s)$/,
      p99: /^1 call in 100 took longer, (in the [\d,]+–[\d,]+ ms bucket|above \d+ s)$/,
      failures: /calls to Durable Objects that failed/,
      "lost-flushes": /isolates' counts that never reached the statistics: [\d,]+ decisions? missing/,
    };
    await page.locator('.tile[data-tile="admitted"] .tile-value').filter({ hasText: /\d/ }).waitFor();
    const tiles = await page
      .locator(".tile")
      .evaluateAll((all) => all.map((t) => (t as HTMLElement).dataset.tile ?? t.textContent ?? ""));
    expect(tiles).toEqual(Object.keys(about));
    for (const [tile, words] of Object.entries(about)) {
      const text = await page.locator(`.tile[data-tile="${tile}"] .tile-about`).textContent();
      expect.soft(text, tile).toMatch(words);
      expect.soft(await page.locator(`.tile[data-tile="${tile}"] .tile-about`).isVisible(), tile).toBe(true);
    }
    // The Admitted tile is what it says: the rules' admissions summed, as the statistics count them.
    await expect
      .poll(
        async () => {
          const stats = await dayOfStats();
          const sum = stats.rules.reduce((n, rule) => n + (rule.totals.admitted ?? 0), 0);
          const shown = await page.locator('.tile[data-tile="admitted"] .tile-value').textContent();
          return shown === sum.toLocaleString("en-US");
        },
        { timeout: 20_000 },
      )
      .toBe(true);
    expect(await page.locator('.tile[data-tile="admitted"] .tile-label').textContent()).toBe("Admitted");
    expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
  });

  it("shows p50 and p99 as the histogram supports them: an estimate within its bucket, never a bucket's bound as a value", async () => {
    // Some calls to objects, so that the histogram has data.
    for (let i = 0; i < 6; i++) await send(`/dash/latency/${i}`, from(uniqueIp()));
    await signIn();
    // What the page shows against what the statistics hold, read again until they agree.
    const en = (n: number) => n.toLocaleString("en-US");
    await expect
      .poll(
        async () => {
          const { latency } = await dayOfStats();
          const mismatches = [];
          for (const q of ["p50", "p99"] as const) {
            const tile = page.locator(`.tile[data-tile="${q}"]`);
            const value = await tile.locator(".tile-value").textContent();
            const about = (await tile.locator(".tile-about").textContent()) ?? "";
            const bucket =
              latency[q]!.highMs === null
                ? `above ${latency[q]!.lowMs / 1000} s`
                : `in the ${en(latency[q]!.lowMs)}–${en(latency[q]!.highMs!)} ms bucket`;
            if (value !== quantileText(latency[q]) || !about.includes(bucket)) {
              mismatches.push(`${q}: shows "${value}", "${about}"; the statistics: ${JSON.stringify(latency[q])}`);
            }
          }
          return mismatches;
        },
        { timeout: 20_000 },
      )
      .toEqual([]);
    // The statistics' own figures agree: the bucket is the one whose bound p50Ms and p99Ms give,
    // and the quantile's rank falls in it.
    const { latency } = await dayOfStats();
    const total = latency.counts.reduce((a, b) => a + b, 0);
    expect(total).toBeGreaterThan(0);
    for (const [q, share, bound] of [
      [latency.p50!, 0.5, latency.p50Ms],
      [latency.p99!, 0.99, latency.p99Ms],
    ] as const) {
      expect(q.highMs ?? 5000).toBe(bound);
      let seen = 0;
      const bucket = latency.counts.findIndex((n) => {
        seen += n;
        return seen >= share * total;
      });
      expect(latency.counts[bucket]).toBeGreaterThan(0);
      if (q.estimateMs !== null) expect(q.estimateMs).toBeGreaterThanOrEqual(q.lowMs);
      if (q.estimateMs !== null) expect(q.estimateMs).toBeLessThanOrEqual(q.highMs!);
    }
    expect(await page.locator("#latency-hint").textContent()).toContain(
      `p50 ${quantileText(latency.p50)} · p99 ${quantileText(latency.p99)}`,
    );
    expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
  });

  it("shows each client's state now in words and a colour that agree, its count rounded, beside its refusals so far", async () => {
    const client = (name: string) => ({ "x-dash-client": uniqueTag(name) });
    // Refused under a limit of 3 a day, then reset: admitted, with its limit left.
    const reset = client("words-reset");
    for (let i = 0; i < 5; i++) await send(`/dash-rate/words/${i}`, from(uniqueIp(), reset));
    // Refused under a limit of 1 a minute, then 15 minutes out.
    const blocked = client("words-blocked");
    for (let i = 0; i < 3; i++) await send(`/dash-penalty/words/${i}`, from(uniqueIp(), blocked));
    // A token bucket's client, refused once its burst of 2 is spent; and one whose every request costs more
    // than its burst, which no wait admits.
    const bucket = client("words-bucket");
    for (let i = 0; i < 3; i++) await send(`/dash-bucket/words/${i}`, from(uniqueIp(), bucket));
    const never = client("words-never");
    for (let i = 0; i < 2; i++) await send(`/dash-never/words/${i}`, from(uniqueIp(), never));
    // The object answers "admitted, 0 left" only while an earlier window's count slides out (a weighted
    // count between limit − 1 and the limit), a moment no test can time: this client's answer is made so
    // from the object's real one, as the page would read it then.
    const edge = client("words-edge");
    for (let i = 0; i < 5; i++) await send(`/dash-rate/words/${i}`, from(uniqueIp(), edge));
    const hashOf = async (rule: string, headers: Record<string, string>) =>
      (await admin<{ keyHash: string }>(`/status?rule=${rule}&key=${Object.values(headers)[0]}`)).body.keyHash;
    const resetHash = await hashOf("e2e-dash-rate", reset);
    const blockedHash = await hashOf("e2e-dash-penalty", blocked);
    const edgeHash = await hashOf("e2e-dash-rate", edge);
    const bucketHash = await hashOf("e2e-dash-bucket", bucket);
    const neverHash = await hashOf("e2e-dash-never", never);
    await page.route("**/__ratelimit/status?*", async (route) => {
      const url = new URL(route.request().url());
      if (route.request().method() !== "GET" || !url.searchParams.get("hash")?.startsWith(edgeHash)) {
        return route.fallback();
      }
      const real = await route.fetch();
      const body = (await real.json()) as Record<string, unknown>;
      return route.fulfill({
        response: real,
        json: { ...body, weighted: 2.3821666666666665, allowed: true, remaining: 0, retryAfterSeconds: 0 },
      });
    });
    try {
      await signIn();
      const row = (rule: string, hash: string) => page.locator(`.rule[data-rule="${rule}"] tr[data-hash^="${hash}"]`);
      await row("e2e-dash-rate", resetHash).locator(".status.refused").waitFor({ timeout: 30_000 });
      await row("e2e-dash-rate", resetHash).locator("button.reset").click();
      await expect
        .poll(() => row("e2e-dash-rate", resetHash).locator(".status").textContent(), { timeout: 15_000 })
        .toBe("admitted now · 3 left");
      await expect
        .poll(() => row("e2e-dash-penalty", blockedHash).locator(".status").textContent(), { timeout: 15_000 })
        .toMatch(/^blocked until \d\d:\d\d:\d\d/);
      const atLimit = row("e2e-dash-rate", edgeHash).locator(".status");
      await expect.poll(() => atLimit.textContent(), { timeout: 15_000 }).toBe("at its limit now");
      expect(await atLimit.getAttribute("class")).toBe("status limit");
      // The count as a person reads it: to a tenth, rounded down, so it compares with the limit as the rule does.
      expect(await atLimit.getAttribute("title")).toBe(
        "Sliding-window count 2.3 of 3: its next request is admitted, and the one after it refused.",
      );
      // A token bucket in its own words: what of its burst is spent, and how fast it refills.
      const spent = row("e2e-dash-bucket", bucketHash).locator(".status");
      await expect
        .poll(() => spent.getAttribute("title"), { timeout: 15_000 })
        .toMatch(/^Token bucket: [12]\.\d of a burst of 2 spent, refilling 1 per 1 min\.$/);
      // No wait admits it: no "retry in 0 s".
      const refusedForGood = row("e2e-dash-never", neverHash).locator(".status");
      await expect
        .poll(() => refusedForGood.textContent(), { timeout: 15_000 })
        .toBe("refused now · whatever the wait");
      // Every row on the page: the words and the colour agree, no "0 left" in green, no long decimals.
      await expect.poll(() => page.locator(".top-refused .status:text-is('…')").count(), { timeout: 15_000 }).toBe(0);
      const statuses = await page.locator(".top-refused .status").evaluateAll((all) =>
        all.map((node) => ({
          class: node.className,
          text: node.textContent ?? "",
          title: node.getAttribute("title"),
        })),
      );
      expect(statuses.length).toBeGreaterThanOrEqual(3);
      for (const status of statuses) {
        const tone = status.class.replace(/^status /, "");
        expect.soft(Object.keys(STATUS_WORDS), JSON.stringify(status)).toContain(tone);
        expect.soft(status.text, JSON.stringify(status)).toMatch(STATUS_WORDS[tone] ?? /^$/);
        expect.soft(status.text, JSON.stringify(status)).not.toMatch(/\b0 left/);
        expect.soft(status.title ?? "", JSON.stringify(status)).not.toMatch(/\d\.\d{2,}/);
      }
      // The columns say which is which: refusals counted so far, and the state now.
      expect(
        await page
          .locator('.rule[data-rule="e2e-dash-rate"] .top-refused thead th')
          .evaluateAll((all) => all.map((th) => th.textContent)),
      ).toEqual(["Client", "Refused so far", "Now", "Actions"]);
    } finally {
      await page.unroute("**/__ratelimit/status?*");
    }
    expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
  }, 60_000);

  it("shows clients by their key's hash, and says on the page how to show their keys (STATS_RAW_KEYS)", async () => {
    await signIn();
    const hint = page.locator("#clients-hint");
    await expect.poll(() => hint.textContent(), { timeout: 20_000 }).toContain('STATS_RAW_KEYS = "true"');
    expect(await hint.textContent()).toMatch(/first 12 hex digits of their key's hash.*\[vars\] of wrangler\.toml/);
    const clients = await page.locator(".top-refused td.client code").allTextContents();
    expect(clients.length).toBeGreaterThan(0);
    for (const client of clients) expect(client).toMatch(/^[0-9a-f]{12}$/);
  });

  it("deletes exactly the override it lists, for every shape of key, and shows each client as key= names it", async () => {
    const ip = () => uniqueIp();
    const tag = (name: string) => uniqueTag(name);
    // Its third group has no leading zero, so the prefix is written as the address is.
    const v6 = `2001:db8:${(0x1000 + randomInt(0xefff)).toString(16)}:ab12::1`;
    // Each client as an operator names it, how the listing keys it, and how the dashboard shows it.
    type Shape = { name: string; rule: string; put: string[]; key: [string, string | null][]; shown: string };
    const shapes: Shape[] = [];
    const shape = (name: string, rule: string, put: string[], key: [string, string | null][], shown: string) =>
      shapes.push({ name, rule, put, key, shown });
    const apiKey = tag("k");
    shape("a plain value", "e2e-per-key", [apiKey], [["header:x-api-key", apiKey]], `header:x-api-key=${apiKey}`);
    shape("no value (no header)", "e2e-per-key", [""], [["header:x-api-key", null]], "header:x-api-key=");
    shape('the value "null"', "e2e-per-key", ["null"], [["header:x-api-key", "null"]], "header:x-api-key=null");
    const odd = `${tag("a")}&key=b %41 c`;
    shape(
      "a value with & = % and spaces",
      "e2e-per-key",
      [odd],
      [["header:x-api-key", odd]],
      `header:x-api-key=${odd}`,
    );
    const sub = tag("sub");
    shape("a fallback's first source", "e2e-user", [`jwt:sub=${sub}`], [["jwt:sub", sub]], `jwt:sub=${sub}`);
    const userIp = ip();
    shape("a fallback's second source", "e2e-user", [`ip=${userIp}`], [["ip", userIp]], `ip=${userIp}`);
    shape("a fallback with neither source", "e2e-user", ["jwt:sub="], [["jwt:sub|ip", null]], "jwt:sub|ip=");
    shape('a fallback\'s value "null"', "e2e-user", ["jwt:sub=null"], [["jwt:sub", "null"]], "jwt:sub=null");
    const plainIp = ip();
    shape("an IP", "e2e", [plainIp], [["ip", plainIp]], `ip=${plainIp}`);
    const prefix = v6.replace(/:ab12::1$/, ":ab00::/56");
    shape("an IPv6 client, by its /56", "e2e", [v6], [["ip", prefix]], `ip=${prefix}`);
    const multiIp = ip();
    const items = `/multi/${tag("items")}`;
    shape(
      "several characteristics: an IP and a path",
      "e2e-multi",
      [`path=${items.toUpperCase()}/`, `ip=${multiIp}`],
      [
        ["ip", multiIp],
        ["path", items],
      ],
      `ip=${multiIp} & path=${items}`,
    );
    const tenant = tag("t");
    shape(
      "several characteristics: a header and a path",
      "e2e-multi",
      [`header:x-tenant=${tenant}`, `path=${items}`],
      [
        ["header:x-tenant", tenant],
        ["path", items],
      ],
      `header:x-tenant=${tenant} & path=${items}`,
    );
    shape(
      "several characteristics, one with neither source",
      "e2e-multi",
      ["header:x-tenant=", `path=${items}`],
      [
        ["header:x-tenant|ip", null],
        ["path", items],
      ],
      `header:x-tenant|ip= & path=${items}`,
    );

    const putOverride = async ({ name, rule, put, key }: Shape) => {
      const reply = await admin<{ key: unknown }>(`/overrides?${clientQuery(rule, put)}`, "PUT", {
        limit: 100,
        note: `dashboard e2e: ${name}`,
      });
      expect([name, reply.status, reply.body.key]).toEqual([name, 200, key]);
    };
    const sameKey = (entry: Listed, shape: Shape) =>
      entry.rule === shape.rule && JSON.stringify(entry.key) === JSON.stringify(shape.key);
    for (const shape of shapes) await putOverride(shape);
    await signIn();

    for (const shape of shapes) {
      const { name, rule, put, shown } = shape;
      const before = await allOverrides();
      const listed = before.find((entry) => sameKey(entry, shape));
      expect(listed, name).toBeDefined();
      const row = await overrideRow(listed!);
      expect.soft(await row.locator("td.client").textContent(), name).toBe(shown);
      await page.locator("#toasts").evaluate((toasts) => toasts.replaceChildren());
      // After a delete the page reads the list again; the next shape waits for it.
      const reread = page
        .waitForResponse((r) => r.request().method() === "GET" && new URL(r.url()).pathname.endsWith("/overrides"), {
          timeout: 10_000,
        })
        .catch(() => null);
      await row.locator("button.danger").click();
      const toast = page.locator(".toast").first();
      await toast.waitFor({ timeout: 10_000 });
      expect.soft(await toast.textContent(), name).toBe(`Deleted the override of ${shown} under ${rule}.`);
      await reread;
      // Gone, and every other override as it was.
      const after = await allOverrides();
      const expected = before.filter((entry) => entry !== listed);
      expect.soft(after.map(identity).sort(), name).toEqual(expected.map(identity).sort());

      // Whatever the dashboard did, the next shape starts from every other shape's override and not this one.
      await admin(`/overrides?${clientQuery(rule, put)}`, "DELETE");
      const lost = shapes.filter((other) => other !== shape && !after.some((entry) => sameKey(entry, other)));
      for (const other of lost.filter((other) => shapes.indexOf(other) > shapes.indexOf(shape))) {
        await putOverride(other);
      }
      if (lost.length > 0) await signIn();
    }
    expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
  }, 120_000);
  /**
   * Runs axe-core over the page as it is, in the light and the dark colour
   * scheme, and returns its serious and critical violations, each with the
   * elements it found and why. Injected through the DevTools protocol, which
   * the page's CSP (script-src 'self') does not govern, so the page is
   * checked under the policy it is served with.
   */
  async function axeViolations(label: string, beforeEach: () => Promise<void> = async () => {}) {
    const found: string[] = [];
    for (const colorScheme of ["light", "dark"] as const) {
      await page.emulateMedia({ colorScheme });
      await beforeEach();
      await page.evaluate(AXE_SOURCE);
      const results = (await page.evaluate(() =>
        (window as unknown as { axe: { run: (context: Document, options: object) => Promise<unknown> } }).axe.run(
          document,
          { resultTypes: ["violations"] },
        ),
      )) as AxeResults;
      const all = results.violations.map((v) => `${v.impact} ${v.id} ×${v.nodes.length}`);
      console.log(
        `dashboard.e2e: axe-core, ${label}, ${colorScheme}: ${all.length === 0 ? "no violations" : all.join(", ")}`,
      );
      for (const violation of results.violations) {
        if (violation.impact !== "serious" && violation.impact !== "critical") continue;
        for (const node of violation.nodes) {
          found.push(
            `${colorScheme}: ${violation.impact} ${violation.id}: ${node.target.join(" ")}: ${node.failureSummary?.replace(/\s+/g, " ")}`,
          );
        }
      }
    }
    await page.emulateMedia({ colorScheme: null });
    return found;
  }

  it("has no serious or critical accessibility violation (axe-core), with every state it can show on the page, made by the test itself", async () => {
    const held: (() => void)[] = [];
    /** A promise the routes below wait on, released when axe is done. */
    const hold = () => new Promise<void>((resolve) => held.push(resolve));
    const ws: WebSocket[] = [];
    try {
      // ---- The data, made here: rows of every kind, in rules only this file uses where a top-10 list must hold them.
      const client = (name: string) => uniqueTag(`axe-${name}`);
      const refuse = async (path: string, headers: Record<string, string>, times = 8) => {
        for (let i = 0; i < times; i++) await send(`${path}/${i}`, from(uniqueIp(), headers));
      };
      const hashOf = async (rule: string, key: string) =>
        (await admin<{ keyHash: string }>(`/status?rule=${rule}&key=${encodeURIComponent(key)}`)).body.keyHash;
      // Under a limit of 3 a day: refused now (with an override), reset (admitted now), at its limit, a
      // status that cannot be read, one being read, and one whose reset is under way.
      const rate = {
        refused: client("refused"),
        admitted: client("admitted"),
        limit: client("limit"),
        unknown: client("unknown"),
        reading: client("reading"),
        resetting: client("resetting"),
      };
      for (const key of Object.values(rate)) await refuse("/dash-rate/axe", { "x-dash-client": key });
      expect((await admin(`/status?rule=e2e-dash-rate&key=${rate.admitted}`, "DELETE")).status).toBe(200);
      expect(
        (await admin(`/overrides?rule=e2e-dash-rate&key=${rate.refused}`, "PUT", { limit: 3, note: "axe: applied" }))
          .status,
      ).toBe(200);
      const rateHash = Object.fromEntries(
        await Promise.all(Object.entries(rate).map(async ([k, key]) => [k, await hashOf("e2e-dash-rate", key)])),
      ) as Record<keyof typeof rate, string>;
      // Blocked by a penalty; what a shadow rule would refuse.
      await refuse("/dash-penalty/axe", { "x-dash-client": client("blocked") }, 3);
      const shadowed = uniqueIp();
      for (let i = 0; i < 3; i++) await send(`/shadow/axe/${i}`, from(shadowed));
      // A concurrency rule's places: one client's one place in use by a WebSocket, another's free again.
      const socket = async (ip: string) => {
        const open = new WebSocket(`${limiterUrl().replace(/^http/, "ws")}/dash-one/echo`, {
          headers: { "cf-connecting-ip": ip },
        });
        ws.push(open);
        await new Promise((resolve, reject) => {
          open.once("open", resolve);
          open.once("error", reject);
        });
        expect((await send("/dash-one/beside", from(ip))).status).toBe(429);
        return open;
      };
      await socket(uniqueIp());
      const freed = await socket(uniqueIp());
      freed.close();
      // A quota's client refused until its month ends; its usage with past periods (which only months of
      // traffic make: added to the real answer below).
      const quotaKey = client("quota");
      await refuse("/quota/axe", { "x-api-key": quotaKey }, 7);
      // Overrides: applied (above), expired, pending (below), and more than a page of them (Show more).
      const expired = uniqueIp();
      const expiresMs = Date.now() + 1_500;
      expect((await admin(`/overrides?rule=e2e&key=${expired}`, "PUT", { limit: 80, expires: expiresMs })).status).toBe(
        200,
      );
      const pending = client("pending");
      expect((await admin(`/overrides?rule=e2e-dash-rate&key=${pending}`, "PUT", { limit: 5 })).status).toBe(200);
      const deleting = client("deleting");
      expect((await admin(`/overrides?rule=e2e-dash-rate&key=${deleting}`, "PUT", { limit: 5 })).status).toBe(200);
      // The list runs by rule, then key: a page's worth after all of the above, so that more is always left to show.
      const morePage = Array.from({ length: 51 }, (_, i) => ({
        rule: "e2e-user",
        key: `jwt:sub=${client(`page-${i}`)}`,
        limit: 3,
      }));
      expect((await admin("/overrides/import", "POST", morePage)).status).toBe(200);
      await sleep(Math.max(0, expiresMs - Date.now()) + 200);
      const pendingHash = await hashOf("e2e-dash-rate", pending);
      const deletingHash = await hashOf("e2e-dash-rate", deleting);

      // ---- What only a moment or a failure shows, from the admin API's real answers held, failed or changed.
      const failing = new Set<string>();
      await page.route("**/__ratelimit/status?*", async (route) => {
        const method = route.request().method();
        const hash = new URL(route.request().url()).searchParams.get("hash")?.slice(0, 12);
        if (method === "GET" && hash === rateHash.unknown) {
          return route.fulfill({
            status: 503,
            contentType: "application/problem+json",
            body: '{"detail":"unavailable"}',
          });
        }
        if (method === "GET" && hash === rateHash.reading) await hold();
        if (method === "DELETE" && hash === rateHash.resetting) await hold();
        if (method === "DELETE" && hash !== undefined && failing.has(hash)) {
          return route.fulfill({
            status: 503,
            contentType: "application/problem+json",
            body: '{"detail":"unavailable"}',
          });
        }
        if (method === "GET" && hash === rateHash.limit) {
          // "Admitted, 0 left": only while an earlier window's count slides out, a moment no test can time.
          const real = await route.fetch();
          const body = (await real.json()) as Record<string, unknown>;
          return route.fulfill({
            response: real,
            json: { ...body, weighted: 2.5, allowed: true, remaining: 0, retryAfterSeconds: 0 },
          });
        }
        return route.fallback();
      });
      await page.route("**/__ratelimit/credits?*", async (route) => {
        if (route.request().method() !== "GET") return route.fallback();
        const real = await route.fetch();
        const body = (await real.json()) as Record<string, unknown>;
        const past = [
          { start: "2026-09-01T04:00:00.000Z", end: "2026-10-01T04:00:00.000Z", used: 5, credit: 2 },
          { start: "2026-08-01T04:00:00.000Z", end: "2026-09-01T04:00:00.000Z", used: 3, credit: 0 },
        ];
        return route.fulfill({ response: real, json: { ...body, past } });
      });
      await page.route("**/__ratelimit/overrides?*", async (route) => {
        const request = route.request();
        const url = new URL(request.url());
        if (
          request.method() === "DELETE" &&
          url.searchParams.getAll("key").includes(`header:x-dash-client=${deleting}`)
        )
          await hold();
        if (request.method() !== "GET" || url.searchParams.has("rule")) return route.fallback();
        // An override its client's object has not confirmed yet: pending until the registry's alarm sends it again.
        const real = await route.fetch();
        const body = (await real.json()) as { overrides: { keyHash: string; state: string }[] };
        for (const entry of body.overrides) if (entry.keyHash === pendingHash) entry.state = "pending";
        return route.fulfill({ response: real, json: body });
      });

      // ---- The token form: its error, and the form sent while the rules are read.
      if (await page.locator("#signout").isVisible()) await page.click("#signout");
      await page.goto(`${limiterUrl()}${PREFIX}/`);
      await page.fill("#token", "not-the-token");
      await page.click("#token-submit");
      await page.locator("#token-error").waitFor({ state: "visible" });
      await page.route("**/__ratelimit/rules", async (route) => {
        await hold();
        return route.fallback();
      });
      await page.fill("#token", inject("adminToken"));
      await page.click("#token-submit");
      await page.locator("#token-submit:disabled").waitFor();
      const onTheForm = await axeViolations("the token form", async () => {
        await expectOnThePage(["#token-error", "#token-submit:disabled", ".login p code"]);
      });
      for (const release of held.splice(0)) release();
      await page.unroute("**/__ratelimit/rules");

      // ---- The dashboard with every state the Worker's data gives.
      await page
        .locator(`.rule[data-rule="e2e-dash-rate"] tr[data-hash^="${rateHash.refused}"] .status.refused`)
        .waitFor({
          timeout: 30_000,
        });
      const rateRow = (k: keyof typeof rate) =>
        page.locator(`.rule[data-rule="e2e-dash-rate"] tr[data-hash^="${rateHash[k]}"]`);
      await rateRow("resetting").locator("button.reset").click();
      await rateRow("resetting").locator("button.reset:disabled").waitFor();
      // Every override row this test made, after "Show more" as often as it takes; then the one being deleted.
      const rows = [
        pendingHash,
        deletingHash,
        await hashOf("e2e", expired),
        await hashOf("e2e-dash-rate", rate.refused),
      ];
      await expect
        .poll(
          async () => {
            const shown = await Promise.all(
              rows.map((hash) => page.locator(`#overrides tr[data-hash="${hash}"]`).count()),
            );
            if (shown.every((n) => n > 0)) return true;
            const more = page.locator("#overrides button.link");
            if (await more.isVisible()) await more.click();
            return false;
          },
          { timeout: 30_000 },
        )
        .toBe(true);
      await page.locator(`#overrides tr[data-hash="${deletingHash}"] button.danger`).click();
      await page.locator(`#overrides tr[data-hash="${deletingHash}"] button.danger:disabled`).waitFor();
      // A quota client's usage, read with the credit form; then a credit without an amount (the form's errors).
      await page.selectOption("#cr-rule", "e2e-quota");
      await page.fill("#cr-keys input", quotaKey);
      await page.click('#credit-form button[value="read"]');
      await page.locator("#usage table.past-periods").waitFor();
      await page.click('#credit-form button[value="credit"]');
      await page.locator("#cr-errors li").first().waitFor();
      /** Puts an override with the form: `key` under e2e-dash-rate, or a bad one (its errors stay on the form). */
      const putFromTheForm = async (key: string | null) => {
        await page.selectOption("#ov-rule", key === null ? "e2e" : "e2e-dash-rate");
        await page.fill("#ov-keys input", key ?? "not-an-ip");
        await page.selectOption("#ov-kind", "limit");
        await page.fill("#ov-limit", "5");
        await page.click('#override-form button[type="submit"]');
      };
      // Toasts last 5 s, so they are made again before each run of axe: an override put from the form
      // (a toast of success), a bad one (the form's errors), and a reset that fails (a toast of failure).
      const formKey = client("form");
      const toasts = async () => {
        await page.locator("#toasts").evaluate((box) => box.replaceChildren());
        await putFromTheForm(formKey);
        await page.locator(".toast:not(.bad)").waitFor();
        await putFromTheForm(null);
        await page.locator("#ov-errors li").first().waitFor();
        failing.add(rateHash.admitted);
        await rateRow("admitted").locator("button.reset:not(:disabled)").click();
        await page.locator(".toast.bad").waitFor();
        failing.delete(rateHash.admitted);
        await rateRow("admitted").locator("button.reset:not(:disabled)").waitFor();
      };
      const asTheWorkerShowsIt: Record<string, string> = {
        "a tile admitted": '.tile.good[data-tile="admitted"] .tile-value',
        "a tile refused": '.tile.bad[data-tile="refused"] .tile-value',
        "a tile would refuse": '.tile.warn[data-tile="would-refuse"] .tile-value',
        "a tile plain": '.tile:not(.good, .bad, .warn)[data-tile="p50"] .tile-value',
        "a tile's line": ".tile-about",
        "the clients' note": "#clients-hint code",
        "a rule's definition": ".rule-def",
        "a badge": ".badge:not(.shadow, .adaptive)",
        "a shadow badge": ".badge.shadow",
        "an adaptive badge": ".badge.adaptive",
        "the limit now": ".limit-now:not(.is-reduced)",
        "a total admitted": ".total.good",
        "a total refused": ".total.bad",
        "a total would refuse": ".total.warn",
        "the period": ".total.muted",
        "a chart's legend": ".u-legend",
        "a rule no client was refused under": '.rule[data-rule="e2e-adaptive"] .empty:not(.ok)',
        "a client refused now, with an override": ".status.refused:text-matches('^refused now .* · override$')",
        "a client blocked": ".status.refused:text-matches('^blocked until')",
        "a client a shadow rule would refuse": ".status.shadow:text-matches('^would refuse now')",
        "a client at its limit": ".status.limit",
        "a client admitted now": ".status.admitted:text-matches('^admitted now · [1-9]')",
        "a client's places all in use": ".status.refused:text-is('1 of 1 in flight')",
        "a client's place free": ".status.admitted:text-is('0 of 1 in flight')",
        "a status that could not be read": ".status.unknown",
        "a status being read": ".top-refused .status:not(.admitted, .refused, .shadow, .limit, .unknown)",
        "a reset button": "button.reset:not(:disabled)",
        "a reset under way": "button.reset:disabled",
        "an override applied, with its note": "#overrides tr:has(.state.applied) td.note:text-is('axe: applied')",
        "an override expired": "#overrides td.warn + td + td .state.expired",
        "an override pending": ".state.pending",
        "a delete button": "button.danger:not(:disabled)",
        "a delete under way": "button.danger:disabled",
        "more overrides than a page": "#overrides button.link",
        "the override form's errors": "#ov-errors li",
        "a quota's client refused until its period ends": '.rule[data-rule="e2e-quota"] .status.refused',
        "a quota client's usage, none left": "#usage .usage-now .total.bad",
        "what it used this period": "#usage .usage-now .total.muted",
        "its past periods": "#usage table.past-periods td.num",
        "the credit form's errors": "#cr-errors li",
        "the credit form's buttons": "#credit-form button.primary",
        "the form's button": "#override-form button.primary",
        "no failure": "#failures .empty.ok",
        "the latency's note": "#latency-hint",
        "a toast": ".toast:not(.bad)",
        "a toast of a failure": ".toast.bad",
        "the sign-out button": "#signout",
        live: ".live:not(.is-stale)",
      };
      const onTheDashboard = await axeViolations("the dashboard as the Worker shows it", async () => {
        await toasts();
        await expectOnThePage(Object.values(asTheWorkerShowsIt));
      });

      // ---- What failures show: failed calls, lost flushes, an adaptive limit cut, then the statistics unreadable.
      await page.route("**/__ratelimit/stats?*", async (route) => {
        const real = await route.fetch();
        const body = (await real.json()) as Record<string, unknown> & {
          health: Record<string, unknown>;
          adaptive: { rule: string; controller: unknown }[];
        };
        const nowMs = Date.now();
        return route.fulfill({
          response: real,
          json: {
            ...body,
            health: {
              ...body.health,
              failures: { timeout: 2, error: 1 },
              failuresLifetime: { timeout: 5, error: 1 },
              lostFlushes: 1,
              lostDecisions: 7,
            },
            adaptive: body.adaptive.map(({ rule }) => ({
              rule,
              controller: {
                rule,
                nowMs,
                factor: 0.4,
                version: 2,
                mode: "reducing",
                configured: 100,
                limit: 40,
                calmMs: 310,
                drift: true,
                priorities: [
                  { priority: "critical", factor: 1, limit: 100, forwarded: 120, shed: 0 },
                  { priority: "default", factor: 0.4, limit: 40, forwarded: 300, shed: 12 },
                  { priority: "sheddable", factor: 0, limit: 0, forwarded: 80, shed: 900 },
                ],
                history: [
                  { atMs: nowMs - 120_000, limit: 100, configured: 100 },
                  { atMs: nowMs - 60_000, limit: 40, configured: 100 },
                ],
              },
            })),
          },
        });
      });
      await page.selectOption("#range", "15");
      await page.locator('.tile.bad[data-tile="failures"]').waitFor();
      await page.unroute("**/__ratelimit/stats?*");
      await page.route("**/__ratelimit/stats?*", (route) =>
        route.fulfill({ status: 503, contentType: "application/problem+json", body: '{"detail":"unavailable"}' }),
      );
      await page.selectOption("#range", "60");
      await page.locator("#stats-error").waitFor({ state: "visible" });
      const whatFailuresShow: Record<string, string> = {
        "a tile of failures": '.tile.bad[data-tile="failures"] .tile-value',
        "a tile of lost flushes": '.tile.warn[data-tile="lost-flushes"] .tile-value',
        "the failures by reason": "#failures table tbody tr td code",
        "lost flushes in the facts": "#failures .facts dd.warn",
        "an adaptive limit cut": ".limit-now.is-reduced",
        "an origin slower than the target when calm":
          // A selector's quotes take one level of backslashes: "." stands for each parenthesis.
          ".drift-note:text-matches('^Origin slower than the target when calm .310 ms.')",
        "each priority's limit, under priorities":
          ".priority-limits:text-matches('^By priority: critical 100 .0 of 120 refused.')",
        "the statistics unreadable": "#stats-error.notice",
        stale: ".live.is-stale",
      };
      const onFailures = await axeViolations("the dashboard with failures", () =>
        expectOnThePage(Object.values(whatFailuresShow)),
      );
      await page.unroute("**/__ratelimit/stats?*");
      expect([...onTheForm, ...onTheDashboard, ...onFailures]).toEqual([]);
    } finally {
      for (const release of held.splice(0)) release();
      await page.unrouteAll({ behavior: "ignoreErrors" });
      for (const socket of ws) socket.close();
    }
  }, 180_000);

  /** Fails with the selectors that match nothing visible on the page. */
  async function expectOnThePage(selectors: string[]) {
    const missing: string[] = [];
    for (const selector of selectors) {
      if ((await page.locator(selector).filter({ visible: true }).count()) === 0) missing.push(selector);
    }
    expect(missing).toEqual([]);
  }
});

describe.skipIf(skipBrowser)("the dashboard with STATS_RAW_KEYS on", () => {
  let worker: RunningWorker;
  let dir: string;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    // A Worker of its own, as the suite's but with raw keys on: the suite's shows hashes, as a fresh deployment does.
    dir = mkdtempSync(join(tmpdir(), "edge-rate-limiter-e2e-raw-keys-"));
    const configPath = join(dir, "wrangler.toml");
    copyFileSync(join(ROOT, "test/e2e/wrangler.e2e.toml"), configPath);
    const { publicKey } = await generateKeyPair("ES256", { extractable: true });
    const jwk = { ...(await exportJWK(publicKey)), kid: "raw-keys", alg: "ES256", use: "sig" };
    worker = await startWrangler({
      configPath,
      entryPath: join(ROOT, "src/index.ts"),
      vars: {
        ORIGIN_URL: originUrl(),
        ADMIN_TOKEN: inject("adminToken"),
        JWT_JWKS: JSON.stringify({ keys: [jwk] }),
        STATS_RAW_KEYS: "true",
      },
      persistTo: join(dir, "state"),
      logFile: join(dir, "wrangler-dev.log"),
    });
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1280, height: 900 }, locale: "en-US", timezoneId: "UTC" });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await worker?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("shows each refused client by its key as written, in its row, its reset and the page's note", async () => {
    const client = uniqueTag("raw-client");
    for (let i = 0; i < 5; i++) {
      await send(`/dash-rate/raw/${i}`, from(uniqueIp(), { "x-dash-client": client }), worker.url);
    }
    await page.goto(`${worker.url}${PREFIX}/`);
    await page.fill("#token", inject("adminToken"));
    await page.click("#token-submit");
    const shown = `header:x-dash-client=${client}`;
    const row = page.locator(`.rule[data-rule="e2e-dash-rate"] .top-refused tr[data-key="${shown}"]`);
    await row.waitFor({ state: "visible", timeout: 30_000 });
    expect(await row.locator("td.client code").textContent()).toBe(shown);
    expect(await row.locator("td.client").getAttribute("title")).toMatch(/^key hash [0-9a-f]{12}$/);
    expect(await page.locator("#clients-hint").textContent()).toMatch(
      /by their keys as written \(STATS_RAW_KEYS is on\)/,
    );
    expect(await page.locator("#clients-hint").textContent()).not.toContain('set STATS_RAW_KEYS = "true"');
    await row.locator("button.reset").click();
    await expect.poll(() => page.locator(".toast").first().textContent()).toBe(`Reset ${shown} under e2e-dash-rate.`);
    await expect.poll(() => row.locator(".status").textContent(), { timeout: 15_000 }).toBe("admitted now · 3 left");
    expect(await row.locator("button.reset").textContent()).toBe(`Reset ${shown} under e2e-dash-rate`);
    expect((await dayOfStats(worker.url)).rawKeys).toBe(true);
  }, 60_000);
});
