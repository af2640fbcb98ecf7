import { concatBytes } from './byte-level';
import type { DecodeOptions, Tokenizer } from './types';

/**
 * The built-in tiny model's tokenizer: one token per UTF-8 byte, plus a few added tokens.
 *
 * Id layout (vocabulary 272, a multiple of 16):
 *
 * | id | token | special (skipped by skipSpecialTokens) |
 * |---|---|---|
 * | 0..255 | the byte itself | no |
 * | 256 | `<|endoftext|>` | yes |
 * | 257 | `<|im_start|>` | yes |
 * | 258 | `<|im_end|>` (end of turn, the EOS) | yes |
 * | 259 / 260 | `<tool_call>` / `</tool_call>` | no |
 * | 261 / 262 | `<tool_response>` / `</tool_response>` | no |
 * | 263 / 264 | `<think>` / `</think>` | no |
 * | 265..271 | `<|reserved_0|>` .. `<|reserved_6|>` | yes |
 *
 * As in Qwen's vocabulary, the tool-call and reasoning markers are added tokens that are not
 * special, so they survive `skipSpecialTokens` and reach the tool-call parser. `idToToken` spells
 * byte b as the character itself for printable ASCII (0x21..0x7e) and `<0xHH>` otherwise. No
 * normalisation: encode is the UTF-8 of the text, with added tokens cut out wherever they appear.
 */
export const BYTE_VOCAB_SIZE = 272;

export const BYTE_ADDED_TOKENS: ReadonlyArray<{ id: number; content: string; special: boolean }> = [
  { id: 256, content: '<|endoftext|>', special: true },
  { id: 257, content: '<|im_start|>', special: true },
  { id: 258, content: '<|im_end|>', special: true },
  { id: 259, content: '<tool_call>', special: false },
  { id: 260, content: '</tool_call>', special: false },
  { id: 261, content: '<tool_response>', special: false },
  { id: 262, content: '</tool_response>', special: false },
  { id: 263, content: '<think>', special: false },
  { id: 264, content: '</think>', special: false },
  ...Array.from({ length: 7 }, (_, i) => ({ id: 265 + i, content: `<|reserved_${i}|>`, special: true })),
];

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Splits text on literal occurrences of the given tokens (longest first). */
export function addedTokenSplitter(tokens: Iterable<string>): RegExp | null {
  const list = [...tokens].filter((t) => t.length > 0).sort((a, b) => b.length - a.length);
  return list.length === 0 ? null : new RegExp(list.map(escapeRegExp).join('|'), 'g');
}

export class ByteTokenizer implements Tokenizer {
  readonly name = 'byte';
  readonly vocabSize = BYTE_VOCAB_SIZE;
  readonly specialTokens: ReadonlyMap<string, number>;
  readonly addedTokens: ReadonlyMap<string, number>;
  readonly eosTokenIds: readonly number[] = [258, 256];
  readonly bosTokenId = null;
  readonly padTokenId = 256;

  private readonly byId = new Map<number, { content: string; special: boolean; bytes: Uint8Array }>();
  private readonly splitter: RegExp | null;
  private readonly single: Uint8Array[] = Array.from({ length: 256 }, (_, b) => Uint8Array.of(b));

  constructor() {
    const special = new Map<string, number>();
    const added = new Map<string, number>();
    const enc = new TextEncoder();
    for (const t of BYTE_ADDED_TOKENS) {
      added.set(t.content, t.id);
      if (t.special) special.set(t.content, t.id);
      this.byId.set(t.id, { content: t.content, special: t.special, bytes: enc.encode(t.content) });
    }
    this.specialTokens = special;
    this.addedTokens = added;
    this.splitter = addedTokenSplitter(added.keys());
  }

  encode(text: string): number[] {
    const out: number[] = [];
    const enc = new TextEncoder();
    const pushText = (s: string) => {
      for (const b of enc.encode(s)) out.push(b);
    };
    if (this.splitter === null) {
      pushText(text);
      return out;
    }
    let last = 0;
    for (const m of text.matchAll(this.splitter)) {
      const at = m.index ?? 0;
      if (at > last) pushText(text.slice(last, at));
      out.push(this.addedTokens.get(m[0]) as number);
      last = at + m[0].length;
    }
    if (last < text.length) pushText(text.slice(last));
    return out;
  }

  decode(ids: ArrayLike<number>, options: DecodeOptions = {}): string {
    const skip = options.skipSpecialTokens === true;
    const parts: Uint8Array[] = [];
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (skip && this.isSpecial(id)) continue;
      const b = this.tokenBytes(id);
      if (b !== undefined) parts.push(b);
    }
    return new TextDecoder('utf-8', { fatal: false, ignoreBOM: true }).decode(concatBytes(parts));
  }

  tokenBytes(id: number): Uint8Array | undefined {
    if (Number.isInteger(id) && id >= 0 && id < 256) return this.single[id];
    return this.byId.get(id)?.bytes;
  }

  tokenToId(token: string): number | undefined {
    const added = this.addedTokens.get(token);
    if (added !== undefined) return added;
    const m = /^<0x([0-9A-F]{2})>$/.exec(token);
    if (m) return parseInt(m[1], 16);
    if (token.length === 1 && token.charCodeAt(0) > 0x20 && token.charCodeAt(0) < 0x7f) return token.charCodeAt(0);
    return undefined;
  }

  idToToken(id: number): string | undefined {
    if (Number.isInteger(id) && id >= 0 && id < 256) {
      return id > 0x20 && id < 0x7f ? String.fromCharCode(id) : `<0x${id.toString(16).toUpperCase().padStart(2, '0')}>`;
    }
    return this.byId.get(id)?.content;
  }

  normalize(text: string): string {
    return text;
  }

  isSpecial(id: number): boolean {
    return this.byId.get(id)?.special === true;
  }
}
