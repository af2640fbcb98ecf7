import { randomUUID } from 'node:crypto';
import { TOPICS, type EvaluationCompletedV1 } from '@anvil/contracts';
import type { MessageBus, Subscription } from '@anvil/messaging';
import { createLogger, ServiceMetrics, type Logger } from '@anvil/observability';
import { removeDeadManagersWorkspaces } from './agents/workspaces';
import { RolloutEventHandlers } from './event-handlers';
import { EventBatcher } from './event-batcher';
import { Evaluations, type EvaluationRequest } from './evaluations/evaluations';
import { GatewayClient } from './gateway-client';
import { RolloutMetrics } from './metrics';
import { Admission } from './rollouts/admission';
import type { AdmissionBlock } from './rollouts/admission-wait';
import { RolloutExecutor, type RolloutOutcome } from './rollouts/executor';
import { GroupQueue } from './rollouts/group-queue';
import { recoverGroups } from './rollouts/recovery';
import { RolloutSessions } from './rollouts/rollout-sessions';
import { RolloutSlots } from './rollouts/rollout-slots';
import { SessionLookahead, type LookaheadCandidate } from './rollouts/session-lookahead';
import { BudgetWatch } from './rollouts/budget-watch';
import { maxStepsOf } from './rollouts/rollout-context';
import { submissionTasks, type SubmitRequest } from './rollouts/submission';
import { RUNTIME_DEFAULTS, type RolloutRuntimeConfig, type RolloutRuntimeOptions } from './runtime-options';
import { Sandboxes } from './sandbox/sandboxes';
import { RolloutStateStore } from './state-store';
import type { StoredTask } from './tasks/jsonl';
import type { TaskSetSpecInput } from './tasks/task-set';
import { TaskSets, type BuiltinTaskSetInput } from './tasks/task-sets';
import { RolloutTaskStore } from './tasks/task-store';

export { RUNTIME_DEFAULTS, type RolloutRuntimeConfig, type RolloutRuntimeOptions } from './runtime-options';
export { EvaluationError } from './evaluations/evaluations';
export type { AdmissionBlock } from './rollouts/admission-wait';
export type { RolloutOutcome } from './rollouts/executor';
export { samplerSeed } from './rollouts/sampler-seed';

/**
 * The rollout manager's moving parts, free of Nest so tests, benches and the one-process host
 * build the very same thing: task sets in PostgreSQL (TaskSets), rollout groups in their lines
 * (GroupQueue) admitted through the staleness controller (Admission) into N slots (RolloutSlots),
 * white-box loops and black-box processes against gateway sessions (RolloutExecutor), verifiers,
 * evaluations (Evaluations), the events consumed (RolloutEventHandlers) and the rollout.started /
 * rollout.completed / evaluation.completed events. This class builds and wires them, and runs the
 * lifecycle: recovery, subscriptions, stop.
 */
export class RolloutRuntime {
  readonly config: RolloutRuntimeConfig;
  readonly gateway: GatewayClient;
  readonly tasks: RolloutTaskStore;
  readonly state: RolloutStateStore;
  readonly metrics: RolloutMetrics;
  readonly serviceMetrics: ServiceMetrics;
  private readonly logger: Logger;
  private readonly bus: MessageBus;
  private readonly events: EventBatcher;
  private readonly taskSets: TaskSets;
  private readonly queue: GroupQueue;
  private readonly sessions: RolloutSessions;
  private readonly lookahead: SessionLookahead;
  private readonly slots: RolloutSlots;
  private readonly admission: Admission;
  private readonly evaluations: Evaluations;
  private readonly handlers: RolloutEventHandlers;
  private readonly idleWaiters: (() => void)[] = [];
  private subscriptions: Subscription[] = [];
  private started = false;
  private stopping = false;

