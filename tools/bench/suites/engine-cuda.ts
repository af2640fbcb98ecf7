// CUDA engine benchmark: `npm run bench -- engine-cuda` on a machine with an NVIDIA GPU (the
// device script tools/device/cuda-check.mjs runs a bundled copy of this file there).
//
// 1. Train-step MFU (forward + backward + grad-norm clip + AdamW) of random-init Qwen2-shaped
//    ~0.5B and ~1.5B models at 8192 tokens per step (two 4096-token sequences). Model FLOPs per
//    step = 6 * P_gemm * T + 12 * L * H * D * sum_nodes(depth + 1) (the engine bench's formula:
//    P_gemm = every parameter used in a per-token GEMM, the LM head included when tied; attention
//    counts only the keys a node sees). MFU = model FLOP/s / 790 TFLOP/s (H200 dense bf16 as
//    measured on random data); the cuBLASLt bf16 GEMM rate of this run is printed next to it.
// 2. Prefix merging on the 0.5B shape: the same samples as flat packs vs merged into tries, at
//    S = total / unique tokens of 2, 4, 8, 16, 40 (groups of n samples with a shared prompt P and
//    own suffixes b, about 8k unique tokens per merged step); step-time speed-up (target >= 0.8 S).
// 3. Decode tokens/s of the GPU generator (paged KV cache) on the two shapes, batch 1 and 64,
//    prompt 512; each step includes copying the last rows' logits to the host and sampling there.
// 4. The tree-attention kernels alone (wmma vs fa2) on the two shapes.
// 5. The SmolLM2-135M shape (random weights), full and LoRA (r = 16 on all seven projections):
//    the same train step at 8192 tokens, and AdamW state of LoRA against full fine-tuning. LoRA's
//    FLOPs are 4 * P_gemm * T + 6 * P_adapter * T + attention (the frozen base has no weight gradients).
// Prints a readable table, then ONE JSON object as the last line of stdout. Where there is no
// CUDA build or device, it says so and the JSON has ran: false.
import { flatPack, mergeSampleValues, packSamples, type Pack, type PackSample } from '@anvil/rl';
import { flatPacks, starSamples } from './bench-kit';
import { Model, analyzeTree, loadBackend, setThreads, type ModelConfigInput } from '@anvil/engine';
import { cpus } from 'node:os';

const H200_BF16_TFLOPS = 790;
const TOKENS_PER_STEP = 8192;

const QWEN2_05B: ModelConfigInput = {
  modelType: 'qwen2',
  vocabSize: 151936,
  hiddenSize: 896,
  intermediateSize: 4864,
  numHiddenLayers: 24,
  numAttentionHeads: 14,
  numKeyValueHeads: 2,
  attentionBias: true,
  tieWordEmbeddings: true,
  maxPositionEmbeddings: 32768,
  ropeTheta: 1e6,
  rmsNormEps: 1e-6,
};
const QWEN2_15B: ModelConfigInput = {
  modelType: 'qwen2',
  vocabSize: 151936,
  hiddenSize: 1536,
  intermediateSize: 8960,
  numHiddenLayers: 28,
  numAttentionHeads: 12,
  numKeyValueHeads: 2,
  attentionBias: true,
  tieWordEmbeddings: true,
  maxPositionEmbeddings: 32768,
  ropeTheta: 1e6,
  rmsNormEps: 1e-6,
};

const SMOLLM2: ModelConfigInput = {
  modelType: 'llama',
  vocabSize: 49152,
  hiddenSize: 576,
  intermediateSize: 1536,
  numHiddenLayers: 30,
  numAttentionHeads: 9,
  numKeyValueHeads: 3,
  tieWordEmbeddings: true,
  maxPositionEmbeddings: 8192,
  ropeTheta: 100000,
  rmsNormEps: 1e-5,
};

const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

/** A value the benchmark needs (a config field, an export of the CUDA build), or a clear error. */
function need<T>(v: T | undefined, what: string): T {
  if (v === undefined) throw new Error(`engine-cuda: ${what} is missing`);
  return v;
}

