// Engine benchmark: `npx tsx tools/bench/suites/engine.ts` (or `npm run bench -- engine`).
//
// 1. Train-step throughput (forward + backward + AdamW) on random-init tiny / small / ~100M
//    configs at ANVIL_BENCH_THREADS (default 2) threads, in tokens/s and model GFLOP/s, next to
//    OpenBLAS SGEMM GFLOP/s measured in the same run on the model's own GEMM shapes.
//    Model FLOPs per step = 6 * P_ne * T + 12 * L * H * D * sum_nodes(depth + 1), where P_ne is
//    the parameters that take part in a GEMM per token (all but the input embedding table; the LM
//    head counts, also when tied) and the second term is attention (QK^T and PV: 4*H*D per visible
//    key forward, twice that backward).
// 2. Prefix merging: the same samples trained flat (each its own sequence) vs merged into a trie,
//    at sharing ratios S = total / unique tokens of 1, 2, 4, 8, 16, 40: step-time speed-up and
//    peak activation memory.
// 3. Generation (createGenerator): decode tokens/s of the tiny and small configs at batch 1 and 8
//    (prompt 128, 64 new tokens; decode = tokens after each sequence's first / time from the first
//    token to the last) and time to first token of a 1024-token prompt, cold vs a prefix-cache hit.
// 4. The SmolLM2-135M shape (random weights: 30 layers, hidden 576, FFN 1536, 9/3 heads, vocab
//    49152, tied embeddings), full-weight and LoRA (r = 16 on all seven projections): forward +
//    backward tokens/s, model GFLOP/s against SGEMM on its own shapes, peak memory (the engine's
//    arenas and the process's RSS high-water), the optimizer state of LoRA against full fine-tuning,
//    and generation tokens/s at batch 1 and 64 (the loop's), with the adapters unmerged. LoRA's
//    FLOPs are 4 * P_gemm * tokens (the frozen base needs no weight gradients) + 6 * P_adapter *
//    tokens + attention.
// Every time is the minimum over a few repetitions after a warm-up (steady state; the least
// disturbed estimate on a shared machine), and SGEMM GFLOP/s is the best run of each shape.
// Prints a readable table, then ONE JSON object as the last line of stdout.
import { mergeSampleValues, packSamples, PackSample, Pack } from '@anvil/rl';
import { flatPacks, starSamples } from './bench-kit';
import { Model, ModelConfigInput, analyzeTree, benchSgemm, createGenerator, engineInfo, setThreads, SgemmMode } from '@anvil/engine';

const threads = Number(process.env.ANVIL_BENCH_THREADS ?? 2);
setThreads(threads);
const quick = process.env.ANVIL_BENCH_QUICK === '1';
// ANVIL_BENCH_ENGINE_SECTIONS=throughput,merging,generation,smollm2 (default: all) runs a subset.
const sections = new Set((process.env.ANVIL_BENCH_ENGINE_SECTIONS ?? 'throughput,merging,generation,smollm2').split(','));

const CONFIGS: Array<{ name: string; cfg: ModelConfigInput; seqs: number; seqLen: number; steps: number }> = [
  {
    name: 'tiny',
    cfg: { vocabSize: 2048, hiddenSize: 128, intermediateSize: 384, numHiddenLayers: 4, numAttentionHeads: 4, numKeyValueHeads: 2 },
    seqs: 4,
    seqLen: 512,
    steps: 5,
  },
  {
    name: 'small',
    cfg: { vocabSize: 8192, hiddenSize: 512, intermediateSize: 1536, numHiddenLayers: 4, numAttentionHeads: 8, numKeyValueHeads: 4 },
    seqs: 4,
    seqLen: 512,
    steps: 4,
  },
  {
    name: '100M',
    cfg: { vocabSize: 32000, hiddenSize: 768, intermediateSize: 2048, numHiddenLayers: 7, numAttentionHeads: 12, numKeyValueHeads: 12 },
    seqs: 2,
    seqLen: 512,
    steps: 3,
  },
];

