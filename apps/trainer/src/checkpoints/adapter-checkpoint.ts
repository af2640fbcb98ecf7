// The LoRA parts of a trainer checkpoint. A LoRA run's model is the frozen starting weights (the
// base, loaded from TRAINER_INITIAL_CHECKPOINT_DIR at every start) plus adapters, so a resume point
// holds the adapters and their AdamW state in PEFT's layout (adapter_config.json,
// adapter_model.safetensors, adapter_optimizer.safetensors): in the version directory itself when
// versions are published as adapters, in its `adapter/` subdirectory beside the merged weights
// otherwise. The adapter files record the base's fingerprint, so a resume onto other starting
// weights is refused before anything is trained.
import { existsSync, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import {
  ADAPTER_CONFIG_FILE,
  ADAPTER_OPTIMIZER_FILE,
  checkpointDigest,
  LoraAdapterError,
  LoraConfigError,
  parsePeftAdapterConfig,
  type LoraConfig,
  type Model,
} from '@anvil/engine';
import type { PublishedWeights } from '@anvil/contracts';

/** Where a merged-weights resume point keeps the adapters (relative to the version directory). */
export const ADAPTER_SUBDIR = 'adapter';

/** The adapters of a resume point: their directory relative to the version's, and checkpointDigest of it. */
export interface AdapterState {
  adapterDir: string;
  sha256: string;
}

export class AdapterCheckpointError extends Error {
  override name = 'AdapterCheckpointError';
}

/** What a version directory holds: a whole model (config.json), or a PEFT adapter alone. */
export function weightsIn(dir: string): PublishedWeights {
  return existsSync(join(dir, 'config.json')) ? 'full' : 'lora-adapter';
}

/** Checks a resume point's adapter files against the digest recorded at write time, and that its AdamW state is there. */
export async function verifyAdapterState(dir: string, state: AdapterState): Promise<void> {
  const at = join(dir, state.adapterDir);
  let digest: string;
  try {
    digest = await checkpointDigest(at);
  } catch (e) {
    throw new AdapterCheckpointError(`${at}: ${(e as Error).message}`);
  }
  if (digest !== state.sha256) throw new AdapterCheckpointError(`${at}: the adapters do not match the digest recorded at write time`);
  if (!existsSync(join(at, ADAPTER_OPTIMIZER_FILE))) throw new AdapterCheckpointError(`${at}: ${ADAPTER_OPTIMIZER_FILE} is missing`);
}

const describe = (c: Pick<LoraConfig, 'rank' | 'alpha' | 'dropout' | 'targets'>) =>
  `rank ${c.rank}, alpha ${c.alpha}, dropout ${c.dropout}, targets ${c.targets.join(',')}`;

/**
 * Loads a resume point's adapters and AdamW state onto `model` (its base: the starting weights, its
 * adapters: those the configuration asks for). Refused, with the model unchanged: adapters of
 * another configuration (rank, alpha, dropout, targets), and adapters trained on another base.
 */
export async function restoreAdapterState(model: Model, dir: string, state: AdapterState): Promise<void> {
  const configured = model.lora;
  if (!configured) throw new AdapterCheckpointError(`${dir}: not a LoRA model`);
  const at = join(dir, state.adapterDir);
  const cfgPath = join(at, ADAPTER_CONFIG_FILE);
  let saved: LoraConfig;
  try {
    saved = parsePeftAdapterConfig(JSON.parse(await fsp.readFile(cfgPath, 'utf8')), cfgPath, model.config);
  } catch (e) {
    if (e instanceof LoraConfigError || e instanceof SyntaxError) throw new AdapterCheckpointError(`${cfgPath}: ${e.message}`);
    throw e;
  }
  if (describe(saved) !== describe(configured))
    throw new AdapterCheckpointError(
      `${at}: the checkpoint's adapters (${describe(saved)}) are not the configured ones (${describe(configured)}): resume with the LoRA settings the run started with, or start a new run in another checkpoint directory`,
    );
  try {
    await model.loadAdapter(at, { optimizer: true });
  } catch (e) {
    if (e instanceof LoraAdapterError)
      throw new AdapterCheckpointError(
        `cannot resume: ${e.message}; TRAINER_INITIAL_CHECKPOINT_DIR must hold the base weights the run started from`,
      );
    throw e;
  }
}
