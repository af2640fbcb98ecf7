import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { TOPICS, type AnyEventEnvelope } from '@anvil/contracts';
import { verifyCheckpointDigest } from '@anvil/engine';
import { createBus } from '@anvil/messaging';
import { waitFor } from '@anvil/testing';

/**
 * The distributed run, end to end, as a user starts it: `anvil stack up` on the real Kafka
 * broker and PostgreSQL server (the test's own, given with --brokers/--database), five built
 * services as five processes, a few training steps of the built-in task on the tiny model. Then it
 * reads what the run left where it should be: the trainer's weights.published (checkpoints on disk
 * that verify), the proxy's policy_version.activated for each, train_batch.trained per batch, the
 * policy versions stamped on the recorded tokens moving forward, the trajectories and batches in the
 * run's PostgreSQL database, each service's log ending in a clean stop, the report.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const SERVER_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !SERVER_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');

const STEPS = 6;
const dataDir = mkdtempSync(join(tmpdir(), 'anvil-distributed-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

// Short on purpose (CI has 2 cores): the untrained tiny model (no warm start), groups of 2, a batch
// of 2 groups, 16 tokens a call, 4 held-out tasks evaluated before step 1, every 3 versions and at the end.
// Its rewards are all 0, so zero-variance groups are kept (not dropped) to make batches at all.
const config = {
  dataDir,
  seed: 1,
  engineThreads: 1,
  task: { evalTasks: 4 },
  warmStart: { steps: 0 },
  rollouts: { groupSize: 2, concurrency: 8, eta: 1, maxTokensPerCall: 16 },
  scheduler: { groupsPerBatch: 2, dropZeroVariance: false },
  algorithm: { warmupSteps: 0 },
  budget: { steps: STEPS, stallSeconds: 60 },
  eval: { everyVersions: 3 },
  checkpointEvery: 3,
};

function stackUp(configFile: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const args = [
      'apps/anvil/bin/anvil.cjs',
      'stack',
      'up',
      '--config',
      configFile,
      '--brokers',
      KAFKA_BROKERS!,
      '--database',
      SERVER_URL!,
      '--no-build',
    ];
    const child = spawn(process.execPath, args, { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.on('close', (code) => resolve({ code, out }));
  });
}

interface Summary {
  rlSteps: number;
  finalVersion: number;
  trainRollouts: number;
  evalVersionDrift: number;
  deployment: string;
  runId: string;
  runDir: string;
  database: string;
  topicPrefix: string;
  mismatch: { tokens: number };
}

/** The Uint32 little-endian array a bytea token column holds. */
const u32 = (b: Buffer) => Array.from({ length: b.length / 4 }, (_, i) => b.readUInt32LE(i * 4));

