import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface StepRecord {
  step: number;
  loss: number;
  tokensPerSec: number;
  sharing: number;
  gradNorm: number;
  peakMB: number;
}

/** Writes summary.json and a self-contained report.html (inline SVG curve) a person can open. */
export function writeReport(dir: string, title: string, summary: Record<string, unknown>, steps: StepRecord[]): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'summary.json'), JSON.stringify({ ...summary, steps }, null, 2));
  const w = 640, h = 240, pad = 32;
  const maxLoss = Math.max(...steps.map((s) => s.loss));
  const minLoss = Math.min(...steps.map((s) => s.loss));
  const x = (i: number) => pad + (i / Math.max(1, steps.length - 1)) * (w - 2 * pad);
  const y = (l: number) => h - pad - ((l - minLoss) / Math.max(1e-9, maxLoss - minLoss)) * (h - 2 * pad);
  const path = steps.map((s, i) => `${i ? 'L' : 'M'}${x(i).toFixed(1)},${y(s.loss).toFixed(1)}`).join(' ');
  const rows = Object.entries(summary).map(([k, v]) => `<tr><th>${k}</th><td>${typeof v === 'number' ? v.toFixed(4) : String(v)}</td></tr>`).join('');
  const html = `<!doctype html><meta charset="utf-8"><title>${title}</title>
<style>body{font:14px system-ui;margin:2em;max-width:720px}th{text-align:left;padding-right:1em}svg{border:1px solid #ccc}</style>
<h1>${title}</h1>
<h2>Loss (mean −log p of answer tokens) per step</h2>
<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}"><path d="${path}" fill="none" stroke="#c33" stroke-width="2"/>
<text x="${pad}" y="${pad - 8}">${maxLoss.toFixed(3)}</text><text x="${pad}" y="${h - 8}">${minLoss.toFixed(3)}</text></svg>
<h2>Summary</h2><table>${rows}</table>`;
  const file = join(dir, 'report.html');
  writeFileSync(file, html);
  return file;
}
