import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Model } from '@anvil/engine';
import { CheckpointError, CheckpointStore } from './checkpoint-store';

async function step(m: Model) {
  const tokens = Int32Array.from({ length: 10 }, (_, i) => (i * 13) % 250);
  const res = await m.forward({ tokens, parents: Int32Array.from({ length: 10 }, (_, i) => i - 1) });
  const d = new Float32Array(10).fill(-0.2);
  d[0] = 0;
  await m.zeroGrad();
  await m.backward(res.handle, d);
  res.handle.dispose();
  await m.step({ lr: 1e-2 });
}

const position = (n: number) => ({ nextBatchStep: n, batchesTrained: n, batchesDropped: 0, lastBatchId: `b${n - 1}` });

describe('CheckpointStore', () => {
  const root = mkdtempSync(join(tmpdir(), 'anvil-ckpt-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('a full checkpoint restores weights, AdamW moments and the data position: the next step equals the uninterrupted one', async () => {
    const store = new CheckpointStore(join(root, 'a'));
    await store.init();
    const m = Model.tiny({ seed: 4, config: { vocabSize: 272 } });
    await step(m);
    await step(m);
    const w = await store.write(m, { runId: 'r', step: 2, version: 2, position: position(2), nonFiniteSkips: 0 }, true);
    expect(w.sha256).toMatch(/^[0-9a-f]{64}$/);
    const latest = await store.latest();
    expect(latest?.state).toMatchObject({ step: 2, version: 2, position: position(2), sha256: w.sha256 });
    const fresh = Model.tiny({ seed: 77, config: { vocabSize: 272 } });
    await store.restoreInto(fresh, latest!.dir);
    expect(fresh.stepCount).toBe(2);
    await step(m);
    await step(fresh);
    m.tensors.forEach((t, i) => expect(Array.from(fresh.tensors[i].data.subarray(0, 64))).toEqual(Array.from(t.data.subarray(0, 64))));
    m.dispose();
    fresh.dispose();
  });

  it("copies the starting checkpoint's tokenizer files, the chat template kept beside them included", async () => {
    const source = join(root, 'source');
    mkdirSync(source, { recursive: true });
    writeFileSync(join(source, 'tokenizer.json'), '{"model": {}}');
    writeFileSync(join(source, 'chat_template.jinja'), '{% for m in messages %}{{ m.content }}{% endfor %}');
    const store = new CheckpointStore(join(root, 'tok'), { tokenizerDir: source });
    await store.init();
    const m = Model.tiny({ seed: 5, config: { vocabSize: 272 } });
    const w = await store.write(m, { runId: 'r', step: 1, version: 1, position: position(1), nonFiniteSkips: 0 }, false);
    expect(readFileSync(join(w.dir, 'chat_template.jinja'), 'utf8')).toBe('{% for m in messages %}{{ m.content }}{% endfor %}');
    expect(readFileSync(join(w.dir, 'tokenizer.json'), 'utf8')).toBe('{"model": {}}');
    expect(existsSync(join(w.dir, 'tokenizer_config.json'))).toBe(false); // absent at the source: not invented
    m.dispose();
  });

  it('crash leftovers are removed, a truncated checkpoint is passed over for the previous one, weight-only versions are pruned', async () => {
    const store = new CheckpointStore(join(root, 'b'), { keepPublished: 2, keepFull: 2 });
    await store.init();
    const m = Model.tiny({ seed: 4, config: { vocabSize: 272 } });
    await store.write(m, { runId: 'r', step: 1, version: 1, position: position(1), nonFiniteSkips: 0 }, true);
    await store.write(m, { runId: 'r', step: 2, version: 2, position: position(2), nonFiniteSkips: 0 }, true);
    for (let v = 3; v <= 6; v++) await store.write(m, { runId: 'r', step: v, version: v, position: position(v), nonFiniteSkips: 0 }, false);
    expect(await store.versions()).toEqual([6, 5, 2, 1]);
    const weights = join(store.dirOf(2), 'model.safetensors');
    writeFileSync(weights, readFileSync(weights).subarray(0, 1000));
    const corrupt: string[] = [];
    const latest = await store.latest((dir) => corrupt.push(dir));
    expect(corrupt).toEqual([store.dirOf(2)]);
    expect(latest?.state.version).toBe(1);
    await expect(store.readState(store.dirOf(2))).rejects.toBeInstanceOf(CheckpointError);
    mkdirSync(join(store.root, '.tmp-crashed'));
    await store.init();
    expect(existsSync(join(store.root, '.tmp-crashed'))).toBe(false);
    m.dispose();
  });
});