function gemmFlopParams(m: Model): number {
  const c = m.config;
  return m.numNonEmbeddingParams + (c.tieWordEmbeddings ? c.vocabSize * c.hiddenSize : 0);
}

function modelFlops(m: Model, packs: Array<{ parents: Int32Array }>): number {
  const c = m.config;
  let f = 0;
  for (const p of packs) {
    const sumLen = analyzeTree(p.parents).sumPathLength;
    f += 6 * gemmFlopParams(m) * p.parents.length + 12 * c.numHiddenLayers * c.numAttentionHeads * c.headDim * sumLen;
  }
  return f;
}

interface StepPack {
  tokens: Int32Array;
  parents: Int32Array;
  coef: Float32Array;
}

/** One optimizer step over several packs; returns seconds of each phase. */
async function trainStep(m: Model, packs: StepPack[]) {
  const t0 = performance.now();
  await m.zeroGrad();
  let fwd = 0,
    bwd = 0;
  for (const p of packs) {
    const a = performance.now();
    const f = await m.forward(p);
    const b = performance.now();
    await m.backward(f, p.coef);
    f.handle.dispose();
    fwd += b - a;
    bwd += performance.now() - b;
  }
  const c = performance.now();
  await m.clipGradNorm(1.0);
  await m.step({ lr: 1e-5 });
  const end = performance.now();
  return { seconds: (end - t0) / 1e3, forward: fwd / 1e3, backward: bwd / 1e3, optimizer: (end - c) / 1e3 };
}

function randomSequences(n: number, len: number, vocab: number, seed: number): PackSample[] {
  let s = seed >>> 0;
  const tok = () => ((s = (s * 1664525 + 1013904223) >>> 0), s % vocab);
  return Array.from({ length: n }, () => {
    const seq = Array.from({ length: len }, tok);
    return { promptIds: seq.slice(0, len / 2), outputIds: seq.slice(len / 2) };
  });
}

function stepPacks(packs: Pack[], samples: PackSample[]): StepPack[] {
  return packs.map((pack) => ({
    tokens: pack.tokens,
    parents: pack.parents,
    coef: mergeSampleValues(
      pack,
      pack.samples.map((i) => Float32Array.from(samples[i].outputIds, () => -1 / samples.length)),
    ),
  }));
}

async function mfu(name: string, cfg: ModelConfigInput, steps: number) {
  const t0 = performance.now();
  const m = Model.create(cfg, { backend: 'cuda', seed: 1, initStd: 0.02 });
  const createSeconds = (performance.now() - t0) / 1e3;
  const samples = randomSequences(2, TOKENS_PER_STEP / 2, m.config.vocabSize, 7);
  const packs = stepPacks([flatPack(samples)], samples);
  await trainStep(m, packs); // warm-up: cuBLASLt plans, pool allocations
  let best = { seconds: Infinity, forward: 0, backward: 0, optimizer: 0 };
  for (let i = 0; i < steps; i++) {
    const r = await trainStep(m, packs);
    if (r.seconds < best.seconds) best = r;
  }
  // one more step with the per-stage CUDA-event profile printed to stderr (not timed)
  process.env.ANVIL_CUDA_PROFILE = '1';
  await trainStep(m, packs);
  delete process.env.ANVIL_CUDA_PROFILE;
  const flops = modelFlops(m, packs);
  const mem = m.memory();
  const row = {
    name,
    params: m.numParams,
    tokens: TOKENS_PER_STEP,
    createSeconds,
    stepSeconds: best.seconds,
    forwardSeconds: best.forward,
    backwardSeconds: best.backward,
    optimizerSeconds: best.optimizer,
    tokensPerSecond: TOKENS_PER_STEP / best.seconds,
    modelTflops: flops / best.seconds / 1e12,
    mfu: flops / best.seconds / 1e12 / H200_BF16_TFLOPS,
    deviceBytes: mem.paramBytes + mem.gradBytes + mem.optimizerBytes,
  };
  console.error(
    `[bench] ${name}: step ${fmt(best.seconds, 3)} s (fwd ${fmt(best.forward, 3)}, bwd ${fmt(best.backward, 3)}, optim ${fmt(best.optimizer, 3)}), ${fmt(row.modelTflops)} TFLOP/s, MFU ${fmt(100 * row.mfu)}%`,
  );
  m.dispose();
  return row;
}

