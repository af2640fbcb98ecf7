// LoRA on the CUDA backend checked against the CPU reference, as cuda-checks.ts does for the rest
// (modelChecks() runs these too, so the device script picks them up):
//   - a training forward (dropout on: both backends draw the same masks) and backward: log-probs,
//     every adapter gradient, the gradient norm, and a frozen base (no base gradients anywhere)
//   - a short LoRA training run whose losses track the CPU's, the base untouched on the device
//   - merging on the device gives the unmerged model's log-probs, and the CPU's merge
//   - adapters with their AdamW state saved and loaded resume where the uninterrupted run goes
//   - the GPU generator refuses a model with unmerged adapters (it would ignore them)
// `backend` 'cpu' runs the same checks on the CPU alone: a test of the checks themselves.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildPack, mergeSampleValues, seededRandom, type Pack, type PackSample } from '@anvil/rl';
import type { ModelConfigInput } from './config';
import type { CudaCheck } from './cuda-checks';
import { createGenerator } from './generator';
import type { LoraOptions } from './lora';
import { Model } from './model';

/** SmolLM2's layer shape (hidden 576, 9 query / 3 KV heads of 64, tied embeddings) at 2 layers and a small vocabulary. */
export const LORA_CHECK_CONFIG: ModelConfigInput = {
  modelType: 'llama',
  vocabSize: 1024,
  hiddenSize: 576,
  intermediateSize: 1536,
  numHiddenLayers: 2,
  numAttentionHeads: 9,
  numKeyValueHeads: 3,
  tieWordEmbeddings: true,
  ropeTheta: 100000,
  rmsNormEps: 1e-5,
  maxPositionEmbeddings: 8192,
};
const LORA: LoraOptions = {
  rank: 8,
  alpha: 16,
  dropout: 0.1,
  targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
  seed: 3,
};
// as cuda-checks.ts: bf16 operands through a few layers
const LOGP_ATOL = 0.05;
const GRAD_REL_L2 = 0.05;

function samples(seed: number, vocab: number, prompts: number, branches: number, promptLen: number, outLen: number): PackSample[] {
  const r = seededRandom(seed);
  const tok = () => Math.floor(r() * vocab);
  const out: PackSample[] = [];
  for (let p = 0; p < prompts; p++) {
    const prompt = Array.from({ length: promptLen }, tok);
    for (let b = 0; b < branches; b++) out.push({ promptIds: prompt, outputIds: Array.from({ length: outLen }, tok) });
  }
  return out;
}

function coefficients(pack: Pack, s: PackSample[], seed: number): Float32Array {
  const r = seededRandom(seed);
  return mergeSampleValues(
    pack,
    pack.samples.map((i) => {
      const adv = r() * 2 - 1;
      return Float32Array.from(s[i].outputIds, () => -adv / s.length);
    }),
  );
}

function relL2(a: Float32Array, b: Float32Array): number {
  let num = 0,
    den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num) / Math.max(Math.sqrt(den), 1e-30);
}

function maxAbsDiff(a: Float32Array, b: Float32Array, mask?: Uint8Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) if (!mask || mask[i]) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** A model with the check's adapters and B set to seeded random values (so A gets gradients too). */
async function withAdapters(backend: 'cpu' | 'cuda', seed = 7): Promise<Model> {
  const m = Model.create(LORA_CHECK_CONFIG, { backend, seed, initStd: 0.05 });
  await m.enableLora(LORA);
  const r = seededRandom(seed + 1);
  for (const t of m.loraTensors) if (t.name.includes('lora_B')) t.data.forEach((_, i) => (t.data[i] = 0.02 * (r() * 2 - 1)));
  await m.syncToDevice();
  return m;
}

