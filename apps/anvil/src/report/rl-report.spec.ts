import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderReport, writeRunReport, type RunReport, type StepRow } from './rl-report';

function run(steps = 30): RunReport {
  const rows: StepRow[] = Array.from({ length: steps }, (_, i) => ({
    step: i + 1,
    version: i + 1,
    wallS: 10 + 4 * i,
    reward: 0.2 + 0.01 * i,
    loss: 0.01,
    gradNorm: 0.5,
    ratioMean: 1,
    clipHighFrac: 0,
    entropy: 0.05,
    mismatchAbs: 3e-8,
    mismatchKl: 1e-12,
    mismatchTokens: 500,
    sharing: 0.6,
    uniqueTokens: 8000,
    totalTokens: 20_000,
    trainSeconds: 2.5,
    idleSeconds: 1,
    stalenessMean: 0.8,
    stalenessMax: 2,
    skipped: i === 3 ? 'non-finite loss or dLoss/dlogp' : null,
  }));
  return {
    title: 'Anvil embedded run <test>',
    summary: { heldOutSuccess: { warmStart: 0.2, final: 0.3 }, seed: 1, wallClockSeconds: 140 },
    steps: rows,
    evals: [0, 10, 20, 30].map((v, i) => ({
      version: v,
      step: v,
      wallS: 10 + 40 * i,
      success: 0.2 + 0.03 * i,
      meanReward: 0.25,
      tasks: 100,
      versionDrift: 0,
    })),
    rolloutTimeline: Array.from({ length: 50 }, (_, i) => [5 + 3 * i, 20 * i] as [number, number]),
    stalenessHistogram: [600, 300, 100],
    mismatchBySplit: [{ key: 'context=append_only agent=white-box', meanAbsDeltaLogp: 3e-8, klK3: 1e-12, tokens: 15_000 }],
    config: { seed: 1 },
  };
}

describe('main job report', () => {
  it('is one self-contained page: every chart inline SVG with data, no network reference, the evaluations and mismatch tables, text escaped', () => {
    const html = renderReport(run());
    expect(html).not.toMatch(/(src|href)=["']https?:/);
    expect(html).not.toMatch(/<script[^>]+src=/);
    expect((html.match(/<svg/g) ?? []).length).toBe(8);
    expect((html.match(/<polyline|<path/g) ?? []).length).toBeGreaterThan(7);
    expect(html).toContain('&lt;test&gt;');
    expect(html).toContain('29.0%'); // held-out success of the last evaluation (0.2 + 3 × 0.03)
    expect(html).toContain('3.00e-8');
  });

  it('draws the mismatch of the steps that measured it as points over every step, and says how many measured', () => {
    const r = run(30);
    r.steps = r.steps.map((s) => (s.step === 1 || s.step === 17 ? s : { ...s, mismatchAbs: NaN, mismatchKl: NaN, mismatchTokens: 0 }));
    const html = renderReport(r);
    const i = html.indexOf(
      '<figcaption>Train/inference mismatch on tokens of the current version (2 of 29 trained steps measured)</figcaption>',
    );
    expect(i).toBeGreaterThan(0);
    const fig = html.slice(i, html.indexOf('</figure>', i));
    expect((fig.match(/<circle/g) ?? []).length).toBe(2);
    // the x axis spans the run (steps 1..30; step 4 was skipped), not just the measured steps
    expect(fig).toContain('>30</text>');
  });

  it('writes report.html and summary.json (summary, evaluations, steps) into the run directory', () => {
    const dir = mkdtempSync(join(tmpdir(), 'anvil-report-'));
    const file = writeRunReport(dir, run(5));
    expect(file).toBe(join(dir, 'report.html'));
    const json = JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8'));
    expect(json.summary.heldOutSuccess).toEqual({ warmStart: 0.2, final: 0.3 });
    expect(json.steps).toHaveLength(5);
    expect(json.evals).toHaveLength(4);
  });
});
