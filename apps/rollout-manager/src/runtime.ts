import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { createEvent, TOPICS, type AnyEventEnvelope, type EvaluationCompletedV1 } from '@anvil/contracts';
import type { MessageBus, Subscription } from '@anvil/messaging';
import { createLogger, ServiceMetrics, type Logger } from '@anvil/observability';
import { seededShuffle, StalenessController } from '@anvil/rl';
import { checkAgentEnv } from './agents/black-box';
import { BUILTIN_ENVIRONMENTS, type EnvironmentFactory } from './environments/registry';
import type { Environment } from './environments/types';
import { EventBatcher } from './event-batcher';
import { GatewayClient } from './gateway-client';
import { RolloutMetrics } from './metrics';
import { RolloutExecutor, type ExecutedRollout, type RolloutOutcome } from './rollouts/executor';
import type { GroupState, LoadedTaskSet } from './rollouts/group-state';
import { recoverGroups } from './rollouts/recovery';
import { SessionLookahead, type LookaheadCandidate } from './rollouts/session-lookahead';
import { RolloutStateStore, type GroupRow, type GroupStatus, type RolloutRow } from './state-store';
import { parseTaskJsonl, type StoredTask } from './tasks/jsonl';
import { taskSetSpecSchema, type TaskSetSpec, type TaskSetSpecInput } from './tasks/task-set';
import { RolloutTaskStore } from './tasks/task-store';
import { checkVerifier, type VerifierFn } from './verifiers/verifiers';

export interface RolloutRuntimeConfig {
  /** Producer name on the events. */
  producer: string;
  /** Model name sent to the gateway. */
  model: string;
  /** Default G (a task set may declare its own). */
  groupSize: number;
  /** N: rollouts running at once. */
  concurrency: number;
  /** Staleness bound η. */
  eta: number;
  /** B: groups per training step (capacity (η + 1)·B groups). */
  groupsPerStep: number;
  initialPolicyVersion: number;
  /** Durable consumer group for rollout_group.settled, train_batch.trained and evaluation.requested; also this instance's identity in rm_groups (a restart recovers the groups of its own name). */
  consumerGroup: string;
  /** How often a refused admission is retried when no event wakes it. */
  admissionPollMs: number;
  requestTimeoutMs: number;
  /** Stop: how long running rollouts get before they are aborted. */
  stopGraceMs: number;
  /** cwd of black-box agents without their own. */
  repoRoot: string;
  /** Rollouts, the next to start, whose gateway sessions are opened while they wait for a slot (see SessionLookahead); default ⌈N/4⌉, 0 = none. */
  sessionLookahead?: number;
  /** How much longer than its rollout's timeout a session opened ahead lives (it may wait that long for its slot; older ones are replaced at the start). */
  sessionLookaheadTtlMs: number;
}

export const RUNTIME_DEFAULTS: RolloutRuntimeConfig = {
  producer: 'rollout-manager',
  model: 'anvil-tiny',
  groupSize: 8,
  concurrency: 64,
  eta: 4,
  groupsPerStep: 8,
  initialPolicyVersion: 0,
  consumerGroup: 'anvil.rollout-manager',
  admissionPollMs: 500,
  requestTimeoutMs: 120_000,
  stopGraceMs: 0,
  repoRoot: process.cwd(),
  sessionLookaheadTtlMs: 600_000,
};

export interface RolloutRuntimeOptions {
  gatewayUrl: string;
  adminToken: string;
  bus: MessageBus;
  dataSource: DataSource;
  config?: Partial<RolloutRuntimeConfig>;
  /** Extra environments (name → factory of a task set's envConfig). */
  environments?: Record<string, EnvironmentFactory>;
  /** TypeScript verifier functions by name (verifier kind 'function'). */
  verifiers?: Record<string, VerifierFn>;
  logger?: Logger;
  metrics?: ServiceMetrics;
}

export type { RolloutOutcome };
/** What holds a train group at the head of the queue: the staleness controller's two bounds, or all N slots running. */
export type AdmissionBlock = 'capacity' | 'version' | 'slots';

export class EvaluationError extends Error {
  override readonly name = 'EvaluationError';
}

interface Running {
  abort: AbortController;
  done: Promise<void>;
}

const terminal = (status: string) => status === 'trained' || status === 'dropped';

