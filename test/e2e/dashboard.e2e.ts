/**
 * The dashboard in a real browser (headless Chromium), against `wrangler dev`
 * with traffic running: an offender from a fixed IP is refused under the
 * e2e config's rule "e2e" (50 a day per IP), while other clients are
 * admitted and a shadow rule logs what it would refuse. The operator opens
 * the page, sees only the token form, signs in, sees the rules, a chart per
 * rule and the offender at the top of the refused clients, presses its Reset,
 * and the offender is admitted again. The overrides' Delete removes exactly
 * the override its row lists, for every shape a key can have; and axe-core
 * finds no serious or critical accessibility violation, with every state the
 * page can colour on it.
 *
 * UPDATE_SCREENSHOT=1 writes the screenshot to docs/dashboard.png (the
 * README's); otherwise it goes to the OS temp directory.
 */
import { execFile } from "node:child_process";
import { randomInt } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { AxeResults } from "axe-core";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import WebSocket from "ws";
import { launchChromium, skipBrowser } from "./support/browser.ts";
import { limiterUrl, send, uniqueIp, uniqueTag } from "./support/client.ts";

const PREFIX = "/__ratelimit";
const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const SCREENSHOT =
  process.env.UPDATE_SCREENSHOT === "1" ? join(ROOT, "docs/dashboard.png") : join(tmpdir(), "dashboard.e2e.png");

