import { loadHfTokenizer, type HfTokenizer } from '../hf-tokenizer';

/** A Llama-2-style tokenizer (Metaspace spaces, BPE with byte fallback), small enough to write here. */
export function sentencePieceStyleTokenizer(): HfTokenizer {
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b;
  let next = 259;
  for (const piece of [
    '▁',
    'h',
    'e',
    'l',
    'o',
    'w',
    'r',
    'd',
    'he',
    'll',
    'hell',
    'hello',
    '▁hello',
    'wo',
    'wor',
    'worl',
    'world',
    '▁world',
    'é',
  ])
    vocab[piece] = next++;
  const merges = [
    ['h', 'e'],
    ['l', 'l'],
    ['he', 'll'],
    ['hell', 'o'],
    ['▁', 'hello'],
    ['w', 'o'],
    ['wo', 'r'],
    ['wor', 'l'],
    ['worl', 'd'],
    ['▁', 'world'],
  ];
  const added = (id: number, content: string) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  });
  return loadHfTokenizer({
    tokenizerJson: {
      version: '1.0',
      added_tokens: [added(0, '<unk>'), added(1, '<s>'), added(2, '</s>')],
      normalizer: {
        type: 'Sequence',
        normalizers: [
          { type: 'Prepend', prepend: '▁' },
          { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
        ],
      },
      pre_tokenizer: null,
      post_processor: null,
      decoder: {
        type: 'Sequence',
        decoders: [
          { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
          { type: 'ByteFallback' },
          { type: 'Fuse' },
          { type: 'Strip', content: ' ', start: 1, stop: 0 },
        ],
      },
      model: {
        type: 'BPE',
        dropout: null,
        unk_token: '<unk>',
        continuing_subword_prefix: null,
        end_of_word_suffix: null,
        fuse_unk: true,
        byte_fallback: true,
        ignore_merges: false,
        vocab,
        merges,
      },
    },
    tokenizerConfig: { bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', tokenizer_class: 'LlamaTokenizer' },
  });
}