/**
 * The rollout manager's moving parts, free of Nest so tests, benches and the one-process host
 * build the very same thing: task sets in PostgreSQL, rollout groups admitted through the
 * staleness controller, white-box loops and black-box processes against gateway sessions,
 * verifiers, and the rollout.started / rollout.completed / evaluation.completed events.
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
  private readonly envFactories: Record<string, EnvironmentFactory>;
  private readonly verifierFns: Record<string, VerifierFn>;
  private controller: StalenessController;
  private currentVersion: number;
  private readonly groups = new Map<string, GroupState>();
  private readonly queue: GroupState[] = [];
  private readonly evalQueue: GroupState[] = [];
  private readonly ready: { group: GroupState; rollout: RolloutRow }[] = [];
  private readonly running = new Map<string, Running>();
  private readonly specs = new Map<string, LoadedTaskSet>();
  private readonly executor: RolloutExecutor;
  private readonly lookahead: SessionLookahead;
  /** Rollouts whose outcome is out and whose cleanup (session close, state writes, listeners) still runs. */
  private readonly finishing = new Set<Promise<void>>();
  private readonly listeners: ((o: RolloutOutcome) => void)[] = [];
  private readonly idleWaiters: (() => void)[] = [];
  private readonly evalGates = new Set<string>();
  private readonly evaluations = new Set<string>();
  private subscriptions: Subscription[] = [];
  private pollTimer: NodeJS.Timeout | null = null;
  private stopping = false;
  private started = false;
  /** What holds the head of the train queue since when (null: nothing waits, or an evaluation gates admissions). */
  private blocked: { reason: AdmissionBlock; since: number } | null = null;
  private readonly blockedMs: Record<AdmissionBlock, number> = { capacity: 0, version: 0, slots: 0 };

  constructor(private readonly opts: RolloutRuntimeOptions) {
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
    this.envFactories = { ...BUILTIN_ENVIRONMENTS, ...opts.environments };
    this.verifierFns = { ...opts.verifiers };
    this.controller = new StalenessController({ eta: this.config.eta, groupsPerStep: this.config.groupsPerStep });
    this.currentVersion = this.config.initialPolicyVersion;
    this.lookahead = new SessionLookahead(this.config.sessionLookahead ?? Math.ceil(this.config.concurrency / 4), (rolloutId, err) =>
      this.logger.warn('opening a session ahead failed; the rollout opens its own', { rolloutId, err }),
    );
    this.executor = new RolloutExecutor({
      config: this.config,
      gateway: this.gateway,
      state: this.state,
      events: this.events,
      metrics: this.metrics,
      logger: this.logger,
      lookahead: this.lookahead,
      version: () => this.currentVersion,
      taskSet: (id) => this.taskSet(id),
      verifierDeps: (spec, env) => this.verifierDeps(spec, env),
    });
  }

  get policyVersion(): number {
    return this.currentVersion;
  }

  // ---------------------------------------------------------------- lifecycle

  /**
   * Recovers durable state (in-flight rollouts of a previous run end as aborted, once, with their
   * sessions closed; queued work is re-queued; staleness counters rebuilt), then subscribes.
   */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    // The current version: the whole (small) policy-version topic, from the beginning, by a group of our own.
    this.subscriptions.push(
      await this.bus.subscribe({
        group: `${this.config.consumerGroup}.versions.${randomUUID()}`,
        topics: [TOPICS.policyVersions],
        fromBeginning: true,
        handler: async (e) => this.onEvent(e),
      }),
    );
    await this.recover();
    this.subscriptions.push(
      await this.bus.subscribe({
        group: this.config.consumerGroup,
        topics: [TOPICS.trajectories, TOPICS.trainBatches, TOPICS.evaluations],
        fromBeginning: false,
        handler: async (e) => this.onEvent(e),
      }),
    );
    this.pollTimer = setInterval(() => this.pump(), this.config.admissionPollMs);
    this.pollTimer.unref();
    this.pump();
  }

  /** Stops admitting; running rollouts get `graceMs`, then are aborted (sessions closed, rollout.completed aborted). */
  async stop(graceMs = this.config.stopGraceMs): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    const all = [...this.running.values()];
    if (graceMs > 0) await Promise.race([Promise.all(all.map((r) => r.done)), new Promise((r) => setTimeout(r, graceMs))]);
    for (const r of this.running.values()) r.abort.abort('aborted');
    await Promise.all([...this.running.values()].map((r) => r.done));
    await Promise.all([...this.finishing]);
    // Sessions opened for rollouts that never started (a restart would close them too).
    await Promise.all(
      this.lookahead.drain().map(async (p) => {
        const opened = await p;
        if (opened) await this.executor.closeSession(opened.sessionId);
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
    this.listeners.push(fn);
  }

  snapshot() {
    return {
      policyVersion: this.currentVersion,
      queuedGroups: this.queue.length,
      queuedEvalGroups: this.evalQueue.length,
      readyRollouts: this.ready.length,
      running: this.running.size,
      staleness: this.controller.snapshot(),
      admissionBlockedSeconds: this.admissionBlockedSeconds(),
      evaluationsRunning: this.evalGates.size,
      sessionsAhead: this.lookahead.size,
    };
  }

  /**
   * Seconds the head of the train queue has waited so far, by what held it (the open wait included):
   * why rollouts are not starting, which refusal counts cannot say (a refusal is counted per attempt).
   */
  admissionBlockedSeconds(now = Date.now()): Record<AdmissionBlock, number> {
    const out = { ...this.blockedMs };
    if (this.blocked) out[this.blocked.reason] += now - this.blocked.since;
    return { capacity: out.capacity / 1000, version: out.version / 1000, slots: out.slots / 1000 };
  }

  /** Ends the open wait (its time to its reason) and opens one for `reason` unless null or unchanged. */
  private markBlocked(reason: AdmissionBlock | null): void {
    if (this.blocked?.reason === reason) return;
    const now = Date.now();
    if (this.blocked) {
      const ms = now - this.blocked.since;
      this.blockedMs[this.blocked.reason] += ms;
      this.metrics.admissionBlockedSeconds.inc({ reason: this.blocked.reason }, ms / 1000);
    }
    this.blocked = reason === null ? null : { reason, since: now };
  }

  private isIdle(): boolean {
    return (
      this.queue.length === 0 &&
      this.evalQueue.length === 0 &&
      this.ready.length === 0 &&
      this.running.size === 0 &&
      this.finishing.size === 0
    );
  }

  private wakeIdle(): void {
    if (this.isIdle()) for (const w of this.idleWaiters.splice(0)) w();
  }

  // ---------------------------------------------------------------- task sets

  private checkSpec(spec: TaskSetSpec): Environment | null {
    const env = spec.env === null ? null : this.envFactory(spec.env)(spec.envConfig);
    if (spec.agent.kind === 'black-box') checkAgentEnv(spec.agent.env);
    if (spec.verifier) checkVerifier(spec.verifier, spec.env, this.verifierDeps(spec, env));
    return env;
  }

  private envFactory(name: string): EnvironmentFactory {
    const f = this.envFactories[name];
    if (!f) throw new Error(`env: unknown environment ${JSON.stringify(name)} (known: ${Object.keys(this.envFactories).join(', ')})`);
    return f;
  }

  private verifierDeps(spec: TaskSetSpec, env: Environment | null) {
    return { environments: new Map(env && spec.env ? [[spec.env, env]] : []), functions: this.verifierFns };
  }

  /** Registers a task set and its tasks (idempotent by id). Unknown environment, agent env or verifier: refused before anything is written. */
  async loadTaskSet(input: TaskSetSpecInput, tasks: StoredTask[]): Promise<{ taskSetId: string; tasks: number }> {
    const spec = taskSetSpecSchema.parse(input);
    const env = this.checkSpec(spec);
    for (const t of tasks) {
      const v = t.verifier ?? spec.verifier ?? (spec.env ? { kind: 'env' as const } : undefined);
      if (!v) throw new Error(`task ${t.id}: verifier: none given and the task set has no environment`);
      checkVerifier(v, spec.env, this.verifierDeps(spec, env));
    }
    const r = await this.tasks.load(spec, tasks);
    this.specs.set(spec.id, { spec, env });
    return r;
  }

  /** Loads a JSONL task file (refused whole, every bad line named) into a task set. */
  async loadJsonl(input: TaskSetSpecInput, text: string, source = '<jsonl>') {
    return this.loadTaskSet(input, parseTaskJsonl(text, source));
  }

  /** A built-in environment's task set from code: `trainCount` train and `evalCount` eval tasks from its seeded generator. */
  loadBuiltin(input: TaskSetSpecInput & { env: string; seed: number; trainCount: number; evalCount: number }) {
    const spec = taskSetSpecSchema.parse(input);
    const env = this.envFactory(input.env)(spec.envConfig);
    const tasks = [
      ...env.generate({ seed: input.seed, count: input.trainCount, split: 'train' }),
      ...env.generate({ seed: input.seed, count: input.evalCount, split: 'eval' }),
    ];
    return this.loadTaskSet(input, tasks);
  }

  private async taskSet(taskSetId: string): Promise<LoadedTaskSet> {
    let s = this.specs.get(taskSetId);
    if (!s) {
      const spec = await this.tasks.spec(taskSetId);
      if (!spec) throw new Error(`taskSetId: unknown task set ${JSON.stringify(taskSetId)}`);
      const parsed = taskSetSpecSchema.parse(spec);
      s = { spec: parsed, env: this.checkSpec(parsed) };
      this.specs.set(taskSetId, s);
    }
    return s;
  }

  // ---------------------------------------------------------------- submission

  /**
   * Queues one group of G rollouts per chosen task (train split unless `split` says otherwise),
   * `repeat` times. Queue positions are assigned here, in submission order: the stored order (task
   * id), or with `shuffleSeed` a seeded permutation, a new one for each repeat.
   */
  async submit(req: {
    taskSetId: string;
    groupSize?: number;
    taskIds?: string[];
    repeat?: number;
    split?: 'train' | 'eval';
    shuffleSeed?: number;
  }): Promise<{ groupIds: string[]; rolloutIds: string[] }> {
    const { spec } = await this.taskSet(req.taskSetId);
    const all = await this.tasks.tasks(req.taskSetId);
    const chosen = req.taskIds
      ? all.filter((t) => req.taskIds?.includes(t.id) || req.taskIds?.includes(String(t.metadata?.sourceId)))
      : all.filter((t) => t.split === (req.split ?? 'train'));
    if (req.taskIds && chosen.length !== req.taskIds.length)
      throw new Error(`taskIds: ${req.taskIds.length - chosen.length} unknown in task set ${req.taskSetId}`);
    const G = req.groupSize ?? spec.groupSize ?? this.config.groupSize;
    const groupIds: string[] = [];
    const rolloutIds: string[] = [];
    const seed = req.shuffleSeed;
    const tasks = Array.from({ length: req.repeat ?? 1 }, (_, r) =>
      seed === undefined ? chosen : seededShuffle(chosen, (seed + Math.imul(r, 0x9e3779b9)) >>> 0),
    ).flat();
    // All at once (one statement per table): groups written one by one trickled into the queue and started a few at a time.
    for (const g of await this.newGroups(spec, tasks, G, 'train', null)) {
      groupIds.push(g.row.id);
      rolloutIds.push(...g.members.map((m) => m.id));
      this.queue.push(g);
    }
    this.metrics.queued.set(this.queuedCount());
    this.pump();
    return { groupIds, rolloutIds };
  }

  /** One group of G per task, in order, with queue positions in that order; written in one transaction. */
  private async newGroups(
    spec: TaskSetSpec,
    tasks: StoredTask[],
    G: number,
    purpose: 'train' | 'eval',
    evalId: string | null,
  ): Promise<GroupState[]> {
    const positions = await this.state.queuePositions(tasks.length * G);
    const groups = tasks.map((task, t): GroupState => {
      const groupId = `${purpose === 'eval' ? 'eval:' : ''}${randomUUID()}`;
      const row: GroupRow = {
        id: groupId,
        taskId: task.id,
        taskSetId: spec.id,
        groupSize: G,
        purpose,
        evalId,
        status: 'queued',
        startVersion: null,
      };
      const members: RolloutRow[] = Array.from({ length: G }, (_, i) => ({
        id: `${groupId}.${i}`,
        groupId,
        taskId: task.id,
        sampleIndex: i,
        queuePosition: positions[t * G + i],
        status: 'queued',
        sessionId: null,
        policyVersionAtStart: null,
        attempts: 0,
      }));
      return { row, task, spec, members, pending: G, submittedAt: Date.now() };
    });
    await this.state.insertGroups(groups.map((g) => ({ group: g.row, rollouts: g.members })));
    for (const g of groups) this.groups.set(g.row.id, g);
    return groups;
  }

  private queuedCount(): number {
    let n = this.ready.length;
    for (const g of [...this.queue, ...this.evalQueue]) n += g.members.filter((m) => m.status === 'queued').length;
    return n;
  }

  // ---------------------------------------------------------------- evaluation

  /**
   * Runs the eval split of a task set pinned to `version`: waits until that version is current
   * (refused when it is already past), gates new training admissions while it runs (in-flight
   * rollouts are not retracted), runs `samplesPerTask` rollouts per eval task (at `temperature`,
   * by default the task set's; sampler seeds per task and sample, see samplerSeed), and publishes
   * evaluation.completed with that version. Eval rollouts say purpose 'eval' and their group ids
   * start with 'eval:'; they never take staleness capacity and are never trained on.
   */
  async runEvaluation(req: {
    taskSetId: string;
    version: number;
    samplesPerTask?: number;
    temperature?: number;
    evalId?: string;
    waitForVersionMs?: number;
  }): Promise<EvaluationCompletedV1> {
    const evalId = req.evalId ?? randomUUID();
    this.evaluations.add(evalId);
    const { spec } = await this.taskSet(req.taskSetId);
    const tasks = (await this.tasks.tasks(req.taskSetId)).filter((t) => t.split === 'eval');
    if (tasks.length === 0) throw new EvaluationError(`taskSetId: task set ${req.taskSetId} has no eval tasks`);
    const deadline = Date.now() + (req.waitForVersionMs ?? 600_000);
    while (this.currentVersion < req.version) {
      if (Date.now() > deadline)
        throw new EvaluationError(
          `version: ${req.version} was not activated within ${req.waitForVersionMs ?? 600_000} ms (current ${this.currentVersion})`,
        );
      await new Promise((r) => setTimeout(r, 50));
    }
    if (this.currentVersion > req.version)
      throw new EvaluationError(
        `version: ${req.version} is already past (current ${this.currentVersion}); evaluations run pinned to the current version`,
      );
    const startedAt = Date.now();
    this.evalGates.add(evalId);
    try {
      const groups = await this.newGroups(spec, tasks, req.samplesPerTask ?? 1, 'eval', evalId);
      for (const g of groups) {
        g.evalVersion = req.version;
        if (req.temperature !== undefined) g.evalTemperature = req.temperature;
      }
      const outcomes = new Map<string, RolloutOutcome>();
      const ids = new Set(groups.flatMap((g) => g.members.map((m) => m.id)));
      const done = new Promise<void>((resolve) => {
        this.listeners.push((o) => {
          if (!ids.has(o.rolloutId)) return;
          outcomes.set(o.rolloutId, o);
          if (outcomes.size === ids.size) resolve();
        });
      });
      this.evalQueue.push(...groups);
      this.pump();
      await done;
      const results = groups.flatMap((g) =>
        g.members.map((m) => {
          const o = outcomes.get(m.id) as RolloutOutcome;
          return { taskId: g.task.id, rolloutId: m.id, reward: o.outcomeReward, success: o.success === true, finishReason: o.finishReason };
        }),
      );
      const rewards = results.map((r) => r.reward).filter((r): r is number => r !== null);
      const payload: EvaluationCompletedV1 = {
        evalId,
        taskSetId: req.taskSetId,
        policyVersion: req.version,
        results,
        successRate: results.length ? results.filter((r) => r.success).length / results.length : 0,
        meanReward: rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : 0,
        versionDrift: [...outcomes.values()].filter((o) => o.versionsSpanned > 1).length,
        startedAt,
        completedAt: Date.now(),
      };
      await this.bus.publish(
        createEvent('evaluation.completed', payload, { key: evalId, producer: this.config.producer, id: `evaluation:${evalId}:completed` }),
      );
      return payload;
    } finally {
      this.evalGates.delete(evalId);
      this.pump();
    }
  }

  // ---------------------------------------------------------------- admission

  private pump(): void {
    if (this.stopping || !this.started) return;
    for (;;) {
      while (this.running.size < this.config.concurrency && this.ready.length > 0) {
        const next = this.ready.shift() as { group: GroupState; rollout: RolloutRow };
        this.launch(next.group, next.rollout);
      }
      if (this.running.size + this.ready.length >= this.config.concurrency) {
        this.markBlocked(this.queue.length > 0 && this.evalQueue.length === 0 && this.evalGates.size === 0 ? 'slots' : null);
        break;
      }
      // Eval groups first, and only at their pinned version.
      const ev = this.evalQueue[0];
      if (ev) {
        if (this.currentVersion !== ev.evalVersion) {
          // The version moved before these were admitted: run them anyway (results say versionDrift); nothing waits forever.
          this.logger.warn('evaluation admitted after the version moved', {
            evalId: ev.row.evalId,
            pinned: ev.evalVersion,
            current: this.currentVersion,
          });
        }
        this.evalQueue.shift();
        this.admit(ev);
        continue;
      }
      const head = this.evalGates.size > 0 ? undefined : this.queue[0];
      if (!head) {
        this.markBlocked(null);
        break;
      }
      const r = this.controller.tryAdmit(head.row.id, this.currentVersion);
      if (!r.admitted) {
        this.metrics.admissionRefusals.inc({ reason: r.reason });
        this.markBlocked(r.reason);
        break;
      }
      this.markBlocked(null);
      this.queue.shift();
      this.metrics.admissionWaitSeconds.observe((Date.now() - head.submittedAt) / 1000);
      this.admit(head);
    }
    this.lookahead.fill(this.upcoming());
    this.metrics.sessionsAhead.set(this.lookahead.size);
    this.metrics.queued.set(this.queuedCount());
    this.wakeIdle();
  }

  private admit(g: GroupState): void {
    g.row.status = 'running';
    g.row.startVersion = this.currentVersion;
    void this.writeGroup(g, 'running', this.currentVersion).catch(() => undefined);
    for (const m of g.members) if (m.status === 'queued') this.ready.push({ group: g, rollout: m });
  }

  /** The rollouts that will start next, in the order they will (ready, then eval groups, then train groups). */
  private *upcoming(): Generator<LookaheadCandidate> {
    const life = (g: GroupState) => g.spec.limits.timeoutMs + 60_000 + this.config.sessionLookaheadTtlMs;
    const candidate = (g: GroupState, r: RolloutRow): LookaheadCandidate => ({
      rolloutId: r.id,
      open: () => this.executor.openSession(g, r, life(g)),
    });
    for (const { group, rollout } of this.ready) yield candidate(group, rollout);
    for (const g of [...this.evalQueue, ...this.queue]) for (const m of g.members) if (m.status === 'queued') yield candidate(g, m);
  }

  // ---------------------------------------------------------------- events in

  private async onEvent(e: AnyEventEnvelope): Promise<void> {
    const type = e.type as string;
    if (type === 'policy_version.activated') {
      const v = (e.payload as { version: number }).version;
      if (v > this.currentVersion) {
        this.currentVersion = v;
        this.controller.activated(v);
        this.pump();
      }
      return;
    }
    if (type === 'rollout_group.settled') {
      const p = e.payload as { groupId: string; status: 'ready' | 'dropped'; retryRolloutIds: string[] };
      const g = this.groups.get(p.groupId);
      if (!g || g.row.purpose === 'eval' || terminal(g.row.status)) return;
      if (p.retryRolloutIds.length > 0 && g.row.status === 'finished') {
        // Environment failures the Data Pool asks to run again: new rollouts of the same group and sample index, admitted again.
        // Released, then admitted again as a whole when the retries start.
        this.controller.dropped(g.row.id);
        const retries: RolloutRow[] = [];
        const positions = await this.state.queuePositions(p.retryRolloutIds.length);
        for (const id of p.retryRolloutIds) {
          const old = g.members.find((m) => m.id === id);
          if (!old) continue;
          const n = g.members.filter((m) => m.id.startsWith(`${id}.retry`)).length + 1;
          retries.push({
            ...old,
            id: `${id}.retry${n}`,
            queuePosition: positions[retries.length],
            status: 'queued',
            sessionId: null,
            policyVersionAtStart: null,
            attempts: 0,
          });
        }
        if (retries.length) {
          await this.state.insertRollouts(retries);
          g.members.push(...retries);
          g.pending += retries.length;
          g.row.status = 'queued';
          await this.writeGroup(g, 'queued');
          this.queue.push(g);
          this.pump();
          return;
        }
      }
      if (p.status === 'dropped') {
        this.controller.dropped(g.row.id);
        g.row.status = 'dropped';
        await this.writeGroup(g, 'dropped');
        this.groups.delete(g.row.id);
        this.pump();
      }
      return;
    }
    if (type === 'evaluation.requested') {
      const p = e.payload as { evalId: string; taskSetId: string; policyVersion: number; samplesPerTask?: number };
      if (this.evaluations.has(p.evalId) || (await this.state.evaluationKnown(p.evalId))) return;
      this.evaluations.add(p.evalId);
      // In the background: an evaluation takes minutes and must not hold the partition.
      void this.runEvaluation({
        taskSetId: p.taskSetId,
        version: p.policyVersion,
        samplesPerTask: p.samplesPerTask,
        evalId: p.evalId,
      }).catch((err: unknown) => this.logger.error('requested evaluation failed', { evalId: p.evalId, err }));
      return;
    }
    if (type === 'train_batch.trained') {
      const p = e.payload as { groupIds: string[]; policyVersion: number };
      for (const id of p.groupIds) {
        const g = this.groups.get(id);
        if (!g || g.row.purpose === 'eval' || terminal(g.row.status)) continue;
        try {
          // its slot frees when the version this batch produced serves, not before (staleness.ts)
          this.controller.trained(id, { releaseAtVersion: p.policyVersion, currentVersion: this.currentVersion });
        } catch (err) {
          // A group still in flight (retries running) cannot have been trained: keep it counted.
          this.logger.warn('train_batch.trained names a group still in flight', { groupId: id, err });
          continue;
        }
        g.row.status = 'trained';
        await this.writeGroup(g, 'trained');
        this.groups.delete(id);
      }
      this.pump();
    }
  }

  // ---------------------------------------------------------------- recovery

  private async recover(): Promise<void> {
    const rec = await recoverGroups({
      state: this.state,
      tasks: this.tasks,
      gateway: this.gateway,
      executor: this.executor,
      logger: this.logger,
      producer: this.config.producer,
      version: () => this.currentVersion,
      taskSet: (id) => this.taskSet(id),
    });
    for (const g of rec.groups) this.groups.set(g.row.id, g);
    this.queue.push(...rec.queued);
    this.ready.push(...rec.ready);
    this.controller = StalenessController.restore(
      { eta: this.config.eta, groupsPerStep: this.config.groupsPerStep },
      { inFlight: rec.inFlight, untrained: rec.untrained },
    );
  }

  // ---------------------------------------------------------------- running a rollout

  private launch(g: GroupState, r: RolloutRow): void {
    const abort = new AbortController();
    r.status = 'running';
    const done = this.executor
      .run(g, r, abort.signal)
      .then(
        ({ outcome, cleanup }) => this.finished(g, r, outcome, cleanup),
        (err: unknown) => this.logger.error('rollout bookkeeping failed', { rolloutId: r.id, err }),
      )
      .finally(() => {
        this.running.delete(r.id);
        this.metrics.inFlight.set(this.running.size);
        this.pump();
      });
    this.running.set(r.id, { abort, done });
    this.metrics.inFlight.set(this.running.size);
  }

  /**
   * A rollout's outcome is out (rollout.completed durable): its slot and its group's staleness
   * capacity are released now; its session close and state writes finish in the background, and
   * listeners hear of it once they have (its session is then closed).
   */
  private finished(g: GroupState, r: RolloutRow, outcome: ExecutedRollout['outcome'], cleanup: Promise<number>): void {
    const purpose = g.row.purpose;
    r.status = 'completed';
    this.metrics.completed.inc({ finish_reason: outcome.finishReason, purpose });
    g.pending--;
    const groupDone = g.pending === 0 && g.row.status === 'running';
    if (groupDone) {
      g.row.status = 'finished';
      if (purpose === 'train') this.controller.finished(g.row.id);
      else this.groups.delete(g.row.id);
    }
    const after = cleanup
      .then(async (cleanupMs) => {
        if (groupDone) await this.writeGroup(g, purpose === 'eval' ? 'dropped' : 'finished');
        const full: RolloutOutcome = { ...outcome, cleanupMs };
        for (const l of [...this.listeners]) {
          try {
            l(full);
          } catch (err) {
            this.logger.warn('rollout listener threw', { err });
          }
        }
      })
      .catch((err: unknown) => this.logger.error('rollout cleanup failed', { rolloutId: r.id, err }))
      .finally(() => {
        this.finishing.delete(after);
        this.wakeIdle();
      });
    this.finishing.add(after);
  }

  /** Group state writes in order per group (admission, finish, trained may follow each other closely). */
  private writeGroup(g: GroupState, status: GroupStatus, startVersion?: number): Promise<void> {
    const next = (g.writes ?? Promise.resolve()).then(() => this.state.setGroup(g.row.id, status, startVersion));
    g.writes = next.catch((err: unknown) => this.logger.error('group state write failed', { groupId: g.row.id, status, err }));
    return next;
  }
}

export { samplerSeed } from './rollouts/sampler-seed';