async function forwardBackward(backend: 'cpu' | 'cuda'): Promise<CudaCheck[]> {
  const cpu = await withAdapters('cpu'),
    dev = await withAdapters(backend);
  try {
    const s = samples(1, 1024, 3, 4, 120, 40);
    const pack = buildPack(s);
    const coef = coefficients(pack, s, 2);
    const fw = { train: true, dropoutSeed: 77 };
    const fc = await cpu.forward(pack, fw),
      fg = await dev.forward(pack, fw);
    const lp = maxAbsDiff(fg.logp, fc.logp, fc.hasLogp);
    const ev = await dev.forward(pack); // an evaluation forward: no dropout, so it must differ
    const dropped = maxAbsDiff(ev.logp, fg.logp, fc.hasLogp);
    ev.handle.dispose();
    await cpu.zeroGrad();
    await dev.zeroGrad();
    await cpu.backward(fc, coef);
    await dev.backward(fg, coef);
    await dev.syncToHost({ grads: true });
    let worst = 0,
      worstName = '';
    const bad: string[] = [];
    dev.loraTensors.forEach((t, i) => {
      const e = relL2(t.grad, cpu.loraTensors[i].grad);
      if (e > worst) [worst, worstName] = [e, t.name];
      if (!(e <= GRAD_REL_L2)) bad.push(`${t.name} ${e.toExponential(2)}`);
    });
    const nc = await cpu.gradNorm(),
      ng = await dev.gradNorm();
    const mem = dev.memory();
    let frozen = mem.gradBytes === 4 * mem.adapterParams;
    try {
      void dev.tensors[0].grad;
      frozen = false;
    } catch {
      /* the frozen base has no gradient view: expected */
    }
    fc.handle.dispose();
    fg.handle.dispose();
    return [
      {
        name: `LoRA (${backend}): training forward with dropout (the CPU's masks) on SmolLM2's layer shape`,
        passed: lp <= LOGP_ATOL && dropped > 1e-4,
        detail: `max |dlogp| ${lp.toExponential(2)} (tolerance ${LOGP_ATOL}); an evaluation forward differs by ${dropped.toExponential(2)} (dropout is on)`,
        metrics: { maxLogpErr: lp, dropoutEffect: dropped },
      },
      {
        name: `LoRA (${backend}): backward, every adapter gradient (relative L2), the norm, a frozen base`,
        passed: bad.length === 0 && Math.abs(nc - ng) <= 0.02 * nc && frozen,
        detail: `${bad.length ? `over ${GRAD_REL_L2}: ${bad.slice(0, 6).join(', ')}` : `worst ${worstName} ${worst.toExponential(2)}`}; norm cpu ${nc.toPrecision(6)} vs ${ng.toPrecision(6)}; device gradient bytes ${mem.gradBytes} for ${mem.adapterParams} adapter parameters${frozen ? '' : ' (BASE NOT FROZEN)'}`,
        metrics: { worstGradRelL2: worst, cpuNorm: nc, devNorm: ng },
      },
    ];
  } finally {
    cpu.dispose();
    dev.dispose();
  }
}

async function trainingTracks(backend: 'cpu' | 'cuda', steps = 10): Promise<CudaCheck> {
  const s = samples(3, 1024, 4, 4, 48, 24).map((x) => ({ promptIds: x.promptIds, outputIds: Array.from(x.promptIds).slice(0, 24) }));
  const pack = buildPack(s);
  const coef = mergeSampleValues(
    pack,
    pack.samples.map((i) => Float32Array.from(s[i].outputIds, () => -1 / s.length)),
  );
  const run = async (b: 'cpu' | 'cuda') => {
    const m = Model.create(LORA_CHECK_CONFIG, { backend: b, seed: 3, initStd: 0.05 });
    await m.enableLora({ ...LORA, dropout: 0 });
    await m.syncToHost();
    const base = m.tensors.map((t) => Float32Array.from(t.data));
    const losses: number[] = [];
    try {
      for (let k = 0; k < steps; k++) {
        const f = await m.forward(pack, { train: true });
        losses.push(coef.reduce((a, c, i) => a + c * f.logp[i], 0));
        await m.zeroGrad();
        await m.backward(f, coef);
        f.handle.dispose();
        await m.clipGradNorm(1.0);
        await m.step({ lr: 5e-3 });
      }
      await m.syncToHost();
      const untouched = m.tensors.every((t, i) => t.data.every((v, k) => v === base[i][k]));
      return { losses, untouched };
    } finally {
      m.dispose();
    }
  };
  const c = await run('cpu'),
    g = await run(backend);
  let worst = 0;
  for (let i = 0; i < steps; i++)
    worst = Math.max(worst, Math.abs(g.losses[i] - c.losses[i]) / Math.max(Math.abs(c.losses[i]), 0.05 * Math.abs(c.losses[0]), 1e-6));
  const fell = g.losses[steps - 1] < 0.9 * g.losses[0] && c.losses[steps - 1] < 0.9 * c.losses[0];
  return {
    name: `LoRA (${backend}): ${steps} AdamW steps on the adapters track the CPU's losses; the base is untouched`,
    passed: worst <= 0.03 && fell && g.untouched,
    detail: `cpu ${c.losses.map((x) => x.toFixed(3)).join(' ')} | ${backend} ${g.losses.map((x) => x.toFixed(3)).join(' ')} | worst relative gap ${worst.toExponential(2)}; base ${g.untouched ? 'untouched' : 'CHANGED'}`,
    metrics: { worstRelGap: worst, firstLoss: g.losses[0], lastLoss: g.losses[steps - 1] },
  };
}

