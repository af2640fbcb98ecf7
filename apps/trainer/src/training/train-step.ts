// One optimizer step (or several, with mini-batches) on a batch given as a prefix tree: pack under
// a token budget, forward every pack once (each shared token computed once), gather per-sample
// log-probs, compute the loss with libs/rl exactly as unmerged training would, scatter dLoss/dlogp
// back onto the nodes (a node shared by m samples gets the sum of their coefficients), backward,
// clip, AdamW. Nothing here knows about Kafka or the database.
import type { Model } from '@anvil/engine';
import {
  computeLoss,
  mergeSampleValues,
  mismatchStats,
  packTree,
  type LossConfig,
  type LossSample,
  type LossStats,
  type PrefixTree,
} from '@anvil/rl';

export interface TrainSettings {
  loss: LossConfig;
  /** AdamW peak learning rate. */
  lr: number;
  /**
   * Linear warm-up over this many optimizer steps (0 or absent = none): step t (1-based, counted
   * over the whole run) uses lr · min(1, t / warmupSteps). A fresh AdamW's first updates are
   * ±lr on every parameter whatever the gradient's size (m̂/√v̂ = sign(g) at t = 1): on the tiny
   * model one such step at lr 1e-3 took a trained sample's log-prob from −1.0 to −17.
   */
  warmupSteps?: number;
  /**
   * Cosine decay after the warm-up, reaching minLrFactor · lr at optimizer step decaySteps and
   * staying there (0 or absent = constant lr after the warm-up). A fixed-budget run sets it to its
   * step budget: late steps of policy-gradient noise then move the weights less.
   */
  decaySteps?: number;
  /** Floor of the cosine decay as a fraction of lr (default 0.1). */
  minLrFactor?: number;
  /** Global gradient-norm clip (0 = off). */
  maxGradNorm: number;
  /** Nodes per pack at most (the engine's forward budget). */
  packTokens: number;
  /** Optimizer steps per batch: the batch's samples are split by group into this many mini-batches. */
  miniBatches: number;
  /** Activation bytes one pack may take (refused before allocating when exceeded). */
  maxPackBytes?: number;
}

export interface MismatchSplit {
  /** The split's name, e.g. "context=sliding_window agent=white-box". */
  key: string;
  meanAbsDeltaLogp: number;
  klK3: number;
  tokens: number;
}

export interface StepReport {
  /** Loss value (−J) of the mini-batch; NaN when skipped. */
  loss: number;
  gradNorm: number;
  stats: LossStats | null;
  /** Recomputed vs recorded log-probs of the tokens the trainer's current weights generated. */
  mismatch: { meanAbsDeltaLogp: number; klK3: number; tokens: number };
  mismatchBySplit: MismatchSplit[];
  samples: number;
  outputTokens: number;
  totalTokens: number;
  uniqueTokens: number;
  sharing: number;
  packs: number;
  seconds: number;
  /** Learning rate of the optimizer step (absent when it was skipped). */
  lr?: number;
  /** Why the step was not applied (non-finite loss or gradient); null when it was. */
  skipped: string | null;
}

/** A view of the tree restricted to some samples (packTree only places nodes their paths use). */
function subTree(tree: PrefixTree, indices: number[]): PrefixTree {
  return { ...tree, samples: indices.map((k) => tree.samples[k]) };
}

/** Splits sample indices into `parts` mini-batches along group boundaries (a group never straddles two). */
export function miniBatchesOf(tree: PrefixTree, parts: number): number[][] {
  if (!Number.isInteger(parts) || parts < 1) throw new RangeError(`miniBatches must be a positive integer, got ${parts}`);
  const groups = new Map<string, number[]>();
  tree.samples.forEach((s, k) => {
    const g = groups.get(s.groupId);
    if (g) g.push(k);
    else groups.set(s.groupId, [k]);
  });
  const list = [...groups.values()];
  const n = Math.min(parts, list.length);
  const out: number[][] = Array.from({ length: n }, () => []);
  list.forEach((g, i) => out[Math.floor((i * n) / list.length)].push(...g));
  return out.filter((m) => m.length > 0);
}

