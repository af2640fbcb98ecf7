import { describe, expect, it } from 'vitest';
import { ConstraintCompiler } from '../compiler';
import { ConstraintViolationError } from '../constraint';
import { toolCallGrammar } from '../tool-call';
import { bpeLikeVocabulary, maskIds } from '../testing';
import { Vocabulary } from './vocabulary';

const vocab = bpeLikeVocabulary();
const id = (piece: string) => {
  const v = vocab.ids.get(piece);
  if (v === undefined) throw new Error(`no piece ${piece}`);
  return v;
};
const byte = (b: number) => b;
const IM_END = id('<|im_end|>');
const EOT = id('<|endoftext|>');
const compiler = new ConstraintCompiler(vocab);
const pieces = (ids: number[]) => ids.map((i) => vocab.decode([i]));

describe('token masks over a byte-level vocabulary', () => {
  it('a token is allowed when its bytes keep the grammar alive, however many JSON characters it spans', () => {
    const c = compiler.constraint({ json: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } }, [IM_END]);
    const first = pieces(maskIds(c.allowed()));
    // '{' alone, or pieces that go on into the key ('{"'), but not '{}' (name is required)
    expect(first).toEqual(expect.arrayContaining(['{', '{"']));
    expect(first).not.toContain('{}');
    expect(first).not.toContain('"');
    c.advance(id('{"'));
    expect(pieces(maskIds(c.allowed()))).toEqual(['n', 'name']);
    c.advance(id('name'));
    // '": ' spans the closing quote, the colon and the space; '"}' would end the object too early
    expect(pieces(maskIds(c.allowed()))).toEqual(expect.arrayContaining(['"', '": ']));
    expect(pieces(maskIds(c.allowed()))).not.toContain('"}');
  });

  it('tokens that split a UTF-8 character: allowed when some character they can become is', () => {
    const c = compiler.constraint({ json: { enum: ['é', 'x'] } }, [IM_END]);
    const start = maskIds(c.allowed());
    expect(start).toContain(id('"\u00c3')); // '"' + the first byte of é (latin1 view of the piece)
    expect(start).toContain(byte(0x22));
    c.advance(id('"\u00c3'));
    // now inside é: only its second byte may follow (alone or with the closing quote)
    expect(maskIds(c.allowed())).toEqual([byte(0xa9), id('\u00a9"')].sort((a, b) => a - b));
    c.advance(id('\u00a9"'));
    expect(maskIds(c.allowed())).toEqual([IM_END]);

    // an emoji in three pieces: F0 9F | 8E | 89 "
    const e = compiler.constraint({ json: { type: 'string', maxLength: 1 } }, [IM_END]);
    e.advance(byte(0x22));
    expect(maskIds(e.allowed())).toContain(id('\u00f0\u009f'));
    e.advance(id('\u00f0\u009f'));
    expect(maskIds(e.allowed())).toEqual(expect.arrayContaining([byte(0x8e)]));
    expect(maskIds(e.allowed())).not.toContain(byte(0x41)); // an ASCII byte cannot finish a 4-byte character
    e.advance(byte(0x8e));
    e.advance(id('\u0089"'));
    expect(maskIds(e.allowed())).toEqual([IM_END]);
    // lone continuation bytes and invalid lead bytes are never allowed
    const s = compiler.constraint({ json: { type: 'string' } }, [IM_END]);
    s.advance(byte(0x22));
    const inString = maskIds(s.allowed());
    for (const bad of [0x80, 0xbf, 0xc0, 0xc1, 0xf5, 0xff, 0x0a, 0x01]) expect(inString).not.toContain(bad);
    for (const good of [0x41, 0xc3, 0xe2, 0xf0, 0x5c]) expect(inString).toContain(good);
  });

  it('added tokens in literal text are matched as their own id, never spelled out of bytes', () => {
    const c = compiler.constraint({ seq: [{ text: 'x}\n' }, { text: '</tool_call>' }] }, [IM_END]);
    c.advance(id('x'));
    c.advance(id('}\n'));
    expect(maskIds(c.allowed())).toEqual([id('</tool_call>')]);
    expect(() => c.advance(byte(0x3c))).toThrow(ConstraintViolationError); // '<' as a byte
  });

  it('stop ids only where the grammar is complete; a mask of one id is a forced token', () => {
    const c = compiler.constraint({ json: { const: true } }, [IM_END, EOT]);
    expect(maskIds(c.allowed())).toEqual(expect.arrayContaining([id('t'), id('tr'), id('true')]));
    expect(maskIds(c.allowed())).not.toContain(IM_END);
    c.advance(id('tr'));
    const next = maskIds(c.allowed());
    expect(next).toEqual(expect.arrayContaining([id('ue'), id('u')]));
    c.advance(id('ue'));
    expect(c.accepting).toBe(true);
    expect(maskIds(c.allowed())).toEqual([IM_END, EOT]);
    expect(c.lastAllowedCount).toBe(2);
    c.advance(IM_END);
    expect(c.finished).toBe(true);

    const forced = compiler.constraint({ seq: [{ text: 'x' }] }, [IM_END]);
    expect(maskIds(forced.allowed())).toEqual([id('x')]);
    expect(forced.lastAllowedCount).toBe(1);
  });

  it('the budget: near the end of max tokens only tokens that still let the call finish (and stop) are allowed', () => {
    const grammar = { json: { type: 'object', properties: { s: { type: 'string' } }, required: ['s'] } };
    const c = compiler.constraint(grammar, [IM_END]);
    for (const p of ['{"', 's', '": ', '"']) c.advance(id(p));
    // Two bytes ('"' and '}') close the string and the object, then the stop id: counted a token per byte (the
    // worst case), a token that keeps the string open needs 4 tokens left (this one included); with 3 only a
    // token that closes the string fits, with 2 only one that closes both.
    expect(maskIds(c.allowed(4))).toContain(id('x'));
    const closing = pieces(maskIds(c.allowed(3)));
    expect(closing).toEqual(expect.arrayContaining(['"', '"}', ', "']));
    for (const p of closing) expect(p.endsWith('"') || p.endsWith('"}')).toBe(true);
    const tight = maskIds(c.allowed(2));
    expect(tight).toEqual([id('"}')]);
    expect(maskIds(c.allowed(100))).toEqual(maskIds(c.allowed())); // far from the end: the whole mask
    expect(maskIds(c.allowed()).length).toBeGreaterThan(150);
  });

  it('advance refuses a token the grammar does not allow, and a resumed walk replays what was generated', () => {
    const grammar = toolCallGrammar(
      [{ name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' } } } }],
      {
        afterName: '", "arguments": ',
        afterArguments: '}\n</tool_call>',
      },
      'add',
    );
    const c = compiler.constraint(grammar, [IM_END]);
    expect(() => c.advance(id('{"'))).toThrow(/not allowed/);
    const done = [id('", "arguments": '), id('{"'), id('a": 1'), id('}}'), id('\n'), id('</tool_call>')];
    const resumed = compiler.constraint(grammar, [IM_END], done);
    expect(maskIds(resumed.allowed())).toEqual([IM_END]);
    expect(() => compiler.constraint(grammar, [IM_END], [id('x')])).toThrow(ConstraintViolationError);
  });

  it('ids the tokenizer lacks (a padded model vocabulary) are never allowed; stop ids must be in range', () => {
    const padded = new ConstraintCompiler(new Vocabulary(vocab, vocab.vocabSize + 100));
    const c = padded.constraint({ json: true }, [IM_END]);
    expect(Math.max(...maskIds(c.allowed()))).toBeLessThan(vocab.vocabSize);
    expect(c.allowed().length).toBe(Math.ceil((vocab.vocabSize + 100) / 32));
    expect(() => padded.constraint({ json: true }, [vocab.vocabSize + 100])).toThrow(/outside the vocabulary/);
    expect(() => padded.constraint({ json: true }, [])).toThrow(/stop ids/);
  });
});
