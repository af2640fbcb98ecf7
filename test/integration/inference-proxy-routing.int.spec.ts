import { afterEach, describe, expect, it } from 'vitest';
import { createEvent, type GenerateRequest, type AnyEventEnvelope } from '@anvil/contracts';
import { MemoryBus } from '@anvil/messaging';
import { createLogger } from '@anvil/observability';
import { fixtureGenerate, type FixtureServer, startSglangFixture, startVllmFixture } from '@anvil/testing';
import { type InferenceBackend, SglangBackend, VllmBackend, type InferenceRuntime } from '@anvil/inference-proxy';
import { testRuntime, WeightsPublishedHandler } from '@anvil/inference-proxy/testing';

/**
 * The router, fail-over and weight-swap policies driving the real vLLM / SGLang clients
 * against several engine protocol fixtures.
 */
const fixtures: FixtureServer[] = [];
const runtimes: InferenceRuntime[] = [];
afterEach(async () => {
  await Promise.all(runtimes.splice(0).map((r) => r.stop(0)));
  await Promise.all(fixtures.splice(0).map((f) => f.close().catch(() => undefined)));
});

async function cluster(n: number, opts: { kind?: 'vllm' | 'sglang'; tokenLatencyMs?: number } & Parameters<typeof testRuntime>[1] = {}) {
  const { kind = 'vllm', tokenLatencyMs = 0, ...runtimeOpts } = opts;
  const fs: FixtureServer[] = [];
  for (let i = 0; i < n; i++)
    fs.push(await (kind === 'vllm' ? startVllmFixture({ tokenLatencyMs }) : startSglangFixture({ tokenLatencyMs })));
  fixtures.push(...fs);
  const backends: InferenceBackend[] = fs.map((f) =>
    kind === 'vllm' ? new VllmBackend({ url: f.url }) : new SglangBackend({ url: f.url }),
  );
  const rt = testRuntime(backends, runtimeOpts);
  runtimes.push(rt);
  const byUrl = new Map(fs.map((f) => [f.url, f]));
  return { rt, fs, fixtureOf: (replica: string) => byUrl.get(replica)! };
}

let n = 0;
const request = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({
  requestId: `req-${++n}`,
  sessionId: 'session-1',
  promptIds: [1, 2, 3],
  maxTokens: 8,
  temperature: 1,
  topP: 1,
  topK: 0,
  seed: 1,
  stopIds: [],
  stream: false,
  topLogprobs: 0,
  ...over,
});
const expected = (prompt: number[], maxTokens: number, weights = 'initial') => fixtureGenerate(prompt, { maxTokens, seed: 1, weights });