/** What one mini-batch's forward + loss + backward produced (gradients are accumulated in the model). */
export interface GradientResult {
  loss: number;
  /** Null when the forward's log-probs were not finite (no loss was computed). */
  stats: LossStats | null;
  mismatch: { all: { meanAbsDeltaLogp: number; klK3: number; tokens: number }; splits: MismatchSplit[] };
  samples: number;
  outputTokens: number;
  totalTokens: number;
  uniqueTokens: number;
  sharing: number;
  packs: number;
  /** False when the forward's log-probs, the loss or a dLoss/dlogp coefficient was not finite: nothing was accumulated. */
  finite: boolean;
  /** What was not finite, when finite is false. */
  nonFinite?: 'log-probs' | 'loss or dLoss/dlogp';
}

/**
 * Forward every pack of the samples `members`, compute the loss over all of them with libs/rl, and
 * accumulate its gradient (zeroGrad first). The loss needs every sample's log-probs before any
 * coefficient is known (aggregation normalisers, sequence-level corrections), so all packs of a
 * mini-batch stay alive between forward and backward; maxPackBytes bounds each.
 */
export async function lossAndGradients(
  model: Model,
  tree: PrefixTree,
  members: number[],
  settings: Pick<TrainSettings, 'loss' | 'packTokens' | 'maxPackBytes'>,
  ctx: {
    currentVersion: number;
    splitOf?: (sampleIndex: number) => string;
    reference?: Model;
    /** LoRA dropout: training forwards whose masks are seeded by this + the pack's index (absent: no dropout). */
    dropoutSeed?: number;
  },
): Promise<GradientResult> {
  const klCoef = settings.loss.klCoef ?? 0;
  if (klCoef > 0 && !ctx.reference)
    throw new Error(`loss.klCoef is ${klCoef} but the trainer has no reference model to take the KL against`);
  const view = subTree(tree, members);
  const packed = packTree(view, { maxTokens: settings.packTokens });
  const n = view.samples.length;
  const lossSamples: LossSample[] = new Array(n);
  const entropy: Float32Array[] = new Array(n);
  const handles: Awaited<ReturnType<Model['forward']>>['handle'][] = [];
  // Decoupled PPO's recomputed proximal policy is the weights before this optimizer step: exactly
  // the weights this forward runs on, so π_prox is these log-probs (a constant to the loss).
  const recomputedProx = settings.loss.kind === 'decoupled_ppo' && settings.loss.prox?.mode === 'recomputed';
  try {
    for (let p = 0; p < packed.packs.length; p++) {
      const pack = packed.packs[p];
      const res = await model.forward(pack, {
        ...(settings.maxPackBytes ? { maxBytes: settings.maxPackBytes } : {}),
        ...(ctx.dropoutSeed !== undefined ? { train: true, dropoutSeed: ctx.dropoutSeed + p } : {}),
      });
      handles.push(res.handle);
      // The reference policy's log-probs of the same nodes: a forward only, its activations freed at once.
      let refLogp: Float32Array | null = null;
      if (ctx.reference) {
        const ref = await ctx.reference.forward(pack, {
          logits: 'recompute',
          ...(settings.maxPackBytes ? { maxBytes: settings.maxPackBytes } : {}),
        });
        refLogp = ref.logp;
        ref.handle.dispose();
      }
      const nodeOf = packed.nodeOf[p];
      pack.samples.forEach((k, j) => {
        const s = view.samples[k];
        const outs = pack.outputNodes[j];
        const logp = Float32Array.from(outs, (node) => res.logp[node]);
        lossSamples[k] = {
          logp,
          ...(recomputedProx ? { proxLogp: Float32Array.from(logp) } : {}),
          ...(refLogp ? { refLogp: Float32Array.from(outs, (node) => (refLogp as Float32Array)[node]) } : {}),
          behaviourLogp: Float32Array.from(outs, (node) => tree.behaviourLogp[nodeOf[node]]),
          versions: Uint32Array.from(outs, (node) => tree.versions[nodeOf[node]]),
          advantage: s.advantage,
          weight: s.lossWeight,
          trajectoryId: s.trajectoryId,
          groupId: s.groupId,
        };
        entropy[k] = Float32Array.from(outs, (node) => res.entropy[node]);
      });
    }
    const shape = {
      samples: n,
      outputTokens: lossSamples.reduce((a, s) => a + s.logp.length, 0),
      totalTokens: packed.totalTokens,
      uniqueTokens: packed.uniqueTokens,
      sharing: packed.sharing,
      packs: packed.packs.length,
    };
    // Non-finite log-probs come from the weights (or an overflow in the forward), not from the
    // batch: the step is skipped like a non-finite loss, and counts against the trainer's limit
    // (computeLoss would refuse them as malformed input, failing the batch instead).
    if (lossSamples.some((s) => !s.logp.every(Number.isFinite)))
      return {
        loss: Number.NaN,
        stats: null,
        mismatch: { all: { meanAbsDeltaLogp: Number.NaN, klK3: Number.NaN, tokens: 0 }, splits: [] },
        ...shape,
        finite: false,
        nonFinite: 'log-probs',
      };
    const mismatch = mismatchOfCurrent(lossSamples, ctx.currentVersion, (k) => (ctx.splitOf ? ctx.splitOf(members[k]) : 'all'));
    const result = computeLoss(lossSamples, settings.loss, { entropy });
    const out: GradientResult = {
      loss: result.loss,
      stats: result.stats,
      mismatch,
      ...shape,
      finite: Number.isFinite(result.loss) && result.dLdlogp.every((d) => d.every(Number.isFinite)),
    };
    if (!out.finite) return { ...out, nonFinite: 'loss or dLoss/dlogp' };
    await model.zeroGrad();
    for (let p = 0; p < packed.packs.length; p++) {
      const pack = packed.packs[p];
      await model.backward(
        handles[p],
        mergeSampleValues(
          pack,
          pack.samples.map((k) => result.dLdlogp[k]),
        ),
      );
    }
    return out;
  } finally {
    for (const h of handles) h.dispose();
  }
}

