/**
 * The warm start of the main job: supervised fine-tuning of the built-in tiny Llama-family model on
 * generated demonstrations of the built-in chain-add tool task (the environment's own
 * `demonstration(task)`: the ideal tool calls and answer). It is an honest partial policy: its
 * budget is a pass rate, not a step count — it trains until `targetPassRate` of the validation
 * tasks (train-split tasks never demonstrated; never the eval split) pass at temperature 1,
 * checked every `checkEvery` steps, at most `steps` steps. A fixed step count was no budget at
 * all: the tiny model's SFT is chaotic (at lr 4e-3 the held-out pass rate after 1600 steps was
 * 0.30, 0.62 or 1.00 depending on the seed and the engine's thread count; at lr 1e-3 it climbs
 * from ~0.1 to ~1.0 within 200 steps, around step 500).
 *
 * The result is cached under <dataDir>/warm-start/<key>/ (a Hugging Face checkpoint), keyed by
 * everything that determines it (budget, seed, model shape, task config, this file's recipe
 * version), so the first `anvil train` pays for it once and later runs reuse it.
 *
 *   anvil warm-start              # builds (or finds) the cached checkpoint and prints its path
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, promises as fsp } from 'node:fs';
import { join, resolve } from 'node:path';
import { getThreads, Model, setThreads, tinyConfig, type ModelConfig } from '@anvil/engine';
import { packSamples, type PackSample } from '@anvil/rl';
import { loadChatFormat, tinyChatFormat, type ChatFormat } from '@anvil/tokenizer';
import { ChainAddEnvironment, type ChainAddConfig, type ChatMessage, type EnvTask } from '@anvil/rollout-manager';
import { passRate } from './sft-validation';

/** Bumped when the recipe below changes, so an old cache is never taken for a new recipe. */
const RECIPE = 'sft-chain-add/3';

/** Seeds the draw of validation tasks (fixed: the same tasks for every warm-start seed). */
const VALIDATION_SEED = 0x5a11d;

/**
 * Engine threads of the warm start, fixed: a thread count changes the order of float reductions,
 * and the tiny model's SFT is chaotic enough that the same recipe on 1 and 2 threads reached 100%
 * and 62% held-out. A fixed count builds the same weights on any machine (more cores do not help
 * the tiny model much; fewer only make it slower).
 */
export const WARM_START_THREADS = 2;

export interface WarmStartOptions {
  /** Optimizer steps of supervised training at most (the lr schedule spans them). */
  steps: number;
  /**
   * Stop once this fraction of the validation tasks pass (temperature 1), checked every
   * `checkEvery` steps from step `checkFrom` (0 = train all `steps`). A pass rate, not a step
   * count, is the budget: the tiny model's SFT is chaotic, and at a fixed step count the held-out
   * pass rate swings from 0.1 to 1.0 with the seed and the thread count.
   */
  targetPassRate: number;
  checkEvery: number;
  checkFrom: number;
  /**
   * Once a check reaches `fineCheckFrom` (a pass rate), check every `fineCheckEvery` steps instead.
   * The tiny model's SFT learns the copying all at once: the pass rate went 16% -> 27% -> 64% over
   * two 25-step checks, so a coarse check overshoots a 35% target by half the scale. Defaults:
   * fineCheckEvery = checkEvery (no fine checks), fineCheckFrom = targetPassRate / 2.
   */
  fineCheckEvery?: number;
  fineCheckFrom?: number;
  /** Train-split tasks held out of the SFT stream to measure the pass rate on. */
  validationTasks: number;
  /** Demonstrations (whole conversations) per step. */
  tasksPerStep: number;
  lr: number;
  seed: number;
  task: Partial<ChainAddConfig>;
  model?: Partial<ModelConfig>;
  /**
   * A Hugging Face model directory to fine-tune instead of the built-in tiny model (a user's run
   * that asks for a warm start): its weights, its tokenizer and chat template. The result carries
   * its tokenizer files, so it is a complete model directory too.
   */
  base?: string;
  dataDir: string;
  /** The environment to demonstrate (default: chain-add with `task`). */
  env?: ChainAddEnvironment;
  /** Measures the validation pass rate (default: passRate at temperature 1; tests of the stopping rule replace it). */
  measure?: (model: Model, validation: EnvTask[], step: number) => Promise<number>;
}

export interface WarmStart {
  dir: string;
  cached: boolean;
  seconds: number;
  steps: number;
  demonstrations: number;
  finalLoss: number | null;
  /** The validation pass rate at each check (temperature 1). */
  validation: { step: number; passRate: number }[];
  /** 'target' when the pass rate reached targetPassRate, else 'steps' (the step budget ran out). */
  stoppedBy: 'target' | 'steps';
}