describe('routing', () => {
  it('keeps a session on one replica and spreads sessions across replicas', async () => {
    const { rt } = await cluster(3);
    const first = await rt.generation.generate(request({ sessionId: 's-a' }));
    for (let i = 0; i < 4; i++) expect((await rt.generation.generate(request({ sessionId: 's-a' }))).replica).toBe(first.replica);
    const used = new Set<string>();
    for (let i = 0; i < 60; i++) used.add((await rt.generation.generate(request({ sessionId: `s-${i}`, maxTokens: 1 }))).replica);
    expect(used.size).toBe(3);
  });

  it("reuses the prefix cache of the session's replica across turns", async () => {
    const { rt } = await cluster(3);
    const t1 = await rt.generation.generate(request({ sessionId: 'chat' }));
    const t2 = await rt.generation.generate(request({ sessionId: 'chat', promptIds: [1, 2, 3, ...t1.outputIds, 42] }));
    expect(t2.cachedPromptTokens).toBe(3 + t1.outputIds.length);
    const snap = rt.snapshot().replicas.find((r) => r.id === t2.replica)!;
    expect(snap.cachedPromptTokens).toBe(t2.cachedPromptTokens);
    expect(snap.prefixCacheHitRate).toBeGreaterThan(0);
  });

  it('falls back to the least-loaded replica when the affine one is over its in-flight limit', async () => {
    const { rt } = await cluster(2, { tokenLatencyMs: 20, maxInFlightPerReplica: 1 });
    const long = rt.generation.generate(request({ sessionId: 'busy', maxTokens: 30 }));
    await new Promise((r) => setTimeout(r, 50));
    const other = await rt.generation.generate(request({ sessionId: 'busy', maxTokens: 2 }));
    const first = await long;
    expect(other.replica).not.toBe(first.replica);
  });

  it('routes around an unhealthy replica and takes it back after it recovers', async () => {
    const { rt, fixtureOf } = await cluster(2);
    const home = (await rt.generation.generate(request({ sessionId: 'h' }))).replica;
    fixtureOf(home).setHealthy(false);
    await rt.monitor.checkAll();
    await rt.monitor.checkAll();
    expect(rt.snapshot().replicas.find((r) => r.id === home)!.healthy).toBe(false);
    const away = await rt.generation.generate(request({ sessionId: 'h' }));
    expect(away.replica).not.toBe(home);
    fixtureOf(home).setHealthy(true);
    await rt.monitor.checkAll();
    expect((await rt.generation.generate(request({ sessionId: 'h' }))).replica).toBe(home);
  });
});

describe('fail-over', () => {
  it.each(['vllm', 'sglang'] as const)('%s: retries on another replica when the chosen one is down before any token', async (kind) => {
    const { rt, fixtureOf } = await cluster(2, { kind });
    const home = (await rt.generation.generate(request({ sessionId: 'f' }))).replica;
    await fixtureOf(home).kill();
    const res = await rt.generation.generate(request({ sessionId: 'f' }));
    expect(res.replica).not.toBe(home);
    expect(res.outputIds).toEqual(expected([1, 2, 3], 8).ids);
    expect(rt.snapshot().replicas.find((r) => r.id === home)!.failures).toBe(1);
  });

  it.each(['vllm', 'sglang'] as const)('%s: resumes mid-stream on another replica from prompt + tokens so far', async (kind) => {
    const { rt, fixtureOf } = await cluster(2, { kind, tokenLatencyMs: 5 });
    const home = rt.router.route('m').replica.id;
    let killed = false;
    const chunks: number[] = [];
    const res = await rt.generation.generate(request({ sessionId: 'm', maxTokens: 40 }), {
      onChunk: (c) => {
        chunks.push(...c.ids);
        if (!killed && chunks.length >= 10) {
          killed = true;
          void fixtureOf(home).kill();
        }
      },
    });
    const full = expected([1, 2, 3], 40);
    expect(res.replica).not.toBe(home);
    expect(res.finishReason).toBe('length');
    // Same weights everywhere: the resumed generation continues exactly where the dead one stopped.
    expect(res.outputIds).toEqual(full.ids);
    expect(res.logprobs).toEqual(full.logprobs);
    expect(chunks).toEqual(full.ids);
    expect(res.versions).toEqual(full.ids.map(() => 0));
  });

  it('fails with no replica left, and returns partial output with abort when it cannot resume', async () => {
    const { rt, fs } = await cluster(1, { tokenLatencyMs: 5 });
    let got = 0;
    const res = await rt.generation.generate(request({ maxTokens: 50 }), {
      onChunk: (c) => {
        got += c.ids.length;
        if (got === 3) void fs[0].kill();
      },
    });
    expect(res.finishReason).toBe('abort');
    expect(res.outputIds.length).toBeGreaterThanOrEqual(3);
    await expect(rt.generation.generate(request())).rejects.toThrow();
  });

  it('a client abort stops the engine generation', async () => {
    const { rt, fs } = await cluster(1, { tokenLatencyMs: 10 });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 60);
    const res = await rt.generation.generate(request({ maxTokens: 500 }), { signal: controller.signal });
    expect(res.finishReason).toBe('abort');
    await expect.poll(() => fs[0].stats.aborted).toBe(1);
  });
});