/** The SmolLM2 shape's train step, full weights and then LoRA on the same model. */
async function smollm2(steps: number) {
  const m = Model.create(SMOLLM2, { backend: 'cuda', seed: 1, initStd: 0.02 });
  const samples = randomSequences(2, TOKENS_PER_STEP / 2, m.config.vocabSize, 9);
  const packs = stepPacks([flatPack(samples)], samples);
  const full6 = modelFlops(m, packs);
  const gemm2 = 2 * gemmFlopParams(m) * TOKENS_PER_STEP;
  const measure = async (mode: string, flops: number) => {
    await trainStep(m, packs); // warm-up
    let best = { seconds: Infinity, forward: 0, backward: 0, optimizer: 0 };
    for (let i = 0; i < steps; i++) {
      const r = await trainStep(m, packs);
      if (r.seconds < best.seconds) best = r;
    }
    const mem = m.memory();
    const row = {
      mode,
      stepSeconds: best.seconds,
      forwardSeconds: best.forward,
      backwardSeconds: best.backward,
      optimizerSeconds: best.optimizer,
      tokensPerSecond: TOKENS_PER_STEP / best.seconds,
      modelTflops: flops / best.seconds / 1e12,
      mfu: flops / best.seconds / 1e12 / H200_BF16_TFLOPS,
      trainableParams: mem.trainableParams,
      gradBytes: mem.gradBytes,
      optimizerBytes: mem.optimizerBytes,
      deviceBytes: mem.paramBytes + mem.gradBytes + mem.optimizerBytes,
    };
    console.error(
      `[bench] SmolLM2 ${mode}: step ${fmt(best.seconds, 3)} s, ${fmt(row.tokensPerSecond, 0)} tok/s, MFU ${fmt(100 * row.mfu)}%`,
    );
    return row;
  };
  try {
    const full = await measure('full', full6);
    await m.enableLora({ rank: 16, alpha: 32, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] });
    const adapter = m.memory().adapterParams;
    const lora = await measure('LoRA r=16', full6 - gemm2 + 6 * adapter * TOKENS_PER_STEP);
    return { rows: [full, lora], adapterParams: adapter, optimizerRatio: lora.optimizerBytes / full.optimizerBytes };
  } finally {
    m.dispose();
  }
}

// S = n (P + b) / (P + n b) with P + n b = U unique tokens per group: P = (S-1) U / (n-1).
// Rounded down, so that two groups never exceed one 8192-token pack (rounding up gave 8194-8206
// unique tokens, which the packer then split into two half-full packs).
function sharingCase(S: number, U: number) {
  const n = S >= 40 ? 64 : 2 * S;
  const P = Math.floor(((S - 1) * U) / (n - 1));
  const b = Math.max(1, Math.floor((U - P) / n));
  return { S, n, P, b };
}

