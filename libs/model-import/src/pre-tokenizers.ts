// The pre-tokenizer of a byte-level BPE vocabulary from its GGUF name (tokenizer.ggml.pre), as
// llama.cpp's llama-vocab.cpp maps names to pre-tokenizer types (llama_vocab::impl::load) and
// types to regular expressions (llm_tokenizer_bpe). llama.cpp applies the expressions in turn,
// each splitting the pieces the previous one left, keeping matches and the text between them as
// pieces: a Sequence of Split pre-tokenizers with behaviour "Isolated" in tokenizer.json. The
// expressions are llama.cpp's own adaptations (e.g. `(?:'[sS]|...)` for `(?i:'s|...)`), which
// JavaScript, Oniguruma and std::regex all read the same way.

const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const PORO = ' ?[^(\\s|.,!?…。，、।۔،)]+';
const TEKKEN =
  '[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+';
const GPT4O =
  "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

export interface PreTokenizerSpec {
  /** llama.cpp's pre-tokenizer type (LLAMA_VOCAB_PRE_TYPE_*), for messages. */
  type: string;
  regexes: readonly string[];
  /** A word that is a whole vocabulary entry is taken as is, before any merge (Llama 3, Tekken). */
  ignoreMerges: boolean;
  /** Whether decoding cleans up spaces before punctuation (tokenizer_config clean_up_tokenization_spaces). */
  cleanSpaces: boolean;
  /** Whether a BOS is added by default when the GGUF does not say (tokenizer.ggml.add_bos_token). */
  addBos: boolean;
}

const spec = (type: string, regexes: string[], o: Partial<Omit<PreTokenizerSpec, 'type' | 'regexes'>> = {}): PreTokenizerSpec => ({
  type,
  regexes,
  ignoreMerges: o.ignoreMerges ?? false,
  cleanSpaces: o.cleanSpaces ?? true,
  addBos: o.addBos ?? false,
});

const DEFAULT = spec('DEFAULT', ['[\\p{P}\\$\\+<=>\\^~\\|]+', GPT2, '\\p{N}+', '[0-9][0-9][0-9]']);
const llama3 = spec('LLAMA3', [LLAMA3], { ignoreMerges: true, addBos: true });
const starcoder = (cleanSpaces = true) => spec('STARCODER', ['\\p{N}', GPT2], { cleanSpaces });
const gpt2 = spec('GPT2', [GPT2]);
const qwen2 = (cleanSpaces: boolean) => spec('QWEN2', [QWEN2], { cleanSpaces });

/** tokenizer.ggml.pre → pre-tokenizer, for the names llama.cpp knows whose expressions are plain regular expressions. */
export const PRE_TOKENIZERS: ReadonlyMap<string, PreTokenizerSpec> = new Map([
  ['default', DEFAULT],
  ...['llama3', 'llama-v3', 'llama-bpe', 'falcon3', 'falcon-h1', 'pixtral', 'midm-2.0', 'lfm2'].map((n) => [n, llama3] as const),
  ['dbrx', spec('DBRX', [LLAMA3])],
  ['smaug-bpe', spec('SMAUG', [LLAMA3])],
  [
    'deepseek-coder',
    spec('DEEPSEEK_CODER', ['[\r\n]', '\\s?\\p{L}+', '\\s?\\p{P}+', '[一-龥ࠀ-一가-퟿]+', '\\p{N}'], { cleanSpaces: false }),
  ],
  ['starcoder', starcoder()],
  ['refact', starcoder()],
  ['command-r', starcoder(false)],
  ['smollm', starcoder(false)],
  ['codeshell', starcoder()],
  ['exaone', starcoder()],
  ['minerva-7b', starcoder()],
  ...['gpt-2', 'phi-2', 'jina-es', 'jina-de', 'gigachat', 'jina-v2-es', 'jina-v2-de', 'a.x-4.0', 'mellum'].map((n) => [n, gpt2] as const),
  ...['jina-v1-en', 'jina-v2-code', 'roberta-bpe', 'mpt', 'olmo', 'jais', 'exaone4'].map((n) => [n, gpt2] as const),
  ['trillion', spec('TRILLION', [GPT2], { cleanSpaces: false })],
  ['granite-docling', spec('GRANITE_DOCLING', [GPT2], { cleanSpaces: false })],
  ['qwen2', qwen2(false)],
  ['deepseek-r1-qwen', qwen2(false)],
  ['kormo', qwen2(false)],
  ['megrez', qwen2(true)],
  ['stablelm2', spec('STABLELM2', [QWEN2])],
  ['hunyuan', spec('HUNYUAN', [QWEN2], { cleanSpaces: false })],
  ['poro-chat', spec('PORO', [PORO], { cleanSpaces: false })],
  ['bloom', spec('BLOOM', [PORO])],
  ['gpt3-finnish', spec('GPT3_FINNISH', [PORO])],
  ['viking', spec('VIKING', [PORO, '\\p{N}'], { cleanSpaces: false })],
  ['tekken', spec('TEKKEN', [TEKKEN], { cleanSpaces: false, ignoreMerges: true, addBos: true })],
  ['gpt-4o', spec('GPT4O', [GPT4O], { cleanSpaces: false })],
  ['llama4', spec('GPT4O', [GPT4O], { cleanSpaces: false })],
]);

export class UnsupportedTokenizerError extends Error {
  override name = 'UnsupportedTokenizerError';
}

/** The pre-tokenizer for a tokenizer.ggml.pre value; absent means llama.cpp's default. */
export function preTokenizerFor(pre: string | undefined, source: string): PreTokenizerSpec {
  if (pre === undefined || pre === '') return DEFAULT;
  const found = PRE_TOKENIZERS.get(pre);
  if (!found)
    throw new UnsupportedTokenizerError(
      `${source}: pre-tokenizer ${JSON.stringify(pre)} (tokenizer.ggml.pre) is not supported; known: ${[...PRE_TOKENIZERS.keys()].join(', ')}`,
    );
  return found;
}

/** tokenizer.json's pre_tokenizer: the expressions as isolating splits, then the byte-level mapping without its own regex. */
export function preTokenizerJson(s: PreTokenizerSpec): Record<string, unknown> {
  return {
    type: 'Sequence',
    pretokenizers: [
      ...s.regexes.map((r) => ({ type: 'Split', pattern: { Regex: r }, behavior: 'Isolated', invert: false })),
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
}
