// The main job's report: a self-contained HTML page (inline SVG, no network) and the JSON summary.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { barChart, CHART_CSS, lineChart } from './svg-charts';

export interface StepRow {
  step: number;
  version: number;
  wallS: number;
  /** Mean outcome reward of the batch's trajectories (train rollouts). */
  reward: number | null;
  loss: number;
  gradNorm: number;
  ratioMean: number;
  clipHighFrac: number;
  entropy: number | null;
  /** Mean k3 of the trained tokens against the starting weights (null when the loss has no KL penalty). */
  klRef?: number | null;
  mismatchAbs: number;
  mismatchKl: number;
  mismatchTokens: number;
  sharing: number;
  uniqueTokens: number;
  totalTokens: number;
  trainSeconds: number;
  idleSeconds: number;
  stalenessMean: number;
  stalenessMax: number;
  skipped: string | null;
}

export interface EvalRow {
  version: number;
  /** Trainer batches trained when the evaluation was pinned. */
  step: number;
  wallS: number;
  success: number;
  meanReward: number;
  tasks: number;
  /** Versions the evaluation rollouts' tokens spanned (0 = pinned to one version as required). */
  versionDrift: number;
}

export interface RunReport {
  title: string;
  summary: Record<string, unknown>;
  steps: StepRow[];
  evals: EvalRow[];
  /** [wall seconds, rollouts completed so far]. */
  rolloutTimeline: Array<[number, number]>;
  /** Versions behind the trainer, per trained output token: count per lag. */
  stalenessHistogram: number[];
  /** Mean |Δlogp| and KL k3 of recomputed vs recorded logprobs, by context-management mode and agent kind. */
  mismatchBySplit: Array<{ key: string; meanAbsDeltaLogp: number; klK3: number; tokens: number }>;
  config: unknown;
}

