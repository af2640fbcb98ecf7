/** Injection tokens of the trainer's providers. */
export const TRAINER_CONFIG = Symbol('TRAINER_CONFIG');