/** One SFT sample per assistant turn: prompt = the conversation before it (with the generation prompt), output = its tokens through the end-of-turn token. */
export function sftSamples(format: ChatFormat, task: EnvTask, messages: ChatMessage[]): PackSample[] {
  const out: PackSample[] = [];
  const eot = format.stopTokenIds;
  const render = (msgs: ChatMessage[], gen: boolean) =>
    format.tokenizer.encode(format.template.render(msgs as never, { tools: task.tools as never, addGenerationPrompt: gen }));
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

/** Files of a model directory that make it a servable Hugging Face model besides its weights. */
const MODEL_DIR_FILES = [
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'generation_config.json',
  'chat_template.jinja',
  'chat_template.json',
];

/** What identifies a base model directory without reading its weights: its path, config, tokenizer files, and each weight file's size and mtime. */
function baseIdentity(dir: string) {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.safetensors') || f.endsWith('.safetensors.index.json'))
    .sort()
    .map((f) => {
      const st = statSync(join(dir, f));
      return [f, st.size, st.mtimeMs];
    });
  const text = (f: string) =>
    existsSync(join(dir, f))
      ? createHash('sha256')
          .update(readFileSync(join(dir, f)))
          .digest('hex')
      : null;
  return { dir: resolve(dir), config: text('config.json'), files, tokenizer: MODEL_DIR_FILES.map(text) };
}

export function warmStartKey(o: WarmStartOptions): string {
  const cfg = o.base ? baseIdentity(o.base) : tinyConfig({ vocabSize: 272, ...o.model });
  const env = new ChainAddEnvironment(o.task).config;
  const probe = (o.env ?? new ChainAddEnvironment(o.task)).generate({ seed: 0, count: 1, split: 'train' })[0];
  const h = createHash('sha256').update(
    JSON.stringify({
      RECIPE,
      opening: probe.messages.filter((m) => m.role === 'system'),
      tools: probe.tools,
      steps: o.steps,
      targetPassRate: o.targetPassRate,
      checkEvery: o.checkEvery,
      checkFrom: o.checkFrom,
      fineCheckEvery: o.fineCheckEvery ?? o.checkEvery,
      fineCheckFrom: o.fineCheckFrom ?? o.targetPassRate / 2,
      validationTasks: o.validationTasks,
      tasksPerStep: o.tasksPerStep,
      lr: o.lr,
      seed: o.seed,
      cfg,
      threads: WARM_START_THREADS,
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
  const threadsBefore = getThreads();
  setThreads(WARM_START_THREADS);
  try {
    return await build(o, dir, started, log);
  } finally {
    setThreads(threadsBefore);
  }
}

async function build(o: WarmStartOptions, dir: string, started: number, log: (line: string) => void): Promise<WarmStart> {
  const format = o.base ? loadChatFormat(o.base) : tinyChatFormat();
  const env = o.env ?? new ChainAddEnvironment(o.task);
  const model = o.base ? await Model.load(o.base) : Model.tiny({ seed: o.seed, config: { vocabSize: 272, ...o.model } });
  model.configureOptimizer({ beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0 });
  let finalLoss: number | null = null;
  // validation tasks: a fixed draw of train-split tasks, never demonstrated
  const validation = o.validationTasks > 0 ? env.generate({ seed: VALIDATION_SEED, count: o.validationTasks, split: 'train' }) : [];
  const held = new Set(validation.map((t) => t.id));
  const curve: { step: number; passRate: number }[] = [];
  let stoppedBy: WarmStart['stoppedBy'] = 'steps';
  let step = 0;
  let every = o.checkEvery;
  let lastCheck = 0;
  while (step < o.steps) {
    step++;
    // twice the tasks asked for, so a step still has tasksPerStep after the validation ones leave
    const tasks = env
      .generate({ seed: o.seed * 1_000_003 + step, count: 2 * o.tasksPerStep, split: 'train' })
      .filter((t) => !held.has(t.id))
      .slice(0, o.tasksPerStep);
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
    const at = () => `${((performance.now() - started) / 1000).toFixed(0)} s`;
    if (step === 1 || step % 100 === 0) log(`warm start: SFT step ${step}/${o.steps}  loss ${finalLoss.toFixed(3)}  ${at()}`);
    if (
      o.targetPassRate > 0 &&
      validation.length > 0 &&
      step >= o.checkFrom &&
      (lastCheck === 0 ? step % every === 0 : step - lastCheck >= every)
    ) {
      lastCheck = step;
      const rate = await (
        o.measure ?? ((m, tasks, at) => passRate(m, format, env, tasks, { temperature: 1, maxTokensPerCall: 64, seed: at }))
      )(model, validation, step);
      curve.push({ step, passRate: rate });
      log(
        `warm start: step ${step}: ${(rate * 100).toFixed(0)}% of ${validation.length} validation tasks pass (target ${(o.targetPassRate * 100).toFixed(0)}%)  ${at()}`,
      );
      if (rate >= o.targetPassRate) {
        stoppedBy = 'target';
        break;
      }
      if (rate >= (o.fineCheckFrom ?? o.targetPassRate / 2)) every = Math.min(every, o.fineCheckEvery ?? o.checkEvery);
    }
  }
  const tmp = `${dir}.tmp-${process.pid}`;
  await fsp.rm(tmp, { recursive: true, force: true });
  await model.save(tmp);
  model.dispose();
  if (o.base) for (const f of MODEL_DIR_FILES) if (existsSync(join(o.base, f))) await fsp.copyFile(join(o.base, f), join(tmp, f));
  const meta: WarmStart = {
    dir,
    cached: false,
    seconds: (performance.now() - started) / 1000,
    steps: step,
    demonstrations: step * o.tasksPerStep,
    finalLoss,
    validation: curve,
    stoppedBy,
  };
  await fsp.writeFile(
    join(tmp, 'warm-start.json'),
    JSON.stringify({ ...meta, recipe: RECIPE, options: { ...o, dataDir: undefined } }, null, 2) + '\n',
  );
  await fsp.mkdir(join(o.dataDir, 'warm-start'), { recursive: true });
  await fsp.rm(dir, { recursive: true, force: true });
  await fsp.rename(tmp, dir);
  return meta;
}