  constructor(opts: RolloutRuntimeOptions) {
    this.config = { ...RUNTIME_DEFAULTS, ...opts.config };
    this.logger = opts.logger ?? createLogger({ service: 'rollout-manager', level: 'warn' });
    this.serviceMetrics = opts.metrics ?? new ServiceMetrics('rollout-manager');
    this.metrics = new RolloutMetrics(this.serviceMetrics);
    this.bus = opts.bus;
    this.events = new EventBatcher(opts.bus);
    this.gateway = new GatewayClient(opts.gatewayUrl.replace(/\/$/, ''), opts.adminToken, {
      requestTimeoutMs: this.config.requestTimeoutMs,
      model: this.config.model,
    });
    this.tasks = new RolloutTaskStore(opts.dataSource);
    this.state = new RolloutStateStore(opts.dataSource, this.config.consumerGroup);
    // Agents' and verifier commands' sandboxes log through the manager's logger: an unsandboxed run says so in the run's log.
    const sandboxes = new Sandboxes(this.logger, opts.sandbox);
    this.taskSets = new TaskSets(this.tasks, {
      sandboxes,
      repoRoot: this.config.repoRoot,
      logger: this.logger,
      environments: opts.environments,
      verifiers: opts.verifiers,
    });
    this.queue = new GroupQueue(this.state, this.logger);
    const { config, gateway, state, events, metrics, logger, queue, taskSets } = this;
    this.sessions = new RolloutSessions({
      gateway,
      state,
      logger,
      model: config.model,
      maxSteps: async (g) => maxStepsOf(g.spec, (await taskSets.get(g.spec.id)).env, g.task),
    });
    this.lookahead = new SessionLookahead(config.sessionLookahead ?? Math.ceil(config.concurrency / 4), (rolloutId, err) =>
      logger.warn('opening a session ahead failed; the rollout opens its own', { rolloutId, err }),
    );
    // The rooms call each other through these (built below; called only once the runtime runs).
    const version = () => this.admission.policyVersion;
    const pump = () => this.admission.pump();
    const executor = new RolloutExecutor({
      config,
      gateway,
      sessions: this.sessions,
      state,
      events,
      metrics,
      logger,
      lookahead: this.lookahead,
      budget: new BudgetWatch((ids) => gateway.budgetSpent(ids), config.budgetPollMs, logger),
      sandboxes,
      version,
      taskSet: (id) => taskSets.get(id),
      verifierDeps: (spec, env) => taskSets.verifierDeps(spec, env),
    });
    this.slots = new RolloutSlots({
      executor,
      metrics,
      logger,
      rolloutDone: (g, r) => this.admission.rolloutDone(g, r),
      writeFinished: (g) => queue.writeFinished(g),
      freed: pump,
      settled: () => this.wakeIdle(),
    });
    this.admission = new Admission({
      config,
      queue,
      slots: this.slots,
      metrics,
      logger,
      evaluating: () => this.evaluations.running,
      pumped: () => this.afterAdmission(),
    });
    this.evaluations = new Evaluations({
      taskSets,
      queue,
      state,
      bus: this.bus,
      producer: config.producer,
      logger,
      version,
      onRolloutCompleted: (fn) => this.slots.onCompleted(fn),
      pump,
    });
    this.handlers = new RolloutEventHandlers({ admission: this.admission, queue, evaluations: this.evaluations, logger });
  }

  get policyVersion(): number {
    return this.admission.policyVersion;
  }

  // ---------------------------------------------------------------- lifecycle

