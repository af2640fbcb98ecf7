// A constrained generation across attempts: on the embedded engine a replica failing mid-call is
// replaced and the call resumes inside its grammar; on vLLM (which compiles a grammar from its
// start) it is not resumed: the partial output comes back with finishReason 'abort'.
import { afterAll, describe, expect, it } from 'vitest';
import { generateRequestSchema } from '@anvil/contracts';
import { toolCallGrammar } from '@anvil/guided-decoding';
import { startVllmFixture, type FixtureServer } from '@anvil/testing';
import { ByteTokenizer, parseAssistantOutput } from '@anvil/tokenizer';
import {
  BackendUnavailableError,
  type BackendGenerateOptions,
  type BackendGenerateRequest,
  type BackendResult,
  type InferenceBackend,
} from '../backends/backend';
import { EmbeddedBackend } from '../backends/embedded-backend';
import { createEngineGenerator } from '../backends/embedded-generator';
import { VllmBackend } from '../backends/vllm-backend';
import { testRuntime } from '../testing/test-runtime';

const tok = new ByteTokenizer();
const tools = [
  { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] } },
];
const grammar = toolCallGrammar(tools, { afterName: '", "arguments": ', afterArguments: '}\n</tool_call>' }, null);
const OPENING = '<tool_call>\n{"name": "';
const request = (requestId: string) =>
  generateRequestSchema.parse({
    requestId,
    sessionId: 's',
    promptIds: tok.encode(`<|im_start|>assistant\n${OPENING}`),
    maxTokens: 60,
    seed: 3,
    stopIds: [258],
    constraint: { grammar },
  });

/** An embedded replica whose first attempt breaks off after `after` tokens, as a crashed engine would. */
class BreaksOnce implements InferenceBackend {
  readonly kind = 'embedded' as const;
  readonly vocabSize: number | null = null;
  readonly resumesConstraints = true;
  readonly model = 'breaks-once';
  constructor(
    private readonly inner: EmbeddedBackend,
    readonly id: string,
    private readonly after: number,
    /** Shared by the replicas: only the first attempt of all breaks. */
    private readonly shared: { broken: string | null },
  ) {}
  get broke() {
    return this.shared.broken !== null;
  }
  get inFlight() {
    return this.inner.inFlight;
  }
  async generate(req: BackendGenerateRequest, opts: BackendGenerateOptions = {}): Promise<BackendResult> {
    if (this.broke) return this.inner.generate(req, opts);
    const stop = new AbortController();
    let n = 0;
    await this.inner.generate(req, {
      signal: stop.signal,
      onTokens: (c) => {
        if (n >= this.after) return;
        n += c.ids.length;
        opts.onTokens?.(c);
        if (n >= this.after) stop.abort();
      },
    });
    this.shared.broken = this.id;
    throw new BackendUnavailableError(this.id, 'connection reset');
  }
  health = () => Promise.resolve({ ok: true });
  loadWeights = () => Promise.resolve();
  abortAll = () => this.inner.abortAll();
}

describe('constrained generations across attempts', () => {
  const closers: (() => Promise<unknown>)[] = [];
  afterAll(() => Promise.all(closers.map((c) => c())));

  it('embedded: a replica failing mid-call is replaced and the call resumes inside its grammar', async () => {
    const gen = await createEngineGenerator(undefined, { seed: 1 });
    const inner = new EmbeddedBackend(gen, 'e', 'tiny', () => tok);
    closers.push(() => inner.close());
    const shared = { broken: null as string | null };
    const rt = testRuntime([new BreaksOnce(inner, 'a', 7, shared), new BreaksOnce(inner, 'b', 7, shared)]);
    closers.push(() => rt.stop(0));
    const r = await rt.generation.generate(request('emb'));
    expect(shared.broken).not.toBeNull();
    expect(r.finishReason).toBe('stop');
    const text = OPENING + tok.decode(r.outputIds, { skipSpecialTokens: true });
    expect(
      parseAssistantOutput(text, { format: 'hermes', tools: tools.map((t) => ({ type: 'function' as const, function: t })) }).issues,
    ).toEqual([]);
    expect(r.constrained).toHaveLength(r.outputIds.length);
    expect(r.constrained?.every((m) => m === 1 || m === 2)).toBe(true);
  });

  it('vLLM: a replica failing mid-call ends it with the partial output (a grammar cannot resume there)', async () => {
    const f1: FixtureServer = await startVllmFixture({ vocabSize: 272, tokenLatencyMs: 15 });
    const f2: FixtureServer = await startVllmFixture({ vocabSize: 272, tokenLatencyMs: 15 });
    closers.push(
      () => f1.close(),
      () => f2.close(),
    );
    const rt = testRuntime([new VllmBackend({ url: f1.url }), new VllmBackend({ url: f2.url })]);
    closers.push(() => rt.stop(0));
    const chunks: number[] = [];
    const pending = rt.generation.generate(request('vl'), {
      onChunk: (c) => {
        chunks.push(...c.ids);
        // the replica serving the call dies; the other stays up
        if (chunks.length === 3) void (f1.stats.requests > 0 ? f1 : f2).kill();
      },
    });
    const r = await pending;
    expect(r.finishReason).toBe('abort');
    expect(r.outputIds.length).toBeGreaterThanOrEqual(3);
    expect(r.constrained).toEqual(r.outputIds.map(() => 1));
    expect(f1.stats.requests + f2.stats.requests).toBe(1); // never sent to the other replica to resume
  });
});
