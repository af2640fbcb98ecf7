/**
 * `npm run bench -- e2e`: the whole asynchronous RL loop, end to end — the real in-process loop of
 * `anvil train` (its one run driver: rollout-manager, gateway, inference-proxy with the
 * embedded engine, Data Pool, trainer, on one in-process bus and PGlite), not a simulation — on a
 * heavy-tailed multi-turn workload: the built-in chain-add tool task with its tool-delay knob
 * (default Pareto per tool call: 1 s scale, alpha 1.5 (infinite variance), capped at a minute: tool calls from a second to a minute, the spread agent workloads have), from the main job's
 * warm start (built or taken from the cache under ANVIL_DATA_DIR, default .anvil).
 *
 * Runs, each with the same train-clock budget (BENCH_E2E_SECONDS of training; the evaluations
 * inside a run are taken out of its clock, so runs that reach more evaluation points lose nothing):
 * - async CISPO: the main job's defaults (η = 2, the adaptive Windowed FIFO W, CISPO) with N, the
 *   rollouts in flight, at what η allows ((η + 1)·B·G = 192, not the main job's 64), seeds 1..SEEDS;
 * - async GRPO: the same with PPO-clip (loss 'ppo', epsilons 0.2 / 0.28), seeds 1..SEEDS;
 * - sync CISPO: W = 1 and η = 0 (rollouts of a step all start on the current version, none starts
 *   until it is trained, and the trainer waits for every rollout of its step), seeds 1..SYNC_SEEDS.
 * Held-out tasks (the seed's eval split) are evaluated before step 1 (once per seed: every run of a
 * seed starts from the same weights with the same paired sampler seeds), every EVAL_EVERY versions
 * (the trainer held at exactly that version) and at the end.
 *
 * Figures: trajectories/s (train rollouts finished while the loop trained) and trained
 * trajectories/s, trained tokens/s (sample tokens, and the prefix tree's unique tokens), trainer idle
 * share, reward at equal wall clock (held-out reward and success of the policy each loop has at the
 * end of the budget; the train reward of its last 20% of rollouts beside them); CISPO against GRPO at
 * equal steps (the largest evaluated version every run reached) and at equal wall clock (the end);
 * the lag distribution (versions behind per trained output token, share of stale tokens). Tables,
 * bench-results/e2e.json (every run's records), then one JSON object on the last line with
 * asyncOverSyncSpeedup (async CISPO over sync CISPO trajectories/s, over the seeds both ran).
 *
 * Knobs: BENCH_E2E_SECONDS (180), BENCH_E2E_SEEDS (3), BENCH_E2E_SYNC_SEEDS (1), BENCH_E2E_EVAL_EVERY
 * (5), BENCH_E2E_EVAL_TASKS (100), BENCH_E2E_EVAL_SAMPLES (2), BENCH_E2E_TOOL_DELAY (JSON, a
 * task.toolDelay), BENCH_E2E_ONLY (comma list of async-cispo, async-ppo, sync-cispo),
 * BENCH_E2E_KEEP_RUNS=1 (keep each run's database and checkpoints), BENCH_E2E_CONCURRENCY (rollouts in
 * flight, default (η + 1)·B·G of the run configuration: 192 for the defaults), ANVIL_DATA_DIR; `--config run.json`
 * starts from a run configuration of your own (its model, task and knobs; the bench sets the budget,
 * the evaluations and, for chain-add, the tool delay; e.g. `--config examples/smollm2/run.json`).
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { engineInfo, setThreads } from '@anvil/engine';
import { checkRunConfig, driveRun, parseRunConfig, startingModel, startInProcessServices, taskSetOf, type RunConfig } from '@anvil/cli';
import { printTable } from './bench-kit';
import {
  commonEvalVersion,
  duringEvaluation,
  heldOutAt,
  heldOutFinal,
  lagDistribution,
  mean,
  pairedDifference,
  rewardOfLast,
  throughput,
  trainClock,
  type RunRecord,
} from './e2e-metrics';

const env = process.env;
const num = (name: string, fallback: number) => {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name}=${v}: a positive number is needed`);
  return n;
};
const SECONDS = num('BENCH_E2E_SECONDS', 180);
const SEEDS = Math.round(num('BENCH_E2E_SEEDS', 3));
const SYNC_SEEDS = Math.min(SEEDS, Math.round(num('BENCH_E2E_SYNC_SEEDS', 1)));
const EVAL_EVERY = Math.round(num('BENCH_E2E_EVAL_EVERY', 5));
const EVAL_TASKS = Math.round(num('BENCH_E2E_EVAL_TASKS', 100));
const EVAL_SAMPLES = Math.round(num('BENCH_E2E_EVAL_SAMPLES', 2));
const TOOL_DELAY = JSON.parse(env.BENCH_E2E_TOOL_DELAY ?? '{"kind":"pareto","scaleMs":1000,"alpha":1.5,"capMs":60000}') as unknown;
const ONLY = new Set((env.BENCH_E2E_ONLY ?? 'async-cispo,async-ppo,sync-cispo').split(',').filter(Boolean));
const KEEP_RUNS = env.BENCH_E2E_KEEP_RUNS === '1';
/**
 * N, rollouts in flight, in every variant. Default: what η lets async hold, (η + 1)·B groups of G.
 * The main job's 64 slots are one batch, which leaves async no room beyond it (measured, 192 bought
 * little: 4.22 against 4.06 trajectories/s over three seeds; the Windowed FIFO's head holds async,
 * README "npm run bench -- e2e"). Sync never holds more than one batch (η = 0): the same with either.
 */