function gemmFlopParams(m: Model): number {
  const c = m.config;
  return m.numNonEmbeddingParams + (c.tieWordEmbeddings ? c.vocabSize * c.hiddenSize : 0);
}

function modelFlops(m: Model, pack: { parents: Int32Array }): number {
  const c = m.config;
  const sumLen = analyzeTree(pack.parents).sumPathLength;
  return 6 * gemmFlopParams(m) * pack.parents.length + 12 * c.numHiddenLayers * c.numAttentionHeads * c.headDim * sumLen;
}

/** One optimizer step over the packs; returns seconds and the peak bytes of one pack's forward+backward. */
async function trainStep(m: Model, packs: Array<{ tokens: Int32Array; parents: Int32Array; coef: Float32Array }>) {
  const t0 = performance.now();
  await m.zeroGrad();
  let peak = 0;
  let fb = 0;
  for (const p of packs) {
    const t1 = performance.now();
    const fw = await m.forward(p);
    await m.backward(fw, p.coef);
    fb += performance.now() - t1;
    peak = Math.max(peak, fw.handle.peakBytes);
    fw.handle.dispose();
  }
  await m.clipGradNorm(1.0);
  await m.step({ lr: 1e-4 });
  return { seconds: (performance.now() - t0) / 1000, fwdBwdSeconds: fb / 1000, peak };
}

/** SGEMM GFLOP/s of OpenBLAS on the forward + backward GEMM shapes of this model at N tokens. */
async function sgemmOnModelShapes(m: Model, N: number) {
  const c = m.config;
  const C = c.hiddenSize,
    F = c.intermediateSize,
    QKV = (c.numAttentionHeads + 2 * c.numKeyValueHeads) * c.headDim,
    HD = c.numAttentionHeads * c.headDim;
  const lmRows = Math.min(N, Math.max(64, Math.floor((8 << 20) / c.vocabSize)));
  // [out, in] of each weight, per layer (x layers) or once (LM head)
  const shapes: Array<[number, number, number]> = [
    [QKV, C, c.numHiddenLayers],
    [C, HD, c.numHiddenLayers],
    [2 * F, C, c.numHiddenLayers],
    [C, F, c.numHiddenLayers],
    [c.vocabSize, C, 1],
  ];
  let flops = 0,
    secs = 0;
  for (const [O, I, times] of shapes) {
    const rows = O === c.vocabSize ? lmRows : N;
    const reps = O === c.vocabSize ? N / rows : 1;
    const runs: Array<[SgemmMode, number, number, number]> = [
      ['nt', rows, O, I],
      ['nn', rows, I, O],
      ['tn', O, I, rows],
    ];
    for (const [mode, M, Nn, K] of runs) {
      const r = await benchSgemm(M, Nn, K, mode, quick ? 0.05 : 0.15);
      const f = 2 * M * Nn * K * times * reps;
      flops += f;
      secs += r.seconds * times * reps;
    }
  }
  return flops / secs / 1e9;
}

function chainPacks(m: Model, seqs: number, seqLen: number, seed: number) {
  const packs = [];
  let s = seed;
  const N = seqs * seqLen;
  const tokens = new Int32Array(N),
    parents = new Int32Array(N),
    coef = new Float32Array(N);
  for (let i = 0; i < N; i++) {
    s = (s * 1103515245 + 12345) >>> 0;
    tokens[i] = s % m.config.vocabSize;
    parents[i] = i % seqLen === 0 ? -1 : i - 1;
    coef[i] = parents[i] < 0 ? 0 : -1 / N;
  }
  packs.push({ tokens, parents, coef });
  return packs;
}

function fmt(x: number, d = 1) {
  return x.toFixed(d);
}
function mib(b: number) {
  return (b / 2 ** 20).toFixed(1);
}