async function merging() {
  const m = Model.create(QWEN2_05B, { backend: 'cuda', seed: 2, initStd: 0.02 });
  const rows = [];
  for (const S of [2, 4, 8, 16, 40]) {
    const c = sharingCase(S, TOKENS_PER_STEP / 2);
    const samples = starSamples(2, c.n, c.P, c.b, m.config.vocabSize, 100 + S);
    const merged = packSamples(samples, { maxTokens: TOKENS_PER_STEP });
    const flat = flatPacks(samples, TOKENS_PER_STEP);
    const mp = stepPacks(merged.packs, samples),
      fp = stepPacks(flat, samples);
    await trainStep(m, mp);
    await trainStep(m, fp.slice(0, 1));
    let tm = Infinity,
      tf = Infinity;
    for (let r = 0; r < 2; r++) {
      tf = Math.min(tf, (await trainStep(m, fp)).seconds);
      tm = Math.min(tm, (await trainStep(m, mp)).seconds);
    }
    const realS = merged.totalTokens / merged.uniqueTokens;
    const row = {
      targetS: S,
      S: realS,
      samples: samples.length,
      prompt: c.P,
      suffix: c.b,
      totalTokens: merged.totalTokens,
      uniqueTokens: merged.uniqueTokens,
      flatPacks: flat.length,
      mergedPacks: merged.packs.length,
      flatStepSeconds: tf,
      mergedStepSeconds: tm,
      speedup: tf / tm,
      target: 0.8 * realS,
    };
    console.error(`[bench] S=${fmt(realS)}: flat ${fmt(tf, 3)} s, merged ${fmt(tm, 3)} s, speed-up ${fmt(row.speedup)}x`);
    rows.push(row);
  }
  m.dispose();
  return rows;
}

/** Decode tokens/s of the GPU generator (paged KV cache), prompt 512, random weights. */
async function decode(addon: NonNullable<ReturnType<typeof loadBackend>['addon']>) {
  const shape = (c: ModelConfigInput) => ({
    vocabSize: need(c.vocabSize, 'vocabSize'),
    hiddenSize: need(c.hiddenSize, 'hiddenSize'),
    intermediateSize: need(c.intermediateSize, 'intermediateSize'),
    numLayers: need(c.numHiddenLayers, 'numHiddenLayers'),
    numHeads: need(c.numAttentionHeads, 'numAttentionHeads'),
    numKvHeads: need(c.numKeyValueHeads, 'numKeyValueHeads'),
    headDim: need(c.hiddenSize, 'hiddenSize') / need(c.numAttentionHeads, 'numAttentionHeads'),
    qkvBias: true,
    tieWordEmbeddings: true,
    ropeTheta: 1e6,
    rmsNormEps: 1e-6,
  });
  const benchDecode = need(addon.benchDecodeCuda, 'benchDecodeCuda').bind(addon);
  const cases = [
    { name: 'qwen2-1.5B shape', cfg: QWEN2_15B, batch: 1 },
    { name: 'qwen2-1.5B shape', cfg: QWEN2_15B, batch: 64 },
    { name: 'qwen2-0.5B shape', cfg: QWEN2_05B, batch: 64 },
  ];
  const rows = [];
  for (const c of cases) {
    try {
      const r = await benchDecode(shape(c.cfg), c.batch, 512, 33);
      rows.push({ name: c.name, ...r });
      console.error(`[bench] decode ${c.name} B=${c.batch}: ${fmt(r.tokensPerSecond, 0)} tok/s (${fmt(r.stepMs, 2)} ms/step)`);
    } catch (e) {
      rows.push({ name: c.name, batch: c.batch, error: (e as Error).message });
    }
  }
  return rows;
}

/** The tree-attention kernels alone, both implementations, on the two training shapes. */
async function attentionKernels(addon: NonNullable<ReturnType<typeof loadBackend>['addon']>) {
  const rows = [];
  const shapes = [
    { name: '1.5B shape', H: 12, KVH: 2, D: 128 },
    { name: '0.5B shape', H: 14, KVH: 2, D: 64 },
  ];
  const N = TOKENS_PER_STEP,
    seqs = 2,
    n = N / seqs;
  const bench = need(addon.benchAttention, 'benchAttention').bind(addon);
  const pairs = (seqs * (n * (n + 1))) / 2; // visible (query, key) pairs of two causal chains
  for (const sh of shapes)
    for (const impl of [1, 2] as const) {
      const row: Record<string, number | string> = { shape: sh.name, impl: impl === 1 ? 'wmma' : 'fa2', H: sh.H, KVH: sh.KVH, D: sh.D, N };
      try {
        const f = await bench(impl, N, sh.H, sh.KVH, sh.D, seqs, false);
        const b = await bench(impl, N, sh.H, sh.KVH, sh.D, seqs, true);
        Object.assign(row, {
          forwardMs: f * 1e3,
          backwardMs: b * 1e3,
          forwardTflops: (4 * sh.H * sh.D * pairs) / f / 1e12,
          backwardTflops: (8 * sh.H * sh.D * pairs) / b / 1e12,
        });
      } catch (e) {
        row.error = (e as Error).message;
      }
      rows.push(row);
    }
  return rows;
}