const CONCURRENCY = env.BENCH_E2E_CONCURRENCY ? Math.round(num('BENCH_E2E_CONCURRENCY', 64)) : null;
const concurrencyOf = (base: RunConfig) => CONCURRENCY ?? (base.rollouts.eta + 1) * base.scheduler.groupsPerBatch * base.rollouts.groupSize;
/** The last share of the budget whose train rewards are compared ("reward at equal wall clock"). */
const LAST_SHARE = 0.2;

type Variant = { mode: RunRecord['mode']; loss: RunRecord['loss'] };
const label = (v: Variant) => `${v.mode}-${v.loss}`;

/** One variant's run configuration: the base with the bench's budget, evaluations and workload, then sync or async and the loss. */
function variantConfig(base: RunConfig, v: Variant, seed: number): RunConfig {
  const raw = JSON.parse(JSON.stringify(base)) as Record<string, Record<string, unknown>>;
  raw.seed = seed as never;
  // Tool delays are the built-in chain-add's dynamics; another task set runs as it is.
  raw.task = { ...raw.task, ...(base.task.set === 'chain-add' ? { toolDelay: TOOL_DELAY } : {}), evalTasks: EVAL_TASKS };
  raw.budget = { steps: 1_000_000, seconds: SECONDS, stallSeconds: Math.max(180, SECONDS) };
  raw.eval = { ...raw.eval, everyVersions: EVAL_EVERY, samplesPerTask: EVAL_SAMPLES };
  raw.rollouts = { ...raw.rollouts, concurrency: concurrencyOf(base) };
  if (v.mode === 'sync') {
    raw.scheduler = { ...raw.scheduler, window: 1 };
    raw.rollouts = { ...raw.rollouts, eta: 0 };
  }
  if (v.loss !== base.algorithm.loss) {
    const { epsLow: _l, epsHigh: _h, cispoMask: _m, dualClip: _d, ...algorithm } = raw.algorithm;
    raw.algorithm = { ...algorithm, loss: v.loss };
  }
  return parseRunConfig(raw);
}

