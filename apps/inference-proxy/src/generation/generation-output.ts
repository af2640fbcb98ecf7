import { TOKEN_CONSTRAINT, type GenerateRequest, type GenerateResponse } from '@anvil/contracts';
import type { FinishReason, TokenChunk, TopLogprobs } from '../backends/backend';

/** Tokens as handed to the caller while a generation runs: each stamped with the policy version it was sampled under. */
export interface StampedChunk {
  ids: number[];
  logprobs: number[];
  versions: number[];
  topLogprobs?: TopLogprobs[];
  /** With a constraint: one TOKEN_CONSTRAINT mark per id. */
  constrained?: number[];
}

/**
 * What one generation has produced across its attempts. Tokens are only appended (a resumed
 * attempt continues after them), so their ids, logprobs and versions are final once handed out.
 */
export class GenerationOutput {
  private readonly ids: number[] = [];
  private readonly logprobs: number[] = [];
  private readonly versions: number[] = [];
  private readonly topLogprobs: TopLogprobs[] | undefined;
  private readonly constrained: number[] | undefined;
  private readonly startedAt = performance.now();
  private firstTokenMs: number | null = null;
  private cachedPromptTokens: number | null = null;
  private lastReplica = '';

  constructor(req: Pick<GenerateRequest, 'topLogprobs' | 'constraint'>) {
    this.topLogprobs = req.topLogprobs > 0 ? [] : undefined;
    this.constrained = req.constraint ? [] : undefined;
  }

  /** Tokens produced so far. */
  get count(): number {
    return this.ids.length;
  }

  /** A copy of the tokens produced so far (what the next attempt continues after). */
  produced(): number[] {
    return [...this.ids];
  }

  /** The replica an attempt now runs on (the response names the last one). */
  attemptedOn(replicaId: string): void {
    this.lastReplica = replicaId;
  }

  /** The prompt tokens an engine served from its prefix cache: the first finished attempt's count is the one reported. */
  promptServed(cachedPromptTokens: number): void {
    if (this.cachedPromptTokens === null) this.cachedPromptTokens = cachedPromptTokens;
  }

  /** Appends an attempt's tokens under `version`; returns them as the caller sees them. */
  append(chunk: TokenChunk, version: number): StampedChunk {
    if (this.firstTokenMs === null && chunk.ids.length > 0)
      this.firstTokenMs = Math.round((performance.now() - this.startedAt) * 1000) / 1000;
    const stamped = chunk.ids.map(() => version);
    this.ids.push(...chunk.ids);
    this.logprobs.push(...chunk.logprobs);
    this.versions.push(...stamped);
    this.topLogprobs?.push(...(chunk.topLogprobs ?? noAlternatives(chunk.ids.length)));
    const marks = this.constrained ? (chunk.constrained ?? chunk.ids.map(() => TOKEN_CONSTRAINT.constrained)) : undefined;
    if (marks) this.constrained?.push(...marks);
    return {
      ids: chunk.ids,
      logprobs: chunk.logprobs,
      versions: stamped,
      ...(this.topLogprobs ? { topLogprobs: chunk.topLogprobs ?? noAlternatives(chunk.ids.length) } : {}),
      ...(marks ? { constrained: marks } : {}),
    };
  }

  response(req: Pick<GenerateRequest, 'requestId' | 'promptIds'>, finishReason: FinishReason): GenerateResponse {
    return {
      requestId: req.requestId,
      outputIds: this.ids,
      logprobs: this.logprobs,
      versions: this.versions,
      finishReason,
      promptTokens: req.promptIds.length,
      cachedPromptTokens: this.cachedPromptTokens ?? 0,
      replica: this.lastReplica,
      firstTokenMs: this.firstTokenMs,
      ...(this.topLogprobs ? { topLogprobs: this.topLogprobs } : {}),
      ...(this.constrained ? { constrained: this.constrained } : {}),
    };
  }
}

/** A backend that gave no alternatives (it does not report them): one empty entry per token keeps the lists aligned. */
const noAlternatives = (n: number): TopLogprobs[] => Array.from({ length: n }, () => ({ ids: [], logprobs: [] }));