async function main() {
  let sel;
  try {
    sel = loadBackend('cuda');
  } catch (e) {
    const reason = (e as Error).message.split('\n')[0];
    console.log(`engine-cuda: not run: ${reason}`);
    console.log(JSON.stringify({ suite: 'engine-cuda', ran: false, reason }));
    return;
  }
  setThreads(Math.min(16, cpus().length)); // host-side random init of the big models
  const info = sel.info;
  const gemm = await need(sel.addon.benchGemmBf16, 'benchGemmBf16').call(sel.addon, 8192, 8192, 8192, 1.0);
  console.error(`[bench] ${info.device?.name}: cuBLASLt bf16 8192^3 ${fmt(gemm.tflops)} TFLOP/s`);
  const quick = process.env.ANVIL_BENCH_QUICK === '1';
  // ANVIL_BENCH_ONLY=attention,mfu,merging,decode,smollm2 runs a subset (device time is scarce)
  const only = new Set((process.env.ANVIL_BENCH_ONLY ?? 'attention,mfu,merging,decode,smollm2').split(','));
  const attention = sel.addon.benchAttention && only.has('attention') ? await attentionKernels(sel.addon) : [];
  for (const r of attention) console.error(`[bench] attention ${r.shape} ${r.impl}: ${JSON.stringify(r)}`);
  const implUsed = process.env.ANVIL_ATTENTION_IMPL === 'wmma' ? 'wmma' : 'default (fa2 for D = 64/128)';
  const models = only.has('mfu')
    ? [await mfu('qwen2-0.5B shape', QWEN2_05B, quick ? 2 : 4), await mfu('qwen2-1.5B shape', QWEN2_15B, quick ? 2 : 4)]
    : [];
  const merge = only.has('merging') ? await merging() : [];
  const decodeRows = sel.addon.benchDecodeCuda && only.has('decode') ? await decode(sel.addon) : [];
  const small = only.has('smollm2') ? await smollm2(quick ? 2 : 4) : null;

  console.log(
    `\nGPU: ${info.device?.name}, cc ${info.device?.computeCapability}, driver ${info.device?.driverVersion}, runtime ${info.device?.runtimeVersion}; ${info.gemm}`,
  );
  console.log(`cuBLASLt bf16 GEMM 8192^3: ${fmt(gemm.tflops)} TFLOP/s (MFU below is against ${H200_BF16_TFLOPS})`);
  if (attention.length) {
    console.log(
      '\nTree attention kernels alone, 8192 nodes = two causal chains of 4096 (FLOPs: 4·H·D per visible pair forward, 8·H·D backward)',
    );
    console.log('shape | impl | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s');
    for (const r of attention)
      console.log(
        r.error
          ? `${r.shape} | ${r.impl} | error: ${r.error}`
          : `${r.shape} | ${r.impl} | ${fmt(Number(r.forwardMs), 2)} | ${fmt(Number(r.forwardTflops))} | ${fmt(Number(r.backwardMs), 2)} | ${fmt(Number(r.backwardTflops))}`,
      );
  }
  console.log(`\nTrain step (fwd + bwd + clip + AdamW), 8192 tokens, random-init Qwen2 shapes; attention: ${implUsed}`);
  console.log('model | params | step s | fwd s | bwd s | optim s | tokens/s | model TFLOP/s | MFU');
  for (const r of models)
    console.log(
      `${r.name} | ${(r.params / 1e9).toFixed(2)}B | ${fmt(r.stepSeconds, 3)} | ${fmt(r.forwardSeconds, 3)} | ${fmt(r.backwardSeconds, 3)} | ${fmt(r.optimizerSeconds, 3)} | ${fmt(r.tokensPerSecond, 0)} | ${fmt(r.modelTflops)} | ${fmt(100 * r.mfu)}%`,
    );
  if (merge.length) {
    console.log('\nPrefix merging (0.5B shape): the same samples flat vs merged into tries');
    console.log(
      'target S | S | samples | prompt | suffix | total tok | unique tok | packs flat/merged | flat s | merged s | speed-up | target',
    );
    for (const r of merge)
      console.log(
        `${r.targetS} | ${fmt(r.S, 2)} | ${r.samples} | ${r.prompt} | ${r.suffix} | ${r.totalTokens} | ${r.uniqueTokens} | ${r.flatPacks}/${r.mergedPacks} | ${fmt(r.flatStepSeconds, 3)} | ${fmt(r.mergedStepSeconds, 3)} | ${fmt(r.speedup, 1)}x | ${fmt(r.target, 1)}x`,
      );
  }
  if (decodeRows.length) {
    console.log(
      '\nGPU decode (paged KV cache; prompt 512 prefilled, then 32 decode steps; logits to the host and the CPU sampler each step)',
    );
    console.log('model | batch | decode tok/s | ms/step | prefill s');
    for (const r of decodeRows)
      console.log(
        'error' in r
          ? `${r.name} | ${r.batch} | error: ${r.error}`
          : `${r.name} | ${r.batch} | ${fmt(r.tokensPerSecond, 0)} | ${fmt(r.stepMs, 2)} | ${fmt(r.prefillSeconds, 3)}`,
      );
  } else
    console.log(`\nGPU decode: ${only.has('decode') ? 'this CUDA build has no benchDecodeCuda export' : 'not run (ANVIL_BENCH_ONLY)'}`);
  if (small) {
    console.log(
      `\nSmolLM2-135M shape (random weights), 8192 tokens per step; LoRA r = 16 on all seven projections (${(small.adapterParams / 1e6).toFixed(2)}M parameters)`,
    );
    console.log(
      'mode | step s | fwd s | bwd s | optim s | tokens/s | model TFLOP/s | MFU | AdamW state MiB | device params+grads+AdamW MiB',
    );
    for (const r of small.rows)
      console.log(
        `${r.mode} | ${fmt(r.stepSeconds, 3)} | ${fmt(r.forwardSeconds, 3)} | ${fmt(r.backwardSeconds, 3)} | ${fmt(r.optimizerSeconds, 3)} | ${fmt(r.tokensPerSecond, 0)} | ${fmt(r.modelTflops)} | ${fmt(100 * r.mfu)}% | ${fmt(r.optimizerBytes / 2 ** 20)} | ${fmt(r.deviceBytes / 2 ** 20)}`,
      );
    console.log(`LoRA AdamW state / full fine-tuning's: ${fmt(100 * small.optimizerRatio, 2)}%`);
  }
  const mfuTarget = models.length ? models[1].mfu >= 0.4 : null;
  const mergeTarget = merge.length > 0 && merge.every((r) => r.speedup >= 0.8 * r.S);
  console.log(
    `\ntargets: MFU >= 40% on the 1.5B shape: ${mfuTarget === null ? 'not run' : mfuTarget ? 'met' : 'NOT met'}; merge speed-up >= 0.8 S: ${merge.length ? (mergeTarget ? 'met' : 'NOT met') : 'not run'}`,
  );
  console.log(
    JSON.stringify({
      suite: 'engine-cuda',
      ran: true,
      device: info.device,
      gemmLibrary: info.gemm,
      cublasBf16Tflops: gemm.tflops,
      peakTflopsAssumed: H200_BF16_TFLOPS,
      attentionImpl: implUsed,
      attention,
      models,
      merging: merge,
      decode: decodeRows,
      smollm2: small,
      targets: { mfu15b: mfuTarget, mergeSpeedup: merge.length ? mergeTarget : null },
    }),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
