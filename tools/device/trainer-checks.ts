// The trainer's own code on the CUDA backend: the built-in tiny model trained by trainOnTree (CISPO, two mini-batches a batch,
// warm-up, clipping) on the GPU against the same batches on the CPU reference, then a full
// checkpoint written by the trainer's CheckpointStore and restored into a fresh GPU model, whose
// next batch must land where the uninterrupted model's lands. `device` 'cpu' runs the "GPU" side on
// the CPU too, which tests the checks themselves where there is no GPU (there the resume is bitwise).
// Entry on the GPU machine: trainer-check.ts.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Model, type Backend } from '@anvil/engine';
import { lossConfig, prefixTreeOf, seededRandom } from '@anvil/rl';
import { CheckpointStore, trainOnTree, type TrainSettings } from '@anvil/trainer';

/** Two groups of multi-turn trajectories (calls extend each other) with recorded behaviour log-probs. */
function batch(seed: number) {
  const rand = seededRandom(seed);
  const tok = () => Math.floor(rand() * 250);
  const system = Array.from({ length: 24 }, tok);
  const samples = [];
  for (let g = 0; g < 2; g++) {
    const task = [...system, ...Array.from({ length: 8 }, tok)];
    for (let r = 0; r < 4; r++) {
      let ctx = [...task];
      const advantage = rand() * 2 - 1;
      for (let c = 0; c < 3; c++) {
        const outputIds = Array.from({ length: 6 + Math.floor(rand() * 10) }, tok);
        samples.push({
          sampleId: `s${seed}g${g}r${r}c${c}`,
          trajectoryId: `s${seed}g${g}r${r}`,
          groupId: `s${seed}g${g}`,
          advantage,
          lossWeight: 1,
          promptIds: [...ctx],
          outputIds,
          behaviourLogp: outputIds.map(() => -5.6 + (rand() - 0.5)),
          versions: outputIds.map(() => 0),
        });
        ctx = [...ctx, ...outputIds, ...Array.from({ length: 5 }, tok)];
      }
    }
  }
  return prefixTreeOf(samples);
}

const settings: TrainSettings = { loss: lossConfig(), lr: 3e-3, warmupSteps: 2, maxGradNorm: 1, packTokens: 100_000, miniBatches: 2 };
const tiny = (backend: Backend, seed = 5) => Model.tiny({ seed, backend, config: { vocabSize: 272 } });

async function weights(m: Model): Promise<Float32Array[]> {
  await m.syncToHost();
  return m.tensors.map((t) => Float32Array.from(t.data));
}

export interface TrainerCheck {
  name: string;
  passed: boolean;
  detail: string;
}

/** The three checks in order; a throw is reported as a failed check. */
export async function trainerChecks(device: Backend = 'cuda'): Promise<TrainerCheck[]> {
  const results: TrainerCheck[] = [];
  const report = (name: string, passed: boolean, detail: string) => {
    results.push({ name, passed, detail });
  };
  const batches = [1, 2, 3, 4].map(batch);
  const dir = mkdtempSync(join(tmpdir(), 'anvil-trainer-check-'));
  const cpu = tiny('cpu');
  const gpu = tiny(device);
  const models = [cpu, gpu];
  try {
    // 1. the same three batches on both backends: every mini-batch's loss tracks the CPU's
    const losses = { cpu: [] as number[], gpu: [] as number[] };
    for (let b = 0; b < 3; b++) {
      for (const r of await trainOnTree(cpu, batches[b], settings, { currentVersion: 0, stepsDone: 2 * b })) losses.cpu.push(r.loss);
      for (const r of await trainOnTree(gpu, batches[b], settings, { currentVersion: 0, stepsDone: 2 * b })) losses.gpu.push(r.loss);
    }
    const scale = Math.max(...losses.cpu.map(Math.abs), 1e-6);
    const worst = Math.max(...losses.cpu.map((l, i) => Math.abs(l - losses.gpu[i]) / scale));
    report(
      `trainOnTree on ${device} vs the CPU: 3 batches x 2 mini-batches, CISPO losses`,
      losses.gpu.length === 6 && losses.gpu.every(Number.isFinite) && worst <= 0.03,
      `cpu ${losses.cpu.map((x) => x.toFixed(4)).join(' ')} | gpu ${losses.gpu.map((x) => x.toFixed(4)).join(' ')} | worst gap ${worst.toExponential(2)} of the largest loss (limit 0.03)`,
    );

    // 2. a full trainer checkpoint of the GPU model, restored into a fresh GPU model
    const store = new CheckpointStore(join(dir, 'ckpt'));
    await store.init();
    const position = { nextBatchStep: 3, batchesTrained: 3, batchesDropped: 0, lastBatchId: 'b3' };
    const written = await store.write(gpu, { runId: 'gpu-check', step: gpu.stepCount, version: 3, position, nonFiniteSkips: 0 }, true);
    const resumed = tiny(device, 99);
    models.push(resumed);
    const state = await store.restoreInto(resumed, written.dir);
    report(
      `CheckpointStore on ${device}: full checkpoint written and restored`,
      state.step === 6 && resumed.stepCount === 6 && state.sha256 === written.sha256,
      `${written.dir}: step ${state.step}, restored model at AdamW step ${resumed.stepCount}, sha256 ${written.sha256.slice(0, 12)}...`,
    );
    // 3. the next batch from the restored model lands where the uninterrupted model's lands
    await trainOnTree(gpu, batches[3], settings, { currentVersion: 3, stepsDone: 6 });
    await trainOnTree(resumed, batches[3], settings, { currentVersion: 3, stepsDone: 6 });
    const [wa, wr] = [await weights(gpu), await weights(resumed)];
    let gap = 0,
      moved = 0;
    const saved = await Model.load(written.dir, { backend: 'cpu' });
    const before = saved.tensors.map((t) => Float32Array.from(t.data));
    saved.dispose();
    wa.forEach((t, i) => {
      for (let k = 0; k < t.length; k++) {
        gap = Math.max(gap, Math.abs(t[k] - wr[i][k]));
        moved = Math.max(moved, Math.abs(t[k] - before[i][k]));
      }
    });
    report(
      `resume after a ${device} checkpoint: the next batch (2 AdamW steps) lands where the uninterrupted run lands`,
      gap <= 1e-6 && moved > 100 * Math.max(gap, 1e-9),
      `max |resumed - uninterrupted| ${gap.toExponential(2)} (limit 1e-6); the batch moved weights by up to ${moved.toExponential(2)}`,
    );
  } catch (e) {
    report('trainer checks threw', false, (e as Error).stack ?? String(e));
  } finally {
    for (const m of models) m.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
  return results;
}
