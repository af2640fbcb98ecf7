import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createEventAt, TOPICS, type AnyEventEnvelope } from '@anvil/contracts';
import { Model, verifyCheckpointDigest } from '@anvil/engine';
import { MemoryBus, silentLogger } from '@anvil/messaging';
import { createLogger } from '@anvil/observability';
import { waitFor } from '@anvil/testing';
import { lossConfig } from '@anvil/rl';
import { CheckpointStore } from './checkpoints/checkpoint-store';
import { TrainerRuntime, type TrainBatchEvent, type TrainerStepEvent } from './runtime';
import { batchEvent, LogSource } from './testing/batch-log';

const logger = createLogger({ service: 'trainer-test', level: 'error' });

const options = {
  runId: 'run',
  settings: { loss: lossConfig(), lr: 1e-3, maxGradNorm: 1, packTokens: 4096, miniBatches: 1 },
  publishEvery: 1,
  checkpointEvery: 2,
  maxNonFiniteSkips: 2,
  initialVersion: 0,
  maxBatches: 0,
  group: 'trainer',
};

async function harness(root: string, log: TrainBatchEvent[], seed = 1) {
  const bus = new MemoryBus({ logger: silentLogger });
  const seen: AnyEventEnvelope[] = [];
  await bus.subscribe({
    group: 'observer',
    topics: [TOPICS.weights, TOPICS.trainBatches],
    fromBeginning: true,
    handler: async (e) => void seen.push(e),
  });
  const model = Model.tiny({ seed, config: { vocabSize: 272 } });
  const steps: TrainerStepEvent[] = [];
  const trainer = new TrainerRuntime(options, {
    bus,
    model,
    store: new CheckpointStore(root),
    batches: new LogSource(log),
    logger,
    onStep: (e) => steps.push(e),
  });
  return { bus, seen, model, trainer, steps };
}

const settle = () => new Promise((r) => setTimeout(r, 50));