describe('anvil stack up', () => {
  it(
    'runs five services over Kafka and PostgreSQL: weights published and picked up, versions on tokens advancing, trajectories and batches stored',
    { timeout: 240_000 },
    async () => {
      const configFile = join(dataDir, 'run.json');
      writeFileSync(configFile, JSON.stringify(config));
      const started = Date.now();
      const { code, out } = await stackUp(configFile);
      const seconds = (Date.now() - started) / 1000;
      expect(code, out.slice(-6000)).toBe(0);
      const lines = out.trim().split('\n');
      const summary = JSON.parse(lines[lines.length - 1]) as Summary;
      expect(summary.deployment).toBe('distributed');
      expect(summary.rlSteps).toBe(STEPS);
      expect(summary.finalVersion).toBe(STEPS);
      expect(summary.trainRollouts).toBeGreaterThanOrEqual(STEPS * 4);
      expect(summary.mismatch.tokens).toBeGreaterThan(0);
      // The progress line and the pinned evaluations, as the embedded job prints them.
      expect(out).toMatch(new RegExp(`^step \\d+/${STEPS} \\| v\\d+ \\| reward`, 'm'));
      const evals = [...out.matchAll(/^held-out success ([\d.]+)% at policy version (\d+)/gm)].map((m) => Number(m[2]));
      expect(evals[0]).toBe(0);
      expect(evals[evals.length - 1]).toBe(STEPS);
      expect(evals.every((v, i) => i === 0 || v > evals[i - 1])).toBe(true);
      expect(summary.evalVersionDrift).toBe(0);

      // Five processes, none of them the driver, each logging to its file and stopping cleanly.
      const logs = join(summary.runDir, 'logs');
      const pids = new Set<number>();
      for (const app of ['gateway', 'inference-proxy', 'rollout-manager', 'middleware', 'trainer']) {
        const log = readFileSync(join(logs, `${app}.log`), 'utf8');
        const listening = log.split('\n').find((l) => l.includes('"msg":"listening"'));
        expect(listening, app).toBeDefined();
        pids.add((JSON.parse(listening!) as { pid: number }).pid);
        expect(log, app).toContain('"msg":"stopped cleanly"');
      }
      expect(pids.size).toBe(5);
      expect(out).not.toContain('"msg":"listening"'); // service logs never reach the terminal

      // The run's events on its topics.
      const seen: AnyEventEnvelope[] = [];
      const bus = createBus({
        kind: 'kafka',
        brokers: KAFKA_BROKERS.split(','),
        clientId: 'e2e-distributed',
        topicPrefix: summary.topicPrefix,
      });
      const sub = await bus.subscribe({
        group: 'e2e.distributed-observer',
        topics: [TOPICS.weights, TOPICS.policyVersions, TOPICS.trainBatches],
        fromBeginning: true,
        handler: async (e) => void seen.push(e),
      });
      const of = <T>(type: string) => seen.filter((e) => e.type === type).map((e) => e.payload as T);
      try {
        await waitFor('every version published, activated and trained', async () =>
          of('weights.published').length >= STEPS &&
          of<{ version: number }>('policy_version.activated').some((p) => p.version === STEPS) &&
          of('train_batch.trained').length >= STEPS
            ? true
            : undefined,
        );
      } finally {
        await sub.stop();
        await bus.close();
      }
      const published = of<{ version: number; checkpointUri: string; sha256: string }>('weights.published');
      expect(published.map((p) => p.version).sort((a, b) => a - b)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
      const checkpoints = join(summary.runDir, 'checkpoints');
      let verified = 0;
      for (const p of published) {
        expect(p.checkpointUri.startsWith(checkpoints), p.checkpointUri).toBe(true);
        // The trainer keeps the newest few versions on disk; each one still there matches its checksum.
        if (existsSync(join(p.checkpointUri, 'config.json'))) {
          await verifyCheckpointDigest(p.checkpointUri, p.sha256);
          verified++;
        }
      }
      expect(verified).toBeGreaterThanOrEqual(2);
      const activated = of<{ version: number; deployment: string }>('policy_version.activated');
      expect(activated.every((a) => a.deployment === 'stack')).toBe(true);
      expect(new Set(activated.map((a) => a.version))).toEqual(new Set(published.map((p) => p.version)));
      const trained = of<{ runId: string; batchStep: number; policyVersion: number; outcome: string }>('train_batch.trained');
      expect(trained.every((t) => t.runId === summary.runId && t.outcome === 'trained')).toBe(true);
      expect(trained.map((t) => t.batchStep).sort((a, b) => a - b)).toEqual(Array.from({ length: STEPS }, (_, i) => i));

      // The run's database: recorded calls with their token versions, trajectories, batches.
      const url = new URL(SERVER_URL);
      url.pathname = `/${summary.database}`;
      const db = new Client({ connectionString: url.toString() });
      await db.connect();
      try {
        const calls = (
          await db.query<{ output_versions: Buffer; eval_id: string | null }>(
            `SELECT c."output_versions", g."eval_id" FROM "llm_calls" c JOIN "rm_groups" g ON g."id" = c."group_id" ORDER BY c."received_at", c."id"`,
          )
        ).rows.map((r) => ({ versions: u32(r.output_versions), evalId: r.eval_id }));
        expect(calls.length).toBeGreaterThan(STEPS * 4);
        // Versions on tokens advance: the first calls ran on version 0, later ones on the published
        // versions, and no call's tokens go back in version.
        const train = calls.filter((c) => c.evalId === null && c.versions.length > 0);
        expect(train[0].versions[0]).toBe(0);
        expect(Math.max(...train.flatMap((c) => c.versions))).toBeGreaterThanOrEqual(STEPS - 2);
        for (const c of train) expect(c.versions.every((v, i) => i === 0 || v >= c.versions[i - 1])).toBe(true);
        // Each evaluation's tokens carry exactly the version it was pinned to.
        const byEval = new Map<string, Set<number>>();
        for (const c of calls.filter((x) => x.evalId !== null))
          for (const v of c.versions) byEval.set(c.evalId!, (byEval.get(c.evalId!) ?? new Set()).add(v));
        expect([...byEval.values()].map((vs) => [...vs]).sort((a, b) => a[0] - b[0])).toEqual(evals.map((v) => [v]));

        const batches = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "data_pool_batch_stats" WHERE "run_id" = $1`, [
          summary.runId,
        ]);
        expect(Number(batches.rows[0].n)).toBeGreaterThanOrEqual(STEPS);
        const trainBatches = await db.query<{ step: number; trajectories: number }>(
          `SELECT "step", cardinality("trajectory_ids") AS trajectories FROM "train_batches" ORDER BY "step"`,
        );
        expect(trainBatches.rows.slice(0, STEPS).map((b) => b.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i));
        expect(trainBatches.rows.every((b) => b.trajectories === 4)).toBe(true);
        const trajectories = await db.query<{ n: string }>(
          `SELECT count(*) AS n FROM "trajectories" t JOIN "train_batches" b ON b."id" = t."train_batch_id"`,
        );
        expect(Number(trajectories.rows[0].n)).toBeGreaterThanOrEqual(STEPS * 4);
      } finally {
        await db.end();
      }

      // The report and the summary file, as the embedded job writes them.
      const reportDir = join(dataDir, 'reports', summary.runId);
      expect(readdirSync(reportDir).sort()).toEqual(['report.html', 'summary.json']);
      expect(readFileSync(join(reportDir, 'report.html'), 'utf8')).toContain('<svg');
      expect((JSON.parse(readFileSync(join(reportDir, 'summary.json'), 'utf8')) as { steps: unknown[] }).steps).toHaveLength(STEPS);
      console.log(`distributed run: ${seconds.toFixed(0)} s from \`stack up\` to its summary`);
    },
  );
});
