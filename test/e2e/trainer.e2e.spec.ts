import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEvent, TOPICS, validateEvent, type AnyEventEnvelope, type EventEnvelope, type TrainBatchStats } from '@anvil/contracts';
import { llmCall, newRolloutIds } from '@anvil/contracts/testing';
import { Model, verifyCheckpointDigest } from '@anvil/engine';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { createDataSource, runMigrations } from '@anvil/persistence';
import { seededRandom } from '@anvil/rl';
import { createScratchDatabase, startService, waitFor, type ScratchDatabase, type ServiceProcess } from '@anvil/testing';
import { PrefixTreeBuilder, writeTrainBatchBlob, type SampleMeta } from '@anvil/train-batch';
import type { TrainerState } from '@anvil/trainer';

/**
 * The built trainer as its own process on the real Kafka broker and PostgreSQL server. This test
 * plays the Data Pool: it owns the schema (runs the migrations) and cuts train batches as the
 * Data Pool does (calls as deltas of their parents -> PrefixTreeBuilder -> the claim-check blob in
 * train_batch_blobs, the batch log row in data_pool_batch_stats, train_batch.created v2 on the
 * bus). The trainer trains them in step order and publishes a verified checkpoint per version; it
 * is SIGKILLed mid-run and restarted, and resumes at its newest full checkpoint's optimizer step
 * and data position: every batch is in the final weights exactly once. A second trainer whose
 * starting weights are NaN skips its steps and reports not ready after that fatal error.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const SERVER_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !SERVER_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const topicPrefix = `e2e-trainer-${process.pid}.`;
const runId = 'e2e-run';

let db: ScratchDatabase;
let ds: DataSource;
let bus: MessageBus;
let sub: Subscription;
let root: string;
const running: ServiceProcess[] = [];
const seen: AnyEventEnvelope[] = [];

beforeAll(async () => {
  db = await createScratchDatabase(SERVER_URL, 'anvil_e2e_trainer');
  ds = createDataSource({ url: db.url });
  await ds.initialize();
  await runMigrations(ds); // the Data Pool's part: the trainer runs with DB_MIGRATE_ON_START=false
  root = mkdtempSync(join(tmpdir(), 'anvil-e2e-trainer-'));
  const model = Model.tiny({ seed: 1, config: { vocabSize: 272 } });
  await model.save(join(root, 'model'));
  for (const t of model.tensors) t.data.fill(Number.NaN);
  await model.save(join(root, 'nan-model'));
  model.dispose();
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-trainer', topicPrefix });
  sub = await bus.subscribe({
    group: 'e2e.trainer-observer',
    topics: [TOPICS.trainBatches, TOPICS.weights],
    fromBeginning: true,
    handler: async (e) => void seen.push(e),
  });
});

afterAll(async () => {
  await Promise.all(running.map((s) => s.stop('SIGKILL')));
  await sub?.stop();
  await bus?.close();
  await ds?.destroy();
  await db?.drop();
  if (root) rmSync(root, { recursive: true, force: true });
});

/**
 * Batch `step` of `run`, cut as the Data Pool cuts one (DataPool.cut): two groups of two
 * rollouts, each a trajectory of two calls (the second extends the first), the tree built from
 * the calls' deltas, blob and batch-log row written in one transaction, the event returned.
 */
