/**
 * The shapes every tokenizer and chat format in this lib shares. The gateway only sees these:
 * it cannot tell the built-in byte-level tokenizer from a Hugging Face one.
 */

export interface DecodeOptions {
  /** Leave out tokens flagged special (`<|im_end|>`, ...). Added tokens that are not special (`<tool_call>`) stay. */
  skipSpecialTokens?: boolean;
}

export interface Tokenizer {
  /** Short description for logs: "hf:Qwen2Tokenizer", "byte". */
  readonly name: string;
  /** Highest token id + 1 (the model's embedding may be padded beyond it). */
  readonly vocabSize: number;
  /** Tokens flagged special (content -> id): skipped by `decode(..., { skipSpecialTokens: true })`. */
  readonly specialTokens: ReadonlyMap<string, number>;
  /**
   * Every added token (content -> id), special or not. Written literally in text, each is
   * recognised by `encode` as its single id: chat templates rely on this.
   */
  readonly addedTokens: ReadonlyMap<string, number>;
  /** End-of-sequence ids (generation_config.json's list where present, else tokenizer_config's eos_token). */
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId: number | null;
  readonly padTokenId: number | null;
  /** Text -> ids. Never adds BOS/EOS or any other token that is not in the text. */
  encode(text: string): number[];
  /** Ids -> text. Ids the vocabulary does not have are skipped (as Hugging Face tokenizers do). */
  decode(ids: ArrayLike<number>, options?: DecodeOptions): string;
  tokenToId(token: string): number | undefined;
  idToToken(id: number): string | undefined;
  /**
   * The text `decode(encode(text))` gives back: the normaliser's effect (Qwen: NFC outside added
   * tokens; byte tokenizer: none). Used to compare rendered text with decoded ids.
   */
  normalize(text: string): string;
  /** True for ids flagged special (see `specialTokens`). */
  isSpecial(id: number): boolean;
  /**
   * The bytes this id contributes to decoded text, for byte-level tokenizers (undefined for an
   * unknown id, and for tokenizers whose decoding is not a byte concatenation).
   */
  tokenBytes(id: number): Uint8Array | undefined;
}

/** OpenAI-shaped chat messages, as agents send them. */
export type Role = 'system' | 'user' | 'assistant' | 'tool';

export interface TextPart {
  type: 'text';
  text: string;
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; /** JSON text */ arguments: string };
}

export interface ChatMessage {
  role: Role;
  content?: string | TextPart[] | null;
  /** Assistant only. */
  tool_calls?: ToolCall[] | null;
  /** Tool only. */
  tool_call_id?: string;
  name?: string;
  /** Assistant reasoning (`<think>` block) as vLLM/DeepSeek return it. `reasoning` is accepted too. */
  reasoning_content?: string | null;
  reasoning?: string | null;
}

export interface ToolDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null };
}

export type ToolCallFormat = 'hermes' | 'llama3-json' | 'none';
