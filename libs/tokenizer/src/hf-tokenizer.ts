import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer as HfJsTokenizer } from '@huggingface/tokenizers';
import { byteLevelTokenBytes, concatBytes } from './byte-level';
import { addedTokenSplitter } from './byte-tokenizer';
import type { DecodeOptions, Tokenizer } from './types';

/** The JSON files of a Hugging Face model directory, already parsed. */
export interface HfTokenizerFiles {
  /** tokenizer.json */
  tokenizerJson: unknown;
  /** tokenizer_config.json (special token names, chat_template). */
  tokenizerConfig?: unknown;
  /** generation_config.json: its eos_token_id (a number or a list) wins over tokenizer_config's eos_token. */
  generationConfig?: unknown;
}

type Json = Record<string, unknown>;

const isObject = (x: unknown): x is Json => typeof x === 'object' && x !== null && !Array.isArray(x);

/** A special-token entry of tokenizer_config.json: a string, or an AddedToken object `{ content }`. */
export function configTokenContent(v: unknown): string | null {
  if (typeof v === 'string') return v;
  if (isObject(v) && typeof v.content === 'string') return v.content;
  return null;
}

const utf8Decoder = () => new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

/**
 * A Hugging Face `tokenizer.json` tokenizer. Encoding runs on @huggingface/tokenizers (checked
 * against the Rust `tokenizers` library on Qwen3's vocabulary: see the golden tests); decoding of
 * byte-level vocabularies (GPT-2, Llama 3, Qwen2/3) is done here from the byte table, exactly as
 * the Rust ByteLevel decoder does (all bytes joined, then lossy UTF-8), which also gives
 * `tokenBytes` for the stream decoder. Other decoders (Metaspace/ByteFallback vocabularies)
 * are delegated to the library.
 */
export class HfTokenizer implements Tokenizer {
  readonly name: string;
  readonly vocabSize: number;
  readonly specialTokens: ReadonlyMap<string, number>;
  readonly addedTokens: ReadonlyMap<string, number>;
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId: number | null;
  readonly padTokenId: number | null;
  /** Whether decoding is a plain byte concatenation (ByteLevel decoder). */
  readonly byteLevel: boolean;
  /** tokenizer_config.json, as given (chat_template, special token names). */
  readonly config: Json;

  private readonly inner: HfJsTokenizer;
  private readonly special = new Set<number>();
  private readonly addedById = new Map<number, string>();
  private readonly bytesCache: Array<Uint8Array | null | undefined>;
  /** Unicode normal forms the normaliser applies, in order (empty: none or not expressible). */
  private readonly normalForms: Array<'NFC' | 'NFD' | 'NFKC' | 'NFKD'>;
  private readonly splitter: RegExp | null;

  constructor(files: HfTokenizerFiles) {
    const tj = files.tokenizerJson;
    if (!isObject(tj) || !isObject(tj.model)) throw new Error('tokenizer.json: expected an object with a "model"');
    const cfg: Json = isObject(files.tokenizerConfig) ? files.tokenizerConfig : {};
    this.config = cfg;
    this.inner = new HfJsTokenizer(tj, cfg);

    const special = new Map<string, number>();
    const added = new Map<string, number>();
    const addedList = Array.isArray(tj.added_tokens) ? tj.added_tokens : [];
    for (const t of addedList) {
      if (!isObject(t) || typeof t.content !== 'string' || typeof t.id !== 'number') continue;
      added.set(t.content, t.id);
      this.addedById.set(t.id, t.content);
      if (t.special === true) {
        special.set(t.content, t.id);
        this.special.add(t.id);
      }
    }
    this.specialTokens = special;
    this.addedTokens = added;

    let maxId = -1;
    const vocab = (tj.model as Json).vocab;
    if (Array.isArray(vocab)) {
      maxId = vocab.length - 1; // Unigram: [[piece, score], ...]
    } else if (isObject(vocab)) {
      for (const id of Object.values(vocab)) if (typeof id === 'number' && id > maxId) maxId = id;
    }
    for (const id of this.addedById.keys()) if (id > maxId) maxId = id;
    this.vocabSize = maxId + 1;
    this.bytesCache = new Array(this.vocabSize);

    this.normalForms = unicodeNormalForms(tj.normalizer);
    this.splitter = addedTokenSplitter(added.keys());
    const decoder = tj.decoder;
    this.byteLevel = isObject(decoder) && decoder.type === 'ByteLevel';

    const idOf = (key: string): number | null => {
      const content = configTokenContent(cfg[key]);
      if (content === null) return null;
      return this.tokenToId(content) ?? null;
    };
    this.bosTokenId = idOf('bos_token');
    this.padTokenId = idOf('pad_token');
    const gen = files.generationConfig;
    let eos: number[] = [];
    if (isObject(gen) && gen.eos_token_id !== undefined && gen.eos_token_id !== null) {
      const v = gen.eos_token_id;
      eos = (Array.isArray(v) ? v : [v]).filter((x): x is number => typeof x === 'number');
    }
    if (eos.length === 0) {
      const id = idOf('eos_token');
      if (id !== null) eos = [id];
    }
    this.eosTokenIds = [...new Set(eos)];
    this.name = `hf:${typeof cfg.tokenizer_class === 'string' ? cfg.tokenizer_class : String((tj.model as Json).type)}`;
  }

