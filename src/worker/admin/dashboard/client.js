/**
 * The dashboard in the browser: plain JavaScript, served by the Worker as
 * `{prefix}/dashboard.js` after uPlot (`{prefix}/uplot.js`, the global
 * `uPlot`). bundle.mjs embeds it in assets.ts as it is; run that after an edit.
 *
 * It holds no data of its own: every number comes from the admin API, with
 * the token the operator enters once. The token stays in sessionStorage, so
 * it lasts for this tab's session and no longer. Without one, the page shows
 * the token form and nothing else.
 */

(() => {
  const PREFIX = document.documentElement.dataset.prefix || "/__ratelimit";
  const TOKEN_KEY = "edge-rate-limiter:admin-token";
  /** How often the statistics are read. */
  const REFRESH_MS = 5000;
  /** The top clients' status is read every this many refreshes (and at once after a reset). */
  const STATUS_EVERY = 3;
  /** The overrides are read every this many refreshes (and at once after a change). */
  const OVERRIDES_EVERY = 6;
  /** Overrides listed at first, and added by each "Show more". */
  const OVERRIDES_PAGE = 50;
  /** The most minutes the statistics keep, and so the most a view asks for. */
  const MAX_MINUTES = 1440;
  /** "Fit the data" shows at least this many minutes, so that a minute's bars are not one wide block. */
  const FIT_MIN_MINUTES = 5;
  const COLORS = {
    admitted: "#2f9e6e",
    refused: "#d94848",
    shadow: "#e39a14",
    latency: "#4b6bdc",
    grid: "#edf0f4",
    axis: "#7b8496",
  };

  /** Everything the page knows; reset on sign-out. */
  let state = freshState();

  function freshState() {
    return {
      token: null,
      /** The period: "fit" (from the first minute with data), or a number of minutes. */
      minutes: "fit",
      /** With "fit": the first minute with data, as the last answer had it (null before any data). */
      fitFrom: null,
      /** The last answer's last minute, by the statistics object's clock. */
      lastToMinute: null,
      /** The first minute the page shows. */
      shownFrom: null,
      rules: [],
      tiers: {},
      /** Per rule id: its card's parts and its chart. */
      cards: new Map(),
      latencyChart: null,
      /** `${rule} ${hash}` -> the status answer, or { error }. */
      statuses: new Map(),
      /** `${rule} ${hash}` of each reset under way: its row is redrawn with its button busy. */
      resetting: new Set(),
      /** `${rule} ${keyHash}` of each override being deleted: the same. */
      deleting: new Set(),
      cycle: 0,
      timer: null,
      overrides: { entries: [], next: null, total: 0, pending: 0, error: null },
      observer: null,
    };
  }

  // ---- DOM helpers ----

  const byId = (id) => document.getElementById(id);

  /** An element: `el("td", { class: "num", text: "5" }, child…)`; `on…` attributes become listeners. */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "text") node.textContent = String(value);
      else if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (name === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined && child !== false) {
        node.append(child instanceof Node ? child : document.createTextNode(String(child)));
      }
    }
    return node;
  }

  const number = new Intl.NumberFormat("en-US");
  const fmt = (n) => number.format(n);
  const time = (date) => date.toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit", second: "2-digit" });

  /** "3 s", "4 min 10 s", "2 h 5 min", "1 d 3 h". */
  function duration(seconds) {
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ""}`;
    if (s < 86400) return `${Math.floor(s / 3600)} h${s % 3600 >= 60 ? ` ${Math.floor((s % 3600) / 60)} min` : ""}`;
    return `${Math.floor(s / 86400)} d${s % 86400 >= 3600 ? ` ${Math.floor((s % 86400) / 3600)} h` : ""}`;
  }

  // ---- the admin API ----

  class ApiError extends Error {
    constructor(status, body) {
      super(body?.detail ?? body?.title ?? `HTTP ${status}`);
      this.status = status;
      this.errors = Array.isArray(body?.errors) ? body.errors.map(String) : [];
    }
  }
  class SignedOut extends Error {}

  /** Calls `{prefix}{path}` with the token; `params` is a list of [name, value] (a name may repeat). */
  async function api(method, path, params = [], body = undefined) {
    // The session that asks: an answer that arrives after a sign-out is dropped, never drawn.
    const session = state;
    const token = state.token;
    if (token === null) throw new SignedOut("signed out");
    const url = new URL(PREFIX + path, location.origin);
    for (const [name, value] of params) url.searchParams.append(name, String(value));
    const headers = { Authorization: `Bearer ${token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res;
    try {
      res = await fetch(url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
      });
    } catch (error) {
      if (state !== session) throw new SignedOut("signed out meanwhile");
      throw error;
    }
    if (state !== session) throw new SignedOut("signed out meanwhile");
    // The token changed (or was never right): forget it, whoever asked.
    if (res.status === 401) {
      signOut("The admin token was refused. Enter the current one.");
      throw new SignedOut("unauthorized");
    }
    const text = await res.text();
    if (state !== session) throw new SignedOut("signed out meanwhile");
    let data = null;
    try {
      data = text === "" ? null : JSON.parse(text);
    } catch {
      data = { detail: `HTTP ${res.status}: not JSON` };
    }
    if (!res.ok) throw new ApiError(res.status, data);
    return data;
  }

  // ---- signing in and out ----

  function showLogin(message) {
    byId("login").hidden = false;
    byId("controls").hidden = true;
    const error = byId("token-error");
    error.textContent = message ?? "";
    error.hidden = !message;
    byId("token").focus();
  }

  async function signIn(token, fromForm) {
    state.token = token;
    const button = byId("token-submit");
    button.disabled = true;
    let view;
    try {
      view = await api("GET", "/rules");
    } catch (error) {
      button.disabled = false;
      if (error instanceof SignedOut) return; // signOut showed why
      state.token = null;
      showLogin(`Could not read the rules: ${error.message}`);
      return;
    }
    button.disabled = false;
    sessionStorage.setItem(TOKEN_KEY, token);
    if (fromForm) byId("token").value = "";
    byId("login").hidden = true;
    byId("controls").hidden = false;
    buildDashboard(view);
    refresh();
    loadOverrides();
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    clearTimeout(state.timer);
    for (const card of state.cards.values()) card.chart?.destroy();
    state.latencyChart?.destroy();
    state.observer?.disconnect();
    state = freshState();
    byId("dashboard").replaceChildren();
    byId("dashboard").hidden = true;
    showLogin(message);
  }

  // ---- the page ----

  function buildDashboard(view) {
    state.rules = view.rules;
    state.tiers = view.tiers ?? {};
    const root = byId("dashboard");
    root.replaceChildren(
      el("section", { class: "tiles", id: "tiles", "aria-label": "Summary" }),
      el("p", { class: "notice", id: "stats-error", role: "status", hidden: true }),
      el(
        "section",
        { class: "section", "aria-labelledby": "rules-title" },
        el(
          "div",
          { class: "section-head" },
          el("h2", { id: "rules-title", text: "Rules" }),
          el("p", {
            class: "hint",
            text: "Requests per minute under each rule. Shadow rules (action = log) refuse nothing: they show what they would refuse.",
          }),
        ),
        el("p", { class: "hint clients-hint", id: "clients-hint" }),
        el("div", { class: "rule-grid", id: "rules" }, view.rules.map(ruleCard)),
      ),
      el(
        "section",
        { class: "section", "aria-labelledby": "health-title" },
        el("div", { class: "section-head" }, el("h2", { id: "health-title", text: "Health" })),
        el(
          "div",
          { class: "health-grid" },
          el(
            "article",
            { class: "card" },
            el("h3", { text: "Decision latency" }),
            el("p", { class: "hint", id: "latency-hint", text: "Decisions that called a Durable Object." }),
            el("div", { class: "chart", id: "latency-chart" }),
          ),
          el(
            "article",
            { class: "card" },
            el("h3", { text: "Failures and lost statistics" }),
            el("div", { id: "failures" }),
          ),
        ),
      ),
      el(
        "section",
        { class: "section", "aria-labelledby": "overrides-title" },
        el(
          "div",
          { class: "section-head" },
          el("h2", { id: "overrides-title", text: "Per-client overrides" }),
          el("p", {
            class: "hint",
            text: "A client's own limit under one rule, a tier, unlimited or deny; applied at once, no deploy.",
          }),
        ),
        el("article", { class: "card" }, el("div", { id: "overrides" }), overrideForm()),
      ),
      quotaRules().length === 0
        ? null
        : el(
            "section",
            { class: "section", "aria-labelledby": "quotas-title" },
            el(
              "div",
              { class: "section-head" },
              el("h2", { id: "quotas-title", text: "Quotas: usage and credits" }),
              el("p", {
                class: "hint",
                text: "A client's usage of a quota, this period and the ones before; a credit adds to, takes from or sets what it has left this period, at once.",
              }),
            ),
            el("article", { class: "card" }, creditForm(), el("div", { id: "usage", "aria-live": "polite" })),
          ),
    );
    root.hidden = false;
    renderTiles(null);
    state.latencyChart = latencyChart(byId("latency-chart"));
    state.observer = new ResizeObserver(() => resizeCharts());
    state.observer.observe(root);
  }

  /**
   * "50 per 1d · per ip · /* · every method", "10 per 1s, bursts of 20 · …"
   * for a token bucket, "2 in flight at once · …" for a concurrency rule,
   * "100,000 per month (monthly on day 1 at 00:00 UTC) · …" for a quota.
   */
  function ruleSummary(rule) {
    // The limit in its kind's own words, as the rules API says it.
    const parts = [rule.summary, `per ${rule.key.join(" + ")}`, rule.path.join(", ")];
    parts.push(rule.methods === null ? "every method" : rule.methods.join(", "));
    if (rule.exclude.length > 0) parts.push(`except ${rule.exclude.join(", ")}`);
    // A kind that counts no cost (requests in flight) has neither field.
    if (rule.count !== undefined && rule.count !== "all") parts.push(`counts ${JSON.stringify(rule.count)}`);
    if (rule.cost !== undefined && rule.cost !== 1) parts.push(`cost ${rule.cost}`);
    return parts.join(" · ");
  }

  function ruleCard(rule) {
    const shadow = rule.action === "log";
    const badges = el(
      "span",
      { class: "badges" },
      shadow ? el("span", { class: "badge shadow", text: "shadow · logs only" }) : null,
      rule.on_error === "closed" ? el("span", { class: "badge", text: "fails closed" }) : null,
      rule.block_for ? el("span", { class: "badge", text: `penalty ${rule.block_for}` }) : null,
      rule.strict ? el("span", { class: "badge", text: "strict" }) : null,
      rule.adaptive ? el("span", { class: "badge adaptive", text: "adaptive" }) : null,
    );
    const totals = el("div", { class: "totals" });
    const chartBox = el("div", { class: "chart" });
    // An adaptive rule: its current limit against the configured one over time (the controller's history).
    const limitText = rule.adaptive ? el("p", { class: "limit-now" }) : null;
    // An origin slower than the rule's target while nothing queues (a baseline drift): said on the card.
    const driftNote = rule.adaptive ? el("p", { class: "drift-note", hidden: true }) : null;
    // Under priorities: each priority's limit now, and what the reduction refused of it over the period.
    const priorityText = rule.adaptive ? el("p", { class: "priority-limits", hidden: true }) : null;
    const limitBox = rule.adaptive ? el("div", { class: "chart limit-chart", hidden: true }) : null;
    const topBody = el("tbody");
    const topEmpty = el("p", { class: "empty", text: "No client refused yet." });
    const card = el(
      "article",
      { class: `card rule${shadow ? " is-shadow" : ""}`, dataset: { rule: rule.id } },
      el("header", { class: "rule-head" }, el("h3", { text: rule.id }), badges),
      el("p", { class: "rule-def", text: ruleSummary(rule) }),
      totals,
      chartBox,
      limitText,
      priorityText,
      driftNote,
      limitBox,
      el(
        "div",
        { class: "top" },
        el("h4", { text: shadow ? "Clients it would refuse most" : "Most refused clients" }),
        el(
          "table",
          { class: "top-refused" },
          el(
            "thead",
            {},
            el(
              "tr",
              {},
              el("th", { text: "Client" }),
              el("th", {
                class: "num",
                text: shadow ? "Would refuse so far" : "Refused so far",
                title: "Since the statistics began counting; ≤ marks an estimate",
              }),
              el("th", { text: "Now", title: "What the client's next request would get" }),
              actionsHeader(),
            ),
          ),
          topBody,
        ),
        topEmpty,
      ),
    );
    state.cards.set(rule.id, {
      rule,
      card,
      totals,
      chartBox,
      topBody,
      topEmpty,
      chart: null,
      shadow,
      limitText,
      priorityText,
      driftNote,
      limitBox,
      limitChart: null,
    });
    return card;
  }

  /**
   * A button named by what it shows: the verb on the screen ("Reset"), and
   * what it acts on after it for screen readers only (" ip=203.0.113.7 under
   * api"). The accessible name is the button's own text, so it contains the
   * visible text in every state; `busy()` shows another verb ("Resetting…")
   * and disables it, `idle()` puts it back.
   */
  function actionButton({ verb, busyVerb, about, ...attrs }) {
    const shown = el("span", { class: "verb", text: verb });
    const button = el(
      "button",
      { type: "button", ...attrs },
      shown,
      el("span", { class: "visually-hidden", text: ` ${about}` }),
    );
    button.busy = () => {
      button.disabled = true;
      shown.textContent = busyVerb;
    };
    button.idle = () => {
      button.disabled = false;
      shown.textContent = verb;
    };
    return button;
  }

  /** The header of a column of buttons: named for screen readers, blank on the screen. */
  const actionsHeader = () => el("th", { class: "actions" }, el("span", { class: "visually-hidden", text: "Actions" }));

  /** Like `replaceChildren`, leaving out null and false (which it would write as text). */
  const fill = (node, ...children) => node.replaceChildren(...children.flat().filter((c) => c !== null && c !== false));

  // ---- charts (uPlot) ----

  const axis = (extra = {}) => ({
    stroke: COLORS.axis,
    grid: { stroke: COLORS.grid, width: 1 },
    ticks: { show: false },
    font: "11px system-ui, sans-serif",
    ...extra,
  });

  /** Tick steps for counts: 1, 2, 5, 10, 20, 50… */
  const WHOLE_STEPS = Array.from({ length: 30 }, (_, i) => [1, 2, 5][i % 3] * 10 ** Math.floor(i / 3));

  const chartWidth = (box) => Math.max(240, Math.floor(box.clientWidth));

  /** Tick steps for a time axis in seconds: whole minutes, then hours. */
  const MINUTE_STEPS = [60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

  function ruleChart(entry) {
    const { shadow, chartBox } = entry;
    const bars = (align) => uPlot.paths.bars({ size: [0.42, 14], align, gap: 1 });
    const second = shadow
      ? { label: "would refuse (shadow)", stroke: COLORS.shadow, fill: `${COLORS.shadow}b3` }
      : { label: "refused", stroke: COLORS.refused, fill: `${COLORS.refused}cc` };
    return new uPlot(
      {
        width: chartWidth(chartBox),
        height: 150,
        padding: [10, 18, 0, 0],
        cursor: { drag: { x: false, y: false }, points: { show: false } },
        legend: { show: true, live: true },
        // At rest the legend shows the latest minute; under the cursor, the minute it points at.
        hooks: { setLegend: [restingLegend] },
        scales: {
          // Half a minute either side, so the first and last minutes' bars are drawn whole.
          x: { time: true, range: (_u, min, max) => [min - 30, max + 30] },
          y: { range: (_u, _min, max) => [0, Math.max(4, Math.ceil(max * 1.15))] },
        },
        axes: [
          // Ticks at whole minutes, so that no two read alike.
          axis({ space: 60, size: 28, incrs: MINUTE_STEPS, values: (_u, splits) => splits.map((v) => hhmm(v)) }),
          // Counts are whole: ticks at whole numbers only.
          axis({ size: 44, incrs: WHOLE_STEPS, values: (_u, splits) => splits.map((v) => compact(v)) }),
        ],
        series: [
          { label: "minute", value: (_u, v) => (v === null ? "–" : hhmm(v)) },
          {
            label: "admitted",
            stroke: COLORS.admitted,
            fill: `${COLORS.admitted}cc`,
            width: 1,
            paths: bars(-1),
            points: { show: false },
            value: (_u, v) => fmt(v ?? 0),
          },
          { ...second, width: 1, paths: bars(1), points: { show: false }, value: (_u, v) => fmt(v ?? 0) },
        ],
      },
      [[], [], []],
      chartBox,
    );
  }

  /** An adaptive rule's limit over time: the current limit, stepped at each change, against the configured one. */
  function limitChart(entry) {
    return new uPlot(
      {
        width: chartWidth(entry.limitBox),
        height: 110,
        padding: [10, 18, 0, 0],
        cursor: { drag: { x: false, y: false }, points: { show: false } },
        legend: { show: true, live: true },
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(4, Math.ceil(max * 1.15))] } },
        axes: [
          axis({ space: 60, size: 28, values: (_u, splits) => splits.map((v) => hhmm(v)) }),
          axis({ size: 44, incrs: WHOLE_STEPS, values: (_u, splits) => splits.map((v) => compact(v)) }),
        ],
        series: [
          { label: "time", value: (_u, v) => (v === null ? "–" : hhmm(v)) },
          {
            label: "limit now",
            stroke: COLORS.refused,
            width: 2,
            paths: uPlot.paths.stepped({ align: 1 }),
            points: { show: false },
            value: (_u, v) => fmt(v ?? 0),
          },
          {
            label: "configured",
            stroke: COLORS.axis,
            width: 1,
            dash: [4, 4],
            points: { show: false },
            value: (_u, v) => fmt(v ?? 0),
          },
        ],
      },
      [[], [], []],
      entry.limitBox,
    );
  }

  function renderLimit(entry, controller) {
    if (entry.limitText === null) return;
    if (!controller || controller.limit === null) {
      entry.limitText.textContent = "Limit as configured: no report from the origin's health yet.";
      entry.limitBox.hidden = true;
      entry.driftNote.hidden = true;
      entry.priorityText.hidden = true;
      return;
    }
    renderDrift(entry, controller);
    renderPriorities(entry, controller);
    entry.limitBox.hidden = false;
    const mode = { full: "as configured", reducing: "reduced", recovering: "recovering" }[controller.mode] ?? "";
    entry.limitText.textContent = `Limit now ${fmt(controller.limit)} of ${fmt(controller.configured)} configured (${mode}, factor ${controller.factor.toFixed(2)})`;
    entry.limitText.classList.toggle("is-reduced", controller.limit < controller.configured);
    const points = [...controller.history];
    // The chart runs to now, at the current limit.
    points.push({ atMs: controller.nowMs, limit: controller.limit, configured: controller.configured });
    if (entry.limitChart === null) entry.limitChart = limitChart(entry);
    entry.limitChart.setData([
      points.map((p) => p.atMs / 1000),
      points.map((p) => p.limit),
      points.map((p) => p.configured),
    ]);
  }

  /**
   * Under priorities: each priority's limit now, refused last first, and how
   * many of its requests the reduction refused over the period shown.
   */
  function renderPriorities(entry, controller) {
    const priorities = controller.priorities ?? [];
    entry.priorityText.hidden = priorities.length === 0;
    if (priorities.length === 0) return;
    entry.priorityText.textContent = `By priority: ${priorities
      .map((p) => `${p.priority} ${fmt(p.limit)} (${fmt(p.shed)} of ${fmt(p.forwarded + p.shed)} refused)`)
      .join(" · ")}`;
  }

  /**
   * A baseline drift: the origin slower than the rule's target while nothing
   * queues, so that lowering the limit would not help and slow answers no
   * longer lower it. The operator should raise the target or look at the origin.
   */
  function renderDrift(entry, controller) {
    entry.driftNote.hidden = !controller.drift;
    if (!controller.drift) return;
    const calm =
      controller.calmMs === null || controller.calmMs === undefined
        ? ""
        : ` (${fmt(Math.round(controller.calmMs))} ms)`;
    entry.driftNote.textContent =
      `Origin slower than the target when calm${calm}, above ${entry.rule.adaptive.latency}: ` +
      "lowering the limit would not make it faster, so slow answers no longer lower it. Raise the target, or look at the origin.";
  }

  /** While the cursor is off the chart, the legend shows the last minute (uPlot would show none). */
  function restingLegend(u) {
    const last = (u.data[0]?.length ?? 0) - 1;
    const resting = !(u.cursor.left >= 0);
    if (resting && last >= 0 && u.legend.idx !== last) queueMicrotask(() => u.setLegend({ idx: last }, false));
  }

  /** Unix seconds as the local "14:05". */
  const hhmm = (seconds) => time(new Date(seconds * 1000)).slice(0, 5);

  const compact = (v) => (v >= 1e6 ? `${v / 1e6}M` : v >= 1e3 ? `${v / 1e3}k` : String(v));

  function latencyChart(box) {
    return new uPlot(
      {
        width: chartWidth(box),
        height: 170,
        padding: [10, 6, 0, 0],
        cursor: { drag: { x: false, y: false }, points: { show: false } },
        legend: { show: false },
        scales: {
          x: { time: false, range: (u) => [-0.5, Math.max(0, (u.data[0]?.length ?? 1) - 1) + 0.5] },
          y: { range: (_u, _min, max) => [0, Math.max(4, Math.ceil(max * 1.15))] },
        },
        axes: [
          axis({
            splits: (u) => u.data[0].map((_, i) => i),
            values: (_u, splits) => splits.map((i) => state.latencyLabels?.[i] ?? ""),
            grid: { show: false },
          }),
          axis({ size: 44, incrs: WHOLE_STEPS, values: (_u, splits) => splits.map((v) => compact(v)) }),
        ],
        series: [
          {},
          {
            label: "decisions",
            stroke: COLORS.latency,
            fill: `${COLORS.latency}cc`,
            width: 1,
            paths: uPlot.paths.bars({ size: [0.7, 48], gap: 2 }),
            points: { show: false },
          },
        ],
      },
      [[], []],
      box,
    );
  }

  function resizeCharts() {
    for (const entry of state.cards.values()) {
      if (entry.chart) entry.chart.setSize({ width: chartWidth(entry.chartBox), height: 150 });
      if (entry.limitChart) entry.limitChart.setSize({ width: chartWidth(entry.limitBox), height: 110 });
    }
    const box = byId("latency-chart");
    if (state.latencyChart && box) state.latencyChart.setSize({ width: chartWidth(box), height: 170 });
  }

  // ---- statistics ----

  /** Refused with a 429: by the rule's object, or by an isolate that knew the refusal. */
  const refusedOf = (c) => (c.refused ?? 0) + (c.refused_cached ?? 0);
  const failedOf = (c) => (c.failed_open ?? 0) + (c.failed_closed ?? 0);

  function schedule() {
    clearTimeout(state.timer);
    state.timer = setTimeout(refresh, REFRESH_MS);
  }

  async function refresh() {
    if (state.token === null) return;
    if (document.hidden) return schedule();
    const cycle = state.cycle++;
    try {
      const stats = await api("GET", "/stats", [["minutes", minutesToAsk()]]);
      renderStats(stats, cycle);
      setLive(true, `Live · ${time(new Date())}`);
      byId("stats-error").hidden = true;
    } catch (error) {
      if (error instanceof SignedOut) return;
      setLive(false, `Stale · ${time(new Date())}`);
      const notice = byId("stats-error");
      if (notice === null) return;
      notice.textContent =
        error.status === 404 || error.status === 501
          ? `No statistics here (${error.message})`
          : `Could not read the statistics: ${error.message}`;
      notice.hidden = false;
    }
    if (cycle > 0 && cycle % OVERRIDES_EVERY === 0) loadOverrides();
    if (state.token !== null) schedule();
  }

  /**
   * The minutes to ask the statistics for: the period chosen, or with "fit"
   * every minute since the first with data (by the statistics object's
   * clock, one more for a minute that began since), or the whole 24 hours
   * until that minute is known.
   */
  function minutesToAsk() {
    if (state.minutes !== "fit") return state.minutes;
    if (state.fitFrom === null || state.lastToMinute === null) return MAX_MINUTES;
    return Math.min(MAX_MINUTES, Math.max(FIT_MIN_MINUTES, state.lastToMinute - state.fitFrom + 2));
  }

  /**
   * The period in words: "since 14:05" (fit, from the first minute with
   * data), or "in the last 5 min" (fit, data younger than that), or "in the
   * last 1 h".
   */
  function periodText() {
    if (state.minutes === "fit" && state.shownFrom === state.fitFrom) return `since ${hhmm(state.shownFrom * 60)}`;
    const minutes = state.minutes === "fit" ? state.lastToMinute - state.shownFrom + 1 : state.minutes;
    return `in the last ${duration(minutes * 60)}`;
  }

  function setLive(ok, text) {
    const live = byId("live");
    live.textContent = text;
    live.classList.toggle("is-stale", !ok);
  }

  function renderStats(stats, cycle) {
    // "Fit the data": from the first minute with a decision, at least FIT_MIN_MINUTES; the answer covers
    // every minute from it, so its totals are the shown minutes' too.
    let from = stats.fromMinute;
    if (state.minutes === "fit") {
      const firsts = stats.rules.flatMap((r) => (r.series.length > 0 ? [r.series[0].minute] : []));
      state.fitFrom = firsts.length > 0 ? Math.min(...firsts) : null;
      from = Math.max(
        stats.fromMinute,
        Math.min(state.fitFrom ?? stats.toMinute, stats.toMinute - FIT_MIN_MINUTES + 1),
      );
    }
    state.lastToMinute = stats.toMinute;
    state.shownFrom = from;
    renderTiles(stats);
    renderClientsHint(stats.rawKeys);
    const rows = new Map(stats.rules.map((r) => [r.id, r]));
    const minutes = [];
    for (let m = from; m <= stats.toMinute; m++) minutes.push(m);
    const controllers = new Map((stats.adaptive ?? []).map((a) => [a.rule, a.controller]));
    for (const entry of state.cards.values()) {
      const view = rows.get(entry.rule.id);
      renderRule(entry, view, minutes, cycle);
      renderLimit(entry, controllers.get(entry.rule.id));
    }
    renderLatency(stats.latency);
    renderFailures(stats.health);
  }

  /**
   * The summary: each tile a figure and a line that says what it counts.
   * The request tiles sum the rules' counts, and a request is counted under
   * each rule that matched it (the statistics keep no other count), so they
   * say so.
   */
  function renderTiles(stats) {
    const tiles = byId("tiles");
    if (!tiles) return;
    const sum = (pick) => (stats ? stats.rules.reduce((n, r) => n + pick(r.totals), 0) : null);
    const failures = stats ? Object.values(stats.health.failures).reduce((n, v) => n + v, 0) : null;
    const tile = (key, label, value, about, tone) =>
      el(
        "div",
        { class: `tile${tone ? ` ${tone}` : ""}`, dataset: { tile: key } },
        el("span", { class: "tile-label", text: label }),
        el("span", { class: "tile-value", text: value ?? "–" }),
        el("span", { class: "tile-about", text: about }),
      );
    const count = (pick) => (stats ? fmt(sum(pick)) : null);
    const lost = stats ? stats.health.lostFlushes : null;
    const lostDecisions = stats ? stats.health.lostDecisions : 0;
    const latency = stats?.latency;
    tiles.replaceChildren(
      tile(
        "admitted",
        "Admitted",
        count((t) => t.admitted),
        "requests let through, once under each rule that matched it",
        "good",
      ),
      tile(
        "held",
        "Held",
        count((t) => t.held ?? 0),
        "admitted after they waited for their turn (max_delay) or a place (concurrency)",
        "good",
      ),
      tile(
        "refused",
        "Refused",
        count(refusedOf),
        "answered 429 at the edge, once under each rule that refused it",
        "bad",
      ),
      tile(
        "shed",
        "Shed",
        count((t) => t.shed ?? 0),
        "answered 503: an adaptive rule's limit was cut while the origin recovers",
        "bad",
      ),
      tile(
        "would-refuse",
        "Would refuse",
        count((t) => t.shadow_refused),
        "what shadow rules (action = log) would have refused; they went on",
        "warn",
      ),
      tile(
        "p50",
        "Latency p50",
        stats ? quantileText(latency.p50) : null,
        `median call to a Durable Object, ${bucketText(latency?.p50)}`,
      ),
      tile(
        "p99",
        "Latency p99",
        stats ? quantileText(latency.p99) : null,
        `1 call in 100 took longer, ${bucketText(latency?.p99)}`,
      ),
      tile(
        "failures",
        "Failures",
        stats ? fmt(failures) : null,
        "calls to Durable Objects that failed: timeouts, errors, overload",
        failures ? "bad" : "",
      ),
      tile(
        "lost-flushes",
        "Lost flushes",
        stats ? fmt(lost) : null,
        `isolates' counts that never reached the statistics: ${fmt(lostDecisions)} decision${lostDecisions === 1 ? "" : "s"} missing`,
        lost ? "warn" : "",
      ),
    );
  }

  /**
   * A latency quantile as the histogram supports it: an estimate within its
   * bucket ("≈ 35 ms"), or "> 5 s" in the last, open bucket.
   */
  function quantileText(q) {
    if (!q) return "–";
    if (q.estimateMs === null) return `> ${q.lowMs >= 1000 ? `${q.lowMs / 1000} s` : `${q.lowMs} ms`}`;
    return `≈ ${q.estimateMs < 10 ? q.estimateMs.toFixed(1) : fmt(Math.round(q.estimateMs))} ms`;
  }

  /** Where the estimate comes from: "in the 20–50 ms bucket", or "above 5 s". */
  function bucketText(q) {
    if (!q) return "none yet";
    if (q.highMs === null) return `above ${q.lowMs >= 1000 ? `${q.lowMs / 1000} s` : `${q.lowMs} ms`}`;
    return `in the ${fmt(q.lowMs)}–${fmt(q.highMs)} ms bucket`;
  }

  /** How clients are shown, and how to show their keys when only hashes are kept. */
  function renderClientsHint(rawKeys) {
    const hint = byId("clients-hint");
    if (!hint) return;
    if (rawKeys) {
      hint.replaceChildren(
        "Clients are shown by their keys as written (STATS_RAW_KEYS is on); a client refused before it was on, by its key's hash.",
      );
      return;
    }
    hint.replaceChildren(
      "Clients are shown by the first 12 hex digits of their key's hash. To show their keys (an IP, an API key), set ",
      el("code", { text: 'STATS_RAW_KEYS = "true"' }),
      " in the [vars] of wrangler.toml and deploy; the statistics object then keeps them.",
    );
  }

  function renderRule(entry, view, minutes, cycle) {
    const byMinute = new Map((view?.series ?? []).map((p) => [p.minute, p.counts]));
    const xs = minutes.map((m) => m * 60);
    // A minute with none is null rather than 0: no bar at all, rather than a sliver on the axis.
    const orNull = (n) => (n > 0 ? n : null);
    // Held requests went on too, after a wait: they are part of the admitted bar (the totals tell them apart).
    const admitted = minutes.map((m) => orNull((byMinute.get(m)?.admitted ?? 0) + (byMinute.get(m)?.held ?? 0)));
    const second = minutes.map((m) => {
      const c = byMinute.get(m);
      // Shed requests were refused too (503, capacity reduced): in the refused bar, told apart in the totals.
      return orNull(c ? (entry.shadow ? c.shadow_refused : refusedOf(c) + (c.shed ?? 0)) : 0);
    });
    if (entry.chart === null) entry.chart = ruleChart(entry);
    entry.chart.setData([xs, admitted, second]);
    entry.chartBox.dataset.fromMinute = String(minutes[0]);
    entry.chartBox.dataset.toMinute = String(minutes.at(-1));

    const totals = view?.totals ?? {};
    const pill = (label, value, tone) =>
      el("span", { class: `total ${tone}` }, el("b", { text: fmt(value ?? 0) }), ` ${label}`);
    fill(
      entry.totals,
      pill("admitted", totals.admitted, "good"),
      (totals.held ?? 0) > 0 ? pill("held", totals.held, "good") : null,
      entry.shadow ? pill("would refuse", totals.shadow_refused, "warn") : pill("refused", refusedOf(totals), "bad"),
      (totals.shed ?? 0) > 0 ? pill("shed (503, capacity reduced)", totals.shed, "bad") : null,
      failedOf(totals) > 0 ? pill("failed", failedOf(totals), "bad") : null,
      el("span", { class: "total muted", text: periodText() }),
    );
    renderTop(entry, view?.topRefused ?? [], cycle);
  }

  function renderTop(entry, top, cycle) {
    const { rule, topBody, topEmpty } = entry;
    topEmpty.hidden = top.length > 0;
    const stale = [];
    const rows = top.map((client) => {
      const id = `${rule.id} ${client.hash}`;
      if (!state.statuses.has(id) || cycle % STATUS_EVERY === 0) stale.push(client);
      return topRow(rule, client);
    });
    topBody.replaceChildren(...rows);
    for (const client of stale) loadStatus(rule, client);
  }

  function topRow(rule, client) {
    const id = `${rule.id} ${client.hash}`;
    const count = client.error > 0 ? `≤ ${fmt(client.count)}` : fmt(client.count);
    const status = el("span", {
      class: "status",
      dataset: {
        shadow: rule.action === "log" ? "yes" : "",
        quota: rule.credits ? "yes" : "",
      },
    });
    paintStatus(status, state.statuses.get(id));
    const reset = actionButton({
      verb: "Reset",
      busyVerb: "Resetting…",
      about: `${client.key} under ${rule.id}`,
      class: "reset",
      title: "Reset this client's count (and penalty) under this rule",
      onclick: () => resetClient(rule, client),
    });
    // A reset under way when the table is redrawn: still shown as such, and not sent twice.
    if (state.resetting.has(id)) reset.busy();
    return el(
      "tr",
      { dataset: { hash: client.hash, key: client.key } },
      el("td", { class: "client", title: `key hash ${client.hash.slice(0, 12)}` }, el("code", { text: client.key })),
      el("td", {
        class: "num",
        text: count,
        title: client.error > 0 ? `between ${fmt(client.count - client.error)} and ${fmt(client.count)}` : undefined,
      }),
      el("td", {}, status),
      el("td", { class: "actions" }, reset),
    );
  }

  /**
   * A client's state now, in words and a colour that agree: refused (red),
   * blocked by a penalty (red), what a shadow rule would refuse (amber), at
   * its limit (amber: its next request is admitted, the one after refused),
   * admitted with some left (green).
   */
  function paintStatus(node, status) {
    node.classList.remove("admitted", "refused", "shadow", "limit", "unknown");
    node.removeAttribute("title");
    if (status === undefined) {
      node.textContent = "…";
      return;
    }
    if (status.error) {
      node.classList.add("unknown");
      node.textContent = "unknown";
      node.title = status.error;
      return;
    }
    const extra = status.override ? " · override" : status.tier ? ` · tier ${status.tier}` : "";
    if (status.inUse !== undefined) {
      // A concurrency rule: its places, not a count in a window.
      paintPlaces(node, status, extra);
      return;
    }
    const atLimit = status.allowed && status.remaining === 0;
    if (status.blockedUntil) {
      node.classList.add("refused");
      node.textContent = `blocked until ${time(new Date(status.blockedUntil))}${extra}`;
    } else if (!status.allowed && status.never) {
      // No wait admits it: a request costing more than a token bucket's burst, or a lasting deny.
      node.classList.add(node.dataset.shadow ? "shadow" : "refused");
      node.textContent = `${node.dataset.shadow ? "would refuse" : "refused"} now · whatever the wait${extra}`;
    } else if (!status.allowed && node.dataset.shadow) {
      // A shadow rule refuses nothing: this is what it would do, were it enforced.
      node.classList.add("shadow");
      node.textContent = `would refuse now · for ${duration(status.retryAfterSeconds)}${extra}`;
    } else if (!status.allowed) {
      node.classList.add("refused");
      node.textContent = `refused now · retry in ${duration(status.retryAfterSeconds)}${extra}`;
    } else if (atLimit) {
      node.classList.add("limit");
      node.textContent = `at its limit now${extra}`;
    } else {
      node.classList.add("admitted");
      node.textContent =
        status.remaining === null || status.remaining === undefined
          ? `admitted now${extra}`
          : `admitted now · ${fmt(status.remaining)} left${extra}`;
    }
    if (typeof status.weighted === "number" && typeof status.limit === "number" && node.dataset.quota) {
      node.title = `${fmt(status.weighted)} of ${fmt(status.limit)} used this period (credits taken off); it renews in ${duration(status.resetSeconds)}.`;
    } else if (typeof status.weighted === "number" && typeof status.burst === "number") {
      node.title =
        `Token bucket: ${tenth(status.weighted)} of a burst of ${fmt(status.burst)} spent, ` +
        `refilling ${fmt(status.limit)} per ${duration(Math.round(status.periodMs / 1000))}.`;
    } else if (typeof status.weighted === "number" && typeof status.limit === "number") {
      node.title =
        `Sliding-window count ${tenth(status.weighted)} of ${fmt(status.limit)}` +
        (atLimit ? ": its next request is admitted, and the one after it refused." : ".");
    } else if (status.limit === null) {
      node.title = "No limit: an override lifts or denies it.";
    }
  }

  /**
   * A count to a tenth, rounded down, so that it compares with a whole
   * limit as the rule does (admitted below the limit): 2.38 is "2.3".
   */
  const tenthFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
  const tenth = (n) => tenthFormat.format(Math.floor(Math.round(n * 1e6) / 1e5) / 10);

  /** A client's places under a concurrency rule: how many are in use, and how many requests wait for one. */
  function paintPlaces(node, status, extra) {
    if (status.override === "deny") {
      // Its places do not matter: every request is refused (403).
      node.classList.add("refused");
      node.textContent = `denied${extra}`;
      node.title = "An override denies this client: every request it sends is refused with 403.";
      return;
    }
    const full = status.free !== null && status.free <= 0;
    node.classList.add(full ? (node.dataset.shadow ? "shadow" : "refused") : "admitted");
    const limit = status.limit === null ? "no limit" : fmt(status.limit);
    const waiting = status.waiting > 0 ? ` · ${fmt(status.waiting)} waiting` : "";
    node.textContent = `${fmt(status.inUse)} of ${limit} in flight${waiting}${extra}`;
    node.title = `${status.free === null ? "no limit" : `${fmt(status.free)} free`}; a place not renewed is taken back after ${duration(status.placeTimeoutMs / 1000)}`;
  }

  async function loadStatus(rule, client) {
    const id = `${rule.id} ${client.hash}`;
    let status;
    try {
      status = await api("GET", "/status", [
        ["rule", rule.id],
        ["hash", client.hash],
      ]);
    } catch (error) {
      if (error instanceof SignedOut) return;
      status = { error: error.message };
    }
    state.statuses.set(id, status);
    const row = state.cards.get(rule.id)?.topBody.querySelector(`tr[data-hash="${client.hash}"] .status`);
    if (row) paintStatus(row, status);
  }

  /** The button of a client's row as it is now: the table is redrawn at every refresh. */
  const resetButton = (rule, client) =>
    state.cards.get(rule.id)?.topBody.querySelector(`tr[data-hash="${client.hash}"] button.reset`) ?? null;

  async function resetClient(rule, client) {
    const id = `${rule.id} ${client.hash}`;
    if (state.resetting.has(id)) return;
    const session = state;
    state.resetting.add(id);
    resetButton(rule, client)?.busy();
    try {
      await api("DELETE", "/status", [
        ["rule", rule.id],
        ["hash", client.hash],
      ]);
      toast(`Reset ${client.key} under ${rule.id}.`);
    } catch (error) {
      if (error instanceof SignedOut) return;
      toast(`Reset failed: ${error.message}`, true);
    }
    await loadStatus(rule, client);
    session.resetting.delete(id);
    if (state === session) resetButton(rule, client)?.idle();
  }

  function renderLatency(latency) {
    // Each bucket by its upper bound: "10" holds 5 to 10 ms; the last holds the rest.
    const bound = (b) => (b >= 1000 ? `${b / 1000}s` : `${b}`);
    state.latencyLabels = [...latency.boundsMs.map(bound), `>${bound(latency.boundsMs.at(-1))}`];
    const calls = latency.counts.reduce((n, v) => n + v, 0);
    byId("latency-hint").textContent =
      `${fmt(calls)} decisions that called a Durable Object, by milliseconds (upper bound of each bucket) · ` +
      `p50 ${quantileText(latency.p50)} · p99 ${quantileText(latency.p99)}, each estimated within its bucket`;
    state.latencyChart?.setData([latency.counts.map((_, i) => i), latency.counts.map((v) => v)]);
  }

  function renderFailures(health) {
    const reasons = new Set([...Object.keys(health.failures), ...Object.keys(health.failuresLifetime)]);
    const rows = [...reasons]
      .sort()
      .map((reason) =>
        el(
          "tr",
          {},
          el("td", {}, el("code", { text: reason })),
          el("td", { class: "num", text: fmt(health.failures[reason] ?? 0) }),
          el("td", { class: "num", text: fmt(health.failuresLifetime[reason] ?? 0) }),
        ),
      );
    byId("failures").replaceChildren(
      rows.length === 0
        ? el("p", { class: "empty ok", text: "No call to a Durable Object failed." })
        : el(
            "table",
            { class: "data" },
            el(
              "thead",
              {},
              el(
                "tr",
                {},
                el("th", { text: "Failure" }),
                el("th", { class: "num", text: "This period" }),
                el("th", { class: "num", text: "Since start" }),
              ),
            ),
            el("tbody", {}, rows),
          ),
      el(
        "dl",
        { class: "facts" },
        el("dt", { text: "Flushes received" }),
        el("dd", { text: fmt(health.flushes) }),
        el("dt", { text: "Flushes lost" }),
        el("dd", { class: health.lostFlushes ? "warn" : "", text: fmt(health.lostFlushes) }),
        el("dt", { text: "Decisions in lost flushes" }),
        el("dd", { class: health.lostDecisions ? "warn" : "", text: fmt(health.lostDecisions) }),
      ),
      el("p", {
        class: "hint",
        text: "Isolates send their counts at most every 10 s; a flush that never arrived is counted here once a later one does.",
      }),
    );
  }

  // ---- overrides ----

  /**
   * A listed client as it is shown: its `key=` parameters, which the API
   * lists with it (`ip=203.0.113.7`; `header:x-api-key=` for clients without
   * the header) and which the page sends to delete it.
   */
  const clientText = (entry) => entry.keyParams.join(" & ");

  function settingOf(entry) {
    if (entry.limit !== undefined) {
      // A token bucket's burst of the client's own, when the override gives one.
      return entry.burst === undefined
        ? `limit ${fmt(entry.limit)}`
        : `limit ${fmt(entry.limit)}, burst ${fmt(entry.burst)}`;
    }
    if (entry.tier !== undefined) return `tier ${entry.tier}`;
    if (entry.unlimited) return "unlimited";
    if (entry.deny) return "deny";
    return "none";
  }

  async function loadOverrides(more = false) {
    const box = byId("overrides");
    if (!box) return;
    // Read again, the list keeps as many entries as it shows: "Show more" is not undone at the next read.
    const shown = state.overrides.entries.length;
    const params = [["limit", more ? OVERRIDES_PAGE : Math.min(1000, Math.max(OVERRIDES_PAGE, shown))]];
    if (more && state.overrides.next) params.push(["cursor", state.overrides.next]);
    try {
      const page = await api("GET", "/overrides", params);
      state.overrides = {
        entries: more ? [...state.overrides.entries, ...page.overrides] : page.overrides,
        next: page.next,
        total: page.total,
        pending: page.pending,
        error: null,
      };
    } catch (error) {
      if (error instanceof SignedOut) return;
      state.overrides.error = error.message;
    }
    renderOverrides();
  }

  function renderOverrides() {
    const box = byId("overrides");
    if (!box) return;
    const { entries, next, total, pending, error } = state.overrides;
    if (error) {
      box.replaceChildren(el("p", { class: "notice", text: `Could not read the overrides: ${error}` }));
      return;
    }
    if (entries.length === 0) {
      box.replaceChildren(el("p", { class: "empty", text: "No overrides: every client has its rules' limits." }));
      return;
    }
    const rows = entries.map((entry) =>
      el(
        "tr",
        { dataset: { rule: entry.rule, hash: entry.keyHash, key: entry.keyParams.join("&") } },
        el("td", { text: entry.rule }),
        el("td", { class: "client", title: `key hash ${entry.keyHash}` }, el("code", { text: clientText(entry) })),
        el("td", { text: settingOf(entry) }),
        el("td", {
          class: entry.expired ? "warn" : "",
          text: entry.expires === null ? "never" : `${new Date(entry.expires).toLocaleString("en-GB")}`,
        }),
        el("td", { class: "note", text: entry.note ?? "" }),
        el("td", {}, el("span", { class: `state ${entry.expired ? "expired" : entry.state}`, text: stateOf(entry) })),
        el("td", { class: "actions" }, deleteButton(entry)),
      ),
    );
    box.replaceChildren(
      el(
        "table",
        { class: "data overrides" },
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            ["Rule", "Client", "Setting", "Expires", "Note", "State"].map((t) => el("th", { text: t })),
            actionsHeader(),
          ),
        ),
        el("tbody", {}, rows),
      ),
      el(
        "p",
        { class: "hint" },
        `${fmt(total)} override${total === 1 ? "" : "s"}${pending ? `, ${fmt(pending)} pending` : ""}.`,
        next
          ? el("button", { type: "button", class: "link", text: "Show more", onclick: () => loadOverrides(true) })
          : null,
      ),
    );
  }

  const stateOf = (entry) => (entry.expired ? "expired" : entry.state);

  function deleteButton(entry) {
    const button = actionButton({
      verb: "Delete",
      busyVerb: "Deleting…",
      about: `the override of ${clientText(entry)} under ${entry.rule}`,
      class: "danger",
      onclick: () => deleteOverride(entry),
    });
    // A delete under way when the list is read again: still shown as such, and not sent twice.
    if (state.deleting.has(`${entry.rule} ${entry.keyHash}`)) button.busy();
    return button;
  }

  /** The Delete button of an override's row as it is now: the list is redrawn when it is read again. */
  const deleteButtonOf = (entry) =>
    byId("overrides")?.querySelector(
      `tr[data-rule="${CSS.escape(entry.rule)}"][data-hash="${CSS.escape(entry.keyHash)}"] button.danger`,
    ) ?? null;

  async function deleteOverride(entry) {
    const id = `${entry.rule} ${entry.keyHash}`;
    if (state.deleting.has(id)) return;
    const session = state;
    state.deleting.add(id);
    deleteButtonOf(entry)?.busy();
    try {
      await api("DELETE", "/overrides", [["rule", entry.rule], ...entry.keyParams.map((k) => ["key", k])]);
      toast(`Deleted the override of ${clientText(entry)} under ${entry.rule}.`);
    } catch (error) {
      if (error instanceof SignedOut) return;
      toast(`Delete failed: ${error.message}`, true);
      return;
    } finally {
      session.deleting.delete(id);
      if (state === session) deleteButtonOf(entry)?.idle();
    }
    loadOverrides();
  }

  function overrideForm() {
    const rule = el(
      "select",
      { id: "ov-rule", name: "rule", required: true },
      state.rules.map((r) => el("option", { value: r.id, text: r.id })),
    );
    const keys = el("div", { class: "key-fields", id: "ov-keys" });
    const kind = el(
      "select",
      { id: "ov-kind", name: "kind" },
      el("option", { value: "limit", text: "limit" }),
      el("option", { value: "tier", text: "tier" }),
      el("option", { value: "unlimited", text: "unlimited" }),
      el("option", { value: "deny", text: "deny" }),
    );
    const limit = el("input", { id: "ov-limit", name: "limit", type: "number", min: 1, step: 1, placeholder: "500" });
    const tier = el(
      "select",
      { id: "ov-tier", name: "tier", hidden: true },
      Object.keys(state.tiers).map((t) => el("option", { value: t, text: t })),
    );
    const expires = el("input", { id: "ov-expires", name: "expires", type: "datetime-local" });
    const note = el("input", { id: "ov-note", name: "note", type: "text", maxlength: 1000, placeholder: "why" });
    // aria-live rather than role="alert", which would take the list's role from the <ul> (and from its items).
    const errors = el("ul", { class: "errors", id: "ov-errors", "aria-live": "assertive", hidden: true });

    const keyInputs = () =>
      keyFields(
        keys,
        state.rules.find((r) => r.id === rule.value),
        "ov",
      );
    const kindChanged = () => {
      limit.hidden = kind.value !== "limit";
      limit.required = kind.value === "limit";
      tier.hidden = kind.value !== "tier";
    };
    rule.addEventListener("change", keyInputs);
    kind.addEventListener("change", kindChanged);
    keyInputs();
    kindChanged();
    if (Object.keys(state.tiers).length === 0) kind.querySelector('option[value="tier"]').disabled = true;

    const form = el(
      "form",
      { class: "override-form", id: "override-form", method: "post", action: "#", autocomplete: "off" },
      el("h3", { text: "Put an override" }),
      el(
        "div",
        { class: "form-row" },
        el("label", { class: "field" }, el("span", { text: "Rule" }), rule),
        keys,
        el(
          "label",
          { class: "field" },
          el("span", { text: "Setting" }),
          el("span", { class: "pair" }, kind, limit, tier),
        ),
        el("label", { class: "field" }, el("span", { text: "Expires (optional)" }), expires),
        el("label", { class: "field grow" }, el("span", { text: "Note" }), note),
        el("button", { type: "submit", class: "primary", text: "Put" }),
      ),
      errors,
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      errors.hidden = true;
      const params = [["rule", rule.value], ...keyParamsOf(keys)];
      const body =
        kind.value === "limit"
          ? { limit: Number(limit.value) }
          : kind.value === "tier"
            ? { tier: tier.value }
            : { [kind.value]: true };
      if (expires.value) body.expires = new Date(expires.value).toISOString();
      if (note.value.trim()) body.note = note.value.trim();
      try {
        const done = await api("PUT", "/overrides", params, body);
        toast(
          `${done.applied ? "Applied" : "Stored (pending)"}: ${settingOf(done.after ?? {})} for ${params
            .slice(1)
            .map((p) => p[1])
            .join(" & ")} under ${rule.value}.`,
        );
        for (const input of keys.querySelectorAll("input")) input.value = "";
        note.value = "";
        expires.value = "";
        loadOverrides();
      } catch (error) {
        if (error instanceof SignedOut) return;
        const list = error.errors.length > 0 ? error.errors : [error.message];
        errors.replaceChildren(...list.map((text) => el("li", { text })));
        errors.hidden = false;
      }
    });
    return form;
  }

  // ---- quotas: usage and credits ----

  /** The rules that keep periods: quotas (`quota` and `per`). */
  const quotaRules = () => state.rules.filter((r) => r.credits);

  /** A signed number: "+500", "−100", "0". */
  const signed = (n) => (n > 0 ? `+${fmt(n)}` : n < 0 ? `−${fmt(-n)}` : "0");

  /** An ISO time as the API gives it, to the minute (or second), in UTC. */
  const isoText = (iso) => `${iso.slice(0, 10)} ${iso.slice(11, iso.endsWith(":00.000Z") ? 16 : 19)} UTC`;

  function creditForm() {
    const rules = quotaRules();
    const rule = el(
      "select",
      { id: "cr-rule", name: "rule", required: true },
      rules.map((r) => el("option", { value: r.id, text: r.id })),
    );
    const keys = el("div", { class: "key-fields", id: "cr-keys" });
    const change = el(
      "select",
      { id: "cr-change", name: "change", "aria-label": "Change" },
      el("option", { value: "add", text: "add" }),
      el("option", { value: "take", text: "take" }),
      el("option", { value: "set", text: "set what is left to" }),
    );
    const amount = el("input", {
      id: "cr-amount",
      name: "amount",
      type: "number",
      min: 0,
      step: 1,
      placeholder: "5000",
      "aria-label": "Units",
    });
    const note = el("input", {
      id: "cr-note",
      name: "note",
      type: "text",
      maxlength: 1000,
      placeholder: "ticket, reason",
    });
    const errors = el("ul", { class: "errors", id: "cr-errors", "aria-live": "assertive", hidden: true });
    const fillKeys = () =>
      keyFields(
        keys,
        state.rules.find((r) => r.id === rule.value),
        "cr",
      );
    rule.addEventListener("change", fillKeys);
    fillKeys();

    const form = el(
      "form",
      { class: "credit-form", id: "credit-form", method: "post", action: "#", autocomplete: "off" },
      el("h3", { text: "A client's usage, and a credit" }),
      el(
        "div",
        { class: "form-row" },
        el("label", { class: "field" }, el("span", { text: "Quota" }), rule),
        keys,
        el("button", { type: "submit", value: "read", text: "Show usage" }),
      ),
      el(
        "div",
        { class: "form-row" },
        el("label", { class: "field" }, el("span", { text: "Credit" }), el("span", { class: "pair" }, change, amount)),
        el("label", { class: "field grow" }, el("span", { text: "Note (logged)" }), note),
        el("button", { type: "submit", value: "credit", class: "primary", text: "Apply credit" }),
      ),
      errors,
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      errors.hidden = true;
      const params = [["rule", rule.value], ...keyParamsOf(keys)];
      const crediting = event.submitter?.value === "credit";
      try {
        if (!crediting) {
          showUsage(await api("GET", "/credits", params));
          return;
        }
        if (amount.value === "") throw new ApiError(400, { errors: ["Give a number of units to credit."] });
        const body = { [change.value]: Number(amount.value) };
        if (note.value.trim()) body.note = note.value.trim();
        const done = await api("POST", "/credits", params, body);
        toast(
          `Credited ${params
            .slice(1)
            .map((p) => p[1])
            .join(" & ")} under ${rule.value}: ${fmt(done.before.remaining)} left before, ${fmt(done.remaining)} now.`,
        );
        amount.value = "";
        note.value = "";
        showUsage(done);
      } catch (error) {
        if (error instanceof SignedOut) return;
        const list = error.errors?.length > 0 ? error.errors : [error.message];
        errors.replaceChildren(...list.map((text) => el("li", { text })));
        errors.hidden = false;
      }
    });
    return form;
  }

  /** A client's usage as the API answers it: the quota, this period, and the past periods. */
  function showUsage(usage) {
    const who = usage.key === undefined ? `hash ${usage.keyHash}` : usage.key.map(([k, v]) => `${k}=${v}`).join(" & ");
    const applied = usage.override ? ` · override: ${usage.override}` : usage.tier ? ` · tier ${usage.tier}` : "";
    const left = usage.remaining === null ? "no limit" : `${fmt(usage.remaining)} left`;
    const tone = usage.remaining === 0 ? "bad" : "good";
    const past =
      usage.past.length === 0
        ? el("p", { class: "empty", text: "No earlier period with any use." })
        : el(
            "table",
            { class: "data past-periods" },
            el(
              "thead",
              {},
              el(
                "tr",
                {},
                el("th", { text: "Period from" }),
                el("th", { text: "To" }),
                el("th", { class: "num", text: "Used" }),
                el("th", { class: "num", text: "Credit" }),
              ),
            ),
            el(
              "tbody",
              {},
              usage.past.map((p) =>
                el(
                  "tr",
                  {},
                  el("td", { text: isoText(p.start) }),
                  el("td", { text: isoText(p.end) }),
                  el("td", { class: "num", text: fmt(p.used) }),
                  el("td", { class: "num", text: signed(p.credit) }),
                ),
              ),
            ),
          );
    byId("usage").replaceChildren(
      el(
        "div",
        { class: "usage", dataset: { rule: usage.rule } },
        el("h4", {}, `${usage.rule} · `, el("code", { text: who })),
        el("p", { class: "quota-words", text: `${usage.limit === null ? "No limit" : usage.quota}${applied}` }),
        el(
          "p",
          { class: "usage-now" },
          el("span", { class: `total ${tone}` }, el("b", { text: left })),
          el("span", { class: "total muted", text: `used ${fmt(usage.used)}` }),
          el("span", { class: "total muted", text: `credit ${signed(usage.credit)}` }),
          el("span", {
            class: "total muted",
            text:
              usage.period === null
                ? "this period: starts at its next request"
                : `this period: ${isoText(usage.period.start)} to ${isoText(usage.period.end)}`,
          }),
        ),
        past,
      ),
    );
  }

  /** One input per characteristic of a rule's key, in `box`; ids start with `prefix`. */
  function keyFields(box, chosen, prefix) {
    box.replaceChildren(
      ...(chosen?.key ?? []).map((characteristic, i) => {
        const sources = characteristic.split("|");
        const single = sources.length === 1;
        return el(
          "label",
          { class: "field" },
          el("span", { text: `Key: ${characteristic}` }),
          el("input", {
            id: `${prefix}-key-${i}`,
            type: "text",
            required: true,
            spellcheck: "false",
            dataset: { index: i, source: single ? sources[0] : "" },
            placeholder: single ? example(sources[0]) : sources.map((s) => `${s}=${example(s)}`).join(" or "),
          }),
        );
      }),
    );
  }

  /** The `key` parameters the inputs of `box` name: `source=value`, the source added where the rule has one. */
  function keyParamsOf(box) {
    return [...box.querySelectorAll("input")].map((input) => {
      const value = input.value.trim();
      const source = input.dataset.source;
      return ["key", source && !value.startsWith(`${source}=`) ? `${source}=${value}` : value];
    });
  }

  const example = (source) =>
    source === "ip" ? "203.0.113.7" : source === "path" ? "/api/items" : source === "method" ? "POST" : "…";

  // ---- toasts ----

  function toast(text, bad = false) {
    const box = byId("toasts");
    const note = el("div", { class: `toast${bad ? " bad" : ""}`, role: "status", text });
    box.append(note);
    setTimeout(() => note.remove(), 5000);
  }

  // ---- start ----

  function start() {
    byId("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = byId("token").value.trim();
      if (token === "") return showLogin("Enter the admin token.");
      signIn(token, true);
    });
    byId("signout").addEventListener("click", () => signOut());
    byId("range").addEventListener("change", (event) => {
      const value = event.currentTarget.value;
      state.minutes = value === "fit" ? "fit" : Number(value);
      state.cycle = 0;
      refresh();
    });
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && state.token !== null) refresh();
    });
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) signIn(saved, false);
    else showLogin();
  }

  start();
})();
