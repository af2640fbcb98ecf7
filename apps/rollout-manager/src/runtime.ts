import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { createEvent, TOPICS, type AnyEventEnvelope, type EvaluationCompletedV1, type RolloutFinishReason } from '@anvil/contracts';
import type { MessageBus, Subscription } from '@anvil/messaging';
import { createLogger, ServiceMetrics, type Logger } from '@anvil/observability';
import { StalenessController } from '@anvil/rl';
import { checkAgentEnv, killLeftoverAgent, runBlackBox, type BlackBoxResult } from './agents/black-box';
import { MemoryStore, runWhiteBoxLoop, type LoopResult } from './agents/white-box';
import { BUILTIN_ENVIRONMENTS, type EnvironmentFactory } from './environments/registry';
import { EnvironmentError, type Environment, type Episode, type Transcript, type VerifyResult } from './environments/types';
import { GatewayClient, GatewayError } from './gateway-client';
import { EventBatcher } from './event-batcher';
import { RolloutMetrics } from './metrics';
import { RolloutStateStore, type GroupRow, type RolloutRow } from './state-store';
import { parseTaskJsonl, type StoredTask } from './tasks/jsonl';
import { taskSetSpecSchema, type TaskSetSpec, type TaskSetSpecInput, type VerifierSpec } from './tasks/task-set';
import { RolloutTaskStore } from './tasks/task-store';
import { checkVerifier, runVerifier, VerifierError, type VerifierFn } from './verifiers/verifiers';

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

/** What one finished rollout reported (also handed to `onRolloutCompleted` listeners). */
export interface RolloutOutcome {
  rolloutId: string;
  groupId: string;
  taskId: string;
  purpose: 'train' | 'eval';
  finishReason: RolloutFinishReason;
  outcomeReward: number | null;
  success: boolean | null;
  numCalls: number;
  error: string | null;
  versionsSpanned: number;
  /** From the slot being taken to the outcome (sessions, events, agent, verifier: everything). */
  wallMs: number;
  /** The agent's own time: the white-box loop (policy calls and tools) or the black-box process, start to exit. */
  agentMs: number;
  /** White-box only: the loop's record (messages sent per call, call ids). */
  loop?: LoopResult;
  blackBox?: Omit<BlackBoxResult, 'cleanup'>;
}

export class EvaluationError extends Error {
  override readonly name = 'EvaluationError';
}

interface GroupState {
  row: GroupRow;
  task: StoredTask;
  spec: TaskSetSpec;
  members: RolloutRow[];
  pending: number;
  submittedAt: number;
  evalVersion?: number;
  /** An evaluation's sampling temperature, when it differs from the task set's. */
  evalTemperature?: number;
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
  private readonly specs = new Map<string, { spec: TaskSetSpec; env: Environment | null }>();
  private readonly listeners: ((o: RolloutOutcome) => void)[] = [];
  private readonly idleWaiters: (() => void)[] = [];
  private readonly evalGates = new Set<string>();
  private readonly evaluations = new Set<string>();
  private subscriptions: Subscription[] = [];
  private pollTimer: NodeJS.Timeout | null = null;
  private stopping = false;
  private started = false;
  private waitingSince: number | null = null;