  encode(text: string): number[] {
    if (text.length === 0) return [];
    return this.inner.encode(text, { add_special_tokens: false }).ids;
  }

  decode(ids: ArrayLike<number>, options: DecodeOptions = {}): string {
    const skip = options.skipSpecialTokens === true;
    if (!this.byteLevel) {
      const kept: number[] = [];
      for (let i = 0; i < ids.length; i++) {
        const id = ids[i];
        if (this.idToToken(id) === undefined || (skip && this.special.has(id))) continue;
        kept.push(id);
      }
      if (kept.length === 0) return '';
      return this.inner.decode(kept, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    }
    const parts: Uint8Array[] = [];
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (skip && this.special.has(id)) continue;
      const b = this.tokenBytes(id);
      if (b !== undefined) parts.push(b);
    }
    return utf8Decoder().decode(concatBytes(parts));
  }

  tokenBytes(id: number): Uint8Array | undefined {
    if (!this.byteLevel || !Number.isInteger(id) || id < 0 || id >= this.vocabSize) return undefined;
    const cached = this.bytesCache[id];
    if (cached !== undefined) return cached ?? undefined;
    const tok = this.idToToken(id);
    const bytes = tok === undefined ? null : byteLevelTokenBytes(tok);
    this.bytesCache[id] = bytes;
    return bytes ?? undefined;
  }

  normalize(text: string): string {
    if (this.normalForms.length === 0) return text;
    const norm = (s: string) => this.normalForms.reduce((acc, form) => acc.normalize(form), s);
    if (this.splitter === null) return norm(text);
    // Added tokens are cut out before normalisation: normalise the text between them only.
    let out = '';
    let last = 0;
    for (const m of text.matchAll(this.splitter)) {
      const at = m.index ?? 0;
      out += norm(text.slice(last, at)) + m[0];
      last = at + m[0].length;
    }
    return out + norm(text.slice(last));
  }

  tokenToId(token: string): number | undefined {
    const added = this.addedTokens.get(token);
    if (added !== undefined) return added;
    return this.inner.token_to_id(token);
  }

  idToToken(id: number): string | undefined {
    if (!Number.isInteger(id) || id < 0) return undefined;
    return this.addedById.get(id) ?? this.inner.id_to_token(id);
  }

  isSpecial(id: number): boolean {
    return this.special.has(id);
  }
}

/**
 * The Unicode normal forms a tokenizer.json normaliser applies (NFC, or a Sequence of normal
 * forms). Other normalisers (lower-casing, Prepend/Replace of SentencePiece vocabularies) are
 * not reproduced: none is returned, and text is compared as is.
 */
function unicodeNormalForms(normalizer: unknown): Array<'NFC' | 'NFD' | 'NFKC' | 'NFKD'> {
  const forms = ['NFC', 'NFD', 'NFKC', 'NFKD'] as const;
  const one = (n: unknown) => (isObject(n) ? forms.find((f) => f === n.type) : undefined);
  if (!isObject(normalizer)) return [];
  const single = one(normalizer);
  if (single) return [single];
  if (normalizer.type === 'Sequence' && Array.isArray(normalizer.normalizers)) {
    const list = normalizer.normalizers.map(one);
    if (list.every((f) => f !== undefined)) return list as Array<'NFC' | 'NFD' | 'NFKC' | 'NFKD'>;
  }
  return [];
}

/** Builds a tokenizer from parsed tokenizer.json / tokenizer_config.json [/ generation_config.json]. */
export function loadHfTokenizer(files: HfTokenizerFiles): HfTokenizer {
  return new HfTokenizer(files);
}

/** Reads the JSON files of a Hugging Face model directory (tokenizer_config and generation_config are optional). */
export function readHfTokenizerFiles(dir: string): HfTokenizerFiles {
  const read = (name: string): unknown => {
    const p = join(dir, name);
    if (!existsSync(p)) return undefined;
    try {
      return JSON.parse(readFileSync(p, 'utf8'));
    } catch (err) {
      throw new Error(`${p}: ${(err as Error).message}`);
    }
  };
  const tokenizerJson = read('tokenizer.json');
  if (tokenizerJson === undefined) throw new Error(`${dir}: no tokenizer.json`);
  return { tokenizerJson, tokenizerConfig: read('tokenizer_config.json'), generationConfig: read('generation_config.json') };
}

/** Loads the tokenizer of a Hugging Face model directory. */
export function loadHfTokenizerFromDir(dir: string): HfTokenizer {
  return new HfTokenizer(readHfTokenizerFiles(dir));
}