async function cutBatch(run: string, step: number): Promise<EventEnvelope<'train_batch.created'>> {
  const rand = seededRandom(1_000 + step);
  const tokens = (n: number) => Int32Array.from({ length: n }, () => Math.floor(rand() * 250));
  const batchId = `${run}:batch:${step}`;
  const b = new PrefixTreeBuilder();
  const samples: SampleMeta[] = [];
  let outputTokens = 0;
  for (let g = 0; g < 2; g++) {
    const ids = { ...newRolloutIds(), groupId: `${run}-b${step}-g${g}` };
    const system = tokens(8);
    for (let r = 0; r < 2; r++) {
      const rollout = { ...ids, rolloutId: `${ids.groupId}-r${r}` };
      const call = (over: Parameters<typeof llmCall>[1]) => {
        const outputIds = tokens(4);
        return llmCall(rollout, {
          outputIds,
          outputLogprobs: new Float32Array(4).fill(-5.6),
          outputVersions: new Uint32Array(4).fill(step),
          ...over,
        }).payload;
      };
      const first = call({ callId: `${rollout.rolloutId}-c0`, promptDeltaIds: Int32Array.from([...system, r]) });
      const second = call({
        callId: `${rollout.rolloutId}-c1`,
        parentCallId: first.callId,
        turnIndex: 1,
        reusedPromptTokens: first.promptLength + first.outputIds.length,
        promptDeltaIds: tokens(3),
      });
      for (const c of [first, second]) {
        const meta = {
          sampleId: c.callId,
          trajectoryId: rollout.rolloutId,
          groupId: ids.groupId,
          advantage: r === 0 ? 1 : -1,
          lossWeight: 1,
        };
        b.add(c, meta);
        samples.push(meta);
        outputTokens += c.outputIds.length;
      }
    }
  }
  const tree = b.build();
  const trajectoryIds = [...new Set(samples.map((s) => s.trajectoryId))];
  const stats: TrainBatchStats = {
    trajectories: trajectoryIds.length,
    samples: samples.length,
    groups: 2,
    totalTokens: b.total,
    uniqueTokens: tree.tokens.length,
    outputTokens,
    sharing: 1 - tree.tokens.length / b.total,
    staleness: { k: 1, mean: 0, max: 0, shareOlderThanK: 0 },
    positionLag: { mean: 0, max: 0 },
    outOfOrder: { mean: 0, max: 0 },
    difficulty: { batchMean: null, populationMean: null },
    lossMasked: 0,
    trainerWaitMs: null,
  };
  const createdAt = Date.now();
  const blob = await ds.transaction(async (m) => {
    const written = await writeTrainBatchBlob(m, { batchId, runId: run, tree });
    await m.query(
      `INSERT INTO "data_pool_batch_stats" ("batch_id", "run_id", "step", "stats", "created_at") VALUES ($1, $2, $3, $4, to_timestamp($5::float8 / 1000.0))`,
      [batchId, run, step, JSON.stringify(stats), createdAt],
    );
    return written;
  });
  const event = createEvent(
    'train_batch.created',
    {
      batchId,
      step,
      runId: run,
      trajectoryIds,
      groupIds: [...new Set(samples.map((s) => s.groupId))],
      samples,
      blob,
      stats,
      policyVersion: step,
      createdAt,
    },
    { key: run, producer: 'e2e-data-pool', id: `train_batch.created:${batchId}` },
  );
  validateEvent(event);
  return event;
}

const trainerEnv = (over: Record<string, string>) => ({
  KAFKA_BROKERS: KAFKA_BROKERS,
  DATABASE_URL: db.url,
  KAFKA_TOPIC_PREFIX: topicPrefix,
  LOG_LEVEL: 'info',
  DB_MIGRATE_ON_START: 'false',
  ENGINE_THREADS: '1',
  TRAINER_LR: '1e-3',
  TRAINER_WARMUP_STEPS: '0',
  ...over,
});

async function startTrainer(env: Record<string, string>): Promise<ServiceProcess> {
  const svc = await startService('trainer', env, 60_000);
  running.push(svc);
  return svc;
}

async function readyz(svc: ServiceProcess): Promise<{ status: number; body: { checks: Record<string, { ok: boolean; error?: string }> } }> {
  const res = await fetch(`${svc.baseUrl}/readyz`);
  return { status: res.status, body: (await res.json()) as { checks: Record<string, { ok: boolean; error?: string }> } };
}

const waitReady = (svc: ServiceProcess) =>
  waitFor(`${svc.app} /readyz 200`, async () => ((await readyz(svc)).status === 200 ? true : undefined), 90_000, 200);

type Trained = {
  batchId: string;
  batchStep: number;
  runId: string | null;
  trainerStep: number;
  policyVersion: number;
  outcome: string;
  checkpointed: boolean;
};
type Published = { version: number; parentVersion: number | null; step: number; checkpointUri: string; sha256: string };
const trainedOf = (run: string, from = 0, to = Infinity) =>
  seen
    .filter((e) => e.type === 'train_batch.trained' && e.occurredAt >= from && e.occurredAt < to)
    .map((e) => e.payload as Trained)
    .filter((p) => p.runId === run);
const publishedOf = (from = 0, to = Infinity) =>
  seen.filter((e) => e.type === 'weights.published' && e.occurredAt >= from && e.occurredAt < to).map((e) => e.payload as Published);

/** Versions with a checkpoint directory under `dir`, newest first. */
const versionsOn = (dir: string) =>
  readdirSync(dir)
    .map((f) => /^v(\d+)$/.exec(f))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]))
    .sort((a, b) => b - a);

