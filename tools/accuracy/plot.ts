/**
 * @module
 * A hand-written SVG line chart: admitted requests in the trailing window
 * `(t − periodMs, t]`, divided by the limit, over time, one line per algorithm.
 */

export type Series = { label: string; color: string; dashed: boolean; widthPx: number; admittedMs: number[] };

export type PlotOptions = {
  title: string;
  limit: number;
  periodMs: number;
  /** Where minute 0 of the x axis is. */
  traceStartMs: number;
  fromMs: number;
  toMs: number;
};

const WIDTH = 960;
const HEIGHT = 480;
const MARGIN = { left: 64, right: 270, top: 44, bottom: 52 };
const PLOT_W = WIDTH - MARGIN.left - MARGIN.right;
const PLOT_H = HEIGHT - MARGIN.top - MARGIN.bottom;

/**
 * The most admitted in any trailing window during each pixel column, so a
 * spike narrower than a pixel still shows at its full height.
 */
export function peakPerColumn(admittedMs: number[], periodMs: number, fromMs: number, toMs: number, columns: number) {
  // Each admission at a counts in (t − periodMs, t] for t in [a, a + periodMs).
  const events: [number, number][] = [];
  for (const a of admittedMs) events.push([a, 1], [a + periodMs, -1]);
  events.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  const peaks = new Array<number>(columns).fill(0);
  const columnMs = (toMs - fromMs) / columns;
  let count = 0;
  let next = 0;
  for (let c = 0; c < columns; c++) {
    const startMs = fromMs + c * columnMs;
    const endMs = startMs + columnMs;
    while (next < events.length && events[next]![0] <= startMs) count += events[next++]![1];
    let peak = count;
    while (next < events.length && events[next]![0] < endMs) {
      count += events[next++]![1];
      peak = Math.max(peak, count);
    }
    peaks[c] = peak;
  }
  return peaks;
}

const escapeXml = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

export function slidingWindowChart(series: Series[], o: PlotOptions): string {
  const columns = PLOT_W;
  const peaks = series.map((s) => peakPerColumn(s.admittedMs, o.periodMs, o.fromMs, o.toMs, columns));
  // Headroom above the highest line, so a line at 2× does not hide in the frame.
  const top = Math.max(2, Math.ceil((Math.max(...peaks.flat()) / o.limit + 0.1) * 4) / 4);
  const x = (column: number) => MARGIN.left + column + 0.5;
  const y = (ratio: number) => MARGIN.top + PLOT_H * (1 - ratio / top);
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${WIDTH} ${HEIGHT}" width="${WIDTH}" height="${HEIGHT}" font-family="system-ui, sans-serif" font-size="12">`,
    `<title>${escapeXml(o.title)}</title>`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="#fff"/>`,
    `<text x="${MARGIN.left}" y="24" font-size="15" font-weight="600">${escapeXml(o.title)}</text>`,
  );
  for (let tick = 0; tick <= top; tick += 0.5) {
    out.push(
      `<line x1="${MARGIN.left}" x2="${MARGIN.left + PLOT_W}" y1="${y(tick).toFixed(1)}" y2="${y(tick).toFixed(1)}" stroke="#e5e5e5"/>`,
      `<text x="${MARGIN.left - 8}" y="${(y(tick) + 4).toFixed(1)}" text-anchor="end">${tick.toFixed(1)}×</text>`,
    );
  }
  const firstMinute = Math.ceil((o.fromMs - o.traceStartMs) / 60_000);
  for (let m = firstMinute; o.traceStartMs + m * 60_000 <= o.toMs; m++) {
    const px = MARGIN.left + (PLOT_W * (o.traceStartMs + m * 60_000 - o.fromMs)) / (o.toMs - o.fromMs);
    out.push(
      `<line x1="${px.toFixed(1)}" x2="${px.toFixed(1)}" y1="${MARGIN.top}" y2="${MARGIN.top + PLOT_H}" stroke="#f0f0f0"/>`,
      `<text x="${px.toFixed(1)}" y="${MARGIN.top + PLOT_H + 18}" text-anchor="middle">${m}</text>`,
    );
  }
  out.push(
    `<line x1="${MARGIN.left}" x2="${MARGIN.left + PLOT_W}" y1="${y(1)}" y2="${y(1)}" stroke="#000" stroke-dasharray="2 3"/>`,
    `<text x="${MARGIN.left + PLOT_W - 4}" y="${y(1) - 5}" text-anchor="end" fill="#000">limit</text>`,
    `<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${PLOT_W}" height="${PLOT_H}" fill="none" stroke="#888"/>`,
    `<text x="${MARGIN.left + PLOT_W / 2}" y="${HEIGHT - 12}" text-anchor="middle">minute of the trace (windows of ${o.periodMs / 1000} s)</text>`,
    `<text transform="translate(16 ${MARGIN.top + PLOT_H / 2}) rotate(-90)" text-anchor="middle">admitted in the trailing ${o.periodMs / 1000} s ÷ limit</text>`,
  );
  series.forEach((s, i) => {
    const points = peaks[i]!.map((peak, c) => `${x(c).toFixed(1)},${y(peak / o.limit).toFixed(1)}`).join(" ");
    const dash = s.dashed ? ` stroke-dasharray="6 3"` : "";
    out.push(
      `<polyline fill="none" stroke="${s.color}" stroke-width="${s.widthPx}"${dash} stroke-linejoin="round" points="${points}"><title>${escapeXml(s.label)}</title></polyline>`,
    );
    const ly = MARGIN.top + 10 + i * 20;
    const lx = MARGIN.left + PLOT_W + 16;
    out.push(
      `<line x1="${lx}" x2="${lx + 24}" y1="${ly}" y2="${ly}" stroke="${s.color}" stroke-width="${Math.max(2, s.widthPx)}"${dash}/>`,
      `<text x="${lx + 30}" y="${ly + 4}">${escapeXml(s.label)}</text>`,
    );
  });
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}
