import type { GenerateRequestInput, TopLogprobs } from '@anvil/contracts';
import type { InferenceProxyClient } from '@anvil/inference-client';
import { linkAbort } from '@anvil/service-kit';
import { StreamDecoder, type Tokenizer } from '@anvil/tokenizer';
import { StopStringMatcher } from './stop-strings';

export interface GenerationResult {
  /** The ids the reply is made of (cut after a stop string, see below). */
  outputIds: number[];
  logprobs: number[];
  versions: number[];
  /** One entry per output id when the request asked for alternatives. */
  topLogprobs?: TopLogprobs[];
  /** With a constraint: one TOKEN_CONSTRAINT mark per output id (1 within a mask, 2 forced). */
  constrained?: number[];
  finishReason: 'stop' | 'length' | 'abort';
  /** Decoded reply text (stop token ids left out, other special tokens kept), ending before a stop string. */
  text: string;
  stoppedByString: boolean;
  /** The stop string that ended the generation (Anthropic's stop_sequence), when one did. */
  stopString?: string;
  promptTokens: number;
  cachedPromptTokens: number;
  firstTokenAt: number | null;
}

/**
 * Runs one generation at the inference-proxy as a token stream and returns exactly what was
 * sampled, with logprobs and per-token policy versions. `onText` sees the decoded text as it
 * grows (for SSE). Stop strings end the generation early: the reply keeps the ids whose text
 * precedes the stop string (when the string starts on a token boundary, which byte-level
 * vocabularies guarantee, the reply's text and ids then agree exactly, so the next turn extends
 * it token-exactly); the rest of the sampled ids are not part of the answered reply.
 *
 * The text keeps special tokens other than the stop ids (which can only end an output): dropping
 * them, as vLLM does by default, would make the agent's echo of the reply differ from what the
 * model sampled, and every later turn a branch instead of a token-exact extension.
 */
export async function runGeneration(opts: {
  client: InferenceProxyClient;
  request: GenerateRequestInput;
  tokenizer: Tokenizer;
  stop: readonly string[];
  signal?: AbortSignal;
  onText?: (text: string) => void;
}): Promise<GenerationResult> {
  const decoder = new StreamDecoder(opts.tokenizer, { skipSpecialTokens: false });
  const hidden = new Set(opts.request.stopIds ?? []);
  if (!opts.onText && opts.stop.length === 0) {
    // Nobody needs the tokens early and nothing may cut the generation short: one JSON answer
    // instead of a token stream (a fraction of the socket writes and reads on both sides).
    const sentAt = Date.now();
    const r = await opts.client.generate(opts.request, { signal: opts.signal });
    const firstTokenAt =
      r.outputIds.length === 0 ? null : typeof r.firstTokenMs === 'number' ? sentAt + Math.round(r.firstTokenMs) : Date.now();
    decoder.push(r.outputIds.filter((id) => !hidden.has(id)));
    decoder.flush();
    return {
      outputIds: r.outputIds,
      logprobs: r.logprobs,
      versions: r.versions,
      ...(r.topLogprobs ? { topLogprobs: r.topLogprobs } : {}),
      ...(r.constrained ? { constrained: r.constrained } : {}),
      finishReason: r.finishReason,
      text: decoder.text,
      stoppedByString: false,
      promptTokens: r.promptTokens,
      cachedPromptTokens: r.cachedPromptTokens,
      firstTokenAt,
    };
  }
  const matcher = new StopStringMatcher(opts.stop);
  const ids: number[] = [];
  const logprobs: number[] = [];
  const versions: number[] = [];
  const top: TopLogprobs[] | undefined = (opts.request.topLogprobs ?? 0) > 0 ? [] : undefined;
  const marks: number[] | undefined = opts.request.constraint ? [] : undefined;
  /** Decoded text length after each id: maps a stop string's position back to ids. */
  const textLengths: number[] = [];
  let firstTokenAt: number | null = null;
  const cancel = new AbortController();
  const link = linkAbort([opts.signal, cancel.signal]);
  const signal = link.signal;
  const stream = opts.client.generateStream(opts.request, { signal });
  let stopAt = -1;
  try {
    for (;;) {
      const next = await stream.next();
      if (next.done) {
        const r = next.value;
        decoder.flush();
        return {
          outputIds: ids,
          logprobs,
          versions,
          ...(top ? { topLogprobs: top } : {}),
          ...(marks ? { constrained: marks } : {}),
          finishReason: r.finishReason,
          text: decoder.text,
          stoppedByString: false,
          promptTokens: r.promptTokens,
          cachedPromptTokens: r.cachedPromptTokens,
          firstTokenAt,
        };
      }
      const chunk = next.value;
      if (firstTokenAt === null && chunk.ids.length > 0) firstTokenAt = Date.now();
      for (let i = 0; i < chunk.ids.length; i++) {
        const before = decoder.text.length;
        if (!hidden.has(chunk.ids[i])) decoder.push(chunk.ids[i]);
        ids.push(chunk.ids[i]);
        logprobs.push(chunk.logprobs[i]);
        versions.push(chunk.versions[i]);
        top?.push(chunk.topLogprobs?.[i] ?? { ids: [], logprobs: [] });
        marks?.push(chunk.constrained?.[i] ?? 1);
        textLengths.push(decoder.text.length);
        if (matcher.active) {
          stopAt = matcher.find(decoder.text, before);
          if (stopAt !== -1) break;
        }
      }
      if (stopAt !== -1) break;
      opts.onText?.(decoder.text);
    }
  } finally {
    // Leaving early (stop string, error, client gone) closes the proxy stream, which aborts the
    // generation there; the stream's own return() releases the connection.
    if (stopAt !== -1 || signal.aborted) cancel.abort();
    await stream.return(undefined as never).catch(() => undefined);
    link.dispose();
  }
  // A stop string at character stopAt: keep the ids whose text ends at or before it.
  let keep = textLengths.findIndex((len) => len > stopAt);
  if (keep === -1) keep = ids.length;
  else if ((keep === 0 ? 0 : textLengths[keep - 1]) !== stopAt) keep += 1; // the stop string starts inside that token
  return {
    outputIds: ids.slice(0, keep),
    logprobs: logprobs.slice(0, keep),
    versions: versions.slice(0, keep),
    ...(top ? { topLogprobs: top.slice(0, keep) } : {}),
    ...(marks ? { constrained: marks.slice(0, keep) } : {}),
    finishReason: 'stop',
    text: decoder.text.slice(0, stopAt),
    stoppedByString: true,
    stopString: opts.stop.find((s) => decoder.text.startsWith(s, stopAt)),
    promptTokens: opts.request.promptIds.length,
    cachedPromptTokens: 0,
    firstTokenAt,
  };
}
