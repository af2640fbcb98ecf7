import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Model, verifyCheckpointDigest } from '@anvil/engine';
import { batchEvent } from '../testing/batch-log';
import { loraTestEnv, saveTinyModel, trainerHarness } from '../testing/trainer-harness';

const root = mkdtempSync(join(tmpdir(), 'anvil-trainer-lora-'));
const baseDir = join(root, 'base');
afterAll(() => rmSync(root, { recursive: true, force: true }));
beforeAll(() => saveTinyModel(baseDir, 1));

const loraEnv = (checkpoints: string, extra: Record<string, string> = {}) =>
  loraTestEnv(join(root, checkpoints), baseDir, { TRAINER_LORA_TARGETS: 'q_proj,v_proj,down_proj', ...extra });

const chain = Int32Array.from({ length: 14 }, (_, i) => (i * 37 + 5) % 250);
const parents = Int32Array.from({ length: 14 }, (_, i) => i - 1);
async function logpOf(m: Model): Promise<Float32Array> {
  const r = await m.forward({ tokens: chain, parents });
  r.handle.dispose();
  return r.logp;
}
const maxDiff = (a: Float32Array, b: Float32Array) => a.reduce((d, x, i) => Math.max(d, Math.abs(x - b[i])), 0);

describe('LoRA training', () => {
  it('trains the adapters only (the base stays bit for bit, AdamW holds the adapters), publishes merged weights, checkpoints the adapters with their AdamW state', async () => {
    const h = await trainerHarness(loraEnv('merged', { TRAINER_LORA_DROPOUT: '0.1' }), []);
    await h.trainAll([0, 1, 2].map((s) => batchEvent(s, 10 + s)));
    const base = await Model.load(baseDir);
    h.model.tensors.forEach((t, i) =>
      expect(
        Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).equals(
          Buffer.from(base.tensors[i].data.buffer, base.tensors[i].data.byteOffset, base.tensors[i].data.byteLength),
        ),
        t.name,
      ).toBe(true),
    );
    expect(h.model.lora).toMatchObject({ rank: 4, alpha: 8, dropout: 0.1, targets: ['q_proj', 'v_proj', 'down_proj'] });
    const adapterParams = h.model.loraTensors.reduce((a, t) => a + t.numel, 0);
    expect(h.model.optimizerState().m?.length).toBe(adapterParams);
    expect(h.model.memory().trainableParams).toBe(adapterParams);
    const moved = h.model.loraTensors.filter((t) => t.name.includes('lora_B') && t.data.some((x) => x !== 0));
    expect(moved.length).toBe(h.model.loraTensors.length / 2); // no B is still zero

    // every version is the whole merged model: what the adapted model computes
    const published = h.published();
    expect(published.map((p) => [p.version, p.weights, p.base])).toEqual([
      [1, 'full', undefined],
      [2, 'full', undefined],
      [3, 'full', undefined],
    ]);
    for (const p of published) await verifyCheckpointDigest(p.checkpointUri, p.sha256);
    const merged = await Model.load(published[2].checkpointUri);
    expect(merged.lora).toBeNull();
    expect(maxDiff(await logpOf(merged), await logpOf(h.model))).toBeLessThan(1e-5);
    expect(maxDiff(await logpOf(base), await logpOf(h.model))).toBeGreaterThan(1e-3);

    // the resume point (batch 2) keeps the adapters and their AdamW state beside the merged weights
    const v2 = published[1].checkpointUri;
    for (const f of [
      'config.json',
      'model.safetensors',
      'adapter/adapter_config.json',
      'adapter/adapter_model.safetensors',
      'adapter/adapter_optimizer.safetensors',
    ])
      expect(existsSync(join(v2, f)), f).toBe(true);
    expect(existsSync(join(v2, 'optimizer.safetensors'))).toBe(false);
    const state = JSON.parse(readFileSync(join(v2, 'trainer-state.json'), 'utf8'));
    expect(state).toMatchObject({ version: 2, step: 4, lora: { adapterDir: 'adapter' } });
    expect(JSON.parse(readFileSync(join(v2, 'adapter/adapter_config.json'), 'utf8'))).toMatchObject({
      peft_type: 'LORA',
      r: 4,
      lora_alpha: 8,
      lora_dropout: 0.1,
      target_modules: ['q_proj', 'v_proj', 'down_proj'],
      base_model_name_or_path: resolve(baseDir),
    });
    expect(existsSync(join(published[2].checkpointUri, 'adapter'))).toBe(false); // weight-only versions hold the merged weights only
    base.dispose();
    merged.dispose();
    await h.close();
  });

  it('publishes adapters over the named base: the event says so, and the base with the adapter merged is the trained policy', async () => {
    const h = await trainerHarness(loraEnv('adapter', { TRAINER_PUBLISH_FORMAT: 'adapter' }), []);
    await h.trainAll([0, 1, 2].map((s) => batchEvent(s, 20 + s)));
    const fingerprint = await h.model.baseFingerprint();
    const published = h.published();
    expect(published.map((p) => [p.version, p.weights, p.base])).toEqual(
      [1, 2, 3].map((v) => [v, 'lora-adapter', { checkpointUri: resolve(baseDir), fingerprint }]),
    );
    for (const p of published) {
      await verifyCheckpointDigest(p.checkpointUri, p.sha256);
      expect(existsSync(join(p.checkpointUri, 'adapter_config.json')) && !existsSync(join(p.checkpointUri, 'config.json'))).toBe(true);
      // only the resume point (version 2) carries AdamW's state
      expect(existsSync(join(p.checkpointUri, 'adapter_optimizer.safetensors')), `v${p.version}`).toBe(p.version === 2);
    }
    const applied = await Model.load(published[2].base!.checkpointUri);
    expect(await applied.baseFingerprint()).toBe(published[2].base!.fingerprint);
    await applied.loadAdapter(published[2].checkpointUri);
    await applied.mergeLora();
    expect(maxDiff(await logpOf(applied), await logpOf(h.model))).toBeLessThan(1e-5);
    applied.dispose();
    await h.close();
  });

  it('a KL penalty with LoRA takes it against the frozen base: a second copy without a gradient arena, equal to the base', async () => {
    const h = await trainerHarness(loraEnv('kl', { TRAINER_KL_COEF: '0.5' }), []);
    const reference = h.reference as Model;
    expect(reference).not.toBeNull();
    const base = await Model.load(baseDir);
    expect(Array.from(await logpOf(reference))).toEqual(Array.from(await logpOf(base)));
    expect(reference.memory().gradBytes).toBeLessThan(base.memory().gradBytes / 50);
    await h.trainAll([0, 1, 2].map((s) => batchEvent(s, 50 + s)));
    const kl = h.steps.map((e) => e.reports[0].stats?.klRefK3 ?? Number.NaN);
    expect(kl[0]).toBeLessThan(1e-9); // LoRA starts with B = 0: exactly the base
    expect(kl[2]).toBeGreaterThan(kl[0]);
    expect(Array.from(await logpOf(reference))).toEqual(Array.from(await logpOf(base)));
    base.dispose();
    await h.close();
  });
});
