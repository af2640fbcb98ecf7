import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BYTE_TO_CHAR, loadChatFormat, loadHfTokenizerFromDir, type HfTokenizer } from '@anvil/tokenizer';
import { importGguf } from './import-gguf';
import { PRE_TOKENIZERS, UnsupportedTokenizerError } from './pre-tokenizers';
import { CHATML_TEMPLATE, hfToGguf, randomCheckpoint, TINY_LLAMA, tinyVocab, type Kv, type TokenizerMetadataOptions } from './testing';

const dir = mkdtempSync(join(tmpdir(), 'gguf-tokenizer-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const vocab = tinyVocab();
const tensors = randomCheckpoint(TINY_LLAMA, vocab.tokens.length, { tie: true });
let n = 0;

async function importWith(tokenizer: TokenizerMetadataOptions = {}, metadata: Kv[] = []) {
  const file = join(dir, `t${++n}.gguf`);
  writeFileSync(file, hfToGguf({ config: TINY_LLAMA, tensors, vocab, tokenizer, metadata }));
  const out = join(dir, `t${n}`);
  const result = await importGguf(file, out);
  return { out, result, tok: loadHfTokenizerFromDir(out) };
}

const readJson = (path: string) => JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;

const STRINGS = [
  'The quick brown fox jumps over the lazy dog.',
  "It's the user's turn; they'll say what THEY'VE seen.",
  'Numbers 12345 and 3.14159, 2024-12-05, 1e-5',
  'def main():\n    return 42\n\n\nprint(main())  # done\n',
  '  leading and trailing   ',
  'tabs\tand\r\nnewlines\n\n',
  'naïve café, Ελληνικά, Русский, 日本語, 한국어, עברית',
  'emoji 😀🎉👍🏽 and ZWJ 👨‍👩‍👧',
  'combining e\u0301 and nbsp\u00a0here',
  '<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n',
  'call <tool_call>{"name": "f", "arguments": {}}</tool_call> now',
  'x'.repeat(100),
  '',
];

/**
 * llama.cpp's BPE tokenization, written out plainly: added tokens are cut out first; the rest is
 * split by each expression in turn (matches and the text between them); each piece becomes its
 * byte-level symbols, which are merged lowest rank first (a piece that is a whole vocabulary entry
 * is taken as is when the pre-tokenizer ignores merges).
 */
function referenceEncode(text: string, pre: string): number[] {
  const spec = PRE_TOKENIZERS.get(pre)!;
  const ids = new Map<string, number>();
  vocab.tokens.forEach((t, i) => vocab.types[i] === 1 && ids.set(t, i));
  const added = vocab.tokens.map((t, i) => [t, i] as const).filter(([, i]) => vocab.types[i] === 3 || vocab.types[i] === 4);
  const rank = new Map(vocab.merges.map((m, i) => [m, i]));
  const out: number[] = [];
  const bpe = (piece: string) => {
    const bl = [...new TextEncoder().encode(piece)].map((b) => BYTE_TO_CHAR[b]).join('');
    if (spec.ignoreMerges && ids.has(bl)) return void out.push(ids.get(bl)!);
    let syms = [...bl];
    for (;;) {
      let best = -1;
      let at = -1;
      for (let i = 0; i + 1 < syms.length; i++) {
        const r = rank.get(`${syms[i]} ${syms[i + 1]}`);
        if (r !== undefined && (best < 0 || r < best)) [best, at] = [r, i];
      }
      if (at < 0) break;
      syms = [...syms.slice(0, at), syms[at] + syms[at + 1], ...syms.slice(at + 2)];
    }
    for (const s of syms) out.push(ids.get(s)!);
  };
  const split = (pieces: string[], re: RegExp) =>
    pieces.flatMap((p) => {
      const res: string[] = [];
      let last = 0;
      for (const m of p.matchAll(re)) {
        if (m.index > last) res.push(p.slice(last, m.index));
        if (m[0].length) res.push(m[0]);
        last = m.index + m[0].length;
      }
      if (last < p.length) res.push(p.slice(last));
      return res;
    });
  const addedRe = new RegExp(added.map(([t]) => t.replace(/[|[\]()\\/.*+?^$]/g, '\\$&')).join('|'), 'g');
  let last = 0;
  const fragments: Array<string | number> = [];
  for (const m of text.matchAll(addedRe)) {
    if (m.index > last) fragments.push(text.slice(last, m.index));
    fragments.push(added.find(([t]) => t === m[0])![1]);
    last = m.index + m[0].length;
  }
  if (last < text.length) fragments.push(text.slice(last));
  for (const f of fragments) {
    if (typeof f === 'number') out.push(f);
    else for (const piece of spec.regexes.reduce((ps, r) => split(ps, new RegExp(r, 'gu')), [f])) bpe(piece);
  }
  return out;
}

/** Where the pieces of an encoding start and end in the text (token boundaries). */
function boundaries(tok: HfTokenizer, text: string): number[] {
  const cuts: number[] = [];
  let at = 0;
  for (const id of tok.encode(text)) cuts.push((at += tok.decode([id]).length));
  return cuts;
}

describe('tokenizer.json rebuilt from a GGUF byte-level BPE vocabulary', () => {
  for (const pre of ['smollm', 'llama-bpe', 'qwen2', 'gpt-2']) {
    it(`${pre}: encodes as llama.cpp's algorithm does, and every string round-trips`, async () => {
      const { tok } = await importWith({ pre });
      let s = 11;
      const rnd = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
      const alphabet = [...'aeiou xyzTHE 0123456789.,;\'"!?()\n\t  éü日本😀-_<>|'];
      const random = Array.from({ length: 150 }, () =>
        Array.from({ length: 1 + Math.floor(rnd() * 30) }, () => alphabet[Math.floor(rnd() * alphabet.length)]).join(''),
      );
      for (const text of [...STRINGS, ...random]) {
        const ids = tok.encode(text);
        expect(ids, JSON.stringify(text)).toEqual(referenceEncode(text, pre));
        expect(tok.decode(ids), JSON.stringify(text)).toBe(text);
      }
    });
  }

  it('splits numbers as the pre-tokenizer says: digit by digit (smollm, qwen2), in threes (llama-bpe), or by the merges (gpt-2)', async () => {
    expect(vocab.merges).toContain('Ġ1 2'); // the vocabulary could merge " 12"
    const cuts = async (pre: string) => boundaries((await importWith({ pre })).tok, ' 12345');
    expect(await cuts('smollm')).toEqual([1, 2, 3, 4, 5, 6]);
    expect(await cuts('qwen2')).toEqual([1, 2, 3, 4, 5, 6]);
    expect((await cuts('llama-bpe')).filter((c) => c === 1 || c === 4 || c === 6)).toEqual([1, 4, 6]);
    expect((await cuts('gpt-2')).length).toBeLessThan(5);
  });

  it('control tokens are special added tokens, user-defined ones plain added tokens, unused ones absent', async () => {
    const { tok, out } = await importWith();
    const { imStart, imEnd, endoftext, toolCall, toolCallEnd } = vocab.ids;
    expect(tok.encode('<|im_start|>user\nhi<|im_end|>')[0]).toBe(imStart);
    expect(tok.encode('<|im_start|>user\nhi<|im_end|>').at(-1)).toBe(imEnd);
    expect(tok.encode('a<tool_call>b</tool_call>')).toEqual([...tok.encode('a'), toolCall, ...tok.encode('b'), toolCallEnd]);
    expect([imStart, imEnd, endoftext].map((id) => tok.isSpecial(id))).toEqual([true, true, true]);
    expect([toolCall, toolCallEnd].map((id) => tok.isSpecial(id))).toEqual([false, false]);
    const ids = tok.encode('<|im_start|>x<tool_call>y<|im_end|>');
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('x<tool_call>y');
    expect(tok.decode(ids)).toBe('<|im_start|>x<tool_call>y<|im_end|>');
    expect(tok.tokenToId('[PAD0]')).toBeUndefined();
    expect(tok.vocabSize).toBe(vocab.tokens.length - 1); // the unused last token is left out

    const tj = readJson(join(out, 'tokenizer.json'));
    expect(tj.added_tokens).toEqual([
      { id: endoftext, content: '<|endoftext|>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false },
      { id: imStart, content: '<|im_start|>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false },
      { id: imEnd, content: '<|im_end|>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false },
      { id: toolCall, content: '<tool_call>', special: false, single_word: false, lstrip: false, rstrip: false, normalized: false },
      { id: toolCallEnd, content: '</tool_call>', special: false, single_word: false, lstrip: false, rstrip: false, normalized: false },
    ]);
    expect(tj.pre_tokenizer).toEqual({
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: '\\p{N}' }, behavior: 'Isolated', invert: false },
        { type: 'Split', pattern: { Regex: PRE_TOKENIZERS.get('smollm')!.regexes[1] }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    });
    expect(tj.decoder).toMatchObject({ type: 'ByteLevel' });
    expect(tj.model).toMatchObject({ type: 'BPE', ignore_merges: false, byte_fallback: false });
    expect((tj.model as { merges: unknown[] }).merges).toHaveLength(vocab.merges.length);
  });

  it('writes tokenizer_config.json (chat template, special tokens), generation_config.json and special_tokens_map.json', async () => {
    const { out } = await importWith();
    const cfg = readJson(join(out, 'tokenizer_config.json'));
    expect(cfg).toMatchObject({
      chat_template: CHATML_TEMPLATE,
      bos_token: '<|im_start|>',
      eos_token: '<|im_end|>',
      pad_token: '<|im_end|>',
      unk_token: '<|endoftext|>',
      add_bos_token: false,
      add_eos_token: false,
      clean_up_tokenization_spaces: false,
      model_max_length: 2048,
      tokenizer_class: 'PreTrainedTokenizerFast',
      additional_special_tokens: [],
    });
    expect((cfg.added_tokens_decoder as Record<string, unknown>)[String(vocab.ids.toolCall)]).toEqual({
      content: '<tool_call>',
      lstrip: false,
      normalized: false,
      rstrip: false,
      single_word: false,
      special: false,
    });
    expect(readJson(join(out, 'generation_config.json'))).toEqual({
      bos_token_id: vocab.ids.imStart,
      eos_token_id: vocab.ids.imEnd,
      pad_token_id: vocab.ids.imEnd,
    });
    expect(readJson(join(out, 'special_tokens_map.json'))).toEqual({
      bos_token: '<|im_start|>',
      eos_token: '<|im_end|>',
      unk_token: '<|endoftext|>',
      pad_token: '<|im_end|>',
    });
  });

  it('the chat format loads: the template renders, and generation stops at the end of turn and end of text', async () => {
    const { out } = await importWith();
    const fmt = loadChatFormat(out);
    const text = fmt.template.render([{ role: 'user', content: 'What is 12 + 7?' }], { addGenerationPrompt: true });
    expect(text).toBe('<|im_start|>user\nWhat is 12 + 7?<|im_end|>\n<|im_start|>assistant\n');
    const ids = fmt.tokenizer.encode(text);
    expect(ids.filter((id) => id === vocab.ids.imStart)).toHaveLength(2);
    expect(fmt.stopTokenIds).toEqual(expect.arrayContaining([vocab.ids.imEnd, vocab.ids.endoftext]));
  });

  it('lists the end-of-turn token beside EOS in generation_config (by tokenizer.ggml.eot_token_id, or by its text as llama.cpp does)', async () => {
    const eosIsEndoftext = [{ key: 'tokenizer.ggml.eos_token_id', type: 4, value: vocab.ids.endoftext } as Kv];
    const byText = await importWith({}, eosIsEndoftext);
    expect(readJson(join(byText.out, 'generation_config.json')).eos_token_id).toEqual([vocab.ids.endoftext, vocab.ids.imEnd]);
    const byKey = await importWith({}, [
      ...eosIsEndoftext,
      { key: 'tokenizer.ggml.eot_token_id', type: 4, value: vocab.ids.toolCallEnd } as Kv,
    ]);
    expect(readJson(join(byKey.out, 'generation_config.json')).eos_token_id).toEqual([vocab.ids.endoftext, vocab.ids.toolCallEnd]);
  });

  it('adds BOS through the post-processor when the GGUF says so', async () => {
    const { out } = await importWith({ pre: 'llama-bpe', addBos: true });
    const tj = readJson(join(out, 'tokenizer.json'));
    expect(tj.post_processor).toMatchObject({
      type: 'TemplateProcessing',
      special_tokens: { '<|im_start|>': { ids: [vocab.ids.imStart] } },
    });
    expect(tj.model).toMatchObject({ ignore_merges: true });
    expect(readJson(join(out, 'tokenizer_config.json')).add_bos_token).toBe(true);
  });

  it("falls back to llama.cpp's default pre-tokenizer without tokenizer.ggml.pre, and says so", async () => {
    const { result, out } = await importWith({ pre: null, chatTemplate: null });
    expect(result.warnings).toEqual([
      'no tokenizer.ggml.pre: the default pre-tokenizer of llama.cpp was used',
      'no chat template (tokenizer.chat_template): the gateway cannot serve chat requests for it',
    ]);
    expect((readJson(join(out, 'tokenizer.json')).pre_tokenizer as { pretokenizers: unknown[] }).pretokenizers).toHaveLength(5);
    expect(readJson(join(out, 'tokenizer_config.json')).chat_template).toBeUndefined();
  });

  it('refuses what it cannot rebuild, with a clear error, writing nothing', async () => {
    const cases: Array<[TokenizerMetadataOptions, Kv[], RegExp]> = [
      [{ pre: 'deepseek-llm' }, [], /pre-tokenizer "deepseek-llm" \(tokenizer.ggml.pre\) is not supported; known: default, llama3/],
      [{ model: 'llama' }, [], /tokenizer model "llama" is not supported: only byte-level BPE .* \(this is a SentencePiece vocabulary\)/],
      [{ model: 't5' }, [], /tokenizer model "t5" is not supported/],
      [{}, [{ key: 'tokenizer.ggml.eos_token_id', type: 4, value: 99999 } as Kv], /tokenizer.ggml.eos_token_id 99999 is not a token id/],
      [{}, [{ key: 'tokenizer.ggml.token_type', type: 9, elementType: 5, value: [1, 2] } as Kv], /\d+ tokens but 2 token types/],
    ];
    for (const [tokenizer, metadata, re] of cases) {
      const file = join(dir, `bad${++n}.gguf`);
      writeFileSync(file, hfToGguf({ config: TINY_LLAMA, tensors, vocab, tokenizer, metadata }));
      const out = join(dir, `bad${n}`);
      const err = await importGguf(file, out).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UnsupportedTokenizerError);
      expect((err as Error).message).toMatch(re);
      expect(() => readFileSync(join(out, 'config.json'))).toThrow(/ENOENT/);
    }
  });
});
