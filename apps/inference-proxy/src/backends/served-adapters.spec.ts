// LoRA adapter versions on vLLM and SGLang, against their protocol fixtures: the base loaded as
// whole weights once, each version's adapter loaded under its own name and named by the requests,
// the previous one unloaded; whole weights afterwards drop the adapter.
import { afterAll, describe, expect, it } from 'vitest';
import { fixtureGenerate, fixtureWeightsWithAdapter, startSglangFixture, startVllmFixture, type FixtureServer } from '@anvil/testing';
import type { InferenceBackend, LoadWeightsRequest, SamplingParams } from './backend';
import { SglangBackend } from './sglang-backend';
import { VllmBackend } from './vllm-backend';

const sampling: SamplingParams = { maxTokens: 6, temperature: 1, topP: 1, topK: 0, seed: 3, stopIds: [] };
const prompt = [5, 6, 7, 8];
const base = { checkpointUri: '/ckpt/base', fingerprint: `sha256:${'1'.repeat(64)}` };
const adapter = (version: number): LoadWeightsRequest => ({
  version,
  checkpointUri: `/ckpt/v${version}`,
  weights: 'lora-adapter',
  base,
});
const expected = (weights: string) => fixtureGenerate(prompt, { maxTokens: 6, seed: 3, weights }).ids;
const generated = async (b: InferenceBackend) =>
  (await b.generate({ requestId: `r${Math.random()}`, promptIds: prompt, sampling })).outputIds;

const engines = [
  ['vLLM', (lora: boolean) => startVllmFixture({ lora }), (url: string) => new VllmBackend({ url, model: 'policy' })],
  ['SGLang', (lora: boolean) => startSglangFixture({ lora }), (url: string) => new SglangBackend({ url })],
] as const;

describe.each(engines)('%s: LoRA adapter versions', (_name, start, backendOf) => {
  const fixtures: FixtureServer[] = [];
  afterAll(() => Promise.all(fixtures.map((f) => f.close())));

  it('loads the base once, then each version as a named adapter the requests use, unloading the previous one', async () => {
    const f = await start(true);
    fixtures.push(f);
    const b = backendOf(f.url);
    expect(await generated(b)).toEqual(expected('initial'));

    await b.loadWeights(adapter(1));
    expect(f.stats.loads).toEqual(['/ckpt/base']);
    expect(f.stats.adapterLoads).toEqual(['anvil-v1=/ckpt/v1']);
    expect(await generated(b)).toEqual(expected(fixtureWeightsWithAdapter('/ckpt/base', '/ckpt/v1')));

    await b.loadWeights(adapter(2));
    expect(f.stats.loads).toEqual(['/ckpt/base']); // the same base: not reloaded
    expect(f.stats.adapterUnloads).toEqual(['anvil-v1']);
    expect([...f.adapters]).toEqual([['anvil-v2', '/ckpt/v2']]);
    expect(await generated(b)).toEqual(expected(fixtureWeightsWithAdapter('/ckpt/base', '/ckpt/v2')));
    // a second load of the same version (a stale replica's resync) changes nothing
    await b.loadWeights(adapter(2));
    expect(f.stats.adapterLoads).toEqual(['anvil-v1=/ckpt/v1', 'anvil-v2=/ckpt/v2']);

    // whole weights: requests name no adapter any more, and the adapter is unloaded
    await b.loadWeights({ version: 3, checkpointUri: '/ckpt/v3' });
    expect(f.stats.loads).toEqual(['/ckpt/base', '/ckpt/v3']);
    expect(f.adapters.size).toBe(0);
    expect(await generated(b)).toEqual(expected('/ckpt/v3'));
    // an adapter after whole weights loads its base again
    await b.loadWeights(adapter(4));
    expect(f.stats.loads).toEqual(['/ckpt/base', '/ckpt/v3', '/ckpt/base']);
    expect(await generated(b)).toEqual(expected(fixtureWeightsWithAdapter('/ckpt/base', '/ckpt/v4')));
  });

  it('an engine without runtime LoRA, or an adapter it cannot load, fails the load with the reason; the served adapter stays', async () => {
    const plain = await start(false);
    fixtures.push(plain);
    await expect(backendOf(plain.url).loadWeights(adapter(1))).rejects.toThrow(/load_lora_adapter .*(404|not enabled)/);

    const f = await start(true);
    fixtures.push(f);
    const b = backendOf(f.url);
    await b.loadWeights(adapter(1));
    await expect(b.loadWeights({ ...adapter(2), checkpointUri: 'fail:/ckpt/v2' })).rejects.toThrow(/load_lora_adapter/);
    expect([...f.adapters]).toEqual([['anvil-v1', '/ckpt/v1']]);
    expect(await generated(b)).toEqual(expected(fixtureWeightsWithAdapter('/ckpt/base', '/ckpt/v1')));
    await expect(b.loadWeights({ ...adapter(5), base: undefined })).rejects.toThrow(/without the base it applies to/);
  });
});