async function throughput() {
  const rows = [];
  for (const c of CONFIGS) {
    const m = Model.create(c.cfg, { seed: 1 });
    const packs = chainPacks(m, c.seqs, c.seqLen, 7);
    const T = c.seqs * c.seqLen;
    const flops = modelFlops(m, packs[0]);
    const sgemmBefore = await sgemmOnModelShapes(m, T);
    await trainStep(m, packs); // warm-up
    const steps = quick ? 1 : c.steps;
    let stepSeconds = Infinity; // the minimum over steps: least disturbed by other load on the machine
    for (let i = 0; i < steps; i++) stepSeconds = Math.min(stepSeconds, (await trainStep(m, packs)).seconds);
    const modelGflops = flops / stepSeconds / 1e9;
    // the better of two measurements around the steps: a burst of outside load must not deflate the reference
    const sgemmGflops = Math.max(sgemmBefore, await sgemmOnModelShapes(m, T));
    const row = {
      name: c.name,
      params: m.numParams,
      gemmParams: gemmFlopParams(m),
      tokensPerStep: T,
      stepSeconds,
      tokensPerSecond: T / stepSeconds,
      modelGflops,
      sgemmGflops,
      ratio: modelGflops / sgemmGflops,
    };
    rows.push(row);
    console.error(
      `[bench] ${c.name}: ${fmt(row.tokensPerSecond, 0)} tok/s, ${fmt(modelGflops)} model GFLOP/s, sgemm ${fmt(sgemmGflops)} GFLOP/s`,
    );
    m.dispose();
  }
  return rows;
}

// S = n (P + b) / (P + n b). Each case is one optimizer step over its batch; both sides are cut
// into packs of at most PACK_TOKENS tokens (flat: whole sequences; merged: packSamples), and the
// batches are sized so that the merged side still fills about 2k-tokens packs, as training would.
const PACK_TOKENS = 8192;
const SHARING_CASES: Array<{ S: number; groups: number; n: number; P: number; b: number }> = [
  { S: 1, groups: 1, n: 16, P: 0, b: 512 },
  { S: 2, groups: 2, n: 32, P: 64, b: 60 },
  { S: 4, groups: 2, n: 32, P: 96, b: 28 },
  { S: 8, groups: 4, n: 32, P: 112, b: 12 },
  { S: 16, groups: 8, n: 32, P: 120, b: 4 },
  { S: 40, groups: 2, n: 64, P: 208, b: 2 },
];

async function merging() {
  const cfg = CONFIGS[1];
  const m = Model.create(cfg.cfg, { seed: 2 });
  const rows = [];
  const toStep = (packs: Pack[], samples: PackSample[]) =>
    packs.map((pack) => ({
      tokens: pack.tokens,
      parents: pack.parents,
      coef: mergeSampleValues(
        pack,
        pack.samples.map((i) => Float32Array.from(samples[i].outputIds, () => -1 / samples.length)),
      ),
    }));
  for (const c of SHARING_CASES) {
    const samples = starSamples(c.groups, c.n, c.P, c.b, m.config.vocabSize, 100 + c.S);
    const merged = packSamples(samples, { maxTokens: PACK_TOKENS });
    const flat = flatPacks(samples, PACK_TOKENS);
    const S = merged.totalTokens / merged.uniqueTokens;
    const mp = toStep(merged.packs, samples),
      fp = toStep(flat, samples);
    // warm-up both (steady state: arenas of these sizes are cached, as in training), then
    // alternate flat and merged steps so that bursts of outside load hit both alike; keep minima
    await trainStep(m, mp);
    await trainStep(m, fp.slice(0, 1)); // flat packs are all <= PACK_TOKENS: one warms the arena cache
    const reps = quick ? 1 : 2;
    let tm = Infinity,
      fbm = Infinity,
      peakM = 0;
    const f = { seconds: Infinity, fwdBwdSeconds: Infinity, peak: 0 };
    for (let r = 0; r < reps; r++) {
      const a = await trainStep(m, fp);
      f.seconds = Math.min(f.seconds, a.seconds);
      f.fwdBwdSeconds = Math.min(f.fwdBwdSeconds, a.fwdBwdSeconds);
      f.peak = a.peak;
      for (let k = 0; k < 3; k++) {
        const b = await trainStep(m, mp);
        tm = Math.min(tm, b.seconds);
        fbm = Math.min(fbm, b.fwdBwdSeconds);
        peakM = b.peak;
      }
    }
    const row = {
      targetS: c.S,
      S,
      samples: samples.length,
      totalTokens: merged.totalTokens,
      uniqueTokens: merged.uniqueTokens,
      sharing: merged.sharing,
      flatPacks: flat.length,
      mergedPacks: merged.packs.length,
      flatStepSeconds: f.seconds,
      mergedStepSeconds: tm,
      speedup: f.seconds / tm,
      flatFwdBwdSeconds: f.fwdBwdSeconds,
      mergedFwdBwdSeconds: fbm,
      fwdBwdSpeedup: f.fwdBwdSeconds / fbm,
      flatPeakBytes: f.peak,
      mergedPeakBytes: peakM,
    };
    rows.push(row);
    console.error(
      `[bench] S=${fmt(S)}: flat ${fmt(f.seconds, 2)} s, merged ${fmt(tm, 3)} s, speed-up ${fmt(row.speedup)}x (fwd+bwd ${fmt(row.fwdBwdSpeedup)}x)`,
    );
  }
  m.dispose();
  return rows;
}

