/** Injection tokens of the inference-proxy's providers. */
export const INFERENCE_CONFIG = Symbol('INFERENCE_CONFIG');
/** A RuntimeHandle: the runtime, or why there is none (the embedded engine cannot generate). */
export const INFERENCE_RUNTIME = Symbol('INFERENCE_RUNTIME');
