// The Hugging Face tokenizer files of a byte-level BPE vocabulary ("gpt2" in GGUF terms), rebuilt
// from tokenizer.ggml.* metadata: tokenizer.json, tokenizer_config.json (with the chat template),
// special_tokens_map.json and generation_config.json.
//
// GGUF token types (llama.h llama_token_type): 1 normal, 2 unknown, 3 control, 4 user-defined,
// 5 unused, 6 byte. Normal tokens are byte-level strings (GPT-2's bytes_to_unicode: "Ġworld" is
// " world") and make up the BPE vocabulary; control and user-defined tokens are written in plain
// text and matched literally in the input, as transformers' added tokens are (control ones are
// special); unused ones (a padded vocabulary's "[PAD123]") are left out, as the original had them.
import { BYTE_TO_CHAR } from '@anvil/tokenizer';
import type { GgufMetadata } from './gguf-metadata';
import { preTokenizerFor, preTokenizerJson, UnsupportedTokenizerError, type PreTokenizerSpec } from './pre-tokenizers';

export const TOKEN_TYPE = { undefined: 0, normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 } as const;

/**
 * Token texts that end a turn, in the order llama.cpp's llama-vocab.cpp looks for its end-of-turn
 * token when the file names none (tokenizer.ggml.eot_token_id).
 */
const END_OF_TURN_TEXTS = [
  '<|eot_id|>',
  '<|im_end|>',
  '<|end|>',
  '<end_of_turn>',
  '<|endoftext|>',
  '<|end_of_text|>',
  '<EOT>',
  '_<EOT>',
  '<｜end▁of▁sentence｜>',
  '<end_of_utterance>',
];

export interface TokenizerFiles {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  specialTokensMap: Record<string, unknown>;
  generationConfig: Record<string, unknown>;
  /** The ids config.json carries. */
  ids: { bos?: number; eos?: number; pad?: number };
  /** Things a person should know (dropped merges, a missing chat template, ...). */
  warnings: string[];
  preTokenizer: PreTokenizerSpec;
}

const utf8 = new TextEncoder();

/** A plain-text token as a byte-level vocabulary string ("<|im_end|>" stays as it is; " x" becomes "Ġx"). */
function toByteLevel(text: string): string {
  let out = '';
  for (const b of utf8.encode(text)) out += BYTE_TO_CHAR[b];
  return out;
}