describe('TrainerRuntime', () => {
  const root = mkdtempSync(join(tmpdir(), 'anvil-trainer-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('trains each batch once in step order, publishes a verified version per batch and skips redeliveries', async () => {
    const log = [0, 1, 2, 3].map((s) => batchEvent(s, 10 + s));
    const h = await harness(join(root, 'a'), log);
    await h.trainer.start();
    for (const e of log) await h.bus.publish(e);
    await h.bus.publish(log[1]); // redelivered
    await waitFor('four batches', async () => (h.steps.length >= 4 ? true : undefined), 60_000, 20);
    await settle();
    await h.trainer.stop();
    expect(h.steps.map((s) => [s.batchStep, s.fromVersion, s.version])).toEqual([
      [0, 0, 1],
      [1, 1, 2],
      [2, 2, 3],
      [3, 3, 4],
    ]);
    expect(h.steps.map((s) => s.checkpointed)).toEqual([false, true, false, true]);
    const published = h.seen
      .filter((e) => e.type === 'weights.published')
      .map((e) => e.payload as { version: number; checkpointUri: string; sha256: string });
    expect(published.map((p) => p.version)).toEqual([1, 2, 3, 4]);
    for (const p of published.slice(-2)) await verifyCheckpointDigest(p.checkpointUri, p.sha256);
    const trained = h.seen
      .filter((e) => e.type === 'train_batch.trained')
      .map((e) => e.payload as { batchId: string; outcome: string; groupIds: string[] });
    expect(trained.map((t) => t.batchId)).toEqual(['b0', 'b1', 'b2', 'b3']);
    expect(trained[0].groupIds).toEqual(['g0-0', 'g0-1']);
    expect(h.trainer.dataPosition).toMatchObject({ nextBatchStep: 4, batchesTrained: 4, lastBatchId: 'b3' });
    await h.bus.close();
    h.model.dispose();
  });

  it('a KL penalty trains against a reference that stays at the starting weights; without a reference it is refused at construction', async () => {
    const klOptions = { ...options, settings: { ...options.settings, loss: lossConfig({ klCoef: 0.5 }) } };
    const bus = new MemoryBus({ logger: silentLogger });
    const model = Model.tiny({ seed: 1, config: { vocabSize: 272 } });
    expect(
      () =>
        new TrainerRuntime(klOptions, { bus, model, store: new CheckpointStore(join(root, 'kl0')), batches: new LogSource([]), logger }),
    ).toThrow(/klCoef is 0.5: the trainer needs a reference model/);
    const reference = Model.tiny({ seed: 1, config: { vocabSize: 272 } });
    const before = Float32Array.from(reference.tensor('model.layers.0.self_attn.q_proj.weight').data);
    const log = [0, 1, 2].map((s) => batchEvent(s, 50 + s));
    const steps: TrainerStepEvent[] = [];
    const trainer = new TrainerRuntime(klOptions, {
      bus,
      model,
      reference,
      store: new CheckpointStore(join(root, 'kl')),
      batches: new LogSource(log),
      logger,
      onStep: (e) => steps.push(e),
    });
    await trainer.start();
    for (const e of log) await bus.publish(e);
    await waitFor('three batches', async () => (steps.length >= 3 ? true : undefined), 60_000, 20);
    await trainer.stop();
    const kl = steps.map((e) => e.reports[0].stats?.klRefK3 ?? NaN);
    expect(kl[0]).toBeLessThan(1e-9); // the first step starts at the reference's own weights
    expect(kl[2]).toBeGreaterThan(kl[0]); // then the trained weights move away from it
    expect(reference.tensor('model.layers.0.self_attn.q_proj.weight').data).toEqual(before);
    await bus.close();
    model.dispose();
    reference.dispose();
  });

  it('pause holds later batches until resume, after the batch in progress', async () => {
    const batches = [0, 1, 2].map((s) => batchEvent(s, 30 + s));
    const log: TrainBatchEvent[] = []; // the Data Pool's log holds what it has cut so far
    const h = await harness(join(root, 'c'), log);
    await h.trainer.start();
    log.push(batches[0]);
    await h.bus.publish(batches[0]);
    await waitFor('batch 0', async () => (h.steps.length === 1 ? true : undefined), 60_000, 20);
    await h.trainer.pause();
    log.push(batches[1], batches[2]);
    await h.bus.publish(batches[1]);
    await h.bus.publish(batches[2]);
    await settle();
    expect(h.steps.map((s) => s.batchStep)).toEqual([0]);
    h.trainer.resume();
    await waitFor('batches 1 and 2 after resume', async () => (h.steps.length === 3 ? true : undefined), 60_000, 20);
    expect(h.steps.map((s) => s.batchStep)).toEqual([0, 1, 2]);
    await h.trainer.stop();
    await h.bus.close();
    h.model.dispose();
  });

  it('resumes after a crash at the last full checkpoint: the batches after it are trained again on the same weights, none skipped', async () => {
    const log = [0, 1, 2].map((s) => batchEvent(s, 20 + s));
    const dir = join(root, 'b');
    const first = await harness(dir, log);
    await first.trainer.start();
    for (const e of log) await first.bus.publish(e);
    await waitFor('three batches', async () => (first.steps.length === 3 ? true : undefined), 60_000, 20);
    await first.trainer.stop(); // "crash" after batch 2: the newest resume point is after batch 1 (version 2); version 3 is weight-only
    const afterTwo = first.steps[1];
    expect(afterTwo.checkpointed).toBe(true);
    // an uninterrupted reference: the weights after batch 2 trained from the version-2 weights
    const uninterrupted = Float32Array.from(first.model.tensors[3].data);
    await first.bus.close();
    first.model.dispose();

    const second = await harness(dir, log, 99);
    await second.trainer.start();
    await waitFor('the retrained batch', async () => (second.steps.length >= 1 ? true : undefined), 60_000, 20);
    await settle();
    await second.trainer.stop();
    // restored at position 2, version 2's weights re-published under a fresh number (4), batch 2 retrained -> 5
    expect(second.steps.map((s) => [s.batchStep, s.fromVersion, s.version])).toEqual([[2, 4, 5]]);
    const versions = second.seen.filter((e) => e.type === 'weights.published').map((e) => (e.payload as { version: number }).version);
    expect(versions).toEqual([4, 5]);
    expect(Array.from(second.model.tensors[3].data)).toEqual(Array.from(uninterrupted));
    expect(second.trainer.dataPosition).toMatchObject({ nextBatchStep: 3, batchesTrained: 3 });
    await second.bus.close();
    second.model.dispose();
  });

  it("trains only its own run's batches, and hands back a delivery that arrives while it stops (uncommitted: the next member trains it)", async () => {
    const batch = batchEvent(0, 40);
    const h = await harness(join(root, 'd'), []); // no batch log: what is not committed reaches the next member through the bus only
    await h.trainer.start();
    const other = createEventAt(
      'train_batch.created',
      2,
      {
        ...{
          batchId: 'other:batch:0',
          step: 0,
          runId: 'other',
          trajectoryIds: ['t'],
          groupIds: ['g'],
          samples: [{ sampleId: 's', trajectoryId: 't', groupId: 'g', advantage: 1, lossWeight: 1 }],
        },
        blob: { store: 'postgres', sha256: '0'.repeat(64), bytes: 1, layout: 'anvil-prefix-tree/1', nodes: 1 },
        stats: {
          ...{ trajectories: 1, samples: 1, groups: 1, totalTokens: 1, uniqueTokens: 1, outputTokens: 1, sharing: 0 },
          ...{
            staleness: { k: 1, mean: 0, max: 0, shareOlderThanK: 0 },
            positionLag: { mean: 0, max: 0 },
            outOfOrder: { mean: 0, max: 0 },
          },
          ...{ difficulty: { batchMean: null, populationMean: null }, lossMasked: 0, trainerWaitMs: null },
        },
        policyVersion: 0,
        createdAt: Date.now(),
      },
      { key: 'other', producer: 'test' },
    ) as unknown as TrainBatchEvent;
    await h.bus.publish(other); // LogSource.tree throws: reading it would fail the test
    await settle();
    expect(h.steps).toEqual([]);
    await h.trainer.pause();
    await h.bus.publish(batch);
    await settle(); // delivered, held by the pause
    await h.trainer.stop();
    expect(h.steps).toEqual([]);
    expect(h.seen.filter((e) => e.type === 'train_batch.trained')).toEqual([]);

    const steps: TrainerStepEvent[] = [];
    const next = new TrainerRuntime(options, {
      bus: h.bus,
      model: h.model,
      store: new CheckpointStore(join(root, 'd2')),
      batches: new LogSource([]),
      logger,
      onStep: (e) => steps.push(e),
    });
    await next.start();
    await waitFor('the handed-back batch', async () => (steps.length === 1 ? true : undefined), 60_000, 20);
    expect(steps.map((s) => s.batchId)).toEqual(['b0']);
    await next.stop();
    await h.bus.close();
    h.model.dispose();
  });
});