const bearer = () => ({ authorization: `Bearer ${inject("adminToken")}` });
const from = (ip: string, headers: Record<string, string> = {}) => ({
  headers: { "cf-connecting-ip": ip, ...headers },
});
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Admin API JSON, with the token. */
async function admin<T>(pathAndQuery: string, method = "GET", body?: unknown): Promise<{ status: number; body: T }> {
  const reply = await send(`${PREFIX}${pathAndQuery}`, {
    method,
    headers: { ...bearer(), ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: reply.status, body: reply.json<T>() };
}

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

      // A tidy picture: the last 15 minutes, once the charts and statuses have drawn.
      await page.selectOption("#range", "15");
      await expect
        .poll(() => page.locator('.rule[data-rule="e2e"] .totals').textContent(), { timeout: 20_000 })
        .toMatch(/[1-9][\d,]* refused/);
      await page.waitForTimeout(1_500);
      await page.mouse.move(1270, 890);
      await page.screenshot({ path: SCREENSHOT });
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
      expect(await card.locator(".rule-def").textContent()).toContain("1 in flight at once");
      expect(problems.filter((p) => !p.includes("401"))).toEqual([]);
    } finally {
      ws.close();
    }
  }, 60_000);

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

  it("has no serious or critical accessibility violation (axe-core), with every state it can show on the page", async () => {
    // Data for every colour the page has: admitted and refused counts, a client refused now
    // and one blocked, one a shadow rule would refuse, overrides applied and expired.
    const apiKey = uniqueTag("axe-key");
    const keyed = { headers: { "x-api-key": apiKey, "cf-connecting-ip": uniqueIp() } };
    for (let i = 0; i < 5; i++) await send(`/keyed/axe/${i}`, keyed);
    const shadowed = uniqueIp();
    for (let i = 0; i < 3; i++) await send(`/shadow/axe/${i}`, from(shadowed));
    const blocked = uniqueIp();
    for (let i = 0; i < 4; i++) await send("/status/401", { method: "POST", ...from(blocked) });
    const applied = uniqueIp();
    expect((await admin(`/overrides?rule=e2e&key=${applied}`, "PUT", { limit: 80, note: "axe" })).status).toBe(200);
    const expired = uniqueIp();
    const expiresMs = Date.now() + 1_500;
    expect((await admin(`/overrides?rule=e2e&key=${expired}`, "PUT", { limit: 80, expires: expiresMs })).status).toBe(
      200,
    );
    await sleep(Math.max(0, expiresMs - Date.now()) + 200);
    const keyHash = (await admin<{ keyHash: string }>(`/status?rule=e2e-per-key&key=${apiKey}`)).body.keyHash;

    // The token form with its error.
    if (await page.locator("#signout").isVisible()) await page.click("#signout");
    await page.goto(`${limiterUrl()}${PREFIX}/`);
    await page.fill("#token", "not-the-token");
    await page.click("#token-submit");
    await page.locator("#token-error").waitFor({ state: "visible" });
    const onTheForm = await axeViolations("the token form");

    await signIn();
    const refusedRow = page.locator(`.rule[data-rule="e2e-per-key"] .top-refused tr[data-key="${keyHash}"]`);
    await refusedRow.waitFor({ state: "visible", timeout: 30_000 });
    await expect.poll(() => refusedRow.locator(".status").textContent(), { timeout: 20_000 }).toMatch(/^refused/);
    // Reset: this client is admitted again, and another stays refused.
    await refusedRow.locator("button.reset").click();
    await expect.poll(() => refusedRow.locator(".status").textContent(), { timeout: 15_000 }).toMatch(/^admitted/);
    // A bad override from the form: its errors.
    await page.selectOption("#ov-rule", "e2e");
    await page.fill("#ov-keys input", "not-an-ip");
    await page.selectOption("#ov-kind", "limit");
    await page.fill("#ov-limit", "5");
    await page.click('#override-form button[type="submit"]');
    await page.locator("#ov-errors li").first().waitFor();

    // States only a failure shows: the statistics unreadable (their notice, the data kept) and a reset
    // that fails (a red toast beside a green one). Toasts last 5 s, so they are made before each run of axe.
    await page.route("**/__ratelimit/stats?*", (route) =>
      route.fulfill({ status: 503, contentType: "application/problem+json", body: '{"detail":"unavailable"}' }),
    );
    await page.selectOption("#range", "15");
    await page.locator("#stats-error").waitFor({ state: "visible" });
    // Every coloured state, on the page when axe runs. A pending override, a lost flush and a
    // status that could not be read share colours checked here (the shadow, warning and plain pills).
    const states = [
      ".tile.good .tile-value",
      ".tile.bad .tile-value",
      ".tile.warn .tile-value",
      ".total.good",
      ".total.bad",
      ".total.warn",
      ".total.muted",
      ".badge.shadow",
      ".badge:not(.shadow)",
      ".status.admitted",
      ".status.refused",
      ".status.shadow",
      ".state.applied",
      ".state.expired",
      "#overrides td.warn",
      "td.note",
      ".empty:not(.ok)",
      ".empty.ok",
      ".notice",
      ".errors li",
      ".toast.bad",
      ".toast:not(.bad)",
      "button.danger",
      "button.reset:not(:disabled)",
      "button.reset:disabled",
      "button.primary",
      ".hint",
      ".rule-def",
      ".u-legend",
    ];
    let releaseResets = () => {};
    const holdResets = async () => {
      releaseResets();
      const held = new Promise<void>((resolve) => {
        releaseResets = resolve;
      });
      await page.route("**/__ratelimit/status?*", async (route) => {
        if (route.request().method() !== "DELETE") return route.fallback();
        await held;
        return route.fallback();
      });
    };
    const showEveryState = async () => {
      releaseResets();
      await page.unroute("**/__ratelimit/status?*");
      await page.route("**/__ratelimit/status?*", (route) =>
        route.request().method() === "DELETE"
          ? route.fulfill({ status: 503, contentType: "application/problem+json", body: '{"detail":"unavailable"}' })
          : route.fallback(),
      );
      await refusedRow.locator("button.reset").click();
      await page.locator(".toast.bad").first().waitFor();
      await page.unroute("**/__ratelimit/status?*");
      await refusedRow.locator("button.reset").click();
      await page.locator(".toast:not(.bad)").first().waitFor();
      // A reset in flight while axe runs: its answer is held until axe is done.
      await holdResets();
      await refusedRow.locator("button.reset").click();
      await refusedRow.locator("button.reset:disabled").waitFor();
      const missing: string[] = [];
      for (const selector of states) {
        if ((await page.locator(selector).filter({ visible: true }).count()) === 0) missing.push(selector);
      }
      expect(missing).toEqual([]);
    };

    const onTheDashboard = await axeViolations("the dashboard with data", showEveryState);
    releaseResets();
    await page.unroute("**/__ratelimit/status?*");
    await page.unroute("**/__ratelimit/stats?*");
    expect([...onTheForm, ...onTheDashboard]).toEqual([]);
  }, 120_000);
});
