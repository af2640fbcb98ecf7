import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkpointDigest, CheckpointDigestError, verifyCheckpointDigest } from './checkpoint-digest';
import { Model } from './model';

describe('checkpointDigest', () => {
  const root = mkdtempSync(join(tmpdir(), 'anvil-digest-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('is stable for the same weights, changes with one flipped byte, and covers shards', async () => {
    const m = Model.tiny({ seed: 2, config: { vocabSize: 272 } });
    await m.save(join(root, 'a'));
    await m.save(join(root, 'b'));
    await m.save(join(root, 'sharded'), { maxShardBytes: 400_000 });
    const a = await checkpointDigest(join(root, 'a'));
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(await checkpointDigest(join(root, 'b'))).toBe(a);
    const sharded = await checkpointDigest(join(root, 'sharded'));
    const path = join(root, 'b', 'model.safetensors');
    const bytes = readFileSync(path);
    bytes[bytes.length - 1] ^= 1;
    writeFileSync(path, bytes);
    await expect(verifyCheckpointDigest(join(root, 'b'), a)).rejects.toThrow(/checksum mismatch/);
    const shards = readdirSync(join(root, 'sharded')).filter((f) => /^model-\d+-of-\d+\.safetensors$/.test(f));
    expect(shards.length).toBeGreaterThan(1);
    const shard = join(root, 'sharded', shards[1]);
    writeFileSync(shard, readFileSync(shard).subarray(0, 100));
    expect(await checkpointDigest(join(root, 'sharded'))).not.toBe(sharded);
    m.dispose();
  });

  it('covers a LoRA adapter directory: its config and weights', async () => {
    const m = Model.tiny({ seed: 3, config: { vocabSize: 272 } });
    await m.enableLora({ rank: 2, alpha: 4, targets: ['q_proj'] });
    await m.saveAdapter(join(root, 'adapter'), { optimizer: true });
    const d = await checkpointDigest(join(root, 'adapter'));
    writeFileSync(join(root, 'adapter', 'adapter_optimizer.safetensors'), 'resume state is not weights');
    expect(await checkpointDigest(join(root, 'adapter'))).toBe(d);
    const cfg = join(root, 'adapter', 'adapter_config.json');
    writeFileSync(cfg, readFileSync(cfg, 'utf8').replace('"r": 2', '"r":  2'));
    await expect(verifyCheckpointDigest(join(root, 'adapter'), d)).rejects.toThrow(/checksum mismatch/);
    rmSync(join(root, 'adapter', 'adapter_model.safetensors'));
    await expect(checkpointDigest(join(root, 'adapter'))).rejects.toThrow(/no adapter_model.safetensors/);
    m.dispose();
  });

  it('refuses a directory that is not a checkpoint', async () => {
    await expect(checkpointDigest(root)).rejects.toBeInstanceOf(CheckpointDigestError);
  });
});