  constructor(private readonly opts: RolloutRuntimeOptions) {
    this.config = { ...RUNTIME_DEFAULTS, ...opts.config };
    this.logger = opts.logger ?? createLogger({ service: 'rollout-manager', level: 'warn' });
    this.serviceMetrics = opts.metrics ?? new ServiceMetrics('rollout-manager');
    this.metrics = new RolloutMetrics(this.serviceMetrics);
    this.bus = opts.bus;
    this.events = new EventBatcher(opts.bus);
    this.gateway = new GatewayClient(opts.gatewayUrl.replace(/\/$/, ''), opts.adminToken, { requestTimeoutMs: this.config.requestTimeoutMs, model: this.config.model });
    this.tasks = new RolloutTaskStore(opts.dataSource);
    this.state = new RolloutStateStore(opts.dataSource, this.config.consumerGroup);
    this.envFactories = { ...BUILTIN_ENVIRONMENTS, ...opts.environments };
    this.verifierFns = { ...opts.verifiers };
    this.controller = new StalenessController({ eta: this.config.eta, groupsPerStep: this.config.groupsPerStep });
    this.currentVersion = this.config.initialPolicyVersion;
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
      evaluationsRunning: this.evalGates.size,
    };
  }

  private isIdle(): boolean {
    return this.queue.length === 0 && this.evalQueue.length === 0 && this.ready.length === 0 && this.running.size === 0;
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
    const tasks = [...env.generate({ seed: input.seed, count: input.trainCount, split: 'train' }), ...env.generate({ seed: input.seed, count: input.evalCount, split: 'eval' })];
    return this.loadTaskSet(input, tasks);
  }

  private async taskSet(taskSetId: string): Promise<{ spec: TaskSetSpec; env: Environment | null }> {
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
   * `repeat` times. Queue positions are assigned here, in submission order.
   */
  async submit(req: { taskSetId: string; groupSize?: number; taskIds?: string[]; repeat?: number; split?: 'train' | 'eval' }): Promise<{ groupIds: string[]; rolloutIds: string[] }> {
    const { spec } = await this.taskSet(req.taskSetId);
    const all = await this.tasks.tasks(req.taskSetId);
    const chosen = req.taskIds ? all.filter((t) => req.taskIds?.includes(t.id) || req.taskIds?.includes(String(t.metadata?.sourceId))) : all.filter((t) => t.split === (req.split ?? 'train'));
    if (req.taskIds && chosen.length !== req.taskIds.length) throw new Error(`taskIds: ${req.taskIds.length - chosen.length} unknown in task set ${req.taskSetId}`);
    const G = req.groupSize ?? spec.groupSize ?? this.config.groupSize;
    const groupIds: string[] = [];
    const rolloutIds: string[] = [];
    for (let rep = 0; rep < (req.repeat ?? 1); rep++) {
      for (const task of chosen) {
        const g = await this.newGroup(spec, task, G, 'train', null);
        groupIds.push(g.row.id);
        rolloutIds.push(...g.members.map((m) => m.id));
        this.queue.push(g);
      }
    }
    this.metrics.queued.set(this.queuedCount());
    this.pump();
    return { groupIds, rolloutIds };
  }

  private async newGroup(spec: TaskSetSpec, task: StoredTask, G: number, purpose: 'train' | 'eval', evalId: string | null): Promise<GroupState> {
    const groupId = `${purpose === 'eval' ? 'eval:' : ''}${randomUUID()}`;
    const row: GroupRow = { id: groupId, taskId: task.id, taskSetId: spec.id, groupSize: G, purpose, evalId, status: 'queued', startVersion: null };
    const positions = await this.state.queuePositions(G);
    const members: RolloutRow[] = Array.from({ length: G }, (_, i) => ({
      id: `${groupId}.${i}`,
      groupId,
      taskId: task.id,
      sampleIndex: i,
      queuePosition: positions[i],
      status: 'queued',
      sessionId: null,
      policyVersionAtStart: null,
      attempts: 0,
    }));
    await this.state.insertGroup(row, members);
    const g: GroupState = { row, task, spec, members, pending: G, submittedAt: Date.now() };
    this.groups.set(groupId, g);
    return g;
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
  async runEvaluation(req: { taskSetId: string; version: number; samplesPerTask?: number; temperature?: number; evalId?: string; waitForVersionMs?: number }): Promise<EvaluationCompletedV1> {
    const evalId = req.evalId ?? randomUUID();
    this.evaluations.add(evalId);
    const { spec } = await this.taskSet(req.taskSetId);
    const tasks = (await this.tasks.tasks(req.taskSetId)).filter((t) => t.split === 'eval');
    if (tasks.length === 0) throw new EvaluationError(`taskSetId: task set ${req.taskSetId} has no eval tasks`);
    const deadline = Date.now() + (req.waitForVersionMs ?? 600_000);
    while (this.currentVersion < req.version) {
      if (Date.now() > deadline) throw new EvaluationError(`version: ${req.version} was not activated within ${req.waitForVersionMs ?? 600_000} ms (current ${this.currentVersion})`);
      await new Promise((r) => setTimeout(r, 50));
    }
    if (this.currentVersion > req.version) throw new EvaluationError(`version: ${req.version} is already past (current ${this.currentVersion}); evaluations run pinned to the current version`);
    const startedAt = Date.now();
    this.evalGates.add(evalId);
    try {
      const groups: GroupState[] = [];
      for (const task of tasks) {
        const g = await this.newGroup(spec, task, req.samplesPerTask ?? 1, 'eval', evalId);
        g.evalVersion = req.version;
        if (req.temperature !== undefined) g.evalTemperature = req.temperature;
        groups.push(g);
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
      await this.bus.publish(createEvent('evaluation.completed', payload, { key: evalId, producer: this.config.producer, id: `evaluation:${evalId}:completed` }));
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
      if (this.running.size + this.ready.length >= this.config.concurrency) break;
      // Eval groups first, and only at their pinned version.
      const ev = this.evalQueue[0];
      if (ev) {
        if (this.currentVersion !== ev.evalVersion) {
          // The version moved before these were admitted: run them anyway (results say versionDrift); nothing waits forever.
          this.logger.warn('evaluation admitted after the version moved', { evalId: ev.row.evalId, pinned: ev.evalVersion, current: this.currentVersion });
        }
        this.evalQueue.shift();
        this.admit(ev);
        continue;
      }
      if (this.evalGates.size > 0) break;
      const head = this.queue[0];
      if (!head) break;
      const r = this.controller.tryAdmit(head.row.id, this.currentVersion);
      if (!r.admitted) {
        this.metrics.admissionRefusals.inc({ reason: r.reason });
        if (this.waitingSince === null) this.waitingSince = Date.now();
        break;
      }
      this.waitingSince = null;
      this.queue.shift();
      this.metrics.admissionWaitSeconds.observe((Date.now() - head.submittedAt) / 1000);
      this.admit(head);
    }
    this.metrics.queued.set(this.queuedCount());
    if (this.isIdle()) for (const w of this.idleWaiters.splice(0)) w();
  }

  private admit(g: GroupState): void {
    g.row.status = 'running';
    g.row.startVersion = this.currentVersion;
    void this.state.setGroup(g.row.id, 'running', this.currentVersion).catch((err: unknown) => this.logger.error('group state write failed', { groupId: g.row.id, err }));
    for (const m of g.members) if (m.status === 'queued') this.ready.push({ group: g, rollout: m });
  }

  // ---------------------------------------------------------------- events in

  private async onEvent(e: AnyEventEnvelope): Promise<void> {
    const type = e.type as string;
    if (type === 'policy_version.activated') {
      const v = (e.payload as { version: number }).version;
      if (v > this.currentVersion) {
        this.currentVersion = v;
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
          retries.push({ ...old, id: `${id}.retry${n}`, queuePosition: positions[retries.length], status: 'queued', sessionId: null, policyVersionAtStart: null, attempts: 0 });
        }
        if (retries.length) {
          await this.state.insertRollouts(retries);
          g.members.push(...retries);
          g.pending += retries.length;
          g.row.status = 'queued';
          await this.state.setGroup(g.row.id, 'queued');
          this.queue.push(g);
          this.pump();
          return;
        }
      }
      if (p.status === 'dropped') {
        this.controller.dropped(g.row.id);
        g.row.status = 'dropped';
        await this.state.setGroup(g.row.id, 'dropped');
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
      void this.runEvaluation({ taskSetId: p.taskSetId, version: p.policyVersion, samplesPerTask: p.samplesPerTask, evalId: p.evalId }).catch((err: unknown) =>
        this.logger.error('requested evaluation failed', { evalId: p.evalId, err }),
      );
      return;
    }
    if (type === 'train_batch.trained') {
      const p = e.payload as { groupIds: string[] };
      for (const id of p.groupIds) {
        const g = this.groups.get(id);
        if (!g || g.row.purpose === 'eval' || terminal(g.row.status)) continue;
        try {
          this.controller.trained(id);
        } catch (err) {
          // A group still in flight (retries running) cannot have been trained: keep it counted.
          this.logger.warn('train_batch.trained names a group still in flight', { groupId: id, err });
          continue;
        }
        g.row.status = 'trained';
        await this.state.setGroup(id, 'trained');
        this.groups.delete(id);
      }
      this.pump();
    }
  }

  // ---------------------------------------------------------------- recovery

  private async recover(): Promise<void> {
    const open = await this.state.openGroups();
    const rows = await this.state.rolloutsOfGroups(open.map((g) => g.id));
    const inFlight: { groupId: string; startVersion: number }[] = [];
    const untrained: string[] = [];
    for (const row of open) {
      const { spec } = await this.taskSet(row.taskSetId);
      const task = (await this.tasks.tasks(row.taskSetId)).find((t) => t.id === row.taskId);
      if (!task) {
        this.logger.error('recovery: task of an open group is gone', { groupId: row.id, taskId: row.taskId });
        continue;
      }
      const members = rows.filter((r) => r.groupId === row.id);
      // Rollouts that were running when the previous manager died: sessions closed, ended as aborted (once: deterministic event id).
      for (const m of members.filter((r) => r.status === 'running')) {
        if (m.agentPgid && killLeftoverAgent(m.agentPgid)) this.logger.warn('killed a black-box agent left by the previous process', { rolloutId: m.id, pgid: m.agentPgid });
        if (m.sessionId) await this.closeSession(m.sessionId);
        await this.publishCompleted({
          rolloutId: m.id,
          groupId: row.id,
          taskId: row.taskId,
          finishReason: 'aborted',
          outcomeReward: null,
          processRewards: [],
          numCalls: 0,
          error: 'rollout manager restarted while the rollout ran',
          versionAtStart: m.policyVersionAtStart ?? this.currentVersion,
          success: null,
        });
        await this.state.rolloutCompleted(m.id, 'aborted');
        m.status = 'completed';
      }
      const g: GroupState = { row, task, spec, members, pending: members.filter((m) => m.status !== 'completed').length, submittedAt: Date.now() };
      this.groups.set(row.id, g);
      if (row.purpose === 'eval') {
        // An evaluation's caller is gone with the old process: its remaining rollouts are not re-run.
        for (const m of members.filter((r) => r.status === 'queued')) await this.state.rolloutCompleted(m.id, 'aborted');
        await this.state.setGroup(row.id, 'dropped');
        this.groups.delete(row.id);
        continue;
      }
      if (row.status === 'queued') this.queue.push(g);
      else if (g.pending > 0) {
        inFlight.push({ groupId: row.id, startVersion: row.startVersion ?? this.currentVersion });
        for (const m of members.filter((r) => r.status === 'queued')) this.ready.push({ group: g, rollout: m });
      } else {
        if (row.status === 'running') await this.state.setGroup(row.id, 'finished');
        g.row.status = 'finished';
        untrained.push(row.id);
      }
    }
    this.controller = StalenessController.restore({ eta: this.config.eta, groupsPerStep: this.config.groupsPerStep }, { inFlight, untrained });
  }

  // ---------------------------------------------------------------- running a rollout

  private launch(g: GroupState, r: RolloutRow): void {
    const abort = new AbortController();
    r.status = 'running';
    const done = this.execute(g, r, abort.signal)
      .catch((err: unknown) => this.logger.error('rollout bookkeeping failed', { rolloutId: r.id, err }))
      .finally(() => {
        this.running.delete(r.id);
        this.metrics.inFlight.set(this.running.size);
        this.pump();
      });
    this.running.set(r.id, { abort, done });
    this.metrics.inFlight.set(this.running.size);
  }

  private async closeSession(sessionId: string): Promise<boolean> {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        await this.gateway.closeSession(sessionId);
        return true;
      } catch (err) {
        if (err instanceof GatewayError && err.status === 404) return true;
        await new Promise((res) => setTimeout(res, 200 * 2 ** attempt));
        if (attempt === 2) this.logger.error('session close failed', { sessionId, err });
      }
    }
    return false;
  }

  private async publishCompleted(o: {
    rolloutId: string;
    groupId: string;
    taskId: string;
    finishReason: RolloutFinishReason;
    outcomeReward: number | null;
    processRewards: { callId: string; value: number }[];
    numCalls: number;
    error: string | null;
    versionAtStart: number;
    success: boolean | null;
  }): Promise<void> {
    const event = createEvent(
      'rollout.completed',
      {
        rolloutId: o.rolloutId,
        groupId: o.groupId,
        taskId: o.taskId,
        finishReason: o.finishReason,
        outcomeReward: o.outcomeReward,
        processRewards: o.processRewards,
        numCalls: o.numCalls,
        error: o.error === null ? null : o.error.slice(0, 10_000),
        completedAt: Date.now(),
        policyVersionAtEnd: this.currentVersion,
        versionsSpanned: Math.max(1, this.currentVersion - o.versionAtStart + 1),
        success: o.success,
      },
      { key: o.rolloutId, producer: this.config.producer, id: `${o.rolloutId}:completed` },
    );
    for (let attempt = 0; ; attempt++) {
      try {
        await this.events.publish(event);
        return;
      } catch (err) {
        if (attempt >= 5) throw err;
        await new Promise((res) => setTimeout(res, 200 * 2 ** attempt));
      }
    }
  }

  private async execute(g: GroupState, r: RolloutRow, stopSignal: AbortSignal): Promise<void> {
    const { spec, task } = g;
    const { env } = await this.taskSet(spec.id);
    const purpose = g.row.purpose;
    const t0 = performance.now();
    const versionAtStart = this.currentVersion;
    const limits = spec.limits;
    const maxSteps = limits.maxSteps ?? env?.limits(task).maxSteps ?? 16;
    const verifier: VerifierSpec = task.verifier ?? spec.verifier ?? { kind: 'env' };
    let finishReason: RolloutFinishReason = 'completed';
    let outcomeReward: number | null = null;
    let success: boolean | null = null;
    let error: string | null = null;
    let numCalls = 0;
    let processRewards: { callId: string; value: number }[] = [];
    let loop: LoopResult | undefined;
    let blackBox: BlackBoxResult | undefined;
    let sessionId: string | null = null;
    let startedPublished = false;
    let agentMs = 0;
    const seed = samplerSeed(g.row.purpose, task.id, r);

    for (let attempt = 0; ; attempt++) {
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort('timeout'), limits.timeoutMs);
      const signal = AbortSignal.any([stopSignal, timeout.signal]);
      let episode: Episode | null = null;
      let retry = false;
      try {
        const session = await this.gateway.createSession({
          rolloutId: r.id,
          groupId: g.row.id,
          taskId: task.id,
          model: this.config.model,
          ...(limits.maxContextTokens ? { maxContextTokens: limits.maxContextTokens } : {}),
          expiresAt: Date.now() + limits.timeoutMs + 60_000,
        });
        sessionId = session.sessionId;
        // The state write and the started event travel together; both are awaited before the agent starts.
        const running = this.state.rolloutRunning(r.id, session.sessionId, versionAtStart, attempt + 1).then(
          () => null,
          (err: unknown) => err as Error,
        );
        if (!startedPublished) {
          await this.events.publish(
            createEvent(
              'rollout.started',
              {
                rolloutId: r.id,
                groupId: g.row.id,
                taskId: task.id,
                taskSetId: spec.id,
                sampleIndex: r.sampleIndex,
                groupSize: g.row.groupSize,
                agent: { kind: spec.agent.kind, name: spec.agent.name },
                policyVersionAtStart: versionAtStart,
                startedAt: Date.now(),
                queuePosition: r.queuePosition,
                purpose,
                ...(g.row.evalId ? { evalId: g.row.evalId } : {}),
              },
              { key: r.id, producer: this.config.producer, id: `${r.id}:started` },
            ),
          );
          startedPublished = true;
          this.metrics.started.inc({ purpose, agent: spec.agent.kind });
        }
        const writeFailed = await running;
        if (writeFailed) throw writeFailed;
        episode = env ? env.reset(task, { rolloutId: r.id, seed, signal }) : noToolsEpisode();
        let transcript: Transcript;
        let agentInfo: Parameters<typeof runVerifier>[2]['agent'];
        if (spec.agent.kind === 'white-box') {
          const a0 = performance.now();
          loop = await runWhiteBoxLoop(
            { gateway: this.gateway, baseUrl: session.baseUrl, episode, signal },
            {
              opening: task.messages,
              tools: task.tools,
              context: spec.context,
              maxSteps,
              maxContextTokens: limits.maxContextTokens,
              temperature: g.evalTemperature ?? spec.sampling.temperature,
              maxTokens: spec.sampling.maxTokens,
              builtinTools: spec.builtinTools,
              memory: new MemoryStore(),
              seed: seed % 1_000_000,
            },
          );
          agentMs += performance.now() - a0;
          numCalls = loop.callIds.length;
          finishReason = loop.finish === 'aborted' && stopSignal.aborted ? 'aborted' : loop.finish === 'aborted' ? 'aborted' : loop.finish;
          transcript = { messages: loop.messages, finalAnswer: loop.finalAnswer };
        } else {
          blackBox = await runBlackBox(spec.agent, task, session, {
            timeoutMs: limits.timeoutMs,
            signal: stopSignal,
            repoRoot: this.config.repoRoot,
            onSpawn: (pgid) => void this.state.setAgentPgid(r.id, pgid).catch((err: unknown) => this.logger.warn('agent pgid write failed', { rolloutId: r.id, err })),
          });
          agentMs += blackBox.wallMs;
          const st = await this.gateway.session(session.sessionId).catch(() => null);
          numCalls = st?.callCount ?? 0;
          if (blackBox.timedOut) finishReason = 'timeout';
          else if (blackBox.aborted) finishReason = 'aborted';
          else if (blackBox.signal === 'spawn-error') throw new EnvironmentError(`agent ${spec.agent.name}: ${blackBox.stderr.trim().slice(0, 500)}`);
          else if (blackBox.exitCode !== 0) {
            finishReason = 'env_error';
            error = `agent ${spec.agent.name} exited with ${blackBox.exitCode ?? blackBox.signal}: ${blackBox.stderr.trim().slice(-2000)}`;
          }
          transcript = { messages: blackBox.messages ?? task.messages, finalAnswer: blackBox.finalAnswer };
          agentInfo = { exitCode: blackBox.exitCode, stdout: blackBox.stdout, stderr: blackBox.stderr, answerFile: blackBox.answerFile, workspace: blackBox.workspace };
        }
        if (finishReason !== 'aborted' && finishReason !== 'env_error') {
          try {
            const v: VerifyResult = await runVerifier(verifier, spec.env, { task, transcript, agent: agentInfo }, this.verifierDeps(spec, env), stopSignal);
            outcomeReward = v.outcomeReward;
            success = v.success;
            if (v.processRewards && loop) {
              processRewards = v.processRewards.flatMap((value, i) => {
                const callId = loop?.stepCallIds[i];
                return callId ? [{ callId, value }] : [];
              });
            }
          } catch (err) {
            finishReason = 'env_error';
            error = (err as Error).message;
            outcomeReward = null;
            success = null;
          }
        }
      } catch (err) {
        const calls = sessionId ? ((await this.gateway.session(sessionId).catch(() => null))?.callCount ?? numCalls) : 0;
        if (stopSignal.aborted) {
          finishReason = 'aborted';
        } else if (timeout.signal.aborted) {
          finishReason = 'timeout';
        } else if (err instanceof EnvironmentError && calls === 0 && attempt < limits.maxEnvRetries) {
          // Nothing was recorded under this rollout id yet: run it again.
          retry = true;
          this.metrics.envRetries.inc();
        } else {
          finishReason = 'env_error';
        }
        numCalls = calls;
        error = `${(err as Error).name}: ${(err as Error).message}`;
        if (err instanceof VerifierError) finishReason = 'env_error';
      } finally {
        clearTimeout(timer);
        await Promise.resolve(episode?.close?.()).catch(() => undefined);
        void blackBox?.cleanup();
      }
      if (!retry) break;
      // The failed attempt's session is closed before the next attempt opens its own.
      if (sessionId) await this.closeSession(sessionId);
      sessionId = null;
      error = null;
    }

    this.metrics.agentSeconds.observe({ agent: spec.agent.kind }, agentMs / 1000);
    // The session is closed whatever the ending, alongside the completion (not after it).
    const closing = sessionId ? this.closeSession(sessionId) : Promise.resolve(true);
    if (startedPublished) {
      await Promise.all([
        closing,
        this.publishCompleted({ rolloutId: r.id, groupId: g.row.id, taskId: task.id, finishReason, outcomeReward, processRewards, numCalls, error, versionAtStart, success }),
      ]);
    } else {
      await closing;
      // Never started (the gateway refused the session, or we were stopped first): report it anyway so the group completes.
      finishReason = stopSignal.aborted ? 'aborted' : 'env_error';
      await this.events.publish(
        createEvent(
          'rollout.started',
          {
            rolloutId: r.id,
            groupId: g.row.id,
            taskId: task.id,
            taskSetId: spec.id,
            sampleIndex: r.sampleIndex,
            groupSize: g.row.groupSize,
            agent: { kind: spec.agent.kind, name: spec.agent.name },
            policyVersionAtStart: versionAtStart,
            startedAt: Date.now(),
            queuePosition: r.queuePosition,
            purpose,
            ...(g.row.evalId ? { evalId: g.row.evalId } : {}),
          },
          { key: r.id, producer: this.config.producer, id: `${r.id}:started` },
        ),
      );
      await this.publishCompleted({ rolloutId: r.id, groupId: g.row.id, taskId: task.id, finishReason, outcomeReward: null, processRewards: [], numCalls: 0, error, versionAtStart, success: null });
    }
    await this.state.rolloutCompleted(r.id, finishReason);
    const wallMs = performance.now() - t0;
    r.status = 'completed';
    this.metrics.completed.inc({ finish_reason: finishReason, purpose });
    g.pending--;
    if (g.pending === 0 && g.row.status === 'running') {
      g.row.status = 'finished';
      if (purpose === 'train') this.controller.finished(g.row.id);
      await this.state.setGroup(g.row.id, purpose === 'eval' ? 'dropped' : 'finished');
      if (purpose === 'eval') this.groups.delete(g.row.id);
    }
    const { cleanup: _cleanup, ...bb } = blackBox ?? ({} as Partial<BlackBoxResult>);
    const outcome: RolloutOutcome = {
      rolloutId: r.id,
      groupId: g.row.id,
      taskId: task.id,
      purpose,
      finishReason,
      outcomeReward,
      success,
      numCalls,
      error,
      versionsSpanned: Math.max(1, this.currentVersion - versionAtStart + 1),
      wallMs,
      agentMs,
      loop,
      blackBox: blackBox ? (bb as Omit<BlackBoxResult, 'cleanup'>) : undefined,
    };
    for (const l of [...this.listeners]) {
      try {
        l(outcome);
      } catch (err) {
        this.logger.warn('rollout listener threw', { err });
      }
    }
  }
}

function noToolsEpisode(): Episode {
  return { executeTool: async (call) => ({ content: `error: unknown tool ${call.name}` }) };
}

/**
 * The seed of a rollout's sampler and environment. A train rollout's comes from its own id. An
 * evaluation rollout's comes from (task, sample index) alone, so every evaluation of a task set
 * draws the same random numbers for the same task and sample: two versions' success rates are a
 * paired comparison (common random numbers), and the run-to-run noise of an evaluation (±5 points
 * on 100 tasks at temperature 1) mostly cancels out of the gain between two of them. Each
 * evaluation on its own is still an unbiased draw of its policy at the sampling temperature.
 */
export function samplerSeed(purpose: 'train' | 'eval', taskId: string, r: Pick<RolloutRow, 'id' | 'sampleIndex'>): number {
  return hashSeed(purpose === 'eval' ? `eval:${taskId}:${r.sampleIndex}` : r.id);
}

function hashSeed(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}
