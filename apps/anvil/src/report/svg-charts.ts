// Small, dependency-free SVG charts for the self-contained HTML report (no network, no scripts).

export interface Series {
  name: string;
  color: string;
  points: Array<[number, number]>;
  /** Draw markers only (e.g. evaluations) instead of a line. */
  markers?: boolean;
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  /** The x range to draw (default: the data's), e.g. every train step when only a few have a point. */
  xMin?: number;
  xMax?: number;
  yMin?: number;
  yMax?: number;
  width?: number;
  height?: number;
}

const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c] as string);

function niceTicks(lo: number, hi: number, n = 5): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

const fmt = (v: number) =>
  Math.abs(v) >= 1000
    ? `${(v / 1000).toFixed(v >= 10_000 ? 0 : 1)}k`
    : Math.abs(v) < 0.01 && v !== 0
      ? v.toExponential(0)
      : String(Number(v.toPrecision(3)));

export function lineChart(o: ChartOptions): string {
  const w = o.width ?? 560,
    h = o.height ?? 260;
  const pad = { l: 56, r: 16, t: 30, b: 42 };
  const all = o.series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  if (all.length === 0) return `<figure><figcaption>${esc(o.title)}</figcaption><p class="empty">no data</p></figure>`;
  const xMin = o.xMin ?? Math.min(...all.map((p) => p[0]));
  let xMax = o.xMax ?? Math.max(...all.map((p) => p[0]));
  if (xMax === xMin) xMax = xMin + 1;
  let yMin = o.yMin ?? Math.min(...all.map((p) => p[1])),
    yMax = o.yMax ?? Math.max(...all.map((p) => p[1]));
  if (yMax === yMin) {
    yMax += 0.5;
    yMin -= 0.5;
  }
  const X = (x: number) => pad.l + ((x - xMin) / (xMax - xMin)) * (w - pad.l - pad.r);
  const Y = (y: number) => h - pad.b - ((y - yMin) / (yMax - yMin)) * (h - pad.t - pad.b);
  const parts: string[] = [];
  for (const t of niceTicks(yMin, yMax))
    parts.push(
      `<line x1="${pad.l}" x2="${w - pad.r}" y1="${Y(t).toFixed(1)}" y2="${Y(t).toFixed(1)}" class="grid"/><text x="${pad.l - 6}" y="${(Y(t) + 4).toFixed(1)}" text-anchor="end">${fmt(t)}</text>`,
    );
  for (const t of niceTicks(xMin, xMax, 6))
    parts.push(`<text x="${X(t).toFixed(1)}" y="${h - pad.b + 16}" text-anchor="middle">${fmt(t)}</text>`);
  parts.push(
    `<line x1="${pad.l}" x2="${pad.l}" y1="${pad.t}" y2="${h - pad.b}" class="axis"/><line x1="${pad.l}" x2="${w - pad.r}" y1="${h - pad.b}" y2="${h - pad.b}" class="axis"/>`,
  );
  parts.push(`<text x="${(pad.l + w - pad.r) / 2}" y="${h - 6}" text-anchor="middle" class="label">${esc(o.xLabel)}</text>`);
  parts.push(
    `<text transform="translate(14 ${(pad.t + h - pad.b) / 2}) rotate(-90)" text-anchor="middle" class="label">${esc(o.yLabel)}</text>`,
  );
  // Legend entries laid out by their text length (about 6.2 px a character at 11 px): fixed slots overlapped.
  let legendX = pad.l + 8;
  o.series.forEach((s) => {
    const pts = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
    if (s.markers)
      for (const [x, y] of pts) parts.push(`<circle cx="${X(x).toFixed(1)}" cy="${Y(y).toFixed(1)}" r="4" fill="${s.color}"/>`);
    else if (pts.length)
      parts.push(
        `<path d="${pts.map(([x, y], k) => `${k ? 'L' : 'M'}${X(x).toFixed(1)},${Y(y).toFixed(1)}`).join(' ')}" fill="none" stroke="${s.color}" stroke-width="2"/>`,
      );
    parts.push(
      `<rect x="${legendX}" y="8" width="10" height="10" fill="${s.color}"/><text x="${legendX + 14}" y="17">${esc(s.name)}</text>`,
    );
    legendX += 14 + Math.ceil(s.name.length * 6.2) + 16;
  });
  return `<figure><figcaption>${esc(o.title)}</figcaption><svg viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" role="img" aria-label="${esc(o.title)}">${parts.join('')}</svg></figure>`;
}

export function barChart(o: {
  title: string;
  xLabel: string;
  yLabel: string;
  bars: Array<{ label: string; value: number }>;
  color?: string;
  width?: number;
  height?: number;
}): string {
  const w = o.width ?? 560,
    h = o.height ?? 240;
  const pad = { l: 56, r: 16, t: 24, b: 48 };
  if (o.bars.length === 0) return `<figure><figcaption>${esc(o.title)}</figcaption><p class="empty">no data</p></figure>`;
  const max = Math.max(...o.bars.map((b) => b.value), 1e-12);
  const bw = (w - pad.l - pad.r) / o.bars.length;
  const Y = (v: number) => h - pad.b - (v / max) * (h - pad.t - pad.b);
  const parts: string[] = [];
  for (const t of niceTicks(0, max))
    parts.push(
      `<line x1="${pad.l}" x2="${w - pad.r}" y1="${Y(t).toFixed(1)}" y2="${Y(t).toFixed(1)}" class="grid"/><text x="${pad.l - 6}" y="${(Y(t) + 4).toFixed(1)}" text-anchor="end">${fmt(t)}</text>`,
    );
  o.bars.forEach((b, i) => {
    const x = pad.l + i * bw;
    parts.push(
      `<rect x="${(x + bw * 0.1).toFixed(1)}" y="${Y(b.value).toFixed(1)}" width="${(bw * 0.8).toFixed(1)}" height="${(h - pad.b - Y(b.value)).toFixed(1)}" fill="${o.color ?? '#3b6fb6'}"/>`,
    );
    parts.push(`<text x="${(x + bw / 2).toFixed(1)}" y="${h - pad.b + 14}" text-anchor="middle">${esc(b.label)}</text>`);
  });
  parts.push(`<line x1="${pad.l}" x2="${w - pad.r}" y1="${h - pad.b}" y2="${h - pad.b}" class="axis"/>`);
  parts.push(`<text x="${(pad.l + w - pad.r) / 2}" y="${h - 8}" text-anchor="middle" class="label">${esc(o.xLabel)}</text>`);
  parts.push(
    `<text transform="translate(14 ${(pad.t + h - pad.b) / 2}) rotate(-90)" text-anchor="middle" class="label">${esc(o.yLabel)}</text>`,
  );
  return `<figure><figcaption>${esc(o.title)}</figcaption><svg viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" role="img" aria-label="${esc(o.title)}">${parts.join('')}</svg></figure>`;
}

export const CHART_CSS = `figure{margin:0 0 1.5em;display:inline-block;vertical-align:top}figcaption{font-weight:600;margin-bottom:4px}
svg text{font:11px system-ui;fill:#333}svg .label{font-size:12px;fill:#555}.grid{stroke:#e4e4e4}.axis{stroke:#888}.empty{color:#888}`;