async function runOne(
  base: RunConfig,
  v: Variant,
  seed: number,
  model: Awaited<ReturnType<typeof startingModel>>['model'],
  baseline: RunRecord['evals'][number] | null,
): Promise<RunRecord> {
  const cfg = variantConfig(base, v, seed);
  const t0 = performance.now();
  const wall = () => (performance.now() - t0) / 1000;
  const completions: [number, number | null][] = [];
  const runId = `bench-e2e-${label(v)}-s${seed}-${randomUUID().slice(0, 6)}`;
  const services = await startInProcessServices(cfg, { runId, model });
  let r: Awaited<ReturnType<typeof driveRun>>;
  try {
    r = await driveRun({
      cfg,
      runId,
      services,
      taskSet: taskSetOf(cfg),
      wall,
      log: (l) => console.log(`  ${l.trim()}`),
      progress: false,
      initialEval: baseline === null,
      budgetExcludesEvals: true,
      onRolloutCompleted: (o, t) => void completions.push([t, o.outcomeReward]),
    });
  } finally {
    await services.close();
  }
  if (!KEEP_RUNS) rmSync(services.runDir, { recursive: true, force: true });
  const clock = (t: number) => trainClock(t, r.trainStartedAtS, r.evalIntervals);
  // What the budget bought: train rollouts that finished while the loop trained (not during an
  // evaluation, which holds the trainer and admits no train rollout), and the steps that finished by its end.
  const inBudget = (t: number) => t >= r.trainStartedAtS && t <= r.loopEndedAtS && !duringEvaluation(t, r.evalIntervals);
  const done = completions.filter(([t]) => inBudget(t));
  const steps = r.rec.steps.filter((s) => s.wallS <= r.loopEndedAtS);
  const evals = r.rec.evals.map((e, i) => ({
    version: e.version,
    trainS: r.evalIntervals[i] ? clock(r.evalIntervals[i][0]) : clock(e.wallS),
    success: e.success,
    meanReward: e.meanReward,
  }));
  return {
    label: label(v),
    mode: v.mode,
    loss: v.loss,
    seed,
    trainSeconds: r.trainSeconds,
    rolloutsCompleted: done.length,
    trainerBusySeconds: steps.reduce((a, s) => a + s.trainSeconds, 0),
    admissionBlockedSeconds: r.admissionBlockedSeconds,
    capacityHeld: r.capacityHeld,
    steps: steps.map((s) => ({
      version: s.version,
      trainS: clock(s.wallS),
      totalTokens: s.totalTokens,
      uniqueTokens: s.uniqueTokens,
      skipped: s.skipped !== null,
    })),
    rewards: done.filter((c): c is [number, number] => c[1] !== null).map(([t, x]) => [clock(t), x]),
    evals: baseline ? [baseline, ...evals] : evals,
    staleness: Array.from(r.rec.staleness, (n) => n ?? 0),
    rlStoppedBy: r.rlStoppedBy,
  };
}

const fix = (x: number, d = 2) => (Number.isFinite(x) ? Number(x.toFixed(d)) : null);

/** A mode's figures for the JSON line. */
function modeJson(r: {
  trajectoriesPerS: number;
  trainedTrajectoriesPerS: number;
  trainedTokensPerS: number;
  trainerIdle: number;
  rewardLast: number;
  heldOutRewardEnd: number;
  heldOutEnd: number;
  steps: number;
  heldBy: (k: keyof RunRecord['admissionBlockedSeconds']) => number;
  capacityHeld: (k: keyof RunRecord['capacityHeld']) => number;
}) {
  return {
    trajectoriesPerS: fix(r.trajectoriesPerS),
    trainedTrajectoriesPerS: fix(r.trainedTrajectoriesPerS),
    trainedTokensPerS: fix(r.trainedTokensPerS, 0),
    trainerIdle: fix(r.trainerIdle, 3),
    steps: fix(r.steps, 1),
    trainRewardLast: fix(r.rewardLast, 3),
    heldOutRewardEnd: fix(r.heldOutRewardEnd, 3),
    heldOutEnd: fix(r.heldOutEnd, 3),
    /** Share of the train time the next group waited at admission, by what held it. */
    admissionHeld: { capacity: fix(r.heldBy('capacity'), 3), version: fix(r.heldBy('version'), 3), slots: fix(r.heldBy('slots'), 3) },
    /** Mean groups holding the staleness capacity, by state. */
    capacityHeld: {
      running: fix(r.capacityHeld('running'), 1),
      untrained: fix(r.capacityHeld('untrained'), 1),
      awaitingVersion: fix(r.capacityHeld('awaitingVersion'), 1),
    },
  };
}

const pct = (x: number | null | undefined) => (x === null || x === undefined || !Number.isFinite(x) ? '-' : `${(x * 100).toFixed(1)}%`);

