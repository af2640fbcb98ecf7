import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadHfTokenizerFromDir } from './hf-tokenizer';
import { loadGolden, QWEN3_DIR, randomText, rng } from './testing/qwen3';
import { sentencePieceStyleTokenizer } from './testing/sentencepiece';

// Loaded once for the file: the real Qwen3 tokenizer (11 MB tokenizer.json).
const qwen = loadHfTokenizerFromDir(QWEN3_DIR);
const golden = loadGolden();

describe('HfTokenizer on the real Qwen3 tokenizer', () => {
  it('knows the special tokens of the Qwen2/3 vocabulary', () => {
    expect(qwen.tokenToId('<|endoftext|>')).toBe(151643);
    expect(qwen.tokenToId('<|im_start|>')).toBe(151644);
    expect(qwen.tokenToId('<|im_end|>')).toBe(151645);
    expect(qwen.tokenToId('<tool_call>')).toBe(151657);
    expect(qwen.tokenToId('</tool_call>')).toBe(151658);
    expect(qwen.tokenToId('<think>')).toBe(151667);
    expect(qwen.idToToken(151645)).toBe('<|im_end|>');
    expect(qwen.vocabSize).toBe(151669);
    expect(qwen.eosTokenIds).toEqual([151645]); // tokenizer_config eos_token (no generation_config here)
    expect(qwen.padTokenId).toBe(151643);
    expect(qwen.bosTokenId).toBeNull();
    expect(qwen.byteLevel).toBe(true);
    expect(qwen.name).toBe('hf:Qwen2Tokenizer');
    // <|im_end|> is special; <tool_call> and <think> are added tokens that are not.
    expect(qwen.isSpecial(151645)).toBe(true);
    expect(qwen.isSpecial(151657)).toBe(false);
    expect(qwen.specialTokens.get('<|im_start|>')).toBe(151644);
    expect(qwen.specialTokens.has('<tool_call>')).toBe(false);
    expect(qwen.addedTokens.get('<tool_call>')).toBe(151657);
    expect(qwen.tokenToId('no-such-token-anywhere')).toBeUndefined();
    expect(qwen.idToToken(10_000_000)).toBeUndefined();
  });

  it('encodes known cases: ASCII, digits one by one, whitespace runs, CJK, emoji, code, special tokens', () => {
    expect(qwen.encode('Hello world!')).toEqual([9707, 1879, 0]);
    expect(qwen.encode('12345')).toEqual([16, 17, 18, 19, 20]);
    expect(qwen.encode('abc123def')).toEqual([13683, 16, 17, 18, 750]);
    expect(qwen.encode('\n')).toEqual([198]);
    expect(qwen.encode('  x   y\n\n\tz')).toEqual([220, 856, 256, 379, 271, 20832]);
    expect(qwen.encode('你好，世界')).toEqual([108386, 3837, 99489]);
    expect(qwen.encode('😀👍🏽')).toEqual([141334, 144349, 145375]);
    expect(qwen.encode('def f(x):\n    return x**2')).toEqual([750, 282, 2075, 982, 262, 470, 856, 334, 17]);
    expect(qwen.encode('<|im_start|>user\nhi<|im_end|>')).toEqual([151644, 872, 198, 6023, 151645]);
    expect(qwen.encode('<tool_call>\n{"a":1}\n</tool_call>')).toEqual([151657, 198, 4913, 64, 788, 16, 532, 151658]);
    expect(qwen.encode('<|im_start|><|im_start|>')).toEqual([151644, 151644]);
    expect(qwen.encode('<|im_start')).toEqual([27, 91, 318, 4906]); // not a special token: plain text
    expect(qwen.encode('')).toEqual([]);
    // JavaScript-object keys are ordinary words.
    expect(qwen.encode('constructor')).toEqual([21846]);
    expect(qwen.decode(qwen.encode('__proto__ toString'))).toBe('__proto__ toString');
  });

  it(`encodes exactly as the Rust tokenizers library on ${golden.encode.length} reference strings`, () => {
    const bad: string[] = [];
    for (const { text, ids } of golden.encode) {
      const got = qwen.encode(text);
      if (JSON.stringify(got) !== JSON.stringify(ids)) bad.push(JSON.stringify(text));
    }
    expect(bad).toEqual([]);
  });

  it(`decodes exactly as the Rust tokenizers library on ${golden.decode.length} random id sequences (partial UTF-8, specials)`, () => {
    for (const { ids, text, skipped } of golden.decode) {
      expect(qwen.decode(ids)).toBe(text);
      expect(qwen.decode(ids, { skipSpecialTokens: true })).toBe(skipped);
    }
  });

  it('round-trips decode(encode(x)) on a varied corpus and on random unicode strings', () => {
    const corpus = [
      'The quick brown fox jumps over the lazy dog.',
      '    indented\n\t\ttabs\r\n\r\ncrlf   trailing   ',
      'Ünïcödé façade — “quotes” ‘single’ … ½ ∑ ∞ ≠ √',
      '日本語のテキストと中文混合 한국어 텍스트',
      '👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 🇯🇵 regional indicators',
      'const x = { a: [1, 2, 3], b: "s" }; // comment\nfunction f() { return x?.a ?? []; }',
      '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>',
      '\u0000\u0001\u001f\u007f control bytes',
      'x'.repeat(2000),
      '3.14159265358979 1e-10 0xDEADBEEF 1_000_000',
    ];
    for (const s of corpus) expect(qwen.decode(qwen.encode(s))).toBe(s);
    const r = rng(42);
    const literals = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<tool_call>', '</think>'];
    for (let i = 0; i < 300; i++) {
      const s = randomText(r, 60, literals);
      // The normalizer is NFC: text comes back NFC-normalised (normalize() says so).
      expect(qwen.decode(qwen.encode(s))).toBe(s.normalize('NFC'));
      expect(qwen.decode(qwen.encode(s))).toBe(qwen.normalize(s));
    }
  });

  it('normalises like its normalizer (NFC), leaving added tokens alone', () => {
    expect(qwen.normalize('e\u0301<|im_end|>\u0338x')).toBe('\u00e9<|im_end|>\u0338x'); // '>' + U+0338 would compose to U+226F
    expect(qwen.decode(qwen.encode('e\u0301<|im_end|>\u0338x'))).toBe('\u00e9<|im_end|>\u0338x');
  });

  it('recognises every added token written literally, even glued to text', () => {
    for (const [content, id] of qwen.addedTokens) {
      const ids = qwen.encode(`a${content}b`);
      expect(ids).toContain(id);
      expect(qwen.decode(ids)).toBe(`a${content}b`);
    }
  });

  it('skips special tokens (not other added tokens) on request, and unknown ids always', () => {
    const ids = qwen.encode('<|im_start|>assistant\n<think>\nr\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>');
    expect(qwen.decode(ids, { skipSpecialTokens: true })).toBe('assistant\n<think>\nr\n</think>\n\n<tool_call>\n{}\n</tool_call>');
    expect(qwen.decode([9707, 151900, 1879])).toBe('Hello world'); // 151900: in the model's padded embedding, not in the vocabulary
    expect(qwen.tokenBytes(151900)).toBeUndefined();
    expect(Array.from(qwen.tokenBytes(1879) ?? [])).toEqual([...Buffer.from(' world')]);
  });

  it('encodes a long text fast enough for the gateway', () => {
    const text = 'The quick brown fox jumps over the lazy dog. 你好世界 12345\n'.repeat(500);
    const t0 = performance.now();
    const ids = qwen.encode(text);
    const ms = performance.now() - t0;
    expect(qwen.decode(ids)).toBe(text);
    expect(ms).toBeLessThan(5000); // generous bound for slow CI; typically ~100 ms
  });
});

