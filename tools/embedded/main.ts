/**
 * `npm run main`: the embedded default as far as it is built today. One process, no external
 * services: the native engine trains the built-in tiny model on the built-in multi-turn task,
 * with every batch merged into prefix trees (each shared token computed once), AdamW with the
 * design's β = (0.9, 0.95), and a checkpoint and a report at the end. The RL loop around it
 * (gateway, rollouts, Data Pool scheduling, CISPO) plugs into the same engine and packer as
 * the issues that build them land.
 *
 * Env: ANVIL_MAIN_STEPS (default 80), ANVIL_DATA_DIR (default .anvil), ANVIL_ENGINE_THREADS.
 */
import { join } from 'node:path';
import { engineInfo, getThreads, Model } from '@anvil/engine';
import { packSamples, seededRandom, type PackSample } from '@anvil/rl';
import { makeTrajectory } from './dialogue-task';
import { writeReport, type StepRecord } from './report';

const steps = Number(process.env.ANVIL_MAIN_STEPS ?? 80);
const dataDir = process.env.ANVIL_DATA_DIR ?? '.anvil';
const trajectoriesPerBatch = 8;
const turnsPerTrajectory = 6;
const packBudget = 4096;

async function trainStep(model: Model, batch: PackSample[], lr: number) {
  const { packs, locations, totalTokens, uniqueTokens, sharing } = packSamples(batch, { maxTokens: packBudget });
  const outputTokens = batch.reduce((n, s) => n + s.outputIds.length, 0);
  await model.zeroGrad();
  let lossSum = 0;
  let peak = 0;
  for (let p = 0; p < packs.length; p++) {
    const pack = packs[p];
    const { handle, logp } = await model.forward(pack);
    // Mean over every answer token of the batch: dL/dlogp = −(summed sample weights) / outputTokens.
    const dLdlogp = new Float32Array(pack.tokens.length);
    for (let i = 0; i < dLdlogp.length; i++) dLdlogp[i] = -pack.lossWeights[i] / outputTokens;
    locations.forEach((loc) => {
      if (loc.pack === p) for (const node of loc.outputNodes) lossSum -= logp[node];
    });
    await model.backward(handle, dLdlogp);
    peak = Math.max(peak, handle.peakBytes);
    handle.dispose();
  }
  const gradNorm = await model.clipGradNorm(1.0);
  await model.step({ lr });
  return { loss: lossSum / outputTokens, totalTokens, uniqueTokens, sharing, gradNorm, peak };
}

async function main() {
  const info = engineInfo();
  console.log(`engine: ${info.backend} backend (${info.reason}), ${getThreads()} threads`);
  const model = Model.tiny({ seed: 1 });
  model.configureOptimizer({ beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.01 });
  console.log(`model: built-in tiny Llama, ${(model.numParams / 1e6).toFixed(2)} M parameters`);
  const rand = seededRandom(42);
  const records: StepRecord[] = [];
  const started = performance.now();
  for (let step = 1; step <= steps; step++) {
    const batch = Array.from({ length: trajectoriesPerBatch }, () => makeTrajectory(rand, turnsPerTrajectory)).flat();
    const lr = 3e-3 * Math.min(1, step / 10);
    const t0 = performance.now();
    const r = await trainStep(model, batch, lr);
    const seconds = (performance.now() - t0) / 1000;
    records.push({ step, loss: r.loss, tokensPerSec: r.totalTokens / seconds, sharing: r.sharing, gradNorm: r.gradNorm, peakMB: r.peak / 2 ** 20 });
    if (step === 1 || step % 10 === 0 || step === steps) {
      console.log(`step ${String(step).padStart(4)}  loss ${r.loss.toFixed(4)}  sharing ${(r.sharing * 100).toFixed(1)}%  ${Math.round(r.totalTokens / seconds)} sample-tokens/s  grad-norm ${r.gradNorm.toFixed(3)}`);
    }
  }
  const checkpointDir = join(dataDir, 'checkpoints', 'embedded-warmup');
  await model.save(checkpointDir);
  const first = records[0], last = records[records.length - 1];
  const summary = {
    steps,
    firstLoss: first.loss,
    finalLoss: last.loss,
    meanSharing: records.reduce((s, r) => s + r.sharing, 0) / records.length,
    meanSampleTokensPerSec: records.reduce((s, r) => s + r.tokensPerSec, 0) / records.length,
    peakActivationMB: Math.max(...records.map((r) => r.peakMB)),
    wallSeconds: (performance.now() - started) / 1000,
    checkpoint: checkpointDir,
  };
  const report = writeReport(join(dataDir, 'reports', `main-${new Date().toISOString().replace(/[:.]/g, '-')}`), 'Anvil embedded run', summary, records);
  console.log(`\ncheckpoint: ${checkpointDir}\nreport: ${report}`);
  if (!(last.loss < first.loss)) {
    console.error('training did not reduce the loss');
    process.exit(1);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
