// Test fixtures: real tokenizers and chat templates the tests load from disk.
export * from './qwen3';
export * from './sentencepiece';