async function generation() {
  const rows = [];
  for (const c of CONFIGS.slice(0, 2)) {
    const m = Model.create({ ...c.cfg, maxPositionEmbeddings: 4096 }, { seed: 1 });
    const gen = await createGenerator(m);
    const V = m.config.vocabSize;
    const prompt = (n: number, k: number) => Array.from({ length: n }, (_, i) => (i * 31 + k * 17) % V);
    await gen.generate(prompt(16, 99), { maxTokens: 4, seed: 1 }); // warm-up
    const decode = async (B: number) => {
      let first = 0;
      let last = 0;
      let count = 0;
      const onToken = () => {
        last = performance.now();
        if (!first) first = last;
        count++;
      };
      await Promise.all(Array.from({ length: B }, (_, k) => gen.generate(prompt(128, k), { maxTokens: 64, seed: k }, { onToken })));
      return (count - B) / ((last - first) / 1000);
    };
    const ttft = async (ids: number[]) => {
      const t0 = performance.now();
      let t = 0;
      const g = await gen.generate(ids, { maxTokens: 1, seed: 1 }, { onToken: () => (t = performance.now()) });
      return { seconds: (t - t0) / 1000, cached: g.cachedPromptTokens };
    };
    const b1 = await decode(1);
    const b8 = await decode(8);
    const long = prompt(1024, 500);
    gen.clearPrefixCache();
    const cold = await ttft(long);
    const warm = await ttft([...long, 1, 2, 3]); // the next turn of a session: its prefix is cached
    const row = {
      name: c.name,
      params: m.numParams,
      decodeTokPerSecB1: b1,
      decodeTokPerSecB8: b8,
      ttftColdSeconds: cold.seconds,
      ttftPrefixHitSeconds: warm.seconds,
      prefixHitTokens: warm.cached,
    };
    rows.push(row);
    console.error(
      `[bench] generation ${c.name}: decode ${fmt(b1, 0)} tok/s (B=1), ${fmt(b8, 0)} tok/s (B=8); TTFT 1024-token prompt ${fmt(cold.seconds, 3)} s cold, ${fmt(warm.seconds, 3)} s with ${warm.cached} cached`,
    );
    await gen.close();
    m.dispose();
  }
  return rows;
}

// SmolLM2-135M-Instruct's shape (HuggingFaceTB), random weights.
const SMOLLM2: ModelConfigInput = {
  modelType: 'llama',
  vocabSize: 49152,
  hiddenSize: 576,
  intermediateSize: 1536,
  numHiddenLayers: 30,
  numAttentionHeads: 9,
  numKeyValueHeads: 3,
  tieWordEmbeddings: true,
  ropeTheta: 100000,
  rmsNormEps: 1e-5,
  maxPositionEmbeddings: 8192,
};
const SMOLLM2_LORA = { rank: 16, alpha: 32, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] };

