// The CUDA backend checked against the CPU reference, as plain functions so that the same checks
// run under vitest (cuda.spec.ts, reported as not run where there is no GPU) and from the device
// script (tools/device/cuda-check.mjs, which has no test runner on the GPU machine):
//   - every GPU kernel against its CPU kernel (the addon's checkKernels(), dtype-scaled tolerances)
//   - whole-model forward (log-probs, entropies) and backward (every gradient tensor) vs the CPU
//   - tree ≡ flat on the GPU (a prefix-merged pack gives the flat packs' log-probs and gradients)
//   - a short training run whose losses track the CPU run's
//   - AdamW's moments out of and back into a model (a trainer checkpoint) resume training
//   - LoRA: forward with dropout, adapter gradients, training, merge, adapter resume (cuda-lora-checks.ts)
import { buildPack, flatPack, mergeSampleValues, seededRandom, type Pack, type PackSample } from '@anvil/rl';
import type { ModelConfigInput } from './config';
import { loadBackend } from './loader';
import { loraChecks } from './cuda-lora-checks';
import { constrainedGenerationMatchesCpu } from './cuda-constrained-checks';
import { createGenerator } from './generator';
import { Model } from './model';
import type { NativeKernelCheck } from './native';

export interface CudaCheck {
  name: string;
  passed: boolean;
  detail: string;
  metrics: Record<string, number>;
}

/** Whether the CUDA backend can run here, and why not (no build, no device, ...). */
export function cudaAvailability(): { available: boolean; reason: string } {
  try {
    const sel = loadBackend('cuda');
    const d = sel.info.device;
    return { available: true, reason: `${d?.name} (cc ${d?.computeCapability}), ${sel.info.gemm}` };
  } catch (e) {
    return { available: false, reason: (e as Error).message.split('\n')[0] };
  }
}

export async function kernelChecks(seed = 1): Promise<NativeKernelCheck[]> {
  const addon = loadBackend('cuda').addon;
  if (!addon.checkKernels) throw new Error('the CUDA addon has no checkKernels export');
  return addon.checkKernels(seed);
}

/** Model shapes the checks use: both tensor-core head dims, the SIMT fallback, GQA, bias, tying. */
export const CHECK_CONFIGS: Array<{ name: string; cfg: ModelConfigInput }> = [
  {
    name: 'qwen2-like D=64 GQA bias tied',
    cfg: {
      modelType: 'qwen2',
      vocabSize: 512,
      hiddenSize: 256,
      intermediateSize: 512,
      numHiddenLayers: 2,
      numAttentionHeads: 4,
      numKeyValueHeads: 2,
      attentionBias: true,
      tieWordEmbeddings: true,
      maxPositionEmbeddings: 4096,
      ropeTheta: 1e6,
    },
  },
  {
    name: 'llama-like D=128 untied',
    cfg: {
      modelType: 'llama',
      vocabSize: 384,
      hiddenSize: 256,
      intermediateSize: 640,
      numHiddenLayers: 2,
      numAttentionHeads: 2,
      numKeyValueHeads: 1,
      tieWordEmbeddings: false,
      maxPositionEmbeddings: 4096,
      ropeTheta: 10000,
    },
  },
  {
    name: 'tiny D=32',
    cfg: {
      modelType: 'llama',
      vocabSize: 300,
      hiddenSize: 128,
      intermediateSize: 384,
      numHiddenLayers: 2,
      numAttentionHeads: 4,
      numKeyValueHeads: 2,
      maxPositionEmbeddings: 4096,
      ropeTheta: 10000,
    },
  },
];

/** Samples sharing prefixes: a few prompts, each with several sampled continuations. */
export function branchingSamples(
  seed: number,
  vocab: number,
  prompts: number,
  branches: number,
  promptLen: number,
  outLen: number,
): PackSample[] {
  const r = seededRandom(seed);
  const tok = () => Math.floor(r() * vocab);
  const out: PackSample[] = [];
  for (let p = 0; p < prompts; p++) {
    const prompt = Array.from({ length: promptLen }, tok);
    for (let b = 0; b < branches; b++) out.push({ promptIds: prompt, outputIds: Array.from({ length: outLen }, tok) });
  }
  return out;
}