  /**
   * Recovers durable state (in-flight rollouts of a previous run end as aborted, once, with their
   * sessions closed; queued work is re-queued; staleness counters rebuilt), then subscribes.
   */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    this.admission.open();
    // The current version: the whole (small) policy-version topic, from the beginning, by a group of our own.
    this.subscriptions.push(
      await this.bus.subscribe({
        group: `${this.config.consumerGroup}.versions.${randomUUID()}`,
        topics: [TOPICS.policyVersions],
        fromBeginning: true,
        handler: (e) => this.handlers.handle(e),
      }),
    );
    await this.recover();
    const left = await removeDeadManagersWorkspaces();
    if (left) this.logger.info('removed the agent workspaces of managers that died mid-run', { workspaces: left });
    this.subscriptions.push(
      await this.bus.subscribe({
        group: this.config.consumerGroup,
        topics: [TOPICS.trajectories, TOPICS.trainBatches, TOPICS.evaluations],
        fromBeginning: false,
        handler: (e) => this.handlers.handle(e),
      }),
    );
    this.admission.poll();
  }

  /** Stops admitting; running rollouts get `graceMs`, then are aborted (sessions closed, rollout.completed aborted). */
  async stop(graceMs = this.config.stopGraceMs): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.admission.stop();
    await this.slots.stop(graceMs);
    // Sessions opened for rollouts that never started (a restart would close them too).
    await Promise.all(
      this.lookahead.drain().map(async (p) => {
        const opened = await p;
        if (opened) await this.sessions.close(opened.sessionId);
      }),
    );
    for (const s of this.subscriptions) await s.stop().catch(() => undefined);
    this.subscriptions = [];
  }

  /** Resolves when nothing is queued, ready or running. */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }

  onRolloutCompleted(fn: (o: RolloutOutcome) => void): void {
    this.slots.onCompleted(fn);
  }

  snapshot() {
    return {
      policyVersion: this.admission.policyVersion,
      queuedGroups: this.queue.train.length,
      queuedEvalGroups: this.queue.evals.length,
      readyRollouts: this.queue.ready.length,
      running: this.slots.size,
      staleness: this.admission.staleness(),
      admissionBlockedSeconds: this.admissionBlockedSeconds(),
      evaluationsRunning: this.evaluations.count,
      sessionsAhead: this.lookahead.size,
    };
  }

  /**
   * Seconds the head of the train queue has waited so far, by what held it (the open wait included):
   * why rollouts are not starting, which refusal counts cannot say (a refusal is counted per attempt).
   */
  admissionBlockedSeconds(now = Date.now()): Record<AdmissionBlock, number> {
    return this.admission.blockedSeconds(now);
  }

  // ---------------------------------------------------------------- task sets, submissions, evaluations

  /** Registers a task set and its tasks (idempotent by id). Unknown environment, agent env or verifier: refused before anything is written. */
  loadTaskSet(input: TaskSetSpecInput, tasks: StoredTask[]): Promise<{ taskSetId: string; tasks: number }> {
    return this.taskSets.load(input, tasks);
  }

  /** Loads a JSONL task file (refused whole, every bad line named) into a task set. */
  loadJsonl(input: TaskSetSpecInput, text: string, source = '<jsonl>'): Promise<{ taskSetId: string; tasks: number }> {
    return this.taskSets.loadJsonl(input, text, source);
  }

  /** A built-in environment's task set from code: `trainCount` train and `evalCount` eval tasks from its seeded generator. */
  loadBuiltin(input: BuiltinTaskSetInput): Promise<{ taskSetId: string; tasks: number }> {
    return this.taskSets.loadBuiltin(input);
  }

  /**
   * Queues one group of G rollouts per chosen task (train split unless `split` says otherwise),
   * `repeat` times. Queue positions are assigned here, in submission order: the stored order (task
   * id), or with `shuffleSeed` a seeded permutation, a new one for each repeat.
   */
  async submit(req: SubmitRequest): Promise<{ groupIds: string[]; rolloutIds: string[] }> {
    const { spec } = await this.taskSets.get(req.taskSetId);
    const tasks = submissionTasks(req, await this.taskSets.tasks(req.taskSetId));
    // All at once (one statement per table): groups written one by one trickled into the queue and started a few at a time.
    const groups = await this.queue.create(spec, tasks, req.groupSize ?? spec.groupSize ?? this.config.groupSize, 'train', null);
    for (const g of groups) this.queue.train.push(g);
    this.metrics.queued.set(this.queue.queuedCount());
    this.admission.pump();
    return { groupIds: groups.map((g) => g.row.id), rolloutIds: groups.flatMap((g) => g.members.map((m) => m.id)) };
  }

  /** See Evaluations.run: the eval split pinned to `version`, training admissions gated meanwhile; evaluation.completed published. */
  runEvaluation(req: EvaluationRequest): Promise<EvaluationCompletedV1> {
    return this.evaluations.run(req);
  }

  // ---------------------------------------------------------------- wiring

  private async recover(): Promise<void> {
    const rec = await recoverGroups({
      state: this.state,
      tasks: this.tasks,
      gateway: this.gateway,
      events: this.events,
      logger: this.logger,
      producer: this.config.producer,
      version: () => this.admission.policyVersion,
      taskSet: (id) => this.taskSets.get(id),
    });
    this.queue.restore(rec);
    this.admission.restore(rec);
  }

  /** After each round of admissions: sessions opened for the rollouts that start next, the queue gauge, idle waiters. */
  private afterAdmission(): void {
    this.lookahead.fill(this.startingNext());
    this.metrics.sessionsAhead.set(this.lookahead.size);
    this.metrics.queued.set(this.queue.queuedCount());
    this.wakeIdle();
  }

  private *startingNext(): Generator<LookaheadCandidate> {
    // A session opened ahead may wait for its slot this much longer than its rollout's own life.
    const extraMs = 60_000 + this.config.sessionLookaheadTtlMs;
    for (const { group, rollout } of this.queue.upcoming())
      yield { rolloutId: rollout.id, open: () => this.sessions.open(group, rollout, group.spec.limits.timeoutMs + extraMs) };
  }

  private isIdle(): boolean {
    return !this.queue.waiting && !this.slots.busy;
  }

  private wakeIdle(): void {
    if (this.isIdle()) for (const w of this.idleWaiters.splice(0)) w();
  }
}
