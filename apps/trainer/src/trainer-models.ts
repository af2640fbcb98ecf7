import { Model } from '@anvil/engine';
import { lossConfigOf, optimizerOf, type TrainerConfig } from './config';
import { loraOptionsOf } from './lora/lora-settings';

/** What the trainer trains, and the KL penalty's fixed reference (null without a penalty). */
export interface TrainerModels {
  model: Model;
  reference: Model | null;
}

/**
 * Applies the configuration to a model loaded from the starting weights: AdamW's settings and,
 * with TRAINER_LORA_RANK, the LoRA adapters (the base frozen from then on: only the adapters have
 * gradients and AdamW moments). A LoRA configuration the model cannot take is a LoraConfigError,
 * and the model is left as it was.
 */
export async function configureTrainerModel(model: Model, config: TrainerConfig): Promise<void> {
  model.configureOptimizer(optimizerOf(config));
  const lora = loraOptionsOf(config);
  if (lora) await model.enableLora(lora);
}

/**
 * Makes a model a forward-only reference: a rank-1 LoRA adapter on one projection, whose B is zero
 * (so it adds exactly 0 to every output), frees the base's gradient arena, which the engine
 * allocates and zero-fills for every model and a reference never uses (half its memory).
 */
export async function freezeReference(model: Model): Promise<void> {
  await model.enableLora({ rank: 1, alpha: 1, targets: ['q_proj'] });
}

/**
 * The trainer's models from its configuration: the starting weights (TRAINER_INITIAL_CHECKPOINT_DIR,
 * or the built-in tiny model, random init seed 0) configured by configureTrainerModel, and for a
 * KL penalty the starting weights again, frozen (freezeReference), never trained. With LoRA the
 * reference is the trained model's own base, but the engine's forward always applies the adapters
 * that are on (it has no base-only forward), so it is a second copy as in full fine-tuning.
 * The service and the in-process host both build the trainer from here.
 */
export async function loadTrainerModels(config: TrainerConfig): Promise<TrainerModels> {
  const dir = config.TRAINER_INITIAL_CHECKPOINT_DIR;
  const load = () => (dir ? Model.load(dir) : Promise.resolve(Model.tiny({ seed: 0 })));
  const model = await load();
  let reference: Model | null = null;
  try {
    await configureTrainerModel(model, config);
    if ((lossConfigOf(config).klCoef ?? 0) > 0) {
      reference = await load();
      await freezeReference(reference);
    }
    return { model, reference };
  } catch (e) {
    model.dispose();
    reference?.dispose();
    throw e;
  }
}
