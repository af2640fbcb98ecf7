import { fileURLToPath } from 'node:url';
import { TOKEN_CONSTRAINT } from '@anvil/contracts';
import { ConstraintCompiler, type GrammarConstraint, type TokenSource } from '@anvil/guided-decoding';
import { BackendRequestError, type BackendConstraint } from './backend';
import type {
  BackendGenerateOptions,
  BackendGenerateRequest,
  BackendHealth,
  BackendResult,
  InferenceBackend,
  LoadWeightsRequest,
} from './backend';
import { mergedAdapterModel } from './embedded-adapters';
import type { EmbeddedGenerator } from './embedded-generator';

/**
 * The native engine in this process as one replica. Tokens stream through onTokens one at a
 * time (the engine samples them one at a time); aborting stops at the next token boundary.
 * Weight loads read the checkpoint directory named by weights.published (the engine clears its
 * prefix cache). Log-probs are those of the engine's sampler: under the distribution each token
 * was sampled from (after temperature / top-k / top-p; the policy's own with temperature 1 and no
 * truncation, and with greedy decoding; with a constraint, under the policy restricted to the
 * allowed ids and renormalised). A request the engine refuses (empty prompt, token
 * outside the vocabulary, prompt beyond the model's positions) is a BackendRequestError (400):
 * another replica would refuse it the same way.
 */
export class EmbeddedBackend implements InferenceBackend {
  readonly kind = 'embedded' as const;
  /** The grammar is replayed over the tokens an earlier attempt generated, so constrained calls resume like any other. */
  readonly resumesConstraints = true;
  private running = 0;
  private readonly controllers = new Set<AbortController>();
  private compiler: ConstraintCompiler | null = null;

  /**
   * `tokenizer`: the served model's vocabulary (its token bytes), which constrained decoding
   * compiles grammars over; loaded on the first constrained request. Null, or a loader that
   * throws: constrained requests are refused (400) with the reason.
   */
  constructor(
    private readonly generator: EmbeddedGenerator,
    readonly id = 'embedded',
    readonly model = id,
    private readonly tokenizer: (() => TokenSource) | null = null,
  ) {}

  get inFlight(): number {
    return this.running;
  }

  get vocabSize(): number {
    return this.generator.vocabSize;
  }

  async generate(req: BackendGenerateRequest, opts: BackendGenerateOptions = {}): Promise<BackendResult> {
    const wantTop = (req.sampling.topLogprobs ?? 0) > 0;
    const constrained = req.constraint ? this.constraint(req.constraint, req.sampling.stopIds) : null;
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
          opts.onTokens?.({
            ids: [id],
            logprobs: [logprob],
            ...(wantTop ? { topLogprobs: [alternatives(top)] } : {}),
            ...(constrained ? { constrained: [constrained.marks[constrained.marks.length - 1]] } : {}),
          }),
        ...(constrained ? { constraint: constrained.engine } : {}),
      });
      return {
        outputIds: r.outputIds,
        logprobs: r.logprobs,
        finishReason: r.finishReason,
        cachedPromptTokens: r.cachedPromptTokens,
        ...(wantTop ? { topLogprobs: r.outputIds.map((_, i) => alternatives(r.topLogprobs?.[i])) } : {}),
        ...(constrained ? { constrained: constrained.marks.slice(0, r.outputIds.length) } : {}),
      };
    } catch (err) {
      throw new BackendRequestError(this.id, 400, (err as Error).message);
    } finally {
      this.running--;
      this.controllers.delete(controller);
      opts.signal?.removeEventListener('abort', forward);
    }
  }

  /**
   * The grammar's walk for one attempt (past the tokens earlier attempts generated), wrapped for
   * the engine: each sampled id is marked forced (the mask allowed only it) or constrained.
   * A grammar that cannot be compiled, or earlier tokens it does not allow, is a 400.
   */
  private constraint(c: BackendConstraint, stopIds: number[]) {
    let walk: GrammarConstraint;
    try {
      walk = this.constraintCompiler().constraint(c.grammar, stopIds, c.generatedIds);
    } catch (err) {
      throw new BackendRequestError(this.id, 400, `constrained decoding: ${(err as Error).message}`);
    }
    const marks: number[] = [];
    let pending: number = TOKEN_CONSTRAINT.constrained;
    return {
      marks,
      engine: {
        allowed: (remaining: number) => {
          const mask = walk.allowed(remaining);
          pending = walk.lastAllowedCount === 1 ? TOKEN_CONSTRAINT.forced : TOKEN_CONSTRAINT.constrained;
          return mask;
        },
        advance: (id: number) => {
          walk.advance(id);
          marks.push(pending);
        },
      },
    };
  }

  /** The compiler over the served vocabulary (rebuilt if a checkpoint changed the model's vocabulary size). */
  private constraintCompiler(): ConstraintCompiler {
    const size = this.generator.vocabSize;
    if (this.compiler && this.compiler.vocab.size === size) return this.compiler;
    if (!this.tokenizer) throw new Error('this replica has no tokenizer to compile grammars over (tokenizer.json next to the checkpoint)');
    const source = this.tokenizer();
    this.compiler = new ConstraintCompiler(source, size);
    return this.compiler;
  }

  async health(): Promise<BackendHealth> {
    return { ok: true, detail: JSON.stringify(this.generator.stats()) };
  }

  /**
   * checkpointUri: a directory path, or a file:// URL of one. A LoRA adapter version is merged into
   * a copy of its base (embedded-adapters.ts) and that model swapped in.
   */
  async loadWeights(req: LoadWeightsRequest): Promise<void> {
    const dir = localPath(req.checkpointUri);
    if (req.weights !== 'lora-adapter') return this.generator.loadCheckpoint(dir);
    if (!req.base) throw new Error(`version ${req.version}: a LoRA adapter without the base it applies to`);
    const merged = await mergedAdapterModel({
      adapterDir: dir,
      base: { dir: localPath(req.base.checkpointUri), fingerprint: req.base.fingerprint },
    });
    await this.generator.loadModel(merged);
  }

  async abortAll(): Promise<void> {
    for (const c of this.controllers) c.abort();
  }

  async close(): Promise<void> {
    await this.abortAll();
    await this.generator.close?.();
  }
}

const localPath = (uri: string) => (uri.startsWith('file://') ? fileURLToPath(uri) : uri);

const alternatives = (top: readonly { id: number; logprob: number }[] | undefined) => ({
  ids: (top ?? []).map((t) => t.id),
  logprobs: (top ?? []).map((t) => t.logprob),
});