const published = (version: number, checkpointUri = `/ckpt/v${version}`, id?: string) =>
  createEvent(
    'weights.published',
    {
      version,
      parentVersion: version - 1,
      step: version,
      checkpointId: `ck-${version}`,
      checkpointUri,
      format: 'hf-safetensors',
      sha256: 'a'.repeat(64),
      publishedAt: Date.now(),
    },
    { key: String(version), producer: 'trainer', id },
  );

describe('weight swaps', () => {
  it('drain-then-swap: in-flight generations finish on the old version, later ones get the new one, nothing fails', async () => {
    const { rt, fs } = await cluster(2, { tokenLatencyMs: 5, swapPolicy: 'drain-then-swap' });
    const inflight = [0, 1, 2].map((i) => rt.generation.generate(request({ sessionId: `d-${i}`, maxTokens: 30 })));
    await new Promise((r) => setTimeout(r, 30));
    const swap = rt.swapper.apply({ version: 1, checkpointUri: '/ckpt/v1' });
    await new Promise((r) => setTimeout(r, 5));
    expect(rt.gate.isOpen).toBe(false);
    // Arrives during the drain: waits, then runs on the new weights.
    const during = rt.generation.generate(request({ sessionId: 'd-late', maxTokens: 5 }));
    const before = await Promise.all(inflight);
    for (const res of before) {
      expect(res.finishReason).toBe('length');
      expect(res.versions.every((v) => v === 0)).toBe(true);
      expect(res.outputIds).toEqual(expected([1, 2, 3], 30).ids);
    }
    expect(await swap).toMatchObject({ status: 'activated' });
    const late = await during;
    expect(late.versions).toEqual([1, 1, 1, 1, 1]);
    expect(late.outputIds).toEqual(expected([1, 2, 3], 5, '/ckpt/v1').ids);
    for (const f of fs) expect(f.stats.loads).toEqual(['/ckpt/v1']);
    expect(rt.snapshot()).toMatchObject({ policyVersion: 1, checkpointUri: '/ckpt/v1', swapping: false });
  });

  it.each(['vllm', 'sglang'] as const)(
    '%s abort-and-resume: a generation spanning the swap carries both versions; old tokens keep their logprobs',
    async (kind) => {
      const { rt, fs } = await cluster(2, { kind, tokenLatencyMs: 5, swapPolicy: 'abort-and-resume' });
      let swap: Promise<unknown> | null = null;
      const chunkVersions: number[] = [];
      const res = await rt.generation.generate(request({ sessionId: 'ar', maxTokens: 30 }), {
        onChunk: (c) => {
          chunkVersions.push(...c.versions);
          if (!swap && chunkVersions.length >= 8) swap = rt.swapper.apply({ version: 1, checkpointUri: '/ckpt/v1' });
        },
      });
      await swap;
      const split = res.versions.indexOf(1);
      expect(split).toBeGreaterThanOrEqual(8);
      expect(res.versions.slice(0, split).every((v) => v === 0)).toBe(true);
      expect(res.versions.slice(split).every((v) => v === 1)).toBe(true);
      expect(res.outputIds.length).toBe(30);
      expect(res.finishReason).toBe('length');
      expect(chunkVersions).toEqual(res.versions);
      // Tokens before the switch are exactly what the old weights sampled, with their logprobs...
      const old = expected([1, 2, 3], 30);
      expect(res.outputIds.slice(0, split)).toEqual(old.ids.slice(0, split));
      expect(res.logprobs.slice(0, split)).toEqual(old.logprobs.slice(0, split));
      // ...and the rest continues from prompt + partial output under the new weights.
      const resumed = fixtureGenerate([1, 2, 3, ...res.outputIds.slice(0, split)], { maxTokens: 30 - split, seed: 1, weights: '/ckpt/v1' });
      expect(res.outputIds.slice(split)).toEqual(resumed.ids);
      expect(res.logprobs.slice(split)).toEqual(resumed.logprobs);
      expect(fs.reduce((s, f) => s + f.stats.aborted, 0)).toBe(1);
    },
  );

  it('drain timeout: a generation that outlives it is interrupted and resumed under the new version', async () => {
    const { rt } = await cluster(1, { tokenLatencyMs: 5, swapPolicy: 'drain-then-swap', drainTimeoutMs: 40 });
    const long = rt.generation.generate(request({ maxTokens: 40 }));
    await new Promise((r) => setTimeout(r, 20));
    await rt.swapper.apply({ version: 1, checkpointUri: '/ckpt/v1' });
    const res = await long;
    expect(res.versions[0]).toBe(0);
    expect(res.versions[res.versions.length - 1]).toBe(1);
    expect(res.outputIds.length).toBe(40);
  });

  it('a replica that fails the load is taken out of rotation and resynced when healthy; if none loads nothing changes', async () => {
    const { rt, fs } = await cluster(2);
    await expect(rt.swapper.apply({ version: 1, checkpointUri: 'fail:/ckpt/v1' })).rejects.toThrow(/no replica loaded/);
    expect(rt.versions.current).toBe(0);
    expect(rt.gate.isOpen).toBe(true);
    // One replica down during the swap: it misses the load, is stale, and catches up on recovery.
    fs[1].setHealthy(false);
    await rt.monitor.checkAll();
    await rt.monitor.checkAll();
    await rt.swapper.apply({ version: 2, checkpointUri: '/ckpt/v2' });
    expect(fs[0].stats.loads).toEqual(['/ckpt/v2']);
    expect(fs[1].stats.loads).toEqual([]);
    const stale = rt.snapshot().replicas.find((r) => r.id === fs[1].url)!;
    expect(stale).toMatchObject({ stale: true, routable: false });
    for (let i = 0; i < 10; i++)
      expect((await rt.generation.generate(request({ sessionId: `x${i}`, maxTokens: 1 }))).replica).toBe(fs[0].url);
    fs[1].setHealthy(true);
    await rt.monitor.checkAll();
    expect(fs[1].stats.loads).toEqual(['/ckpt/v2']);
    expect(rt.snapshot().replicas.find((r) => r.id === fs[1].url)).toMatchObject({ stale: false, healthy: true, weightsVersion: 2 });
  });

  it('weights.published: applied once, redelivered and older versions ignored, activation published once', async () => {
    const { rt, fs } = await cluster(2);
    const bus = new MemoryBus();
    const activations: AnyEventEnvelope[] = [];
    const sub = await bus.subscribe({
      group: 'test.activations',
      topics: ['anvil.policy-versions.v1'],
      handler: async (e) => void activations.push(e),
    });
    const handler = new WeightsPublishedHandler(rt.swapper, rt.versions, bus, 'test', createLogger({ service: 't', level: 'error' }));
    const v2 = published(2);
    expect(await handler.handle(v2)).toMatchObject({ status: 'activated' });
    expect(await handler.handle(v2)).toMatchObject({ status: 'ignored' });
    expect(await handler.handle(published(2, '/ckpt/other'))).toMatchObject({ status: 'ignored' });
    expect(await handler.handle(published(1))).toMatchObject({ status: 'ignored' });
    await sub.whenIdle({ timeoutMs: 5_000 });
    for (const f of fs) expect(f.stats.loads).toEqual(['/ckpt/v2']);
    expect(activations.map((e) => e.payload)).toEqual([
      expect.objectContaining({ version: 2, deployment: 'test', swapPolicy: 'drain-then-swap' }),
    ]);
    expect((await rt.generation.generate(request())).versions.every((v) => v === 2)).toBe(true);
    await sub.stop();
    await bus.close();
  });
});
