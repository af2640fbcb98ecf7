// A small byte-level BPE vocabulary for tests, trained here on a few sentences the way GPT-2's
// BPE is trained (most frequent adjacent pair merged first), laid out as a GGUF vocabulary:
// control tokens, the 256 byte tokens, the merged tokens, user-defined tokens, and an unused one.
import { BYTE_TO_CHAR } from '@anvil/tokenizer';
import { kv, type Kv } from './gguf-writer';

export const CHATML_TEMPLATE =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

export const TINY_CORPUS = [
  'The quick brown fox jumps over the lazy dog.',
  'the theory of the thing is that the other thing is there',
  "It's the user's turn; they'll say what they've seen and we'd listen.",
  'Numbers: 12 123 1234 12345 and 2024, 1999, 3.14159.',
  'Counting: 12 123 1234 12345 12 123 1234 12345 12 123 1234 12345 12 123 12',
  'def main():\n    return 42\n\nprint(main())\n',
  'Hello, hello, HELLO! Where is the capital of France? Paris is.',
];

export interface TinyVocab {
  tokens: string[];
  types: number[];
  merges: string[];
  ids: { endoftext: number; imStart: number; imEnd: number; toolCall: number; toolCallEnd: number; unused: number };
}

const GPT2_SPLIT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const utf8 = new TextEncoder();

/** GGUF token types (llama.h). */
const NORMAL = 1;
const CONTROL = 3;
const USER_DEFINED = 4;
const UNUSED = 5;

export function tinyVocab(numMerges = 120, corpus: readonly string[] = TINY_CORPUS): TinyVocab {
  // Words as byte-level symbol sequences, with their counts.
  const words = new Map<string, number>();
  for (const text of corpus)
    for (const w of text.match(GPT2_SPLIT) ?? []) {
      const key = [...utf8.encode(w)].map((b) => BYTE_TO_CHAR[b]).join('\u0000');
      words.set(key, (words.get(key) ?? 0) + 1);
    }
  let seqs = [...words].map(([k, n]) => ({ syms: k.split('\u0000'), n }));
  const merges: string[] = [];
  const merged: string[] = [];
  for (let m = 0; m < numMerges; m++) {
    const counts = new Map<string, number>();
    for (const { syms, n } of seqs)
      for (let i = 0; i + 1 < syms.length; i++) {
        const p = `${syms[i]} ${syms[i + 1]}`;
        counts.set(p, (counts.get(p) ?? 0) + n);
      }
    let best: string | null = null;
    let bestCount = 0;
    for (const [p, c] of counts)
      if (c > bestCount || (c === bestCount && best !== null && p < best)) {
        best = p;
        bestCount = c;
      }
    if (best === null) break;
    const [a, b] = best.split(' ');
    merges.push(best);
    merged.push(a + b);
    seqs = seqs.map(({ syms, n }) => {
      const out: string[] = [];
      for (let i = 0; i < syms.length; i++)
        if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(syms[i]);
      return { syms: out, n };
    });
  }
  const tokens = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', ...BYTE_TO_CHAR, ...merged, '<tool_call>', '</tool_call>', '[PAD0]'];
  const types: number[] = tokens.map((_, i) => (i < 3 ? CONTROL : NORMAL));
  const n = tokens.length;
  types[n - 3] = USER_DEFINED;
  types[n - 2] = USER_DEFINED;
  types[n - 1] = UNUSED;
  return { tokens, types, merges, ids: { endoftext: 0, imStart: 1, imEnd: 2, toolCall: n - 3, toolCallEnd: n - 2, unused: n - 1 } };
}

export interface TokenizerMetadataOptions {
  pre?: string | null;
  chatTemplate?: string | null;
  addBos?: boolean;
  model?: string;
}

/** The tokenizer.* metadata of a GGUF file for this vocabulary (bos <|im_start|>, eos <|im_end|>, like SmolLM2). */
export function tokenizerMetadata(v: TinyVocab, o: TokenizerMetadataOptions = {}): Kv[] {
  const out: Kv[] = [
    kv.str('tokenizer.ggml.model', o.model ?? 'gpt2'),
    kv.strs('tokenizer.ggml.tokens', v.tokens),
    kv.i32s('tokenizer.ggml.token_type', v.types),
    kv.strs('tokenizer.ggml.merges', v.merges),
    kv.u32('tokenizer.ggml.bos_token_id', v.ids.imStart),
    kv.u32('tokenizer.ggml.eos_token_id', v.ids.imEnd),
    kv.u32('tokenizer.ggml.unknown_token_id', v.ids.endoftext),
    kv.u32('tokenizer.ggml.padding_token_id', v.ids.imEnd),
    kv.bool('tokenizer.ggml.add_bos_token', o.addBos ?? false),
  ];
  if (o.pre !== null) out.push(kv.str('tokenizer.ggml.pre', o.pre ?? 'smollm'));
  if (o.chatTemplate !== null) out.push(kv.str('tokenizer.chat_template', o.chatTemplate ?? CHATML_TEMPLATE));
  return out;
}