const esc = (s: string) => s.replace(/[&<>]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;' })[c] as string);
const cell = (v: unknown) =>
  typeof v === 'number'
    ? Number.isInteger(v)
      ? String(v)
      : v.toPrecision(4)
    : typeof v === 'object' && v !== null
      ? esc(JSON.stringify(v))
      : esc(String(v));

function movingAverage(points: Array<[number, number]>, k: number): Array<[number, number]> {
  return points.map(([x], i) => {
    const win = points.slice(Math.max(0, i - k + 1), i + 1);
    return [x, win.reduce((a, p) => a + p[1], 0) / win.length];
  });
}

/** Completions per second over a trailing window of `windowS` seconds (completions come in bursts: a window of a fixed count spikes). */
function ratePerSecond(timeline: Array<[number, number]>, windowS: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let j = 0;
  for (const [t, n] of timeline) {
    while (j < timeline.length - 1 && timeline[j][0] < t - windowS) j++;
    const [t0, n0] = timeline[j];
    if (t - t0 >= windowS / 2) out.push([t, (n - n0) / (t - t0)]);
  }
  return out;
}

export function renderReport(r: RunReport): string {
  const s = r.steps.filter((x) => !x.skipped);
  const reward = s.filter((x) => x.reward !== null).map((x) => [x.step, x.reward as number] as [number, number]);
  const rewardT = s.filter((x) => x.reward !== null).map((x) => [x.wallS, x.reward as number] as [number, number]);
  const evalStep = r.evals.map((e) => [e.step, e.success] as [number, number]);
  const evalT = r.evals.map((e) => [e.wallS, e.success] as [number, number]);
  const charts = [
    lineChart({
      title: 'Reward and held-out success against training step',
      xLabel: 'train step (batches)',
      yLabel: 'reward / success',
      yMin: 0,
      yMax: 1,
      series: [
        { name: 'train reward (batch)', color: '#9bb7e0', points: reward },
        { name: 'train reward (avg of 5)', color: '#2a5ca8', points: movingAverage(reward, 5) },
        { name: 'held-out success', color: '#d2462f', points: evalStep, markers: true },
      ],
    }),
    lineChart({
      title: 'Reward and held-out success against wall clock',
      xLabel: 'seconds since the run started',
      yLabel: 'reward / success',
      yMin: 0,
      yMax: 1,
      series: [
        { name: 'train reward (avg of 5)', color: '#2a5ca8', points: movingAverage(rewardT, 5) },
        { name: 'held-out success', color: '#d2462f', points: evalT, markers: true },
      ],
    }),
    lineChart({
      title: 'Trainer throughput',
      xLabel: 'seconds since the run started',
      yLabel: 'tokens per second',
      yMin: 0,
      series: [
        {
          name: 'trained tokens/s (unique tree nodes)',
          color: '#2f8f5b',
          points: s.map((x) => [x.wallS, x.uniqueTokens / Math.max(1e-9, x.trainSeconds)] as [number, number]),
        },
        {
          name: 'trained tokens/s (samples unmerged)',
          color: '#9bd1b3',
          points: s.map((x) => [x.wallS, x.totalTokens / Math.max(1e-9, x.trainSeconds)] as [number, number]),
        },
      ],
    }),
    lineChart({
      title: 'Rollout throughput (train rollouts completed)',
      xLabel: 'seconds since the run started',
      yLabel: 'rollouts per second',
      yMin: 0,
      series: [
        {
          name: 'rollouts/s (over the last 30 s)',
          color: '#8a5cc2',
          points: ratePerSecond(r.rolloutTimeline, 30),
        },
      ],
    }),
    lineChart({
      title: 'Trainer idle share per step (waiting for a batch)',
      xLabel: 'train step',
      yLabel: 'idle / (idle + busy)',
      yMin: 0,
      yMax: 1,
      series: [
        {
          name: 'idle share',
          color: '#c27c2a',
          points: s.map((x) => [x.step, x.idleSeconds / Math.max(1e-9, x.idleSeconds + x.trainSeconds)] as [number, number]),
        },
      ],
    }),
    barChart({
      title: 'Staleness of trained tokens (versions behind the trainer)',
      xLabel: 'versions behind',
      yLabel: 'share of tokens',
      bars: (() => {
        const tot = r.stalenessHistogram.reduce((a, b) => a + b, 0) || 1;
        return r.stalenessHistogram.map((c, lag) => ({ label: String(lag), value: c / tot }));
      })(),
    }),
    lineChart({
      title: 'Prefix-tree merge speed-up per batch (tokens the samples hold / tree nodes trained)',
      xLabel: 'train step',
      yLabel: 'total / unique tokens',
      yMin: 0,
      series: [
        {
          name: `merge speed-up (sharing 1 − unique/total: mean ${(s.reduce((a, x) => a + x.sharing, 0) / Math.max(1, s.length)).toFixed(2)})`,
          color: '#2f8f5b',
          points: s.map((x) => [x.step, x.totalTokens / Math.max(1, x.uniqueTokens)] as [number, number]),
        },
      ],
    }),
    lineChart({
      // With several AdamW steps a batch only the mini-batches before its first step measure it, so many steps have no point.
      title: `Train/inference mismatch on tokens of the current version (${s.filter((x) => x.mismatchTokens > 0).length} of ${s.length} trained steps measured)`,
      xLabel: 'train step',
      yLabel: 'mean |Δlogp|',
      // Markers over every step's range: a measured step is a point, not a line across unmeasured ones.
      xMin: 1,
      xMax: Math.max(2, s.length ? s[s.length - 1].step : 2),
      yMin: 0,
      series: [
        {
          name: 'mean |Δlogp|',
          color: '#d2462f',
          markers: true,
          points: s.filter((x) => x.mismatchTokens > 0).map((x) => [x.step, x.mismatchAbs] as [number, number]),
        },
      ],
    }),
  ];
  const splitRows = r.mismatchBySplit
    .map(
      (m) =>
        `<tr><td>${esc(m.key)}</td><td>${m.meanAbsDeltaLogp.toExponential(2)}</td><td>${m.klK3.toExponential(2)}</td><td>${m.tokens}</td></tr>`,
    )
    .join('');
  const evalRows = r.evals
    .map(
      (e) =>
        `<tr><td>${e.version}</td><td>${e.step}</td><td>${e.wallS.toFixed(0)}</td><td>${(e.success * 100).toFixed(1)}%</td><td>${e.meanReward.toFixed(3)}</td><td>${e.tasks}</td><td>${e.versionDrift}</td></tr>`,
    )
    .join('');
  const summaryRows = Object.entries(r.summary)
    .map(([k, v]) => `<tr><th>${esc(k)}</th><td>${cell(v)}</td></tr>`)
    .join('');
  return `<!doctype html><html lang="en"><meta charset="utf-8"><title>${esc(r.title)}</title>
<style>body{font:14px system-ui;margin:1.5em 2em;color:#222;max-width:1200px}h1{font-size:20px}h2{font-size:16px;margin-top:1.5em}
table{border-collapse:collapse;margin-bottom:1em}td,th{border-bottom:1px solid #e4e4e4;padding:3px 10px;text-align:left;font-variant-numeric:tabular-nums}${CHART_CSS}</style>
<h1>${esc(r.title)}</h1>
<h2>Summary</h2><table>${summaryRows}</table>
<h2>Curves</h2>${charts.join('\n')}
<h2>Held-out evaluations (each pinned to one policy version)</h2><table><tr><th>version</th><th>train step</th><th>wall s</th><th>success</th><th>mean reward</th><th>tasks</th><th>version drift</th></tr>${evalRows}</table>
<h2>Train/inference mismatch by context-management mode and agent kind</h2><table><tr><th>split</th><th>mean |Δlogp|</th><th>KL k3</th><th>tokens</th></tr>${splitRows}</table>
<h2>Run configuration</h2><pre>${esc(JSON.stringify(r.config, null, 2))}</pre>
</html>`;
}

/** Writes report.html and summary.json into dir; returns the report's path. */
export function writeRunReport(dir: string, r: RunReport): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'summary.json'),
    JSON.stringify(
      {
        summary: r.summary,
        evals: r.evals,
        steps: r.steps,
        stalenessHistogram: r.stalenessHistogram,
        mismatchBySplit: r.mismatchBySplit,
        config: r.config,
      },
      null,
      2,
    ) + '\n',
  );
  const file = join(dir, 'report.html');
  writeFileSync(file, renderReport(r));
  return file;
}
