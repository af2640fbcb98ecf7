// Constrained decoding on the GPU generator against the CPU generator (the reference): the GPU
// samples on the host with the CPU sampler, so the masks are applied by the same code; what this
// checks is that the device logits, restricted to each step's mask, give the CPU's choice and
// the CPU's constrained log-probs.
import { seededRandom } from '@anvil/rl';
import type { ModelConfigInput } from './config';
import type { CudaCheck } from './cuda-checks';
import { createGenerator, type TokenConstraint } from './generator';
import { Model } from './model';

/** A constraint that allows `masks[i]` at step i (ids listed), recording nothing else. */
function stepMasks(masks: number[][], vocab: number): TokenConstraint {
  let step = 0;
  return {
    allowed: () => {
      const m = new Uint32Array(Math.ceil(vocab / 32));
      for (const id of masks[step]) m[id >>> 5] |= 1 << (id & 31);
      return m;
    },
    advance: () => void step++,
  };
}

/**
 * Greedy constrained decoding of 12 tokens on `backend` with a random mask per step (1 to 6
 * allowed ids; a mask of one id is a forced token): each token must be the CPU's constrained
 * greedy choice for the same context, or within 0.05 nats of it (bf16 near-ties), its log-prob
 * under the renormalised distribution must equal the CPU's within 0.05, forced tokens must have
 * log-prob exactly 0 on both; then 16 sampled tokens (temperature 1) must all lie in their masks.
 * `backend` 'cpu' runs the check against itself (to test the check where there is no GPU).
 */
export async function constrainedGenerationMatchesCpu(cfg: ModelConfigInput, backend: 'cuda' | 'cpu' = 'cuda'): Promise<CudaCheck> {
  const vocab = cfg.vocabSize ?? 256;
  const cpu = Model.create(cfg, { backend: 'cpu', seed: 5, initStd: 0.05 });
  const dev = Model.create(cfg, { backend, seed: 5, initStd: 0.05 });
  const gc = await createGenerator(cpu, { prefixCacheBytes: 0 });
  const gd = await createGenerator(dev, { prefixCacheBytes: 0 });
  try {
    const r = seededRandom(23);
    const prompt = Array.from({ length: 37 }, () => Math.floor(r() * vocab));
    const steps = 12;
    const masks = Array.from({ length: steps }, (_, i) => {
      const n = i % 4 === 1 ? 1 : 2 + Math.floor(r() * 5);
      return [...new Set(Array.from({ length: n }, () => Math.floor(r() * vocab)))].sort((a, b) => a - b);
    });
    const g = await gd.generate(prompt, { maxTokens: steps, temperature: 0, seed: 1 }, { constraint: stepMasks(masks, vocab) });
    let exact = 0;
    let lpErr = 0;
    let worstTie = 0;
    let outside = 0;
    let forcedNonZero = 0;
    for (let i = 0; i < steps; i++) {
      const ctx = [...prompt, ...g.outputIds.slice(0, i)];
      if (!masks[i].includes(g.outputIds[i])) outside++;
      // the CPU's log-probs of every allowed id in this context, renormalised over the mask
      const tokens = Int32Array.from([...ctx, ...masks[i]]);
      const parents = Int32Array.from(tokens, (_, k) => (k < ctx.length ? k - 1 : ctx.length - 1));
      const fw = await cpu.forward({ tokens, parents });
      fw.handle.dispose();
      const lps = masks[i].map((_, k) => fw.logp[ctx.length + k]);
      const mx = Math.max(...lps);
      const z = mx + Math.log(lps.reduce((s, x) => s + Math.exp(x - mx), 0));
      const gpuK = masks[i].indexOf(g.outputIds[i]);
      const c = await gc.generate(ctx, { maxTokens: 1, temperature: 0, seed: 1 }, { constraint: stepMasks([masks[i]], vocab) });
      if (masks[i].length === 1) forcedNonZero += Number(g.logprobs[i] !== 0) + Number(c.logprobs[0] !== 0);
      if (gpuK === -1) continue;
      lpErr = Math.max(lpErr, Math.abs(g.logprobs[i] - (lps[gpuK] - z)));
      if (c.outputIds[0] === g.outputIds[i]) exact++;
      else worstTie = Math.max(worstTie, mx - lps[gpuK]);
    }
    const sampled = await gd.generate(
      prompt,
      { maxTokens: 16, temperature: 1, seed: 9 },
      { constraint: stepMasks([...masks, ...masks], vocab) },
    );
    const sampledOutside = sampled.outputIds.filter((id, i) => !masks[i % steps].includes(id)).length;
    return {
      name: 'generation: constrained decoding (a mask per step) on the GPU generator vs the CPU, teacher-forced',
      passed: outside === 0 && sampledOutside === 0 && forcedNonZero === 0 && lpErr <= 0.05 && worstTie <= 0.05,
      detail: `${exact}/${steps} the CPU's constrained greedy choice (worst near-tie ${worstTie.toExponential(2)}); max constrained log-prob gap ${lpErr.toExponential(2)}; tokens outside their mask: greedy ${outside}, sampled ${sampledOutside}; forced tokens with log-prob != 0: ${forcedNonZero}`,
      metrics: { exactTokens: exact, maxLogprobErr: lpErr, worstTieGap: worstTie, outside: outside + sampledOutside, forcedNonZero },
    };
  } finally {
    await gc.close();
    await gd.close();
    cpu.dispose();
    dev.dispose();
  }
}