function maxRssBytes(): number {
  return process.resourceUsage().maxRSS * 1024;
}

/** Decode tokens/s of `B` concurrent sequences (prompt `P`, `n` new tokens): tokens after each one's first / time from the first to the last. */
async function decodeRate(m: Model, B: number, P: number, n: number): Promise<number> {
  const gen = await createGenerator(m, { maxBatch: B, prefixCacheBytes: 0 });
  const V = m.config.vocabSize;
  try {
    await gen.generate([1, 2, 3, 4], { maxTokens: 2, seed: 1 }); // warm-up
    let first = 0,
      last = 0,
      count = 0;
    const onToken = () => {
      last = performance.now();
      if (!first) first = last;
      count++;
    };
    const prompt = (k: number) => Array.from({ length: P }, (_, i) => (i * 31 + k * 17) % V);
    // all B prompts are admitted together and prefilled in the first step; decode is timed after it
    await Promise.all(Array.from({ length: B }, (_, k) => gen.generate(prompt(k), { maxTokens: n, seed: k }, { onToken })));
    return (count - B) / ((last - first) / 1000);
  } finally {
    await gen.close();
  }
}

async function smollm2() {
  const m = Model.create(SMOLLM2, { seed: 1 });
  const seqs = quick ? 1 : 2,
    seqLen = 512;
  const packs = chainPacks(m, seqs, seqLen, 11);
  const T = seqs * seqLen;
  const attention = modelFlops(m, packs[0]) - 6 * gemmFlopParams(m) * T;
  const reps = quick ? 1 : 2;
  const measure = async (flops: number) => {
    await trainStep(m, packs); // warm-up (arenas cached, moments allocated)
    let best = { seconds: Infinity, fwdBwdSeconds: Infinity, peak: 0 };
    for (let i = 0; i < reps; i++) {
      const r = await trainStep(m, packs);
      if (r.fwdBwdSeconds < best.fwdBwdSeconds) best = r;
    }
    const mem = m.memory();
    return {
      fwdBwdSeconds: best.fwdBwdSeconds,
      stepSeconds: best.seconds,
      tokensPerSecond: T / best.fwdBwdSeconds,
      modelGflops: flops / best.fwdBwdSeconds / 1e9,
      packPeakBytes: best.peak,
      paramBytes: mem.paramBytes,
      gradBytes: mem.gradBytes,
      optimizerBytes: mem.optimizerBytes,
      trainableParams: mem.trainableParams,
      arenaBytes: mem.paramBytes + mem.gradBytes + mem.optimizerBytes + best.peak,
      rssHighWaterBytes: maxRssBytes(),
    };
  };
  const sgemmBefore = await sgemmOnModelShapes(m, T);
  const full = await measure(6 * gemmFlopParams(m) * T + attention);
  const genFull = { b1: await decodeRate(m, 1, 64, quick ? 8 : 24), b64: await decodeRate(m, 64, 64, quick ? 4 : 16) };
  console.error(`[bench] SmolLM2 full: ${fmt(full.tokensPerSecond)} tok/s fwd+bwd, ${fmt(full.modelGflops)} GFLOP/s`);
  await m.enableLora(SMOLLM2_LORA);
  const adapterParams = m.memory().adapterParams;
  const lora = await measure(4 * gemmFlopParams(m) * T + 6 * adapterParams * T + attention);
  const genLora = { b1: await decodeRate(m, 1, 64, quick ? 8 : 24), b64: await decodeRate(m, 64, 64, quick ? 4 : 16) };
  console.error(`[bench] SmolLM2 LoRA: ${fmt(lora.tokensPerSecond)} tok/s fwd+bwd, ${fmt(lora.modelGflops)} GFLOP/s`);
  const sgemmGflops = Math.max(sgemmBefore, await sgemmOnModelShapes(m, T));
  const gemmParams = gemmFlopParams(m);
  m.dispose();
  return {
    params: m.numParams,
    gemmParams,
    tokensPerStep: T,
    sgemmGflops,
    lora: { ...SMOLLM2_LORA, adapterParams },
    full: { ...full, ratio: full.modelGflops / sgemmGflops, decodeTokPerSecB1: genFull.b1, decodeTokPerSecB64: genFull.b64 },
    loraRow: { ...lora, ratio: lora.modelGflops / sgemmGflops, decodeTokPerSecB1: genLora.b1, decodeTokPerSecB64: genLora.b64 },
    optimizerRatio: lora.optimizerBytes / full.optimizerBytes,
  };
}

