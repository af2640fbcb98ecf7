import { describe, expect, it } from 'vitest';
import { BYTE_ADDED_TOKENS, BYTE_VOCAB_SIZE, ByteTokenizer } from './byte-tokenizer';
import { randomText, rng } from './testing/qwen3';

const tok = new ByteTokenizer();

describe('ByteTokenizer (built-in tiny model)', () => {
  it('has the documented id layout', () => {
    expect(tok.vocabSize).toBe(BYTE_VOCAB_SIZE);
    expect(BYTE_VOCAB_SIZE).toBe(272);
    expect(tok.tokenToId('<|endoftext|>')).toBe(256);
    expect(tok.tokenToId('<|im_start|>')).toBe(257);
    expect(tok.tokenToId('<|im_end|>')).toBe(258);
    expect(tok.tokenToId('<tool_call>')).toBe(259);
    expect(tok.tokenToId('</tool_call>')).toBe(260);
    expect(tok.tokenToId('<tool_response>')).toBe(261);
    expect(tok.tokenToId('</tool_response>')).toBe(262);
    expect(tok.tokenToId('<think>')).toBe(263);
    expect(tok.tokenToId('</think>')).toBe(264);
    expect(tok.idToToken(271)).toBe('<|reserved_6|>');
    expect(tok.idToToken(272)).toBeUndefined();
    expect(BYTE_ADDED_TOKENS.map((t) => t.id)).toEqual(Array.from({ length: 16 }, (_, i) => 256 + i));
    expect(tok.eosTokenIds).toEqual([258, 256]);
    expect(tok.isSpecial(258)).toBe(true);
    expect(tok.isSpecial(259)).toBe(false);
    expect(tok.isSpecial(65)).toBe(false);
    expect(tok.idToToken(65)).toBe('A');
    expect(tok.idToToken(10)).toBe('<0x0A>');
    expect(tok.tokenToId('<0x0A>')).toBe(10);
    expect(tok.tokenToId('A')).toBe(65);
  });

  it('encodes text as UTF-8 bytes and added tokens as their ids', () => {
    expect(tok.encode('hi')).toEqual([104, 105]);
    expect(tok.encode('é')).toEqual([0xc3, 0xa9]);
    expect(tok.encode('<|im_start|>user\nx<|im_end|>')).toEqual([257, 117, 115, 101, 114, 10, 120, 258]);
    expect(tok.encode('a<tool_call>b</tool_call>')).toEqual([97, 259, 98, 260]);
    expect(tok.encode('<|im_start')).toEqual([...Buffer.from('<|im_start')]);
    expect(tok.encode('')).toEqual([]);
  });

  it('decodes, skipping special tokens on request and unknown ids always', () => {
    const ids = tok.encode('<|im_start|>assistant\n<tool_call>{}</tool_call><|im_end|>');
    expect(tok.decode(ids)).toBe('<|im_start|>assistant\n<tool_call>{}</tool_call><|im_end|>');
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('assistant\n<tool_call>{}</tool_call>');
    expect(tok.decode([104, 999, -1, 105])).toBe('hi');
    expect(tok.decode([0xe4, 0xbd])).toBe('\uFFFD'); // incomplete sequence, lossy like HF
  });

  it('round-trips random unicode exactly (no normalisation)', () => {
    const r = rng(7);
    for (let i = 0; i < 500; i++) {
      const s = randomText(r, 80, ['<|im_end|>', '<tool_call>', '<think>', '<|reserved_3|>']);
      expect(tok.decode(tok.encode(s))).toBe(s);
    }
  });
});