async function mergeMatches(backend: 'cpu' | 'cuda'): Promise<CudaCheck> {
  const cpu = await withAdapters('cpu', 9),
    dev = await withAdapters(backend, 9);
  try {
    const s = samples(5, 1024, 2, 3, 60, 20);
    const pack = buildPack(s);
    const before = await dev.forward(pack);
    await dev.mergeLora();
    await cpu.mergeLora();
    const after = await dev.forward(pack),
      ref = await cpu.forward(pack);
    const self = maxAbsDiff(after.logp, before.logp, before.hasLogp),
      vsCpu = maxAbsDiff(after.logp, ref.logp, ref.hasLogp);
    for (const f of [before, after, ref]) f.handle.dispose();
    return {
      name: `LoRA (${backend}): merged on the device, W + (alpha/r) B A gives the adapter model's log-probs and the CPU merge's`,
      passed: self <= LOGP_ATOL && vsCpu <= LOGP_ATOL && dev.lora === null,
      detail: `max |dlogp| merged vs unmerged ${self.toExponential(2)}, vs the CPU merge ${vsCpu.toExponential(2)} (tolerance ${LOGP_ATOL})`,
      metrics: { mergedVsUnmerged: self, mergedVsCpu: vsCpu },
    };
  } finally {
    cpu.dispose();
    dev.dispose();
  }
}

async function adapterResumes(backend: 'cpu' | 'cuda'): Promise<CudaCheck> {
  const s = samples(11, 1024, 2, 3, 40, 16);
  const pack = buildPack(s);
  const coef = coefficients(pack, s, 4);
  const step = async (m: Model) => {
    const f = await m.forward(pack);
    await m.zeroGrad();
    await m.backward(f, coef);
    f.handle.dispose();
    await m.step({ lr: 1e-2 });
  };
  const dir = mkdtempSync(join(tmpdir(), 'anvil-lora-check-'));
  const a = await withAdapters(backend, 13);
  const b = Model.create(LORA_CHECK_CONFIG, { backend, seed: 13, initStd: 0.05 });
  try {
    await step(a);
    await step(a);
    await a.saveAdapter(dir, { optimizer: true });
    await b.loadAdapter(dir, { optimizer: true });
    await step(a);
    await step(b);
    await a.syncToHost();
    await b.syncToHost();
    let gap = 0;
    a.loraTensors.forEach((t, i) => (gap = Math.max(gap, maxAbsDiff(b.loraTensors[i].data, t.data))));
    return {
      name: `LoRA (${backend}): adapters and their AdamW state saved after 2 steps and loaded into another model: the 3rd step lands where the uninterrupted one does`,
      passed: gap <= 1e-6 && b.stepCount === 3,
      detail: `max |adapter difference| after step 3: ${gap.toExponential(2)} (limit 1e-6); resumed step count ${b.stepCount}`,
      metrics: { resumedMaxAbsGap: gap },
    };
  } finally {
    a.dispose();
    b.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function generatorRefuses(): Promise<CudaCheck> {
  const m = await withAdapters('cuda', 15);
  try {
    let message = '';
    try {
      const g = await createGenerator(m);
      await g.close();
    } catch (e) {
      message = (e as Error).message;
    }
    return {
      name: 'LoRA (cuda): the GPU generator refuses a model with unmerged adapters (it would generate from the base alone)',
      passed: /does not apply unmerged LoRA adapters/.test(message),
      detail: message || 'createGenerator accepted the model',
      metrics: {},
    };
  } finally {
    m.dispose();
  }
}

/** Every LoRA check, in the order the device script prints them. */
export async function loraChecks(backend: 'cuda' | 'cpu' = 'cuda'): Promise<CudaCheck[]> {
  const out: CudaCheck[] = [];
  out.push(...(await forwardBackward(backend)));
  out.push(await trainingTracks(backend));
  out.push(await mergeMatches(backend));
  out.push(await adapterResumes(backend));
  if (backend === 'cuda') out.push(await generatorRefuses());
  return out;
}