/** dL/dlogp of a token-mean policy-gradient-like loss with random advantages, merged per node. */
function coefficients(pack: Pack, samples: PackSample[], seed: number): Float32Array {
  const r = seededRandom(seed);
  return mergeSampleValues(
    pack,
    pack.samples.map((i) => {
      const adv = r() * 2 - 1;
      return Float32Array.from(samples[i].outputIds, () => -adv / samples.length);
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

function maxAbsDiff(a: Float32Array, b: Float32Array, mask?: Uint8Array): { max: number; at: number } {
  let max = 0,
    at = -1;
  for (let i = 0; i < a.length; i++) {
    if (mask && !mask[i]) continue;
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= max)) {
      max = d;
      at = i;
    }
  }
  return { max, at };
}

// bf16 operands (8-bit mantissa) through a few layers: log-probs (about -5 to -7 here) within
// 0.05 nats (under 1%), gradients within a few percent (relative L2 per tensor). Measured on an
// H200: up to 0.035 nats and 1.7% (a 400-token chain at D = 64).
const LOGP_ATOL = 0.05;
const GRAD_REL_L2 = 0.05;

/** Forward and backward of one pack on both backends; every output and gradient compared. */
export async function modelVsCpu(name: string, cfg: ModelConfigInput, pack: Pack, coef: Float32Array, seed = 7): Promise<CudaCheck[]> {
  const cpu = Model.create(cfg, { backend: 'cpu', seed, initStd: 0.05 });
  const gpu = Model.create(cfg, { backend: 'cuda', seed, initStd: 0.05 });
  try {
    const checks: CudaCheck[] = [];
    const fc = await cpu.forward(pack),
      fg = await gpu.forward(pack);
    const lp = maxAbsDiff(fg.logp, fc.logp, fc.hasLogp),
      en = maxAbsDiff(fg.entropy, fc.entropy, fc.hasLogp);
    checks.push({
      name: `${name}: forward log-probs and entropies (N=${pack.uniqueTokens})`,
      passed: lp.max <= LOGP_ATOL && en.max <= LOGP_ATOL,
      detail: `max |dlogp| ${lp.max.toExponential(2)} at node ${lp.at} (cpu ${fc.logp[lp.at]}, gpu ${fg.logp[lp.at]}); max |dentropy| ${en.max.toExponential(2)}; tolerance ${LOGP_ATOL}`,
      metrics: { maxLogpErr: lp.max, maxEntropyErr: en.max },
    });
    const dent = Float32Array.from(coef, (c, i) => (fc.hasLogp[i] ? 0.01 * c : 0));
    await cpu.zeroGrad();
    await gpu.zeroGrad();
    await cpu.backward(fc, coef, dent);
    await gpu.backward(fg, coef, dent);
    await gpu.syncToHost({ grads: true });
    let worst = 0,
      worstName = '';
    const bad: string[] = [];
    for (const t of cpu.tensors) {
      const e = relL2(gpu.tensor(t.name).grad, t.grad);
      if (e > worst) {
        worst = e;
        worstName = t.name;
      }
      if (!(e <= GRAD_REL_L2)) bad.push(`${t.name} ${e.toExponential(2)}`);
    }
    checks.push({
      name: `${name}: backward, every gradient tensor (relative L2)`,
      passed: bad.length === 0,
      detail: bad.length
        ? `over ${GRAD_REL_L2}: ${bad.slice(0, 6).join(', ')}`
        : `worst ${worstName} ${worst.toExponential(2)} (tolerance ${GRAD_REL_L2})`,
      metrics: { worstGradRelL2: worst },
    });
    const nc = await cpu.gradNorm(),
      ng = await gpu.gradNorm();
    checks.push({
      name: `${name}: gradient norm`,
      passed: Math.abs(nc - ng) <= 0.02 * nc,
      detail: `cpu ${nc.toPrecision(6)}, gpu ${ng.toPrecision(6)}`,
      metrics: { cpuNorm: nc, gpuNorm: ng },
    });
    fc.handle.dispose();
    fg.handle.dispose();
    return checks;
  } finally {
    cpu.dispose();
    gpu.dispose();
  }
}

/** On the GPU alone: a prefix-merged pack gives the same log-probs and gradients as flat packs. */
export async function treeEqualsFlat(name: string, cfg: ModelConfigInput, samples: PackSample[]): Promise<CudaCheck> {
  const m = Model.create(cfg, { backend: 'cuda', seed: 11, initStd: 0.05 });
  try {
    const tree = buildPack(samples),
      flat = flatPack(samples);
    const coefT = coefficients(tree, samples, 5),
      coefF = coefficients(flat, samples, 5);
    const ft = await m.forward(tree);
    await m.zeroGrad();
    await m.backward(ft, coefT);
    await m.syncToHost({ grads: true });
    const gt = m.tensors.map((t) => Float32Array.from(t.grad));
    const ff = await m.forward(flat);
    await m.zeroGrad();
    await m.backward(ff, coefF);
    await m.syncToHost({ grads: true });
    let lpErr = 0;
    tree.outputNodes.forEach((nodes, k) => {
      const fn = flat.outputNodes[k];
      for (let t = 0; t < nodes.length; t++) lpErr = Math.max(lpErr, Math.abs(ft.logp[nodes[t]] - ff.logp[fn[t]]));
    });
    let worst = 0;
    m.tensors.forEach((t, i) => (worst = Math.max(worst, relL2(gt[i], t.grad))));
    ft.handle.dispose();
    ff.handle.dispose();
    return {
      name: `${name}: tree ≡ flat on the GPU (${tree.uniqueTokens} merged vs ${flat.uniqueTokens} flat nodes)`,
      passed: lpErr <= LOGP_ATOL && worst <= GRAD_REL_L2,
      detail: `max |dlogp| ${lpErr.toExponential(2)}, worst gradient relative L2 ${worst.toExponential(2)}`,
      metrics: { maxLogpErr: lpErr, worstGradRelL2: worst },
    };
  } finally {
    m.dispose();
  }
}

/** The same AdamW steps on both backends from the same weights: the loss curves must track. */
export async function trainingTracksCpu(cfg: ModelConfigInput, steps = 12): Promise<CudaCheck> {
  const samples = branchingSamples(3, 512, 4, 4, 48, 24).map((s) => ({
    promptIds: s.promptIds,
    outputIds: Array.from(s.promptIds).slice(0, 24),
  }));
  const pack = buildPack(samples);
  const coef = mergeSampleValues(
    pack,
    pack.samples.map((i) => Float32Array.from(samples[i].outputIds, () => -1 / samples.length)),
  );
  const run = async (backend: 'cpu' | 'cuda') => {
    const m = Model.create(cfg, { backend, seed: 3, initStd: 0.05 });
    const losses: number[] = [];
    try {
      for (let s = 0; s < steps; s++) {
        const f = await m.forward(pack);
        let loss = 0;
        for (let i = 0; i < coef.length; i++) loss += coef[i] * f.logp[i];
        losses.push(loss);
        await m.zeroGrad();
        await m.backward(f, coef);
        f.handle.dispose();
        await m.clipGradNorm(1.0);
        await m.step({ lr: 3e-3 });
      }
    } finally {
      m.dispose();
    }
    return losses;
  };
  const lc = await run('cpu'),
    lg = await run('cuda');
  // Relative gap per step, measured against the CPU loss but never against less than 5% of the
  // first loss: once the task is nearly memorised (loss near 0) a relative gap means nothing.
  let worst = 0;
  for (let i = 0; i < steps; i++)
    worst = Math.max(worst, Math.abs(lg[i] - lc[i]) / Math.max(Math.abs(lc[i]), 0.05 * Math.abs(lc[0]), 1e-6));
  const fell = lg[steps - 1] < 0.8 * lg[0] && lc[steps - 1] < 0.8 * lc[0];
  return {
    name: `training run, ${steps} AdamW steps: GPU losses track the CPU's`,
    passed: worst <= 0.03 && fell,
    detail: `cpu ${lc.map((x) => x.toFixed(3)).join(' ')} | gpu ${lg.map((x) => x.toFixed(3)).join(' ')} | worst relative gap ${worst.toExponential(2)}`,
    metrics: { worstRelGap: worst, firstLoss: lg[0], lastLoss: lg[steps - 1] },
  };
}

/**
 * Generation through the JavaScript Generator on a CUDA model (the GPU generator: paged KV cache)
 * against the same weights on the CPU. Greedy decoding of a random-init model meets near-ties
 * (top-2 log-probs within 1e-3), where bf16 may pick the other token; so every GPU token is
 * checked teacher-forced instead: it must be the CPU's greedy choice for the same context, or
 * within 0.05 nats of it (a near-tie), and its raw log-prob must equal the CPU's within 0.05, as
 * must the log-probs of its top-3 alternatives.
 * A second turn extending the first must then hit the GPU prefix cache.
 */
export async function generationMatchesCpu(cfg: ModelConfigInput, backend: 'cuda' | 'cpu' = 'cuda'): Promise<CudaCheck> {
  const cpu = Model.create(cfg, { backend: 'cpu', seed: 5, initStd: 0.05 });
  const gpu = Model.create(cfg, { backend, seed: 5, initStd: 0.05 }); // 'cpu' only to test the check itself
  const gc = await createGenerator(cpu, { prefixCacheBytes: 0 });
  const gg = await createGenerator(gpu, { prefixCacheBytes: 64 << 20 });
  try {
    const r = seededRandom(17);
    const prompt = Array.from({ length: 45 }, () => Math.floor(r() * (cfg.vocabSize ?? 256)));
    const b = await gg.generate(prompt, { maxTokens: 8, temperature: 0, seed: 1, topLogprobs: 3 });
    // the CPU's log-prob of every GPU token, teacher-forced: forward over prompt + GPU tokens
    const seq = [...prompt, ...b.outputIds];
    const fw = await cpu.forward({ tokens: Int32Array.from(seq), parents: Int32Array.from(seq, (_, i) => i - 1) });
    fw.handle.dispose();
    let lpErr = 0,
      worstTie = 0,
      exact = 0;
    const notes: string[] = [];
    for (let i = 0; i < b.outputIds.length; i++) {
      const cpuLpOfGpuToken = fw.logp[prompt.length + i];
      lpErr = Math.max(lpErr, Math.abs(cpuLpOfGpuToken - b.rawLogprobs[i]));
      const c = await gc.generate(seq.slice(0, prompt.length + i), { maxTokens: 1, temperature: 0, seed: 1 });
      if (c.outputIds[0] === b.outputIds[i]) exact++;
      else {
        const gap = c.rawLogprobs[0] - cpuLpOfGpuToken; // how far the GPU's token is from the CPU's top one
        worstTie = Math.max(worstTie, gap);
        notes.push(`step ${i}: gpu ${b.outputIds[i]} vs cpu ${c.outputIds[0]} (cpu gap ${gap.toExponential(2)})`);
      }
    }
    // top log-probs of the GPU generator: each alternative's log-prob equals the CPU's for that token
    let topErr = 0;
    for (let i = 0; i < b.outputIds.length; i++)
      for (const alt of b.topLogprobs?.[i] ?? []) {
        const ctx = [...seq.slice(0, prompt.length + i), alt.id];
        const f = await cpu.forward({ tokens: Int32Array.from(ctx), parents: Int32Array.from(ctx, (_, k) => k - 1) });
        f.handle.dispose();
        topErr = Math.max(topErr, Math.abs(f.logp[ctx.length - 1] - alt.logprob));
      }
    const topOk = b.topLogprobs?.length === b.outputIds.length && b.topLogprobs.every((t) => t.length === 3);
    const next = [...seq, 3, 4, 5];
    const b2 = await gg.generate(next, { maxTokens: 2, temperature: 0, seed: 1 });
    return {
      name: 'generation: GPU generator (paged KV) vs the CPU, teacher-forced greedy tokens and raw log-probs, then a prefix-cache hit',
      passed: lpErr <= 0.05 && worstTie <= 0.05 && topOk && topErr <= 0.05 && b2.cachedPromptTokens >= 48,
      detail: `gpu ${b.outputIds.join(',')}: ${exact}/8 the CPU's greedy choice${notes.length ? ` (near-ties: ${notes.join('; ')})` : ''}; max raw log-prob gap ${lpErr.toExponential(2)}; top-3 log-probs ${topOk ? 'present' : 'MISSING'}, max gap to the CPU ${topErr.toExponential(2)}; second turn reused ${b2.cachedPromptTokens} of ${next.length} prompt tokens`,
      metrics: {
        exactTokens: exact,
        worstTieGap: worstTie,
        maxLogprobErr: lpErr,
        maxTopLogprobErr: topErr,
        cachedPromptTokens: b2.cachedPromptTokens,
      },
    };
  } finally {
    await gc.close();
    await gg.close();
    cpu.dispose();
    gpu.dispose();
  }
}

/**
 * A trainer checkpoint's optimizer state on this backend: AdamW's moments copied out after two
 * steps, restored into a second model that was given the same weights, must make the next step
 * land where the uninterrupted model's step lands, and the moments must round-trip bit for bit.
 * A restore that silently dropped the moments would instead match a model stepped from zero
 * moments, so that difference is measured too and must be far larger.
 * `backend` 'cpu' only tests the check itself (there the resumed step is bitwise).
 */
export async function optimizerStateResumes(cfg: ModelConfigInput, backend: 'cuda' | 'cpu' = 'cuda'): Promise<CudaCheck> {
  const samples = branchingSamples(11, cfg.vocabSize ?? 256, 2, 3, 40, 16);
  const pack = buildPack(samples);
  const coef = coefficients(pack, samples, 4);
  const step = async (m: Model) => {
    const f = await m.forward(pack);
    await m.zeroGrad();
    await m.backward(f, coef);
    f.handle.dispose();
    await m.clipGradNorm(1.0);
    await m.step({ lr: 1e-3 });
  };
  const weights = async (m: Model) => {
    await m.syncToHost();
    return m.tensors.map((t) => Float32Array.from(t.data));
  };
  const sameWeightsAs = async (from: Model, seed: number) => {
    const m = Model.create(cfg, { backend, seed, initStd: 0.05 });
    const w = await weights(from);
    m.tensors.forEach((t, i) => t.data.set(w[i]));
    await m.syncToDevice();
    return m;
  };
  const a = Model.create(cfg, { backend, seed: 3, initStd: 0.05 });
  const models: Model[] = [a];
  try {
    const before = a.optimizerState();
    await step(a);
    await step(a);
    const state = a.optimizerState();
    if (!state.m || !state.v) throw new Error('no optimizer moments after two steps');
    const resumed = await sameWeightsAs(a, 99);
    const zeroMoments = await sameWeightsAs(a, 98);
    models.push(resumed, zeroMoments);
    resumed.setOptimizerState({ step: state.step, m: state.m, v: state.v });
    const back = resumed.optimizerState();
    const bits = (x: Float32Array | null) => (x ? Buffer.from(x.buffer, x.byteOffset, x.byteLength) : Buffer.alloc(0));
    const roundTrip = back.step === 2 && bits(back.m).equals(bits(state.m)) && bits(back.v).equals(bits(state.v));
    zeroMoments.setOptimizerState({ step: state.step, m: new Float32Array(a.numParams), v: new Float32Array(a.numParams) });
    await step(a);
    await step(resumed);
    await step(zeroMoments);
    const [wa, wr, wz] = [await weights(a), await weights(resumed), await weights(zeroMoments)];
    let resumedGap = 0,
      zeroGap = 0,
      bitwise = true;
    wa.forEach((t, i) => {
      bitwise &&= bits(t).equals(bits(wr[i]));
      for (let k = 0; k < t.length; k++) {
        resumedGap = Math.max(resumedGap, Math.abs(t[k] - wr[i][k]));
        zeroGap = Math.max(zeroGap, Math.abs(t[k] - wz[i][k]));
      }
    });
    const passed =
      before.m === null &&
      before.step === 0 &&
      state.step === 2 &&
      roundTrip &&
      resumed.stepCount === 3 &&
      resumedGap <= 1e-6 &&
      zeroGap > 100 * Math.max(resumedGap, 1e-9);
    return {
      name: `optimizer state (${backend}): moments out after 2 steps, into a copy, the 3rd step lands where the uninterrupted run's does`,
      passed,
      detail: `moments round-trip ${roundTrip ? 'bitwise' : 'CHANGED'}; after step 3 the resumed weights are ${bitwise ? 'bitwise equal' : `within ${resumedGap.toExponential(2)}`} (limit 1e-6); zero moments instead are off by ${zeroGap.toExponential(2)}`,
      metrics: { resumedMaxAbsGap: resumedGap, zeroMomentsMaxAbsGap: zeroGap, bitwise: bitwise ? 1 : 0 },
    };
  } finally {
    for (const m of models) m.dispose();
  }
}

/** Every model-level check, in the order the device script prints them. */
export async function modelChecks(): Promise<CudaCheck[]> {
  const out: CudaCheck[] = [];
  for (const { name, cfg } of CHECK_CONFIGS) {
    const vocab = cfg.vocabSize ?? 256;
    const samples = branchingSamples(1, vocab, 3, 5, 150, 40);
    const pack = buildPack(samples);
    out.push(...(await modelVsCpu(name, cfg, pack, coefficients(pack, samples, 2))));
    // a chain longer than one attention tile, as a flat sequence
    const chain = branchingSamples(4, vocab, 1, 1, 300, 100);
    const cp = flatPack(chain);
    out.push(...(await modelVsCpu(`${name}, one 400-token chain`, cfg, cp, coefficients(cp, chain, 3))));
    out.push(await treeEqualsFlat(name, cfg, branchingSamples(9, vocab, 2, 6, 130, 30)));
  }
  out.push(await trainingTracksCpu(CHECK_CONFIGS[0].cfg));
  out.push(await generationMatchesCpu(CHECK_CONFIGS[0].cfg));
  out.push(await constrainedGenerationMatchesCpu(CHECK_CONFIGS[0].cfg));
  out.push(await optimizerStateResumes(CHECK_CONFIGS[0].cfg));
  out.push(...(await loraChecks()));
  return out;
}
