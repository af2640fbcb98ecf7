import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { anvilTrain } from '@anvil/testing';

/**
 * Real coding-agent harnesses, unchanged, through the whole loop: `anvil train` on the built-in
 * repo-fix set (seeded bugs in small Python and JavaScript modules) with mini-swe-agent, then
 * with Codex CLI, each as a preset in the local sandbox against the embedded tiny model (random
 * init: what it writes is noise, which is the point: the harness, the sandbox, the held-back tests
 * and the trainer must cope with it). Each run makes one training step on the recorded calls
 * (zero-variance groups kept, so a batch forms whatever the agents scored), and afterwards its
 * database shows every rollout that ran finished with a reason, every one of them with its calls
 * recorded and its session closed.
 */
const root = join(__dirname, '..', '..');
const work = mkdtempSync(join(tmpdir(), 'anvil-repo-fix-presets-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

beforeAll(() => {
  // The presets at their pins (idempotent: nothing is fetched once they are there).
  const installed = spawnSync(
    process.execPath,
    [join(root, 'apps', 'anvil', 'bin', 'anvil.cjs'), 'agents', 'install', 'mini-swe-agent', 'codex'],
    {
      encoding: 'utf8',
    },
  );
  if (installed.status !== 0) throw new Error(`anvil agents install failed: ${installed.stdout}${installed.stderr}`);
}, 600_000);

async function trainWith(preset: 'mini-swe-agent' | 'codex', env: Record<string, string>) {
  const dataDir = join(work, preset);
  const configFile = join(work, `${preset}.json`);
  writeFileSync(
    configFile,
    JSON.stringify({
      dataDir,
      warmStart: { enabled: false },
      task: {
        set: 'repo-fix',
        agent: { kind: 'black-box', preset, env },
        envConfig: { levels: 1 },
        trainTasks: 4,
        evalTasks: 1,
        limits: { maxSteps: 2, timeoutMs: 180_000 },
      },
      rollouts: { groupSize: 2, concurrency: 2, maxTokensPerCall: 32 },
      scheduler: { groupsPerBatch: 1, dropZeroVariance: false },
      budget: { steps: 1, stallSeconds: 300 },
      eval: { samplesPerTask: 1 },
    }),
  );
  const { code, out, err } = await anvilTrain(configFile);
  expect(code, `${preset}: ${out.slice(-3000)}\n${err.slice(-3000)}`).toBe(0);
  const summary = JSON.parse(out.trim().split('\n').pop() as string) as {
    rlSteps: number;
    finalVersion: number;
    trainRollouts: number;
    mismatch: { tokens: number };
  };
  expect(summary, preset).toMatchObject({ rlSteps: 1, finalVersion: 1 });
  // the step trained on tokens the agents' calls recorded
  expect(summary.mismatch.tokens, preset).toBeGreaterThan(0);

  const runs = join(dataDir, 'runs');
  const db = new PGlite(join(runs, readdirSync(runs)[0], 'db'));
  try {
    const rollouts = (
      await db.query<{ id: string; status: string; finish_reason: string | null; calls: number; open_sessions: number }>(
        `SELECT r.id, r.status, r.finish_reason,
                (SELECT count(*)::int FROM gateway_calls c JOIN gateway_sessions s ON s.id = c.session_id WHERE s.rollout_id = r.id) AS calls,
                (SELECT count(*)::int FROM gateway_sessions s WHERE s.rollout_id = r.id AND s.status <> 'closed') AS open_sessions
           FROM rm_rollouts r WHERE r.status <> 'queued'`,
      )
    ).rows;
    for (const r of rollouts) {
      expect(r.status, `${preset} ${r.id}`).toBe('completed');
      expect(r.finish_reason, `${preset} ${r.id}`).not.toBeNull();
      expect(r.open_sessions, `${preset} ${r.id}`).toBe(0);
    }
    // Those the run's end did not abort (it stops the rollouts in flight) ran their agent on the model:
    // at least the two train rollouts of the step and the held-out ones before and after it.
    const ran = rollouts.filter((r) => r.finish_reason !== 'aborted');
    expect(ran.length, preset).toBeGreaterThanOrEqual(4);
    for (const r of ran) expect(r.calls, `${preset} ${JSON.stringify(r)}`).toBeGreaterThan(0);
  } finally {
    await db.close();
  }
}

describe('coding-agent harnesses on repo-fix through anvil train', () => {
  it('mini-swe-agent in the local sandbox: rollouts finish with a reason, calls recorded, a training step', { timeout: 900_000 }, () =>
    trainWith('mini-swe-agent', {}),
  );

  it("Codex CLI in the local sandbox (its compact prompt, for the tiny model's context): the same", { timeout: 900_000 }, () =>
    trainWith('codex', { AGENT_COMPACT: '1' }),
  );
});