async function main(): Promise<void> {
  const started = performance.now();
  const argv = process.argv.slice(2);
  const at = argv.indexOf('--config');
  const checked = checkRunConfig({ file: at >= 0 ? argv[at + 1] : undefined, env });
  if (!checked.cfg) {
    console.error(`invalid run config:\n${checked.problems.map((p) => `  ${p}`).join('\n')}`);
    process.exit(78);
  }
  const base = checked.cfg;
  setThreads(base.engineThreads);
  const info = engineInfo();
  console.log(
    `e2e bench: ${SECONDS} s of training per run, seeds 1..${SEEDS} (sync 1..${SYNC_SEEDS}), held-out ${EVAL_TASKS} tasks x ${EVAL_SAMPLES} every ${EVAL_EVERY} versions, tool delay ${base.task.set === 'chain-add' ? JSON.stringify(TOOL_DELAY) : `none (task set ${base.task.set})`}, ${concurrencyOf(base)} rollouts in flight at most, engine ${info.backend}, ${base.engineThreads} thread(s) per engine call`,
  );
  const start = await startingModel(base, (l) => console.log(l));
  const plan: { v: Variant; seed: number }[] = [];
  for (let seed = 1; seed <= SEEDS; seed++) {
    plan.push({ v: { mode: 'async', loss: 'cispo' }, seed });
    if (seed <= SYNC_SEEDS) plan.push({ v: { mode: 'sync', loss: 'cispo' }, seed });
    plan.push({ v: { mode: 'async', loss: 'ppo' }, seed });
  }
  const todo = plan.filter((p) => ONLY.has(label(p.v)));
  const runs: RunRecord[] = [];
  const baselines = new Map<number, RunRecord['evals'][number]>();
  for (const [i, p] of todo.entries()) {
    console.log(`\nrun ${i + 1}/${todo.length}: ${label(p.v)} seed ${p.seed}`);
    const rec = await runOne(base, p.v, p.seed, start.model, baselines.get(p.seed) ?? null);
    if (!baselines.has(p.seed) && rec.evals[0]?.version === 0) baselines.set(p.seed, rec.evals[0]);
    const t = throughput(rec, base.scheduler.groupsPerBatch * base.rollouts.groupSize);
    console.log(
      `  -> ${t.steps} steps (v${rec.steps[rec.steps.length - 1]?.version ?? 0}) in ${rec.trainSeconds.toFixed(0)} s: ${t.trajectoriesPerS.toFixed(2)} trajectories/s, trainer idle ${pct(t.trainerIdle)}, held-out ${pct(heldOutFinal(rec)?.success)} at the end (${rec.rlStoppedBy})`,
    );
    const b = rec.admissionBlockedSeconds;
    const h = rec.capacityHeld;
    console.log(
      `     next group held at admission: capacity ${pct(b.capacity / rec.trainSeconds)}, version bound ${pct(b.version / rec.trainSeconds)}, all N slots running ${pct(b.slots / rec.trainSeconds)} of the time; ` +
        `capacity held by ${h.running.toFixed(1)} running, ${h.untrained.toFixed(1)} finished untrained, ${h.awaitingVersion.toFixed(1)} trained awaiting their version (groups, mean)`,
    );
    runs.push(rec);
  }

  const perBatch = base.scheduler.groupsPerBatch * base.rollouts.groupSize;
  const of = (mode: string, loss: string) => runs.filter((r) => r.mode === mode && r.loss === loss);
  const asyncC = of('async', 'cispo');
  const syncC = of('sync', 'cispo');
  const asyncG = of('async', 'ppo');

  // 1. Sync against async, same workload, same budget.
  const modeRow = (name: string, rs: RunRecord[]) => {
    const ts = rs.map((r) => throughput(r, perBatch));
    const m = (f: (t: (typeof ts)[number]) => number) => mean(ts.map(f));
    return {
      name,
      runs: rs.length,
      trajectoriesPerS: m((t) => t.trajectoriesPerS),
      trainedTrajectoriesPerS: m((t) => t.trainedTrajectoriesPerS),
      trainedTokensPerS: m((t) => t.trainedTokensPerS),
      uniqueTokensPerS: m((t) => t.uniqueTokensPerS),
      trainerIdle: m((t) => t.trainerIdle),
      steps: m((t) => t.steps),
      rewardLast: mean(rs.map((r) => rewardOfLast(r, LAST_SHARE, r.trainSeconds))),
      heldOutEnd: mean(rs.map((r) => heldOutFinal(r)?.success ?? NaN)),
      heldOutRewardEnd: mean(rs.map((r) => heldOutFinal(r)?.meanReward ?? NaN)),
      meanLag: lagDistribution(rs).mean,
      heldBy: (k: keyof RunRecord['admissionBlockedSeconds']) => mean(rs.map((r) => r.admissionBlockedSeconds[k] / r.trainSeconds)),
      capacityHeld: (k: keyof RunRecord['capacityHeld']) => mean(rs.map((r) => r.capacityHeld[k])),
    };
  };
  const pairedSeeds = syncC.map((r) => r.seed).filter((s) => asyncC.some((a) => a.seed === s));
  const asyncPaired = modeRow(
    'async (defaults)',
    asyncC.filter((r) => pairedSeeds.includes(r.seed)),
  );
  const sync = modeRow(
    'sync (W=1, eta=0)',
    syncC.filter((r) => pairedSeeds.includes(r.seed)),
  );
  const speedup = asyncPaired.trajectoriesPerS / sync.trajectoriesPerS;
  const trainedSpeedup = asyncPaired.trainedTrajectoriesPerS / sync.trainedTrajectoriesPerS;
  printTable(
    `sync against async: CISPO, seeds ${pairedSeeds.join(', ') || '-'}, ${SECONDS} s of training each (means over seeds)`,
    [sync, asyncPaired].map((r) => ({
      mode: r.name,
      runs: r.runs,
      'trajectories/s': r.trajectoriesPerS,
      'trained traj/s': r.trainedTrajectoriesPerS,
      'trained tok/s': Math.round(r.trainedTokensPerS),
      'unique tok/s': Math.round(r.uniqueTokensPerS),
      'trainer idle': pct(r.trainerIdle),
      steps: r.steps,
      [`train reward, last ${LAST_SHARE * 100}%`]: r.rewardLast,
      'held-out reward at end': r.heldOutRewardEnd,
      'held-out success at end': pct(r.heldOutEnd),
      'mean lag': r.meanLag,
      'admission held: capacity / version / slots': `${pct(r.heldBy('capacity'))} / ${pct(r.heldBy('version'))} / ${pct(r.heldBy('slots'))}`,
    })),
  );
  console.log(`async / sync: ${speedup.toFixed(2)}x trajectories/s, ${trainedSpeedup.toFixed(2)}x trained trajectories/s`);

  // 2. CISPO against GRPO (PPO-clip), async, per seed.
  const seeds = [...new Set([...asyncC, ...asyncG].map((r) => r.seed))].sort((a, b) => a - b);
  const equalSteps = commonEvalVersion([...asyncC, ...asyncG]);
  const lossRows = seeds.map((seed) => {
    const c = asyncC.find((r) => r.seed === seed);
    const g = asyncG.find((r) => r.seed === seed);
    return {
      seed,
      start: c ? heldOutAt(c, 0) : g ? heldOutAt(g, 0) : null,
      cispoSteps: c && equalSteps !== null ? heldOutAt(c, equalSteps) : null,
      grpoSteps: g && equalSteps !== null ? heldOutAt(g, equalSteps) : null,
      cispoEnd: c ? heldOutFinal(c) : null,
      grpoEnd: g ? heldOutFinal(g) : null,
    };
  });
  const meanOf = (xs: (number | null | undefined)[]) => mean(xs.filter((x): x is number => typeof x === 'number'));
  const cmp = {
    equalSteps: { version: equalSteps, cispo: meanOf(lossRows.map((r) => r.cispoSteps)), grpo: meanOf(lossRows.map((r) => r.grpoSteps)) },
    equalWallClock: {
      seconds: SECONDS,
      cispo: meanOf(lossRows.map((r) => r.cispoEnd?.success)),
      grpo: meanOf(lossRows.map((r) => r.grpoEnd?.success)),
    },
  };
  // The same gaps paired by seed (same warm start, same evaluation tasks): whether a gap is more than noise.
  const pairsOf = (f: (r: (typeof lossRows)[number]) => [number | null | undefined, number | null | undefined]) =>
    lossRows.map(f).filter((p): p is [number, number] => typeof p[0] === 'number' && typeof p[1] === 'number');
  const gap = {
    equalSteps: pairedDifference(pairsOf((r) => [r.cispoSteps, r.grpoSteps])),
    equalWallClock: pairedDifference(pairsOf((r) => [r.cispoEnd?.success, r.grpoEnd?.success])),
  };
  printTable(
    `CISPO against GRPO (PPO-clip), async, held-out success (${EVAL_TASKS} tasks x ${EVAL_SAMPLES} samples, temperature ${base.eval.temperature})`,
    [
      ...lossRows.map((r) => ({
        seed: String(r.seed),
        'v0 (start)': pct(r.start),
        [`CISPO v${equalSteps ?? '-'}`]: pct(r.cispoSteps),
        [`GRPO v${equalSteps ?? '-'}`]: pct(r.grpoSteps),
        [`CISPO end (${SECONDS} s)`]: r.cispoEnd ? `${pct(r.cispoEnd.success)} v${r.cispoEnd.version}` : '-',
        [`GRPO end (${SECONDS} s)`]: r.grpoEnd ? `${pct(r.grpoEnd.success)} v${r.grpoEnd.version}` : '-',
      })),
      {
        seed: 'mean',
        'v0 (start)': pct(meanOf(lossRows.map((r) => r.start))),
        [`CISPO v${equalSteps ?? '-'}`]: pct(cmp.equalSteps.cispo),
        [`GRPO v${equalSteps ?? '-'}`]: pct(cmp.equalSteps.grpo),
        [`CISPO end (${SECONDS} s)`]: pct(cmp.equalWallClock.cispo),
        [`GRPO end (${SECONDS} s)`]: pct(cmp.equalWallClock.grpo),
      },
    ],
  );

  const points = (d: { n: number; mean: number; se: number }) =>
    `${(d.mean * 100).toFixed(1)} ± ${Number.isFinite(d.se) ? (d.se * 100).toFixed(1) : '-'} points (${d.n} seeds)`;
  console.log(
    `CISPO − GRPO, paired by seed (mean ± standard error): ${points(gap.equalSteps)} at v${equalSteps ?? '-'}, ${points(gap.equalWallClock)} at ${SECONDS} s`,
  );

  // 3. How asynchronous is it really: versions behind per trained output token.
  const lags = { async: lagDistribution([...asyncC, ...asyncG]), sync: lagDistribution(syncC) };
  printTable(
    'lag of trained output tokens (versions behind the trainer at the step), pooled over runs',
    Object.entries(lags).map(([mode, l]) => ({
      mode,
      tokens: l.tokens,
      'lag 0': pct(l.shares[0]),
      'lag 1': pct(l.shares[1]),
      'lag 2': pct(l.shares[2]),
      'lag >=3': pct(l.shares[3]),
      mean: l.mean,
      max: l.max,
      'stale (lag >= 1)': pct(l.staleShare),
    })),
  );

  mkdirSync('bench-results', { recursive: true });
  writeFileSync(join('bench-results', 'e2e.json'), JSON.stringify({ runs }, null, 1) + '\n');
  // Reward at equal wall clock: the held-out reward and success of the policy each loop has at the end of the same budget.
  const rewardNoWorse = asyncPaired.heldOutRewardEnd >= sync.heldOutRewardEnd && asyncPaired.heldOutEnd >= sync.heldOutEnd;
  const summary = {
    suite: 'e2e',
    asyncOverSyncSpeedup: fix(speedup),
    asyncOverSyncTrainedSpeedup: fix(trainedSpeedup),
    sync: modeJson(sync),
    async: modeJson(asyncPaired),
    cispoVsGrpo: {
      seeds: seeds.length,
      equalSteps: {
        version: equalSteps,
        cispo: fix(cmp.equalSteps.cispo, 3),
        grpo: fix(cmp.equalSteps.grpo, 3),
        pairedGap: fix(gap.equalSteps.mean, 3),
        pairedGapSe: fix(gap.equalSteps.se, 3),
      },
      equalWallClock: {
        seconds: SECONDS,
        cispo: fix(cmp.equalWallClock.cispo, 3),
        grpo: fix(cmp.equalWallClock.grpo, 3),
        pairedGap: fix(gap.equalWallClock.mean, 3),
        pairedGapSe: fix(gap.equalWallClock.se, 3),
      },
    },
    lag: Object.fromEntries(
      Object.entries(lags).map(([k, l]) => [
        k,
        { mean: fix(l.mean, 3), max: l.max, staleShare: fix(l.staleShare, 3), shares: l.shares.map((x) => fix(x, 3)) },
      ]),
    ),
    targets: {
      asyncAtLeast3xSync: speedup >= 3,
      rewardAtEqualWallClockNoWorse: rewardNoWorse,
      cispoAtLeastGrpo: cmp.equalSteps.cispo >= cmp.equalSteps.grpo && cmp.equalWallClock.cispo >= cmp.equalWallClock.grpo,
    },
    config: {
      secondsPerRun: SECONDS,
      seeds: SEEDS,
      syncSeeds: SYNC_SEEDS,
      evalEvery: EVAL_EVERY,
      evalTasks: EVAL_TASKS,
      evalSamples: EVAL_SAMPLES,
      toolDelay: TOOL_DELAY,
      concurrency: concurrencyOf(base),
      model: base.model,
    },
    wallClockSeconds: fix((performance.now() - started) / 1000, 0),
  };
  console.log(JSON.stringify(summary));
}

main().catch((err) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exit(1);
});