/**
 * Trains on one batch: one AdamW step per mini-batch. `currentVersion` is the policy version of
 * the model's weights before the first step (tokens stamped with it measure the engine's own
 * train/inference mismatch); `splitOf` names the mismatch split of a sample (context-management
 * mode, agent kind). A non-finite loss or gradient skips that step and leaves the weights alone.
 */
export async function trainOnTree(
  model: Model,
  tree: PrefixTree,
  settings: TrainSettings,
  ctx: { currentVersion: number; splitOf?: (sampleIndex: number) => string; stepsDone?: number; reference?: Model },
): Promise<StepReport[]> {
  const reports: StepReport[] = [];
  let applied = ctx.stepsDone ?? 0;
  // Once a mini-batch's step is applied the weights are no published version any more: a later
  // mini-batch's recomputed log-probs differ from the recorded ones by that update, not by the
  // engine, so only the mini-batches trained before the batch's first applied step measure the
  // mismatch. The later ones are deliberately not measured by an extra forward-only pass before the
  // first step: that variant gave the right figures but cost held-out reward in real runs, for a
  // reason not understood yet.
  let weightsAreCurrent = true;
  const dropout = (model.lora?.dropout ?? 0) > 0;
  const miniBatches = miniBatchesOf(tree, settings.miniBatches);
  for (let mb = 0; mb < miniBatches.length; mb++) {
    const members = miniBatches[mb];
    const started = performance.now();
    const g = await lossAndGradients(model, tree, members, settings, {
      ...ctx,
      ...(weightsAreCurrent ? {} : { currentVersion: Number.NaN }),
      ...(dropout ? { dropoutSeed: dropoutSeedOf(applied, mb) } : {}),
    });
    const base = {
      loss: g.loss,
      stats: g.stats,
      mismatch: g.mismatch.all,
      mismatchBySplit: g.mismatch.splits,
      samples: g.samples,
      outputTokens: g.outputTokens,
      totalTokens: g.totalTokens,
      uniqueTokens: g.uniqueTokens,
      sharing: g.sharing,
      packs: g.packs,
    };
    const seconds = () => (performance.now() - started) / 1000;
    if (!g.finite) {
      reports.push({ ...base, gradNorm: NaN, seconds: seconds(), skipped: `non-finite ${g.nonFinite ?? 'loss or dLoss/dlogp'}` });
      continue;
    }
    const norm = await model.gradNorm();
    if (!Number.isFinite(norm)) {
      await model.zeroGrad();
      reports.push({ ...base, gradNorm: norm, seconds: seconds(), skipped: 'non-finite gradient norm' });
      continue;
    }
    if (settings.maxGradNorm > 0) await model.clipGradNorm(settings.maxGradNorm);
    applied++;
    const lr = lrAt(settings, applied);
    await model.step({ lr });
    weightsAreCurrent = false;
    reports.push({ ...base, gradNorm: norm, lr, seconds: seconds(), skipped: null });
  }
  return reports;
}

