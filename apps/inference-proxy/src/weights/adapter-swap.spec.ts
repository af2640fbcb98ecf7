// weights.published v2 with a LoRA adapter, over the real embedded backend: the proxy checks the
// adapter's checksum, merges it into a copy of the named base (checked against the published
// fingerprint) and swaps the merged model in; each version is applied to the base, not on top of
// the previous one; a refused adapter or base leaves the active weights serving.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { weightsPublished } from '@anvil/contracts/testing';
import type { Model as EngineModel } from '@anvil/engine';
import { MemoryBus } from '@anvil/messaging';
import { createLogger } from '@anvil/observability';
import type { SamplingParams } from '../backends/backend';
import { EmbeddedBackend } from '../backends/embedded-backend';
import { createEngineGenerator } from '../backends/embedded-generator';
import { testRuntime } from '../testing/test-runtime';
import { WeightsPublishedHandler } from './weights-published-handler';

const greedy: SamplingParams = { maxTokens: 16, temperature: 0, topP: 1, topK: 0, seed: 1, stopIds: [] };
const prompt = [10, 20, 30, 40, 50];

describe('weights.published: a LoRA adapter version on the embedded engine', async () => {
  const { Model, checkpointDigest, createGenerator } = await import('@anvil/engine');
  const root = mkdtempSync(join(tmpdir(), 'anvil-adapter-swap-'));
  const baseDir = join(root, 'base');
  const otherDir = join(root, 'other');
  let fingerprint = '';
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  /** An adapter over `base` with random B (so it changes the policy), saved as version `v`; returns the merged model. */
  async function adapterVersion(v: number, seed: number, over = baseDir): Promise<EngineModel> {
    const m = await Model.load(over);
    await m.enableLora({ rank: 4, alpha: 8, targets: ['q_proj', 'v_proj', 'down_proj'], seed });
    let x = seed;
    for (const t of m.loraTensors)
      if (t.name.includes('lora_B'))
        t.data.forEach((_, i) => (t.data[i] = ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31 - 0.5) * 0.5));
    await m.syncToDevice();
    await m.saveAdapter(join(root, `v${v}`), { baseModelNameOrPath: over });
    await m.mergeLora();
    return m;
  }
  const event = async (version: number, sha256?: string, fp?: string) =>
    weightsPublished(version, {
      checkpointUri: join(root, `v${version}`),
      sha256: sha256 ?? (await checkpointDigest(join(root, `v${version}`))),
      weights: 'lora-adapter',
      base: { checkpointUri: baseDir, fingerprint: fp ?? fingerprint },
    });
  /** Greedy tokens and log-probs of a model, through the engine's own generator. */
  async function reference(m: EngineModel) {
    const g = await createGenerator(m);
    const r = await g.generate(prompt, { maxTokens: 16, temperature: 0, seed: 1 });
    await g.close();
    return { ids: r.outputIds, logprobs: r.logprobs };
  }

  beforeAll(async () => {
    for (const [dir, seed] of [
      [baseDir, 3],
      [otherDir, 4],
    ] as const) {
      const m = Model.tiny({ seed });
      await m.save(dir);
      if (dir === baseDir) fingerprint = await m.baseFingerprint();
      m.dispose();
    }
  });

  it('applies each version to the base, checksum and base verified, and generates what the merged model generates', async () => {
    const backend = new EmbeddedBackend(await createEngineGenerator(baseDir, { seed: 0 }));
    const rt = testRuntime([backend]);
    const bus = new MemoryBus();
    const handler = new WeightsPublishedHandler(
      rt.swapper,
      rt.versions,
      bus,
      'test',
      createLogger({ service: 't', level: 'error', sink: () => undefined }),
    );
    const gen = async () => {
      const r = await backend.generate({ requestId: `r${Math.random()}`, promptIds: prompt, sampling: greedy });
      return { ids: r.outputIds, logprobs: r.logprobs };
    };
    const base = await Model.load(baseDir);
    const baseOut = await gen();
    expect(baseOut.ids).toEqual((await reference(base)).ids);

    const merged1 = await adapterVersion(1, 11);
    const merged2 = await adapterVersion(2, 22);
    const want1 = await reference(merged1);
    const want2 = await reference(merged2);
    expect(want1.ids).not.toEqual(baseOut.ids); // the adapter changes the policy

    expect(await handler.handle(await event(1))).toMatchObject({ status: 'activated' });
    const got1 = await gen();
    expect(got1.ids).toEqual(want1.ids);
    got1.logprobs.forEach((lp, i) => expect(Math.abs(lp - want1.logprobs[i])).toBeLessThan(1e-5));
    // version 2 is applied to the base, not on top of version 1
    expect(await handler.handle(await event(2))).toMatchObject({ status: 'activated' });
    expect((await gen()).ids).toEqual(want2.ids);
    expect(rt.versions.loaded).toMatchObject({ version: 2, weights: 'lora-adapter', base: { checkpointUri: baseDir } });

    // a corrupted adapter: refused by its checksum, version 2 keeps serving
    const merged3 = await adapterVersion(3, 33);
    const good3 = await checkpointDigest(join(root, 'v3'));
    const file = join(root, 'v3', 'adapter_model.safetensors');
    const bytes = readFileSync(file);
    bytes[bytes.length - 3] ^= 0xff;
    writeFileSync(file, bytes);
    expect(await handler.handle(await event(3, good3))).toMatchObject({
      status: 'ignored',
      reason: expect.stringContaining('checksum mismatch'),
    });
    // a base whose weights are not the published fingerprint's: no replica loads it
    await expect(handler.handle(await event(3, await checkpointDigest(join(root, 'v3')), `sha256:${'0'.repeat(64)}`))).rejects.toThrow(
      /no replica loaded policy version 3/,
    );
    expect(rt.snapshot().replicas[0]).toMatchObject({
      lastError: expect.stringContaining('holds other weights than the adapter was trained on'),
    });
    // an adapter trained on another base, published over this one: refused by the fingerprint the adapter records
    const foreign = await adapterVersion(4, 44, otherDir);
    await expect(handler.handle(await event(4))).rejects.toThrow(/no replica loaded policy version 4/);
    expect(rt.snapshot().replicas[0].lastError).toMatch(/trained on another base model/);
    expect(rt.versions.current).toBe(2);
    expect((await gen()).ids).toEqual(want2.ids);

    // whole weights after adapters: served as before
    await merged1.save(join(root, 'v5'));
    const full = weightsPublished(5, {
      checkpointUri: join(root, 'v5'),
      sha256: await checkpointDigest(join(root, 'v5')),
      weights: 'full',
    });
    expect(await handler.handle(full)).toMatchObject({ status: 'activated' });
    expect((await gen()).ids).toEqual(want1.ids);
    for (const m of [base, merged1, merged2, merged3, foreign]) m.dispose();
    await rt.stop(0);
    await bus.close();
  });
});
