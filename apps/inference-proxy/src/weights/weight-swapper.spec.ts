import { describe, expect, it } from 'vitest';
import type { BackendGenerateOptions, BackendGenerateRequest, BackendResult, InferenceBackend } from '../backends/backend';
import type { InferenceRuntimeOptions } from '../runtime';
import { testRuntime } from '../testing/test-runtime';

/** A backend that samples one token (id 7) every `tokenMs` until maxTokens or its signal; loads are recorded. */
class PacedBackend implements InferenceBackend {
  readonly id = 'paced';
  readonly kind = 'embedded' as const;
  readonly model = 'paced';
  readonly vocabSize = null;
  inFlight = 0;
  readonly loads: string[] = [];
  constructor(private readonly tokenMs: number) {}

  async generate(req: BackendGenerateRequest, opts: BackendGenerateOptions = {}): Promise<BackendResult> {
    this.inFlight++;
    const ids: number[] = [];
    try {
      while (ids.length < req.sampling.maxTokens) {
        if (opts.signal?.aborted) return { outputIds: ids, logprobs: ids.map(() => -1), finishReason: 'abort', cachedPromptTokens: 0 };
        await new Promise((r) => setTimeout(r, this.tokenMs));
        ids.push(7);
        opts.onTokens?.({ ids: [7], logprobs: [-1] });
      }
      return { outputIds: ids, logprobs: ids.map(() => -1), finishReason: 'length', cachedPromptTokens: 0 };
    } finally {
      this.inFlight--;
    }
  }
  async health() {
    return { ok: true };
  }
  async loadWeights(req: { checkpointUri: string }) {
    this.loads.push(req.checkpointUri);
  }
  async abortAll() {
    // generations stop through their signals
  }
}

const request = (requestId: string, weightSwap?: 'finish' | 'abort-and-resume') => ({
  requestId,
  sessionId: requestId,
  promptIds: [1, 2, 3],
  maxTokens: 30,
  temperature: 1,
  topP: 1,
  topK: 0,
  seed: null,
  stopIds: [],
  stream: false,
  topLogprobs: 0,
  ...(weightSwap ? { weightSwap } : {}),
});

/** Starts one generation per choice, swaps to version 1 once each has produced a few tokens, and returns each one's per-token versions. */
async function swapUnder(policy: InferenceRuntimeOptions['swapPolicy'], choices: ('finish' | 'abort-and-resume' | undefined)[]) {
  const backend = new PacedBackend(10);
  const rt = testRuntime([backend], { swapPolicy: policy });
  const produced = choices.map(() => 0);
  const runs = choices.map((c, i) =>
    rt.generation.generate(request(`r${i}`, c), { onChunk: (chunk) => (produced[i] += chunk.ids.length) }),
  );
  while (produced.some((n) => n < 3)) await new Promise((r) => setTimeout(r, 2));
  const swap = await rt.swapper.apply({ version: 1, checkpointUri: '/ckpt/v1' });
  const results = await Promise.all(runs);
  await rt.stop(0);
  return { swap, versions: results.map((r) => r.versions), lengths: results.map((r) => r.outputIds.length), loads: backend.loads };
}

describe('weight swap: each generation chooses (its session, per task set) whether it finishes or aborts and resumes', () => {
  it('under drain-then-swap, abort-and-resume requests span both versions while finish and unset ones end on the old weights', async () => {
    const { swap, versions, lengths, loads } = await swapUnder('drain-then-swap', ['abort-and-resume', 'finish', undefined]);
    expect(swap).toMatchObject({ status: 'activated' });
    expect(loads).toEqual(['/ckpt/v1']);
    expect(lengths).toEqual([30, 30, 30]);
    // Interrupted at a token boundary: the tokens before the swap keep version 0, the rest are 1.
    expect(versions[0][0]).toBe(0);
    expect(versions[0].at(-1)).toBe(1);
    expect(versions[0].indexOf(1)).toBeGreaterThan(0);
    expect(versions[0].slice(versions[0].indexOf(1)).every((v) => v === 1)).toBe(true);
    // The swap waited for them: every token on the weights they started with.
    expect(versions[1].every((v) => v === 0)).toBe(true);
    expect(versions[2].every((v) => v === 0)).toBe(true);
  });

  it('under abort-and-resume, a finish request still ends on the old weights while unset ones are resumed', async () => {
    const { versions } = await swapUnder('abort-and-resume', ['finish', undefined]);
    expect(versions[0].every((v) => v === 0)).toBe(true);
    expect(versions[1][0]).toBe(0);
    expect(versions[1].at(-1)).toBe(1);
  });
});
