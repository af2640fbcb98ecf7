import { randomUUID } from 'node:crypto';
import { createEvent, type EvaluationCompletedV1, type EvaluationRequestedV1 } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import type { Logger } from '@anvil/observability';
import type { RolloutOutcome } from '../rollouts/executor';
import type { GroupQueue } from '../rollouts/group-queue';
import type { GroupState } from '../rollouts/group-state';
import type { RolloutStateStore } from '../state-store';
import type { TaskSets } from '../tasks/task-sets';
import { evaluationSummary } from './evaluation-summary';

export class EvaluationError extends Error {
  override readonly name = 'EvaluationError';
}

export interface EvaluationRequest {
  taskSetId: string;
  version: number;
  samplesPerTask?: number;
  temperature?: number;
  evalId?: string;
  waitForVersionMs?: number;
}

export interface EvaluationDeps {
  taskSets: TaskSets;
  queue: GroupQueue;
  state: RolloutStateStore;
  bus: MessageBus;
  producer: string;
  logger: Logger;
  version(): number;
  onRolloutCompleted(fn: (o: RolloutOutcome) => void): void;
  /** Admits what waits (the eval groups just queued; training again once an evaluation ends). */
  pump(): void;
}

const DEFAULT_WAIT_FOR_VERSION_MS = 600_000;

/**
 * Held-out evaluations (DESIGN "Evaluation"): the eval split of a task set run pinned to one
 * policy version, asked for over HTTP or by evaluation.requested. While one runs, new training
 * admissions wait (in-flight rollouts are not retracted).
 */
export class Evaluations {
  /** Evaluations running now. */
  private readonly gates = new Set<string>();
  /** Every evalId this process has run or been asked for: a redelivered request runs nothing. */
  private readonly known = new Set<string>();

  constructor(private readonly d: EvaluationDeps) {}

  /** Whether an evaluation runs (training admissions wait). */
  get running(): boolean {
    return this.gates.size > 0;
  }

  get count(): number {
    return this.gates.size;
  }

  /**
   * Runs the eval split of a task set pinned to `version`: waits until that version is current
   * (refused when it is already past), gates new training admissions while it runs (in-flight
   * rollouts are not retracted), runs `samplesPerTask` rollouts per eval task (at `temperature`,
   * by default the task set's; sampler seeds per task and sample, see samplerSeed), and publishes
   * evaluation.completed with that version. Eval rollouts say purpose 'eval' and their group ids
   * start with 'eval:'; they never take staleness capacity and are never trained on.
   */
  async run(req: EvaluationRequest): Promise<EvaluationCompletedV1> {
    const evalId = req.evalId ?? randomUUID();
    this.known.add(evalId);
    const { spec } = await this.d.taskSets.get(req.taskSetId);
    const tasks = (await this.d.taskSets.tasks(req.taskSetId)).filter((t) => t.split === 'eval');
    if (tasks.length === 0) throw new EvaluationError(`taskSetId: task set ${req.taskSetId} has no eval tasks`);
    await this.untilVersion(req.version, req.waitForVersionMs ?? DEFAULT_WAIT_FOR_VERSION_MS);
    const startedAt = Date.now();
    this.gates.add(evalId);
    try {
      const groups = await this.d.queue.create(spec, tasks, req.samplesPerTask ?? 1, 'eval', evalId);
      for (const g of groups) {
        g.evalVersion = req.version;
        if (req.temperature !== undefined) g.evalTemperature = req.temperature;
      }
      const done = this.outcomesOf(groups);
      this.d.queue.evals.push(...groups);
      this.d.pump();
      const payload = evaluationSummary({ evalId, taskSetId: req.taskSetId, version: req.version, startedAt }, groups, await done);
      await this.d.bus.publish(
        createEvent('evaluation.completed', payload, { key: evalId, producer: this.d.producer, id: `evaluation:${evalId}:completed` }),
      );
      return payload;
    } finally {
      this.gates.delete(evalId);
      this.d.pump();
    }
  }

  /** evaluation.requested: runs in the background (an evaluation takes minutes and must not hold the partition), once per evalId. */
  async requested(p: EvaluationRequestedV1): Promise<void> {
    if (this.known.has(p.evalId) || (await this.d.state.evaluationKnown(p.evalId))) return;
    this.known.add(p.evalId);
    void this.run({ taskSetId: p.taskSetId, version: p.policyVersion, samplesPerTask: p.samplesPerTask, evalId: p.evalId }).catch(
      (err: unknown) => this.d.logger.error('requested evaluation failed', { evalId: p.evalId, err }),
    );
  }

  /** Waits until `version` is current; refused when it does not come in time or is already past. */
  private async untilVersion(version: number, waitMs: number): Promise<void> {
    const deadline = Date.now() + waitMs;
    while (this.d.version() < version) {
      if (Date.now() > deadline)
        throw new EvaluationError(`version: ${version} was not activated within ${waitMs} ms (current ${this.d.version()})`);
      await new Promise((r) => setTimeout(r, 50));
    }
    if (this.d.version() > version)
      throw new EvaluationError(
        `version: ${version} is already past (current ${this.d.version()}); evaluations run pinned to the current version`,
      );
  }

  /** Resolves with every member's outcome, by rollout id, once the last is out. */
  private outcomesOf(groups: GroupState[]): Promise<Map<string, RolloutOutcome>> {
    const ids = new Set(groups.flatMap((g) => g.members.map((m) => m.id)));
    const outcomes = new Map<string, RolloutOutcome>();
    return new Promise((resolve) => {
      this.d.onRolloutCompleted((o) => {
        if (!ids.has(o.rolloutId)) return;
        outcomes.set(o.rolloutId, o);
        if (outcomes.size === ids.size) resolve(outcomes);
      });
    });
  }
}
