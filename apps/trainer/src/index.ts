/**
 * The trainer's public entry point (`@anvil/trainer`): what hosts (the `anvil` CLI's in-process
 * run, tests, benches, the GPU checks) may use. Everything else under src/ is the service's own.
 */
export { TrainerModule } from './app.module';
export { trainerEnv, lossConfigOf, optimizerOf, trainerOptionsOf, type TrainerConfig } from './config';
export { TrainerRuntime, type TrainerOptions, type TrainerStepEvent, type BatchSource } from './runtime';
export { PostgresBatchSource } from './batches/batch-source';
export { CheckpointStore, type TrainerState } from './checkpoints/checkpoint-store';
export type { LoggedStep } from './http/step-log';
export { trainOnTree, type TrainSettings } from './training/train-step';
export { configureTrainerModel, loadTrainerModels, type TrainerModels } from './trainer-models';
export { loraOptionsOf, PUBLISH_FORMATS, type PublishFormat } from './lora/lora-settings';
