/**
 * The distributed adapter of the run driver's port: the services run as their own processes
 * (stack/up.ts starts them); the driver reaches the rollout-manager and the trainer through their
 * internal HTTP APIs, and hears rollouts end on Kafka (rollout.started says which are evaluation
 * rollouts, rollout.completed how each ended). The trainer's steps come from its step log, polled.
 */
import { TOPICS, type AnyEventEnvelope } from '@anvil/contracts';
import type { MessageBus, Subscription } from '@anvil/messaging';
import type { TrainerStepEvent } from '@anvil/trainer';
import type { CompletedRollout, RunServices } from '../services';
import type { RolloutManagerClient, TrainerClient } from './clients';

const POLL_MS = 200;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface DistributedOptions {
  rolloutManager: RolloutManagerClient;
  trainer: TrainerClient;
  /** The run's Kafka bus (its topic prefix). */
  bus: MessageBus;
  runDir: string;
  checkpointsDir: string;
  log: (line: string) => void;
}

export async function connectDistributedServices(o: DistributedOptions): Promise<RunServices> {
  const { rolloutManager: rm, trainer } = o;
  const stepListeners: ((e: TrainerStepEvent, atMs: number) => void)[] = [];
  const rolloutListeners: ((r: CompletedRollout) => void)[] = [];
  // Eval rollouts say so on rollout.started (and their groups start with 'eval:'); they are never trained on.
  const evalRollouts = new Set<string>();
  const onEvent = async (e: AnyEventEnvelope) => {
    if (e.type === 'rollout.started') {
      if (e.payload.purpose === 'eval') evalRollouts.add(e.payload.rolloutId);
      return;
    }
    if (e.type !== 'rollout.completed') return;
    const p = e.payload;
    const purpose = evalRollouts.delete(p.rolloutId) || p.groupId.startsWith('eval:') ? 'eval' : 'train';
    const r: CompletedRollout = {
      rolloutId: p.rolloutId,
      groupId: p.groupId,
      purpose,
      finishReason: p.finishReason,
      outcomeReward: p.outcomeReward,
      error: p.error,
    };
    for (const fn of rolloutListeners) fn(r);
  };
  const sub: Subscription = await o.bus.subscribe({
    group: 'anvil.run-driver',
    topics: [TOPICS.rollouts],
    fromBeginning: true,
    handler: onEvent,
  });

  let lastSeq = 0;
  // The background poller and flushSteps both read the step log: one read at a time, and each step
  // handed on once (by its sequence number), or a step read twice would be recorded twice.
  let reading: Promise<number | null> = Promise.resolve(null);
  const readSteps = async () => {
    const r = await trainer.steps(lastSeq);
    if (r.missed > 0) o.log(`note: ${r.missed} trainer step report(s) were no longer held by the trainer; the report skips them`);
    for (const s of r.steps) {
      if (s.seq <= lastSeq) continue;
      lastSeq = s.seq;
      for (const fn of stepListeners) fn(s.event, s.at);
    }
    return r.steps.length ? r.steps[r.steps.length - 1].event.version : null;
  };
  const pollSteps = () => (reading = reading.catch(() => null).then(readSteps));
  let polling = true;
  let lastVersion = 0;
  const poller = (async () => {
    while (polling) {
      await sleep(POLL_MS);
      if (!polling) break;
      lastVersion = (await pollSteps().catch(() => null)) ?? lastVersion;
    }
  })();

  return {
    deployment: 'distributed',
    runDir: o.runDir,
    checkpointsDir: o.checkpointsDir,
    tasks: {
      loadBuiltin: ({ seed, trainCount, evalCount, ...spec }) => rm.loadBuiltin(spec, { env: spec.env, seed, trainCount, evalCount }),
      loadJsonl: (spec, jsonl) => rm.loadJsonl(spec, jsonl),
    },
    submit: async (pass) => void (await rm.submit(pass)),
    rolloutState: async () => rm.state(),
    evaluate: (req) => rm.evaluate(req),
    // The trainer service takes batches from its start; none come before the first train submission.
    startTraining: async () => undefined,
    pauseTraining: async () => (await trainer.pause()).version,
    resumeTraining: async () => void (await trainer.resume()),
    trainerState: async () => {
      const t = await trainer.state();
      return { version: t.version ?? 0, done: t.done, failure: t.failure, busyMs: t.totals?.busyMs ?? 0 };
    },
    onStep: (fn) => void stepListeners.push(fn),
    onRolloutCompleted: (fn) => void rolloutListeners.push(fn),
    /**
     * The trainer counts a batch (its version, `done`) a moment before it logs the batch's step
     * report (after the checkpoint and the events), so the log is complete once its last step
     * carries the trainer's current version and it holds as many steps as the trainer handled batches.
     */
    async flushSteps() {
      const deadline = performance.now() + 60_000;
      for (;;) {
        const t = await trainer.state();
        lastVersion = (await pollSteps()) ?? lastVersion;
        if (lastSeq >= (t.totals?.batches ?? 0) && lastVersion >= (t.version ?? 0)) return;
        if (performance.now() > deadline)
          throw new Error(`the trainer is at version ${t.version} but its step log reached ${lastVersion} within 60 s`);
        await sleep(100);
      }
    },
    // The rollout-manager service ends its rollouts when it stops (stack/up.ts stops the services in order).
    stopRollouts: async () => undefined,
    async close() {
      polling = false;
      await poller;
      await sub.stop().catch(() => undefined);
    },
  };
}
