// Test support: a TrainerRuntime built from an environment exactly as the service builds it
// (trainerEnv, loadTrainerModels, trainerOptionsOf), on an in-memory bus, with every event it
// publishes collected.
import { TOPICS, type AnyEventEnvelope, type EventPayload } from '@anvil/contracts';
import { loadConfig } from '@anvil/config';
import { Model } from '@anvil/engine';
import { MemoryBus, silentLogger } from '@anvil/messaging';
import { createLogger } from '@anvil/observability';
import { waitFor } from '@anvil/testing';
import { CheckpointStore } from '../checkpoints/checkpoint-store';
import { trainerEnv, trainerOptionsOf } from '../config';
import { TrainerRuntime, type TrainBatchEvent, type TrainerStepEvent } from '../runtime';
import { loadTrainerModels } from '../trainer-models';
import { LogSource } from './batch-log';

const logger = createLogger({ service: 'trainer-test', level: 'error' });

/** The variables every trainer environment needs besides the knobs under test. */
export const BASE_ENV = {
  KAFKA_BROKERS: '127.0.0.1:19092',
  DATABASE_URL: 'postgres://anvil@127.0.0.1:15432/anvil',
};

/** Saves the built-in tiny model (random init `seed`) as a Hugging Face directory: a starting checkpoint. */
export async function saveTinyModel(dir: string, seed: number): Promise<void> {
  const m = Model.tiny({ seed });
  await m.save(dir);
  m.dispose();
}

/**
 * A LoRA trainer over the starting checkpoint `baseDir`: rank 4, alpha 8 on all projections, a
 * learning rate that moves the tiny model within a few steps, 2 AdamW steps a batch (one per
 * group), a resume point every 2 batches.
 */
export function loraTestEnv(checkpointDir: string, baseDir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    CHECKPOINT_DIR: checkpointDir,
    TRAINER_INITIAL_CHECKPOINT_DIR: baseDir,
    TRAINER_LORA_RANK: '4',
    TRAINER_LORA_ALPHA: '8',
    TRAINER_LR: '1e-2',
    TRAINER_WARMUP_STEPS: '0',
    TRAINER_ADAM_EPS: '1e-8',
    TRAINER_MINI_BATCHES: '2',
    TRAINER_CHECKPOINT_EVERY: '2',
    ...extra,
  };
}

export async function trainerHarness(env: Record<string, string>, log: TrainBatchEvent[]) {
  const config = loadConfig('trainer', trainerEnv, { ...BASE_ENV, ...env });
  const { model, reference } = await loadTrainerModels(config);
  const bus = new MemoryBus({ logger: silentLogger });
  const seen: AnyEventEnvelope[] = [];
  await bus.subscribe({ group: 'observer', topics: [TOPICS.weights], fromBeginning: true, handler: async (e) => void seen.push(e) });
  const steps: TrainerStepEvent[] = [];
  const trainer = new TrainerRuntime(trainerOptionsOf(config), {
    bus,
    model,
    ...(reference ? { reference } : {}),
    store: new CheckpointStore(config.CHECKPOINT_DIR, { keepPublished: 8, keepFull: 4 }),
    batches: new LogSource(log),
    logger,
    onStep: (e) => steps.push(e),
  });
  return {
    config,
    model,
    reference,
    bus,
    trainer,
    steps,
    /** The weights.published payloads so far. */
    published: () => seen.filter((e) => e.type === 'weights.published').map((e) => e.payload as EventPayload<'weights.published'>),
    /** Starts, publishes `batches`, waits until that many were trained, stops. */
    async trainAll(batches: TrainBatchEvent[]) {
      await trainer.start();
      for (const e of batches) await bus.publish(e);
      await waitFor(`${batches.length} batches`, async () => (steps.length >= batches.length ? true : undefined), 60_000, 20);
      await trainer.stop();
    },
    async close() {
      await trainer.stop();
      await bus.close();
      model.dispose();
      reference?.dispose();
    },
  };
}
