import type { InferenceProxyClient, ReplicasReport } from '@anvil/inference-client';
import type { Tokenizer } from '@anvil/tokenizer';

/**
 * Embedding rows a model may have beyond its tokenizer's ids (Hugging Face checkpoints pad the
 * embedding, e.g. Qwen2.5: 151,936 rows for 151,665 ids). Sampled ids in the padding decode to
 * nothing, so the padding must stay a sliver of the vocabulary.
 */
export const vocabPaddingAllowance = (tokenizerVocab: number) => Math.max(128, Math.ceil(tokenizerVocab * 0.005));

/**
 * Why a model of `modelVocab` ids cannot be served through a tokenizer of `tokenizerVocab` ids,
 * or null when it can (or when the engine does not report its vocabulary). Refused: a model
 * with fewer ids than the tokenizer (prompt ids it has no embedding for), or with more than the
 * padding allowance beyond it (ids it samples that decode to nothing).
 */
export function vocabularyMismatch(tokenizerVocab: number, modelVocab: number | null | undefined): string | null {
  if (typeof modelVocab !== 'number') return null;
  if (modelVocab < tokenizerVocab) return `it has ${tokenizerVocab - modelVocab} ids fewer than the tokenizer`;
  const allowance = vocabPaddingAllowance(tokenizerVocab);
  if (modelVocab - tokenizerVocab > allowance)
    return `it has ${modelVocab - tokenizerVocab} ids more than the tokenizer (at most ${allowance} of embedding padding are allowed), which would decode to nothing`;
  return null;
}

/** The served model's vocabulary disagrees with the gateway's tokenizer: serving would answer (near-)empty replies. */
export class VocabularyMismatchError extends Error {
  override readonly name = 'VocabularyMismatchError';
}

/**
 * What the gateway knows of the inference-proxy behind it: whether it answers (the
 * `inference-proxy` readiness check: reachable with a routable replica), and whether the model
 * it serves shares the gateway tokenizer's vocabulary, checked on the first answer. A mismatch
 * is reported once to `onMismatch` (the service exits 78 there) and fails readiness.
 */
export class InferenceProxyProbe {
  private mismatch: VocabularyMismatchError | null = null;
  private verified = false;

  constructor(
    private readonly client: Pick<InferenceProxyClient, 'replicas'>,
    private readonly tokenizer: Pick<Tokenizer, 'name' | 'vocabSize'>,
    private readonly onMismatch: (error: VocabularyMismatchError) => void,
    private readonly timeoutMs = 1_500,
  ) {}

  /** True once a proxy answer has been checked (whatever the outcome). */
  get checked(): boolean {
    return this.verified;
  }

  /** Resolves with the number of routable replicas; rejects, without the proxy's address, when it is unreachable, has none, or serves a mismatched model. */
  async check(): Promise<number> {
    if (this.mismatch) throw this.mismatch;
    let report: ReplicasReport;
    try {
      report = await this.client.replicas({ signal: AbortSignal.timeout(this.timeoutMs) });
    } catch {
      throw new Error('the inference-proxy is unreachable');
    }
    this.verify(report);
    const routable = report.replicas.filter((r) => r.routable).length;
    if (routable === 0) throw new Error(`the inference-proxy has no routable replica (of ${report.replicas.length})`);
    return routable;
  }

  private verify(report: ReplicasReport): void {
    if (this.verified) return;
    this.verified = true;
    for (const r of report.replicas) {
      const modelVocab = typeof r.vocabSize === 'number' ? r.vocabSize : null;
      const why = vocabularyMismatch(this.tokenizer.vocabSize, modelVocab);
      if (!why) continue;
      this.mismatch = new VocabularyMismatchError(
        `the served model's vocabulary (${modelVocab} ids, replica ${r.id}${typeof r.model === 'string' ? `, model ${r.model}` : ''}) disagrees with the gateway tokenizer's (${this.tokenizer.vocabSize} ids, ${this.tokenizer.name}): ${why}`,
      );
      this.onMismatch(this.mismatch);
      throw this.mismatch;
    }
  }
}