describe('loadHfTokenizerFromDir', () => {
  const dir = mkdtempSync(join(tmpdir(), 'anvil-tok-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('takes EOS ids from generation_config.json when present', () => {
    const tokenizerJson = readFileSync(join(QWEN3_DIR, 'tokenizer.json'));
    writeFileSync(join(dir, 'tokenizer.json'), tokenizerJson);
    writeFileSync(join(dir, 'tokenizer_config.json'), readFileSync(join(QWEN3_DIR, 'tokenizer_config.json')));
    writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: [151645, 151643], pad_token_id: 151643 }));
    const t = loadHfTokenizerFromDir(dir);
    expect(t.eosTokenIds).toEqual([151645, 151643]);
  });

  it('fails clearly without tokenizer.json', () => {
    const empty = mkdtempSync(join(tmpdir(), 'anvil-tok-empty-'));
    try {
      expect(() => loadHfTokenizerFromDir(empty)).toThrow(/no tokenizer\.json/);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

describe('HfTokenizer with a decoder that is not byte-level', () => {
  const sp = sentencePieceStyleTokenizer();

  it('encodes and decodes through the library (byte fallback for unknown characters)', () => {
    expect(sp.byteLevel).toBe(false);
    expect(sp.tokenBytes(5)).toBeUndefined();
    const ids = sp.encode('hello world 😀');
    expect(ids.slice(0, 2)).toEqual([sp.tokenToId('▁hello'), sp.tokenToId('▁world')]);
    expect(sp.decode(ids)).toBe('hello world 😀');
    expect(sp.eosTokenIds).toEqual([2]);
    expect(sp.bosTokenId).toBe(1);
    expect(sp.decode([1, ...ids, 2], { skipSpecialTokens: true })).toBe('hello world 😀');
  });
});
