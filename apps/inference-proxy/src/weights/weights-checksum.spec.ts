// weights.published carries the checkpoint's sha256 (engine checkpointDigest): the proxy checks the
// files against it before any replica loads them, over the real embedded backend.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createEvent } from '@anvil/contracts';
import { MemoryBus } from '@anvil/messaging';
import { createLogger } from '@anvil/observability';
import { EmbeddedBackend } from '../backends/embedded-backend';
import { createEngineGenerator } from '../backends/embedded-generator';
import { testRuntime } from '../testing/test-runtime';
import { WeightsPublishedHandler } from './weights-published-handler';

describe('weights.published checksum', async () => {
  const { Model, checkpointDigest } = await import('@anvil/engine');
  const root = mkdtempSync(join(tmpdir(), 'anvil-weights-sha-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  const published = (version: number, dir: string, sha256: string) =>
    createEvent(
      'weights.published',
      {
        version,
        parentVersion: version - 1,
        step: version,
        checkpointId: `v${version}`,
        checkpointUri: dir,
        format: 'hf-safetensors',
        sha256,
        publishedAt: Date.now(),
      },
      { key: String(version), producer: 'test' },
    );

  it('swaps to a checkpoint whose files match, refuses a corrupted one and keeps serving the active weights', async () => {
    const rt = testRuntime([new EmbeddedBackend(await createEngineGenerator(undefined, { seed: 1 }))]);
    const bus = new MemoryBus();
    const handler = new WeightsPublishedHandler(
      rt.swapper,
      rt.versions,
      bus,
      'test',
      createLogger({ service: 't', level: 'error', sink: () => undefined }),
    );
    const m = Model.tiny({ seed: 2 });
    await m.save(join(root, 'v1'));
    await m.save(join(root, 'v2'));
    m.dispose();
    const good = await checkpointDigest(join(root, 'v1'));
    expect(await handler.handle(published(1, join(root, 'v1'), good))).toMatchObject({ status: 'activated' });
    const file = join(root, 'v2', 'model.safetensors');
    const bytes = readFileSync(file);
    bytes[bytes.length - 5] ^= 0xff;
    writeFileSync(file, bytes);
    const outcome = await handler.handle(published(2, join(root, 'v2'), good));
    expect(outcome).toMatchObject({ status: 'ignored', reason: expect.stringContaining('checksum mismatch') });
    expect(rt.versions.current).toBe(1);
    expect(rt.snapshot().replicas[0]).toMatchObject({ weightsVersion: 1 });
    await rt.stop(0);
    await bus.close();
  });
});
