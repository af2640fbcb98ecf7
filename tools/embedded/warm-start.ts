/**
 * The warm start of the main job: supervised fine-tuning of the built-in tiny Llama-family model on
 * generated demonstrations of the built-in chain-add tool task (the environment's own
 * `demonstration(task)`: the ideal tool calls and answer), for a fixed, stated budget. It is an
 * honest partial policy: it knows the format and roughly how to add, and RL has room above it.
 *
 * The result is cached under <dataDir>/warm-start/<key>/ (a Hugging Face checkpoint), keyed by
 * everything that determines it (budget, seed, model shape, task config, this file's recipe
 * version), so the first `npm run main` pays for it once and later runs reuse it.
 *
 *   npm run warm-start            # builds (or finds) the cached checkpoint and prints its path
 */
import { createHash } from 'node:crypto';
import { existsSync, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { Model, tinyConfig, type ModelConfig } from '@anvil/engine';
import { packSamples, type PackSample } from '@anvil/rl';
import { tinyChatFormat, type ChatFormat } from '@anvil/tokenizer';
import { ChainAddEnvironment, type ChainAddConfig } from '../../apps/rollout-manager/src/environments/chain-add';
import type { ChatMessage, EnvTask } from '../../apps/rollout-manager/src/environments/types';

/** Bumped when the recipe below changes, so an old cache is never taken for a new recipe. */
const RECIPE = 'sft-chain-add/1';

export interface WarmStartOptions {
  /** Optimizer steps of supervised training. */
  steps: number;
  /** Demonstrations (whole conversations) per step. */
  tasksPerStep: number;
  lr: number;
  seed: number;
  task: Partial<ChainAddConfig>;
  model?: Partial<ModelConfig>;
  dataDir: string;
  /** The environment to demonstrate (default: chain-add with `task`). */
  env?: ChainAddEnvironment;
}

export const WARM_START_DEFAULTS: Omit<WarmStartOptions, 'dataDir' | 'task'> = { steps: 120, tasksPerStep: 16, lr: 3e-3, seed: 1 };

export interface WarmStart {
  dir: string;
  cached: boolean;
  seconds: number;
  steps: number;
  demonstrations: number;
  finalLoss: number | null;
}

/** One SFT sample per assistant turn: prompt = the conversation before it (with the generation prompt), output = its tokens through the end-of-turn token. */
export function sftSamples(format: ChatFormat, task: EnvTask, messages: ChatMessage[]): PackSample[] {
  const out: PackSample[] = [];
  const eot = format.stopTokenIds;
  const render = (msgs: ChatMessage[], gen: boolean) => format.tokenizer.encode(format.template.render(msgs as never, { tools: task.tools as never, addGenerationPrompt: gen }));
  for (let i = 0; i < messages.length; i++) {
    if (messages[i].role !== 'assistant') continue;
    const prompt = render(messages.slice(0, i), true);
    const full = render(messages.slice(0, i + 1), false);
    const rest = full.slice(prompt.length);
    const end = rest.findIndex((t) => eot.includes(t));
    if (end < 0) throw new Error(`demonstration of ${task.id}: assistant turn ${i} has no end-of-turn token`);
    out.push({ promptIds: prompt, outputIds: rest.slice(0, end + 1) });
  }
  return out;
}

export function warmStartKey(o: WarmStartOptions): string {
  const cfg = tinyConfig({ vocabSize: 272, ...o.model });
  const env = new ChainAddEnvironment(o.task).config;
  const probe = (o.env ?? new ChainAddEnvironment(o.task)).generate({ seed: 0, count: 1, split: 'train' })[0];
  const h = createHash('sha256').update(
    JSON.stringify({
      RECIPE,
      opening: probe.messages.filter((m) => m.role === 'system'),
      tools: probe.tools,
      steps: o.steps,
      tasksPerStep: o.tasksPerStep,
      lr: o.lr,
      seed: o.seed,
      cfg,
      env: { ...env, toolDelay: undefined },
    }),
  );
  return h.digest('hex').slice(0, 16);
}

export async function warmStart(o: WarmStartOptions, log: (line: string) => void = () => undefined): Promise<WarmStart> {
  const dir = join(o.dataDir, 'warm-start', warmStartKey(o));
  if (existsSync(join(dir, 'warm-start.json'))) {
    const meta = JSON.parse(await fsp.readFile(join(dir, 'warm-start.json'), 'utf8')) as WarmStart;
    return { ...meta, dir, cached: true };
  }
  const started = performance.now();
  const format = tinyChatFormat();
  const env = o.env ?? new ChainAddEnvironment(o.task);
  const model = Model.tiny({ seed: o.seed, config: { vocabSize: 272, ...o.model } });
  model.configureOptimizer({ beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0 });
  let finalLoss: number | null = null;
  for (let step = 1; step <= o.steps; step++) {
    const tasks = env.generate({ seed: o.seed * 1_000_003 + step, count: o.tasksPerStep, split: 'train' });
    const batch = tasks.flatMap((t) => sftSamples(format, t, env.demonstration(t)));
    const { packs, locations } = packSamples(batch, { maxTokens: 32_768 });
    const outputTokens = batch.reduce((n, s) => n + s.outputIds.length, 0);
    await model.zeroGrad();
    let nll = 0;
    for (let p = 0; p < packs.length; p++) {
      const { handle, logp } = await model.forward(packs[p]);
      const d = new Float32Array(packs[p].tokens.length);
      for (let i = 0; i < d.length; i++) d[i] = -packs[p].lossWeights[i] / outputTokens;
      locations.forEach((l) => {
        if (l.pack === p) for (const node of l.outputNodes) nll -= logp[node];
      });
      await model.backward(handle, d);
      handle.dispose();
    }
    await model.clipGradNorm(1.0);
    // linear warm-up over 10 steps, then cosine to 10% of lr
    const warm = Math.min(1, step / 10);
    const cos = 0.1 + 0.9 * 0.5 * (1 + Math.cos((Math.PI * step) / o.steps));
    await model.step({ lr: o.lr * warm * cos });
    finalLoss = nll / outputTokens;
    if (step === 1 || step % 20 === 0 || step === o.steps) log(`warm start: SFT step ${step}/${o.steps}  loss ${finalLoss.toFixed(3)}  ${((performance.now() - started) / 1000).toFixed(0)} s`);
  }
  const tmp = `${dir}.tmp-${process.pid}`;
  await fsp.rm(tmp, { recursive: true, force: true });
  await model.save(tmp);
  model.dispose();
  const meta: WarmStart = { dir, cached: false, seconds: (performance.now() - started) / 1000, steps: o.steps, demonstrations: o.steps * o.tasksPerStep, finalLoss };
  await fsp.writeFile(join(tmp, 'warm-start.json'), JSON.stringify({ ...meta, recipe: RECIPE, options: { ...o, dataDir: undefined } }, null, 2) + '\n');
  await fsp.mkdir(join(o.dataDir, 'warm-start'), { recursive: true });
  await fsp.rm(dir, { recursive: true, force: true });
  await fsp.rename(tmp, dir);
  return meta;
}
