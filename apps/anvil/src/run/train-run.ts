/**
 * One training run end to end, whichever services carry it: the driver, then the report and the
 * JSON summary, then what the user reads last (held-out success before and after, where the
 * report and checkpoints are, or why the run could not learn) and the exit code that says which.
 */
import { join } from 'node:path';
import { EXIT } from '../cli/command';
import type { RunConfig } from '../config/run-config';
import { writeRunReport } from '../report/rl-report';
import { driveRun, type RunDriverOptions, type RunDriverResult } from './driver';
import { describeFailure } from './failures';

export interface TrainRunOptions extends RunDriverOptions {
  cfg: RunConfig;
  /** The report's title ('Anvil run <id>' by default). */
  title?: string;
  /** How the starting weights came about (the summary's warmStart). */
  warmStart: Record<string, unknown>;
  /** Added to the summary (where a distributed run's logs, database and topics are). */
  extraSummary?: Record<string, unknown>;
}

export interface TrainRunResult {
  exitCode: number;
  summary: Record<string, unknown>;
  report: string;
  result: RunDriverResult;
}

export async function trainRun(o: TrainRunOptions): Promise<TrainRunResult> {
  const r = await driveRun(o);
  const { rec } = r;
  const { cfg } = o;
  const summary: Record<string, unknown> = {
    ...rec.summary({
      seed: cfg.seed,
      wallClockSeconds: r.endedAtS,
      finalVersion: r.finalVersion,
      rlStoppedBy: r.rlStoppedBy,
      warmStart: o.warmStart,
      finalEvalPinnedTo: r.finalEvalPinnedTo,
    }),
    deployment: o.services.deployment,
    ...(r.failure ? { failure: { cause: r.failure.cause, message: r.failure.message, firstError: r.failure.firstError } } : {}),
    ...o.extraSummary,
  };
  const report = writeRunReport(join(cfg.dataDir, 'reports', o.runId), {
    title: o.title ?? `Anvil run ${o.runId}`,
    summary,
    steps: rec.steps,
    evals: rec.evals,
    rolloutTimeline: rec.rolloutTimeline,
    stalenessHistogram: Array.from(rec.staleness, (v) => v ?? 0),
    mismatchBySplit: rec.mismatchBySplit(),
    config: cfg,
  });
  const warm = rec.evals[0];
  const last = rec.evals[rec.evals.length - 1];
  const steps = summary.rlSteps as number;
  if (warm && last && last !== warm)
    o.log(
      `\nheld-out success: ${(warm.success * 100).toFixed(1)}% -> ${(last.success * 100).toFixed(1)}% after ${steps} RL steps (version ${last.version})`,
    );
  else if (warm) o.log(`\nheld-out success: ${(warm.success * 100).toFixed(1)}% at version ${warm.version}; ${steps} RL steps`);
  else o.log(`\n${steps} RL steps (version ${r.finalVersion}); no held-out evaluation (the task set has no eval tasks)`);
  o.log(`report: ${report}`);
  o.log(`checkpoints: ${o.services.checkpointsDir}`);
  let exitCode: number = EXIT.ok;
  if (r.failure) {
    console.error(`\n${r.rlStoppedBy === 'stall' ? 'the run stalled' : 'the run stopped early'}: ${describeFailure(r.failure)}`);
    exitCode = r.rlStoppedBy === 'rollouts-failed' || r.failure.cause === 'rollouts-failing' ? EXIT.rolloutsFailed : EXIT.stalled;
  }
  return { exitCode, summary, report, result: r };
}
