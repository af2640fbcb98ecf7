// Trainer checkpoints on disk, each written atomically: everything goes into a hidden temporary
// directory beside the final one, is fsynced, and the directory is renamed into place, so a crash
// leaves either a whole checkpoint or none (a leftover temporary directory is removed at start).
//
//   <root>/v<version>/                      one directory per published policy version
//     config.json, model.safetensors       Hugging Face layout (what the inference-proxy loads)
//     tokenizer.json, tokenizer_config.json, chat_template.jinja, ... copied from the starting checkpoint
//                                           when it had them (TOKENIZER_FILES: what a loader needs to serve it)
//     optimizer.safetensors                 AdamW m and v (full checkpoints only)
//     trainer-state.json                    step, version, data position, digest (full checkpoints only)
//
// With LoRA the model's weights are the merged ones (W + (alpha / r) B A), and a full checkpoint
// keeps the adapters and their AdamW state in adapter/ instead of optimizer.safetensors; versions
// published as adapters hold a PEFT adapter directory instead (adapter_config.json,
// adapter_model.safetensors, and for a resume point adapter_optimizer.safetensors), see
// adapter-checkpoint.ts.
//
// Only full checkpoints (every K steps) are resume points; the others exist so inference can load
// each published version, and are pruned to the newest `keepPublished`.
import { randomUUID } from 'node:crypto';
import { existsSync, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { PublishedWeights } from '@anvil/contracts';
import { checkpointDigest, Model, parseSafetensors, toFloat32, writeSafetensors } from '@anvil/engine';
import type { PublishFormat } from '../lora/lora-settings';
import { ADAPTER_SUBDIR, AdapterCheckpointError, restoreAdapterState, verifyAdapterState, type AdapterState } from './adapter-checkpoint';

/** Where the trainer is in the Data Pool's batch sequence: the next batch sequence number it will train. */
export interface DataPosition {
  /** train_batch.created `step` of the next batch to train (every lower one was trained or dropped). */
  nextBatchStep: number;
  /** Batches trained since the start of the run. */
  batchesTrained: number;
  /** Batches consumed without a step (refused as corrupt or stale, or all steps skipped as non-finite). */
  batchesDropped: number;
  /** Id of the last batch consumed. */
  lastBatchId: string | null;
}

export interface TrainerState {
  format: 'anvil-trainer-state/1';
  runId: string;
  /** Optimizer steps taken (mini-batches count one each). */
  step: number;
  /** Policy version of these weights (published as weights.published.version). */
  version: number;
  position: DataPosition;
  /** Steps skipped for a non-finite loss or gradient since the run started. */
  nonFiniteSkips: number;
  /** checkpointDigest of the weights in this directory. */
  sha256: string;
  writtenAt: number;
  /** A LoRA run's resume point: where its adapters and their AdamW state are (absent: full fine-tuning). */
  lora?: AdapterState;
}

export class CheckpointError extends Error {
  override name = 'CheckpointError';
}

export interface WrittenCheckpoint {
  dir: string;
  sha256: string;
  full: boolean;
  /** What the directory holds: a whole model, or (LoRA published as adapters) a PEFT adapter. */
  weights: PublishedWeights;
}

/** How a LoRA model's versions are written: the merged weights or the adapter alone, and the base name adapter_config.json records. */
export interface WriteOptions {
  format?: PublishFormat;
  baseModelNameOrPath?: string | null;
}

const STATE_FILE = 'trainer-state.json';
const OPTIMIZER_FILE = 'optimizer.safetensors';
// Newer Hugging Face checkpoints keep the chat template beside tokenizer_config.json instead of in it
// (chat_template.jinja, or chat_template.json): without it a checkpoint of such a model has no template.
const TOKENIZER_FILES = [
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'generation_config.json',
  'chat_template.jinja',
  'chat_template.json',
];

async function fsyncDir(dir: string): Promise<void> {
  const h = await fsp.open(dir, 'r');
  try {
    await h.sync();
  } finally {
    await h.close();
  }
}

async function fsyncFiles(dir: string): Promise<void> {
  for (const f of await fsp.readdir(dir, { withFileTypes: true })) {
    if (f.isDirectory()) {
      await fsyncFiles(join(dir, f.name));
      await fsyncDir(join(dir, f.name));
      continue;
    }
    const h = await fsp.open(join(dir, f.name), 'r+');
    try {
      await h.sync();
    } finally {
      await h.close();
    }
  }
}

export class CheckpointStore {
  constructor(
    readonly root: string,
    private readonly opts: { tokenizerDir?: string; keepPublished?: number; keepFull?: number } = {},
  ) {}

  dirOf(version: number): string {
    return join(this.root, `v${version}`);
  }

  /** Creates the root and removes temporary directories a crashed writer left. */
  async init(): Promise<void> {
    await fsp.mkdir(this.root, { recursive: true });
    for (const f of await fsp.readdir(this.root))
      if (f.startsWith('.tmp-')) await fsp.rm(join(this.root, f), { recursive: true, force: true });
  }

  /**
   * Writes the model as policy version `state.version`; with `full` also the optimizer moments and
   * the trainer state (a resume point). A LoRA model's version holds its merged weights, or with
   * format 'adapter' the adapter alone; its resume point holds the adapters and their AdamW state.
   * Returns the directory and the weights' digest.
   */
  async write(
    model: Model,
    state: Omit<TrainerState, 'format' | 'sha256' | 'writtenAt' | 'lora'>,
    full: boolean,
    opts: WriteOptions = {},
  ): Promise<WrittenCheckpoint> {
    const final = this.dirOf(state.version);
    const tmp = join(this.root, `.tmp-${randomUUID()}`);
    const lora = model.lora !== null;
    const adapterOnly = lora && opts.format === 'adapter';
    const baseModelNameOrPath = opts.baseModelNameOrPath ?? null;
    if (adapterOnly) await model.saveAdapter(tmp, { optimizer: full, baseModelNameOrPath });
    else {
      await model.save(tmp);
      for (const f of TOKENIZER_FILES) {
        const src = this.opts.tokenizerDir ? join(this.opts.tokenizerDir, f) : null;
        if (src && existsSync(src)) await fsp.copyFile(src, join(tmp, f));
      }
      if (full && lora) await model.saveAdapter(join(tmp, ADAPTER_SUBDIR), { optimizer: true, baseModelNameOrPath });
    }
    const sha256 = await checkpointDigest(tmp);
    if (full) {
      let adapters: AdapterState | undefined;
      if (lora) {
        const adapterDir = adapterOnly ? '.' : ADAPTER_SUBDIR;
        adapters = { adapterDir, sha256: adapterOnly ? sha256 : await checkpointDigest(join(tmp, adapterDir)) };
      } else await this.writeOptimizer(model, tmp);
      const full: TrainerState = {
        format: 'anvil-trainer-state/1',
        ...state,
        sha256,
        writtenAt: Date.now(),
        ...(adapters ? { lora: adapters } : {}),
      };
      await fsp.writeFile(join(tmp, STATE_FILE), JSON.stringify(full, null, 2) + '\n');
    }
    await fsyncFiles(tmp);
    if (existsSync(final)) await fsp.rm(final, { recursive: true, force: true }); // a re-publish of the same version after a crash
    await fsp.rename(tmp, final);
    await fsyncDir(this.root);
    await this.prune();
    return { dir: final, sha256, full, weights: adapterOnly ? 'lora-adapter' : 'full' };
  }

  /** AdamW's moments and step of a full fine-tuning resume point. */
  private async writeOptimizer(model: Model, dir: string): Promise<void> {
    const opt = model.optimizerState();
    const tensors =
      opt.m && opt.v
        ? [
            { name: 'adam_m', shape: [opt.m.length], dtype: 'F32' as const, data: opt.m },
            { name: 'adam_v', shape: [opt.v.length], dtype: 'F32' as const, data: opt.v },
          ]
        : [];
    await writeSafetensors(join(dir, OPTIMIZER_FILE), tensors, { step: String(opt.step), format: 'anvil-adamw/1' });
  }

  /** The newest full checkpoint whose files verify (a corrupt one is reported and passed over), or null. */
  async latest(onCorrupt?: (dir: string, err: Error) => void): Promise<{ dir: string; state: TrainerState } | null> {
    for (const v of await this.versions()) {
      const dir = this.dirOf(v);
      if (!existsSync(join(dir, STATE_FILE))) continue;
      try {
        return { dir, state: await this.readState(dir) };
      } catch (e) {
        onCorrupt?.(dir, e as Error);
      }
    }
    return null;
  }

  /** Reads and verifies a full checkpoint's state (weights digest, optimizer file). */
  async readState(dir: string): Promise<TrainerState> {
    let state: TrainerState;
    try {
      state = JSON.parse(await fsp.readFile(join(dir, STATE_FILE), 'utf8')) as TrainerState;
    } catch (e) {
      throw new CheckpointError(`${dir}: ${STATE_FILE} is unreadable (${(e as Error).message})`);
    }
    if (state.format !== 'anvil-trainer-state/1')
      throw new CheckpointError(`${dir}: unknown trainer state format ${JSON.stringify(state.format)}`);
    for (const k of ['step', 'version', 'nonFiniteSkips'] as const)
      if (!Number.isInteger(state[k]) || state[k] < 0)
        throw new CheckpointError(`${dir}: ${STATE_FILE} field ${k} is not a non-negative integer`);
    if (!state.position || !Number.isInteger(state.position.nextBatchStep))
      throw new CheckpointError(`${dir}: ${STATE_FILE} has no data position`);
    let digest: string;
    try {
      digest = await checkpointDigest(dir);
    } catch (e) {
      throw new CheckpointError(`${dir}: ${(e as Error).message}`);
    }
    if (digest !== state.sha256)
      throw new CheckpointError(`${dir}: weights do not match the digest recorded at write time (truncated or altered)`);
    if (state.lora) {
      try {
        await verifyAdapterState(dir, state.lora);
      } catch (e) {
        if (e instanceof AdapterCheckpointError) throw new CheckpointError(e.message);
        throw e;
      }
    } else if (!existsSync(join(dir, OPTIMIZER_FILE))) throw new CheckpointError(`${dir}: ${OPTIMIZER_FILE} is missing`);
    return state;
  }

  /**
   * Loads a full checkpoint into `model` (same shape): its weights and optimizer moments, or for a
   * LoRA run (the model holding the starting weights and the configured adapters) the adapters and
   * their moments. A checkpoint of the other kind, or adapters of another base or configuration,
   * are refused with the model unchanged.
   */
  async restoreInto(model: Model, dir: string): Promise<TrainerState> {
    const state = await this.readState(dir);
    if (state.lora || model.lora) {
      if (!state.lora)
        throw new CheckpointError(
          `${dir}: a full fine-tuning checkpoint, but this trainer trains LoRA adapters (TRAINER_LORA_RANK): unset it, or start the LoRA run in another checkpoint directory`,
        );
      if (!model.lora)
        throw new CheckpointError(
          `${dir}: a LoRA checkpoint (adapters over frozen starting weights), but this trainer does full fine-tuning: set the run's TRAINER_LORA_* again, or start in another checkpoint directory`,
        );
      await restoreAdapterState(model, dir, state.lora);
      return state;
    }
    const loaded = await Model.load(dir);
    try {
      if (
        loaded.tensors.length !== model.tensors.length ||
        loaded.tensors.some((t, i) => t.numel !== model.tensors[i].numel || t.name !== model.tensors[i].name)
      )
        throw new CheckpointError(`${dir}: the checkpoint's tensors do not match the trainer's model`);
      loaded.tensors.forEach((t, i) => model.tensors[i].data.set(t.data));
      await model.syncToDevice();
    } finally {
      loaded.dispose();
    }
    const st = parseSafetensors(await fsp.readFile(join(dir, OPTIMIZER_FILE)), join(dir, OPTIMIZER_FILE));
    const m = st.tensors.get('adam_m');
    const v = st.tensors.get('adam_v');
    const step = Number(st.metadata?.step ?? NaN);
    if (!Number.isInteger(step) || step < 0) throw new CheckpointError(`${dir}: ${OPTIMIZER_FILE} has no step`);
    if (m && v) {
      const mm = new Float32Array(model.numParams);
      const vv = new Float32Array(model.numParams);
      if (m.shape[0] !== model.numParams || v.shape[0] !== model.numParams)
        throw new CheckpointError(`${dir}: optimizer moments do not match the model's ${model.numParams} parameters`);
      toFloat32(m, mm, `${dir}: adam_m`);
      toFloat32(v, vv, `${dir}: adam_v`);
      model.setOptimizerState({ step, m: mm, v: vv });
    }
    return state;
  }

  /** Published versions on disk, newest first. */
  async versions(): Promise<number[]> {
    if (!existsSync(this.root)) return [];
    return (await fsp.readdir(this.root))
      .map((f) => /^v(\d+)$/.exec(f))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => b - a);
  }

  /** Keeps the newest keepPublished weight-only versions and the newest keepFull resume points. */
  private async prune(): Promise<void> {
    const keepPublished = this.opts.keepPublished ?? 4;
    const keepFull = this.opts.keepFull ?? 2;
    let published = 0,
      fulls = 0;
    for (const v of await this.versions()) {
      const dir = this.dirOf(v);
      const full = existsSync(join(dir, STATE_FILE));
      const keep = full ? fulls++ < keepFull : published++ < keepPublished;
      if (!keep) await fsp.rm(dir, { recursive: true, force: true });
    }
  }
}
