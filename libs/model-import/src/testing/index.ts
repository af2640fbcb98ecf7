// Test support: a GGUF writer with reference quantizers, a tiny BPE vocabulary, a converter from
// transformers-named tensors to GGUF (llama.cpp's layout), and a zip writer for fake wheels.
export * from './gguf-writer';
export * from './quantize';
export * from './tiny-vocab';
export * from './hf-to-gguf';
export * from './zip-writer';
