/** What the vocabulary index needs from a tokenizer (libs/tokenizer's `Tokenizer` has it). */
export interface TokenSource {
  readonly vocabSize: number;
  /** Added tokens (content -> id): always emitted as their own id, so they are symbols here, never bytes. */
  readonly addedTokens: ReadonlyMap<string, number>;
  /** The bytes an id decodes to (byte-level vocabularies); undefined: the id is never allowed. */
  tokenBytes(id: number): Uint8Array | undefined;
}

/**
 * A tokenizer's vocabulary as constrained decoding walks it: the byte strings of its ordinary
 * tokens in a trie (a token is allowed in a state when walking its bytes keeps the automaton
 * alive, and the trie shares that walk between every token with the same prefix), and its added
 * tokens by content. Built once per tokenizer; the trie is stored flat (children of a node are
 * contiguous), which keeps the walk over a 49k vocabulary to a few hundred thousand array reads.
 */
export class Vocabulary {
  /** Bits in a mask: the model's vocabulary, which may be padded beyond the tokenizer's. */
  readonly size: number;
  /** Uint32 words in a mask. */
  readonly words: number;
  /** Added token content -> ids. */
  readonly added: ReadonlyMap<string, readonly number[]>;
  /** Ordinary tokens in the trie. */
  readonly byteTokens: number;
  /** Whether every single byte is a token: then a completion of n bytes takes at most n tokens (the budget guarantee). */
  readonly hasEveryByte: boolean;
  /** Per node: its children are edges [childStart[n], childStart[n + 1]). */
  readonly childStart: Int32Array;
  readonly edgeByte: Uint8Array;
  readonly edgeNode: Int32Array;
  /** Per node: the ids ending there are tokIds[tokStart[n], tokStart[n + 1]). */
  readonly tokStart: Int32Array;
  readonly tokIds: Int32Array;
  private readonly bytesById: (Uint8Array | undefined)[];

  constructor(source: TokenSource, size = source.vocabSize) {
    if (!Number.isInteger(size) || size < source.vocabSize)
      throw new Error(`vocabulary size ${size} is smaller than the tokenizer's ${source.vocabSize}`);
    this.size = size;
    this.words = Math.ceil(size / 32);
    const added = new Map<string, number[]>();
    const addedIds = new Set<number>();
    for (const [content, id] of source.addedTokens) {
      if (id < 0 || id >= size) continue;
      added.set(content, [...(added.get(content) ?? []), id]);
      addedIds.add(id);
    }
    this.added = added;
    this.bytesById = new Array<Uint8Array | undefined>(size);
    const ids: number[] = [];
    for (let id = 0; id < source.vocabSize; id++) {
      if (addedIds.has(id)) continue;
      const b = source.tokenBytes(id);
      if (b === undefined || b.length === 0) continue;
      this.bytesById[id] = b;
      ids.push(id);
    }
    if (ids.length === 0) throw new Error('the tokenizer exposes no token bytes: constrained decoding needs a byte-level vocabulary');
    this.byteTokens = ids.length;
    const singles = new Set(
      ids.filter((id) => (this.bytesById[id] as Uint8Array).length === 1).map((id) => (this.bytesById[id] as Uint8Array)[0]),
    );
    this.hasEveryByte = singles.size === 256;
    const bytes = this.bytesById;
    ids.sort((a, b) => compareBytes(bytes[a] as Uint8Array, bytes[b] as Uint8Array) || a - b);
    // Breadth-first over ranges of the sorted ids that share a prefix of length `depth`.
    const childStart: number[] = [];
    const edgeByte: number[] = [];
    const edgeNode: number[] = [];
    const tokStart: number[] = [];
    const tokIds: number[] = [];
    const queue: { lo: number; hi: number; depth: number }[] = [{ lo: 0, hi: ids.length, depth: 0 }];
    for (let n = 0; n < queue.length; n++) {
      const { lo, hi, depth } = queue[n];
      let i = lo;
      tokStart.push(tokIds.length);
      while (i < hi && (bytes[ids[i]] as Uint8Array).length === depth) tokIds.push(ids[i++]);
      childStart.push(edgeByte.length);
      while (i < hi) {
        const byte = (bytes[ids[i]] as Uint8Array)[depth];
        let j = i;
        while (j < hi && (bytes[ids[j]] as Uint8Array)[depth] === byte) j++;
        edgeByte.push(byte);
        edgeNode.push(queue.length);
        queue.push({ lo: i, hi: j, depth: depth + 1 });
        i = j;
      }
    }
    childStart.push(edgeByte.length);
    tokStart.push(tokIds.length);
    this.childStart = Int32Array.from(childStart);
    this.edgeByte = Uint8Array.from(edgeByte);
    this.edgeNode = Int32Array.from(edgeNode);
    this.tokStart = Int32Array.from(tokStart);
    this.tokIds = Int32Array.from(tokIds);
  }

  /** Trie nodes (the root is 0). */
  get nodes(): number {
    return this.childStart.length - 1;
  }

  /** The bytes of an ordinary token (undefined for added tokens and ids without bytes). */
  bytesOf(id: number): Uint8Array | undefined {
    return this.bytesById[id];
  }

  /** Added token contents, for compiling literal text into symbols. */
  addedContents(): string[] {
    return [...this.added.keys()];
  }
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}