export function buildTokenizerFiles(
  meta: GgufMetadata,
  opts: { vocabSize: number; contextLength: number; source: string },
): TokenizerFiles {
  const { source } = opts;
  const fail = (msg: string): never => {
    throw new UnsupportedTokenizerError(`${source}: ${msg}`);
  };
  const model = meta.string('tokenizer.ggml.model', 'optional') ?? fail('no tokenizer (tokenizer.ggml.model is missing)');
  if (model !== 'gpt2')
    fail(
      `tokenizer model ${JSON.stringify(model)} is not supported: only byte-level BPE vocabularies ("gpt2": Llama 3, Qwen2, SmolLM, ...) can be rebuilt` +
        (model === 'llama' ? ' (this is a SentencePiece vocabulary)' : ''),
    );
  const tokens = meta.strings('tokenizer.ggml.tokens');
  const types = meta.ints('tokenizer.ggml.token_type', 'optional') ?? tokens.map(() => TOKEN_TYPE.normal);
  if (types.length !== tokens.length) fail(`${tokens.length} tokens but ${types.length} token types`);
  if (tokens.length > opts.vocabSize) fail(`${tokens.length} tokens but the embedding has only ${opts.vocabSize} rows`);
  const merges = meta.strings('tokenizer.ggml.merges');
  const pre = preTokenizerFor(meta.string('tokenizer.ggml.pre', 'optional'), source);
  const warnings: string[] = [];
  if (!meta.has('tokenizer.ggml.pre')) warnings.push('no tokenizer.ggml.pre: the default pre-tokenizer of llama.cpp was used');

  const idOf = (key: string): number | undefined => {
    const id = meta.int(`tokenizer.ggml.${key}`, 'optional');
    if (id !== undefined && (id < 0 || id >= tokens.length))
      fail(`tokenizer.ggml.${key} ${id} is not a token id (0..${tokens.length - 1})`);
    return id;
  };
  const bos = idOf('bos_token_id');
  const eos = idOf('eos_token_id');
  const unk = idOf('unknown_token_id');
  const pad = idOf('padding_token_id');
  const byText = (texts: string[]) => texts.map((t) => tokens.indexOf(t)).find((i) => i >= 0);
  const eot = idOf('eot_token_id') ?? byText(END_OF_TURN_TEXTS);
  const eom = idOf('eom_token_id') ?? byText(['<|eom_id|>']);
  const addBos = meta.bool('tokenizer.ggml.add_bos_token', 'optional') ?? pre.addBos;
  const addEos = meta.bool('tokenizer.ggml.add_eos_token', 'optional') ?? false;

  const vocab: Record<string, number> = Object.create(null) as Record<string, number>;
  const added: Array<{ id: number; content: string; special: boolean }> = [];
  for (let id = 0; id < tokens.length; id++) {
    const text = tokens[id];
    const type = types[id];
    if (type === TOKEN_TYPE.unused) continue;
    if (type === TOKEN_TYPE.control || type === TOKEN_TYPE.userDefined) {
      added.push({ id, content: text, special: type === TOKEN_TYPE.control });
      // Also a vocabulary entry when its plain text is its byte-level form, as in the original
      // tokenizer.json (merges may build it, and ids map back to it).
      if (toByteLevel(text) === text && !(text in vocab)) vocab[text] = id;
      continue;
    }
    if (type < 0 || type > TOKEN_TYPE.byte) fail(`token ${id} has an unknown type ${type}`);
    if (text in vocab) fail(`token ${JSON.stringify(text)} appears twice (ids ${vocab[text]} and ${id})`);
    vocab[text] = id;
  }

  // A merge joins two vocabulary entries into a third; transformers refuses a file with any other.
  const pairs: Array<[string, string]> = [];
  let dropped = 0;
  for (const m of merges) {
    const at = m.indexOf(' ', 1);
    const a = at < 0 ? m : m.slice(0, at);
    const b = at < 0 ? '' : m.slice(at + 1);
    if (at < 0 || !(a in vocab) || !(b in vocab) || !(a + b in vocab)) dropped++;
    else pairs.push([a, b]);
  }
  if (dropped) warnings.push(`${dropped} of ${merges.length} merges name tokens outside the vocabulary and were left out`);

  const text = (id: number | undefined) => (id === undefined ? null : tokens[id]);
  const single: unknown[] = [];
  const pair: unknown[] = [];
  const specials: Record<string, unknown> = {};
  const piece = (id: number) => ({ SpecialToken: { id: tokens[id], type_id: 0 } });
  if (addBos && bos !== undefined) {
    single.push(piece(bos));
    pair.push(piece(bos));
    specials[tokens[bos]] = { id: tokens[bos], ids: [bos], tokens: [tokens[bos]] };
  }
  single.push({ Sequence: { id: 'A', type_id: 0 } });
  pair.push({ Sequence: { id: 'A', type_id: 0 } });
  if (addEos && eos !== undefined) {
    single.push(piece(eos));
    pair.push(piece(eos));
    specials[tokens[eos]] = { id: tokens[eos], ids: [eos], tokens: [tokens[eos]] };
  }
  pair.push({ Sequence: { id: 'B', type_id: 1 } });

  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added.map((t) => ({ ...t, single_word: false, lstrip: false, rstrip: false, normalized: false })),
    normalizer: null,
    pre_tokenizer: preTokenizerJson(pre),
    post_processor:
      Object.keys(specials).length > 0
        ? { type: 'TemplateProcessing', single, pair, special_tokens: specials }
        : { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: pre.ignoreMerges,
      vocab,
      merges: pairs,
    },
  };

  const named = new Set([bos, eos, unk, pad].filter((x) => x !== undefined));
  const additional = added.filter((t) => t.special && !named.has(t.id)).map((t) => t.content);
  const specialTokensMap: Record<string, unknown> = {};
  for (const [key, id] of [
    ['bos_token', bos],
    ['eos_token', eos],
    ['unk_token', unk],
    ['pad_token', pad],
  ] as const)
    if (id !== undefined) specialTokensMap[key] = tokens[id];
  if (additional.length) specialTokensMap.additional_special_tokens = additional;

  const chatTemplate = meta.string('tokenizer.chat_template', 'optional');
  if (chatTemplate === undefined)
    warnings.push('no chat template (tokenizer.chat_template): the gateway cannot serve chat requests for it');
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: addBos,
    add_eos_token: addEos,
    add_prefix_space: false,
    added_tokens_decoder: Object.fromEntries(
      added.map((t) => [
        String(t.id),
        { content: t.content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: t.special },
      ]),
    ),
    additional_special_tokens: additional,
    bos_token: text(bos),
    eos_token: text(eos),
    pad_token: text(pad),
    unk_token: text(unk),
    ...(chatTemplate !== undefined ? { chat_template: chatTemplate } : {}),
    clean_up_tokenization_spaces: pre.cleanSpaces,
    model_max_length: opts.contextLength,
    tokenizer_class: 'PreTrainedTokenizerFast',
  };

  // generation_config's eos_token_id lists every id that ends generation (the end of turn too).
  const stops = [...new Set([eos, eot, eom].filter((x): x is number => x !== undefined))];
  const generationConfig: Record<string, unknown> = {};
  if (bos !== undefined) generationConfig.bos_token_id = bos;
  if (stops.length) generationConfig.eos_token_id = stops.length === 1 ? stops[0] : stops;
  if (pad !== undefined) generationConfig.pad_token_id = pad;

  return {
    tokenizerJson,
    tokenizerConfig,
    specialTokensMap,
    generationConfig,
    ids: { bos, eos, pad },
    warnings,
    preTokenizer: pre,
  };
}
