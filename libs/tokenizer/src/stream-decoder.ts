import type { DecodeOptions, Tokenizer } from './types';

/**
 * Turns a stream of token ids into text deltas for SSE, never emitting a broken UTF-8 sequence:
 * bytes of a character split across tokens are held back until the character is complete.
 *
 * Byte-level tokenizers (tokenBytes defined) go through a streaming UTF-8 decoder, so the
 * concatenated deltas plus `flush()` equal `tokenizer.decode(allIds, options)` exactly (a
 * sequence that can never complete becomes U+FFFD at once, as in one-shot decoding). Other
 * tokenizers use the prefix-window method (decode a short window ending at the new ids, emit
 * the new text once it no longer ends in U+FFFD).
 */
export class StreamDecoder {
  private readonly skip: boolean;
  private readonly utf8 = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
  private readonly byteLevel: boolean;
  // Prefix-window state (non-byte-level tokenizers).
  private readonly ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;
  private emitted = '';

  constructor(
    private readonly tokenizer: Tokenizer,
    options: DecodeOptions = {},
  ) {
    this.skip = options.skipSpecialTokens === true;
    // A tokenizer is byte-level when an ordinary id has bytes (id 0 may be special, try a few).
    let probe = false;
    for (let id = 0; id < Math.min(tokenizer.vocabSize, 512) && !probe; id++) {
      if (!tokenizer.isSpecial(id) && tokenizer.tokenBytes(id) !== undefined) probe = true;
    }
    this.byteLevel = probe;
  }

  /** The text all ids so far decode to (complete characters only). */
  get text(): string {
    return this.emitted;
  }

  /** Feeds one id or several; returns the text that became complete (possibly ''). */
  push(idOrIds: number | ArrayLike<number>): string {
    const list = typeof idOrIds === 'number' ? [idOrIds] : Array.from(idOrIds);
    let delta = '';
    if (this.byteLevel) {
      for (const id of list) {
        if (this.skip && this.tokenizer.isSpecial(id)) continue;
        const b = this.tokenizer.tokenBytes(id);
        if (b !== undefined && b.length > 0) delta += this.utf8.decode(b, { stream: true });
      }
    } else {
      for (const id of list) {
        if (this.skip && this.tokenizer.isSpecial(id)) continue;
        this.ids.push(id);
      }
      delta = this.windowDelta(false);
    }
    this.emitted += delta;
    return delta;
  }

  /** Ends the stream: whatever is held back is emitted (an incomplete character as U+FFFD). */
  flush(): string {
    const delta = this.byteLevel ? this.utf8.decode() : this.windowDelta(true);
    this.emitted += delta;
    return delta;
  }

  private windowDelta(final: boolean): string {
    if (this.ids.length === this.readOffset) return '';
    const prefix = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset));
    const full = this.tokenizer.decode(this.ids.slice(this.prefixOffset));
    if (!final && (full.length <= prefix.length || full.endsWith('\uFFFD'))) return '';
    const delta = full.slice(prefix.length);
    this.prefixOffset = this.readOffset;
    this.readOffset = this.ids.length;
    return delta;
  }
}
