import { describe, expect, it } from 'vitest';
import { ByteTokenizer } from './byte-tokenizer';
import { loadHfTokenizerFromDir } from './hf-tokenizer';
import { StreamDecoder } from './stream-decoder';
import { QWEN3_DIR, randomText, rng } from './testing/qwen3';
import { sentencePieceStyleTokenizer } from './testing/sentencepiece';
import type { Tokenizer } from './types';

const qwen = loadHfTokenizerFromDir(QWEN3_DIR);
const byte = new ByteTokenizer();
const sp = sentencePieceStyleTokenizer();

/** Streams ids one at a time; checks no delta holds a broken character and all deltas add up. */
function streamAll(tok: Tokenizer, ids: number[], skipSpecialTokens = false): string[] {
  const d = new StreamDecoder(tok, { skipSpecialTokens });
  const deltas = ids.map((id) => d.push(id));
  deltas.push(d.flush());
  expect(deltas.join('')).toBe(tok.decode(ids, { skipSpecialTokens }));
  expect(d.text).toBe(deltas.join(''));
  return deltas;
}

describe('StreamDecoder', () => {
  it('holds back the bytes of a character split across tokens (byte tokenizer)', () => {
    const ids = byte.encode('a€😀b');
    const d = new StreamDecoder(byte);
    expect(ids.map((id) => d.push(id))).toEqual(['a', '', '', '€', '', '', '', '😀', 'b']);
    expect(d.flush()).toBe('');
  });

  it('emits U+FFFD at once for bytes that can never complete, and at flush for a cut-off tail', () => {
    const d = new StreamDecoder(byte);
    expect(d.push([0xff])).toBe('\uFFFD');
    expect(d.push([0xe2, 0x82])).toBe('');
    expect(d.flush()).toBe('\uFFFD');
  });

  it('never emits a broken character on Qwen3 ids, and the deltas add up to decode()', () => {
    const r = rng(3);
    for (let i = 0; i < 100; i++) {
      const text = randomText(r, 60, ['<|im_end|>', '<tool_call>', '<think>']);
      const ids = qwen.encode(text);
      for (const skip of [false, true]) {
        const deltas = streamAll(qwen, ids, skip);
        for (const delta of deltas.slice(0, -1)) expect(delta.includes('\uFFFD')).toBe(false);
      }
    }
  });

  it('handles Qwen3 byte tokens that split a CJK character and an emoji', () => {
    // Ids for single bytes: the byte-level spelling of each byte is a token in the vocabulary.
    const bytes = [...Buffer.from('世😀')];
    const ids = bytes.map((b) => qwen.tokenToId(byteSpelling(b)) as number);
    expect(ids.every((id) => Number.isInteger(id))).toBe(true);
    const deltas = streamAll(qwen, ids);
    expect(deltas).toEqual(['', '', '世', '', '', '', '😀', '']);
  });

  it('skips special tokens when asked, streaming the same text as decode()', () => {
    const ids = qwen.encode('<|im_start|>assistant\nHi <tool_call>{}</tool_call><|im_end|>');
    expect(streamAll(qwen, ids, true).join('')).toBe('assistant\nHi <tool_call>{}</tool_call>');
    expect(streamAll(byte, byte.encode('x<|im_end|>'), true).join('')).toBe('x');
  });

  it('works for tokenizers that are not byte-level (prefix window): spaces and byte-fallback emoji', () => {
    const ids = sp.encode('hello world 😀 hello');
    const deltas = streamAll(sp, ids);
    expect(deltas.join('')).toBe('hello world 😀 hello');
    for (const delta of deltas) expect(delta.includes('\uFFFD')).toBe(false);
    expect(deltas).toContain(' world');
  });
});

/** GPT-2 byte-level spelling of a byte (the token string of the single-byte token). */
function byteSpelling(b: number): string {
  const bs: number[] = [];
  for (let x = 0x21; x <= 0x7e; x++) bs.push(x);
  for (let x = 0xa1; x <= 0xac; x++) bs.push(x);
  for (let x = 0xae; x <= 0xff; x++) bs.push(x);
  if (bs.includes(b)) return String.fromCharCode(b);
  let n = 0;
  for (let x = 0; x < 256; x++) {
    if (bs.includes(x)) continue;
    if (x === b) return String.fromCharCode(256 + n);
    n++;
  }
  throw new Error('unreachable');
}
