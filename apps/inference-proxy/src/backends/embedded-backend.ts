import { fileURLToPath } from 'node:url';
import { BackendRequestError } from './backend';
import type {
  BackendGenerateOptions,
  BackendGenerateRequest,
  BackendHealth,
  BackendResult,
  InferenceBackend,
  LoadWeightsRequest,
} from './backend';
import type { EmbeddedGenerator } from './embedded-generator';

/**
 * The native engine in this process as one replica. Tokens stream through onTokens one at a
 * time (the engine samples them one at a time); aborting stops at the next token boundary.
 * Weight loads read the checkpoint directory named by weights.published (the engine clears its
 * prefix cache). Log-probs are those of the engine's sampler: under the distribution each token
 * was sampled from (after temperature / top-k / top-p; the policy's own with temperature 1 and no
 * truncation, and with greedy decoding). A request the engine refuses (empty prompt, token
 * outside the vocabulary, prompt beyond the model's positions) is a BackendRequestError (400):
 * another replica would refuse it the same way.
 */
export class EmbeddedBackend implements InferenceBackend {
  readonly kind = 'embedded' as const;
  private running = 0;
  private readonly controllers = new Set<AbortController>();

  constructor(
    private readonly generator: EmbeddedGenerator,
    readonly id = 'embedded',
    readonly model = id,
  ) {}

  get inFlight(): number {
    return this.running;
  }

  get vocabSize(): number {
    return this.generator.vocabSize;
  }

  async generate(req: BackendGenerateRequest, opts: BackendGenerateOptions = {}): Promise<BackendResult> {
    const wantTop = (req.sampling.topLogprobs ?? 0) > 0;
    const controller = new AbortController();
    const forward = () => controller.abort();
    opts.signal?.addEventListener('abort', forward, { once: true });
    if (opts.signal?.aborted) controller.abort();
    this.controllers.add(controller);
    this.running++;
    try {
      // Alternatives (topLogprobs: k) are the engine's k most likely tokens under the policy's raw
      // logits; `logprobs` stay those of the processed distribution each token was sampled from.
      const r = await this.generator.generate(req.promptIds, req.sampling, {
        signal: controller.signal,
        onToken: (id, logprob, _raw, top) =>
          opts.onTokens?.({ ids: [id], logprobs: [logprob], ...(wantTop ? { topLogprobs: [alternatives(top)] } : {}) }),
      });
      return {
        outputIds: r.outputIds,
        logprobs: r.logprobs,
        finishReason: r.finishReason,
        cachedPromptTokens: r.cachedPromptTokens,
        ...(wantTop ? { topLogprobs: r.outputIds.map((_, i) => alternatives(r.topLogprobs?.[i])) } : {}),
      };
    } catch (err) {
      throw new BackendRequestError(this.id, 400, (err as Error).message);
    } finally {
      this.running--;
      this.controllers.delete(controller);
      opts.signal?.removeEventListener('abort', forward);
    }
  }

  async health(): Promise<BackendHealth> {
    return { ok: true, detail: JSON.stringify(this.generator.stats()) };
  }

  /** checkpointUri: a directory path, or a file:// URL of one. */
  loadWeights(req: LoadWeightsRequest): Promise<void> {
    const dir = req.checkpointUri.startsWith('file://') ? fileURLToPath(req.checkpointUri) : req.checkpointUri;
    return this.generator.loadCheckpoint(dir);
  }

  async abortAll(): Promise<void> {
    for (const c of this.controllers) c.abort();
  }

  async close(): Promise<void> {
    await this.abortAll();
    await this.generator.close?.();
  }
}

const alternatives = (top: readonly { id: number; logprob: number }[] | undefined) => ({
  ids: (top ?? []).map((t) => t.id),
  logprobs: (top ?? []).map((t) => t.logprob),
});