/**
 * The seed of LoRA dropout's masks in a mini-batch (its packs add their index): fixed by the
 * optimizer steps applied before it and its place in the batch, which a resume restores, so a
 * resumed run draws exactly the masks the uninterrupted one drew.
 */
export function dropoutSeedOf(stepsApplied: number, miniBatch: number): number {
  return (stepsApplied * 64 + miniBatch) * 2 ** 16;
}

/** The learning rate of optimizer step `step` (1-based over the run): a linear warm-up to the peak lr, then constant or a cosine decay to minLrFactor · lr. */
export function lrAt(settings: Pick<TrainSettings, 'lr' | 'warmupSteps' | 'decaySteps' | 'minLrFactor'>, step: number): number {
  const w = settings.warmupSteps ?? 0;
  const warm = w > 0 ? Math.min(1, step / w) : 1;
  const d = settings.decaySteps ?? 0;
  if (d <= w) return settings.lr * warm;
  const floor = settings.minLrFactor ?? 0.1;
  const progress = Math.min(1, Math.max(0, (step - w) / (d - w)));
  return settings.lr * warm * (floor + (1 - floor) * 0.5 * (1 + Math.cos(Math.PI * progress)));
}

/** Mismatch of the tokens the current weights generated (recorded version == currentVersion), overall and per split. */
function mismatchOfCurrent(samples: LossSample[], currentVersion: number, splitOf: (k: number) => string): GradientResult['mismatch'] {
  const bySplit = new Map<string, { logp: Float32Array; behaviourLogp: Float32Array }[]>();
  const all: { logp: Float32Array; behaviourLogp: Float32Array }[] = [];
  samples.forEach((s, k) => {
    const keep: number[] = [];
    const v = s.versions as Uint32Array;
    for (let t = 0; t < v.length; t++) if (v[t] === currentVersion) keep.push(t);
    if (keep.length === 0) return;
    const pair = { logp: Float32Array.from(keep, (t) => s.logp[t]), behaviourLogp: Float32Array.from(keep, (t) => s.behaviourLogp[t]) };
    all.push(pair);
    const key = splitOf(k);
    const list = bySplit.get(key);
    if (list) list.push(pair);
    else bySplit.set(key, [pair]);
  });
  return {
    all: mismatchStats(all),
    splits: [...bySplit.entries()].map(([key, pairs]) => ({ key, ...mismatchStats(pairs) })),
  };
}