/** The newest full checkpoint (resume point) under `dir`. */
function newestFull(dir: string): TrainerState {
  const full = versionsOn(dir).filter((v) => existsSync(join(dir, `v${v}`, 'trainer-state.json')));
  expect(full.length).toBeGreaterThan(0);
  return JSON.parse(readFileSync(join(dir, `v${full[0]}`, 'trainer-state.json'), 'utf8')) as TrainerState;
}

async function expectVerified(published: Published[]): Promise<void> {
  for (const p of published) {
    expect(p.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(existsSync(join(p.checkpointUri, 'model.safetensors'))).toBe(true);
    await verifyCheckpointDigest(p.checkpointUri, p.sha256);
  }
}

describe('trainer as a process', () => {
  it('trains batches in step order, publishes verified checkpoints, and resumes after SIGKILL at the same step and data position', async () => {
    const checkpoints = join(root, 'checkpoints');
    const env = trainerEnv({
      TRAINER_RUN_ID: runId,
      TRAINER_INITIAL_CHECKPOINT_DIR: join(root, 'model'),
      CHECKPOINT_DIR: checkpoints,
      TRAINER_PUBLISH_EVERY: '1',
      TRAINER_CHECKPOINT_EVERY: '2',
      CHECKPOINT_KEEP_PUBLISHED: '100',
      CHECKPOINT_KEEP_FULL: '100',
      TRAINER_CONSUMER_GROUP: 'e2e.trainer',
    });
    const first = await startTrainer(env);
    await waitReady(first);
    const ready = (await readyz(first)).body;
    expect(ready.checks).toMatchObject({ kafka: { ok: true }, postgres: { ok: true }, trainer: { ok: true }, training: { ok: true } });

    for (let step = 0; step < 4; step++) await bus.publish(await cutBatch(runId, step));
    await waitFor('batch 2 trained', async () => (trainedOf(runId).some((t) => t.batchStep === 2) ? true : undefined), 60_000, 20);
    first.child.kill('SIGKILL');
    expect(await first.stop()).toBe(null); // killed, no exit code
    const killedAt = Date.now();

    // Before the kill: batches 0.. in order, once each; versions 1, 2, ... each with a verified checkpoint.
    await new Promise((r) => setTimeout(r, 1_000)); // events the killed trainer published reach the observer
    const before = trainedOf(runId, 0, killedAt);
    expect(before.map((t) => t.batchStep)).toEqual(before.map((_, i) => i));
    expect(before.map((t) => t.policyVersion)).toEqual(before.map((_, i) => i + 1));
    // (a version is published before its batch's train_batch.trained: the kill may fall between the two)
    const publishedBefore = publishedOf(0, killedAt);
    expect(publishedBefore.length - before.length).toBeGreaterThanOrEqual(0);
    expect(publishedBefore.length - before.length).toBeLessThanOrEqual(1);
    expect(publishedBefore.map((p) => p.version)).toEqual(publishedBefore.map((_, i) => i + 1));
    expect(publishedBefore.map((p) => p.parentVersion)).toEqual(publishedBefore.map((_, i) => i));
    await expectVerified(publishedBefore);

    // The resume point: the newest full checkpoint (every 2nd batch), its optimizer step and data position.
    const resume = newestFull(checkpoints);
    const P = resume.position.nextBatchStep;
    expect(P % 2).toBe(0);
    expect(P).toBeGreaterThanOrEqual(2);
    expect(P).toBeLessThanOrEqual(4);
    expect(resume).toMatchObject({
      runId,
      version: P,
      step: P,
      position: { nextBatchStep: P, batchesTrained: P, batchesDropped: 0, lastBatchId: `${runId}:batch:${P - 1}` },
    });
    const newestOnDisk = Math.max(...versionsOn(checkpoints));

    const second = await startTrainer(env);
    await waitReady(second);
    const resumed = second
      .output()
      .split('\n')
      .filter((l) => l.includes('"msg":"trainer resumed"'))
      .map((l) => JSON.parse(l) as { step: number; version: number; position: TrainerState['position'] });
    expect(resumed).toHaveLength(1);
    expect(resumed[0]).toMatchObject({ step: resume.step, version: resume.version, position: resume.position });
    for (let step = 4; step < 6; step++) await bus.publish(await cutBatch(runId, step));
    await waitFor(
      'batch 5 trained after the restart',
      async () => (trainedOf(runId, killedAt).some((t) => t.batchStep === 5) ? true : undefined),
      60_000,
      20,
    );
    // Its version is published before train_batch.trained, but on another topic: the observer can see
    // the two in either order (a stop-26 flake read the versions before the last one arrived).
    await waitFor(
      'the version of optimizer step 6 published',
      async () => (publishedOf(killedAt).some((p) => p.step === 6) ? true : undefined),
      30_000,
      20,
    );

    // After the restart: from the resume position on, each batch once, in order, the optimizer step continuing from the checkpoint's.
    const after = trainedOf(runId, killedAt);
    expect(after.map((t) => t.batchStep)).toEqual([...Array(6 - P).keys()].map((i) => P + i));
    expect(after.map((t) => t.trainerStep)).toEqual(after.map((_, i) => resume.step + i + 1));
    expect(after.every((t) => t.outcome === 'trained')).toBe(true);
    // The final weights' lineage: batches 0..P-1 before the kill, P..5 after it: each exactly once, none skipped.
    expect([...before.filter((t) => t.batchStep < P), ...after].map((t) => t.batchStep)).toEqual([0, 1, 2, 3, 4, 5]);

    // Versions after the restart are new numbers: the resumed weights re-published (under a fresh
    // number when later weight-only versions were lost), then one per batch, each verified.
    const publishedAfter = publishedOf(killedAt);
    const republished = newestOnDisk === resume.version ? resume.version : newestOnDisk + 1;
    expect(publishedAfter.map((p) => p.version)).toEqual([republished, ...after.map((_, i) => republished + i + 1)]);
    expect(publishedAfter.slice(1).map((p) => p.parentVersion)).toEqual(after.map((_, i) => republished + i));
    await expectVerified(publishedAfter);
    if (republished !== resume.version) expect(publishedAfter[0].sha256).toBe(resume.sha256); // the resume point's weights, renumbered

    const final = newestFull(checkpoints);
    expect(final.position).toEqual({ nextBatchStep: 6, batchesTrained: 6, batchesDropped: 0, lastBatchId: `${runId}:batch:5` });
    expect(final.step).toBe(6);

    const metrics = await (await fetch(`${second.baseUrl}/metrics`)).text();
    const last = publishedAfter[publishedAfter.length - 1].version;
    expect(metrics).toMatch(new RegExp(`anvil_trainer_policy_version\\{[^}]*\\} ${last}\\n`));
    expect(metrics).toMatch(/anvil_trainer_next_batch_step\{[^}]*\} 6\n/);
    expect(metrics).toMatch(new RegExp(`anvil_trainer_steps_total\\{[^}]*\\} ${6 - P}\\n`));
    for (const name of [
      'anvil_trainer_tokens_per_second',
      'anvil_trainer_loss',
      'anvil_trainer_grad_norm',
      'anvil_trainer_idle_seconds_total',
      'anvil_trainer_skipped_steps_total',
    ])
      expect(metrics).toContain(name);

    expect(await second.stop('SIGTERM')).toBe(0);
    expect(second.output()).toContain('stopped cleanly');
  });

  it('reports not ready after a fatal error: every step non-finite, past TRAINER_MAX_NON_FINITE_SKIPS', async () => {
    const run = 'e2e-nan-run';
    const svc = await startTrainer(
      trainerEnv({
        TRAINER_RUN_ID: run,
        TRAINER_INITIAL_CHECKPOINT_DIR: join(root, 'nan-model'),
        CHECKPOINT_DIR: join(root, 'nan-checkpoints'),
        TRAINER_MAX_NON_FINITE_SKIPS: '0',
        TRAINER_CONSUMER_GROUP: 'e2e.trainer-nan',
      }),
    );
    await waitReady(svc);
    await bus.publish(await cutBatch(run, 0));
    const notReady = await waitFor(
      '/readyz 503',
      async () => {
        const r = await readyz(svc);
        return r.status === 503 ? r.body : undefined;
      },
      60_000,
      100,
    );
    expect(notReady.checks.training).toMatchObject({ ok: false, error: expect.stringContaining('non-finite') });
    expect(trainedOf(run).map((t) => [t.batchStep, t.outcome])).toEqual([[0, 'skipped']]);
    const metrics = await (await fetch(`${svc.baseUrl}/metrics`)).text();
    expect(metrics).toMatch(/anvil_trainer_fatal\{[^}]*\} 1\n/);
    expect(metrics).toMatch(/anvil_trainer_skipped_steps_total\{[^}]*\} 1\n/);
    expect((await fetch(`${svc.baseUrl}/healthz`)).status).toBe(200); // alive: an operator reads why
    expect(await svc.stop('SIGTERM')).toBe(0);
  });
});