async function main() {
  const t0 = performance.now();
  const info = engineInfo();
  console.log(
    `Anvil engine benchmark - backend ${info.backend} (${info.reason}); ${info.info.blas}; ${threads} threads; ${info.info.simd}`,
  );
  const tp = sections.has('throughput') ? await throughput() : [];
  const mg = sections.has('merging') ? await merging() : [];
  const gn = sections.has('generation') ? await generation() : [];
  const sm = sections.has('smollm2') ? await smollm2() : null;

  console.log('\nTrain step (forward + backward + clip + AdamW), chains of 512 tokens');
  console.log('model FLOPs = 6 * P_gemm * tokens + 12 * layers * heads * head_dim * sum(depth + 1)');
  console.log('config | params | P_gemm | tokens/step | step s | tokens/s | model GFLOP/s | OpenBLAS SGEMM GFLOP/s (model shapes) | ratio');
  for (const r of tp)
    console.log(
      `${r.name} | ${(r.params / 1e6).toFixed(2)}M | ${(r.gemmParams / 1e6).toFixed(2)}M | ${r.tokensPerStep} | ${fmt(r.stepSeconds, 3)} | ${fmt(r.tokensPerSecond, 0)} | ${fmt(r.modelGflops)} | ${fmt(r.sgemmGflops)} | ${fmt(r.ratio, 2)}`,
    );
  console.log(`\nPrefix merging (${CONFIGS[1].name} config): the same samples flat vs merged into a trie`);
  console.log(
    `(step = zeroGrad + forward/backward of every pack (<= ${PACK_TOKENS} tokens each) + clip + AdamW; fwd+bwd excludes the optimizer, whose cost is the same for both; peak = activations + scratch of the largest pack)`,
  );
  console.log(
    'target S | S = total/unique | samples | total tok | unique tok | packs flat/merged | flat step s | merged step s | step speed-up | fwd+bwd speed-up | flat peak MiB | merged peak MiB',
  );
  for (const r of mg)
    console.log(
      `${r.targetS} | ${fmt(r.S, 2)} | ${r.samples} | ${r.totalTokens} | ${r.uniqueTokens} | ${r.flatPacks}/${r.mergedPacks} | ${fmt(r.flatStepSeconds, 3)} | ${fmt(r.mergedStepSeconds, 3)} | ${fmt(r.speedup, 1)}x | ${fmt(r.fwdBwdSpeedup, 1)}x | ${mib(r.flatPeakBytes)} | ${mib(r.mergedPeakBytes)}`,
    );

  console.log(
    '\nGeneration (KV cache, continuous batching): prompt 128, 64 new tokens; TTFT of a 1024-token prompt cold vs prefix-cache hit',
  );
  console.log('config | params | decode tok/s B=1 | decode tok/s B=8 | TTFT cold s | TTFT prefix hit s | hit tokens');
  for (const r of gn)
    console.log(
      `${r.name} | ${(r.params / 1e6).toFixed(2)}M | ${fmt(r.decodeTokPerSecB1, 0)} | ${fmt(r.decodeTokPerSecB8, 0)} | ${fmt(r.ttftColdSeconds, 3)} | ${fmt(r.ttftPrefixHitSeconds, 3)} | ${r.prefixHitTokens}`,
    );

  if (sm) {
    console.log(
      `\nSmolLM2-135M shape (random weights, ${(sm.params / 1e6).toFixed(1)}M params, vocab 49152, tied): ${sm.tokensPerStep} tokens per step (chains of 512); LoRA r = ${sm.lora.rank}, alpha ${sm.lora.alpha} on ${sm.lora.targets.join('/')} (${(sm.lora.adapterParams / 1e6).toFixed(2)}M adapter params)`,
    );
    console.log(
      'FLOPs: full 6 * P_gemm * tokens + attention; LoRA 4 * P_gemm * tokens + 6 * P_adapter * tokens + attention (no base weight gradients)',
    );
    console.log(
      'mode | fwd+bwd s | fwd+bwd tok/s | model GFLOP/s | SGEMM GFLOP/s | ratio | step s (+clip+AdamW) | pack peak MiB | params+grads+AdamW+pack MiB | RSS high-water MiB | AdamW state MiB | decode tok/s B=1 | decode tok/s B=64',
    );
    for (const [name, r] of [
      ['full', sm.full],
      ['LoRA', sm.loraRow],
    ] as const)
      console.log(
        `${name} | ${fmt(r.fwdBwdSeconds, 2)} | ${fmt(r.tokensPerSecond)} | ${fmt(r.modelGflops)} | ${fmt(sm.sgemmGflops)} | ${fmt(r.ratio, 2)} | ${fmt(r.stepSeconds, 2)} | ${mib(r.packPeakBytes)} | ${mib(r.arenaBytes)} | ${mib(r.rssHighWaterBytes)} | ${mib(r.optimizerBytes)} | ${fmt(r.decodeTokPerSecB1)} | ${fmt(r.decodeTokPerSecB64)}`,
      );
    console.log(`LoRA optimizer state / full fine-tuning's: ${(100 * sm.optimizerRatio).toFixed(2)}%`);
  }

  // null = the section did not run
  const ratioTarget = tp.length ? tp.filter((r) => r.name !== 'tiny').every((r) => r.ratio >= 0.5) : null;
  const speedupTarget = mg.length ? mg.every((r) => (r.targetS <= 16 ? r.speedup >= 0.8 * r.S : r.speedup >= 20)) : null;
  const fwdBwdSpeedupTarget = mg.length ? mg.every((r) => (r.targetS <= 16 ? r.fwdBwdSpeedup >= 0.8 * r.S : r.fwdBwdSpeedup >= 20)) : null;
  const memoryTarget = mg.length ? mg.filter((r) => r.targetS > 1).every((r) => r.mergedPeakBytes < r.flatPeakBytes) : null;
  const smollm2Target = sm ? sm.full.ratio >= 0.6 : null;
  const optimizerTarget = sm ? sm.optimizerRatio <= 0.05 : null;
  const met = (x: boolean | null) => (x === null ? 'not run' : x ? 'met' : 'NOT met');
  console.log(
    `\ntargets: ratio >= 0.5 on small/100M: ${met(ratioTarget)}; step speed-up >= 0.8 S (S <= 16) and >= 20x at S = 40: ${met(speedupTarget)} (fwd+bwd: ${met(fwdBwdSpeedupTarget)}); merged memory below flat: ${met(memoryTarget)}; SmolLM2 fwd+bwd >= 0.6 SGEMM: ${met(smollm2Target)}; LoRA optimizer state <= 5% of full: ${met(optimizerTarget)}`,
  );
  const seconds = (performance.now() - t0) / 1000;
  console.log(`total ${fmt(seconds)} s`);
  console.log(
    JSON.stringify({
      suite: 'engine',
      backend: info.backend,
      threads,
      blas: info.info.blas,
      flopsFormula: '6*P_gemm*tokens + 12*layers*heads*head_dim*sum(depth+1)',
      throughput: tp,
      merging: mg,
      generation: gn,
      smollm2: sm,
      targets: {
        ratio: ratioTarget,
        speedup: speedupTarget,
        fwdBwdSpeedup: fwdBwdSpeedupTarget,
        memory: memoryTarget,
        smollm2Ratio: smollm2Target,
        loraOptimizer: optimizerTarget,
      },
      seconds,
    }),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
