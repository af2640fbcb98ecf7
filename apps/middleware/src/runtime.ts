import type { DataSource } from 'typeorm';
import { TOPICS, type TrainBatchStats } from '@anvil/contracts';
import type { MessageBus, Subscription } from '@anvil/messaging';
import { Outbox, runMigrations } from '@anvil/persistence';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { DataPoolIngestion } from './data-pool/ingestion';
import { dataPoolConfig, type DataPoolConfig, type DataPoolConfigInput } from './data-pool/config';
import { DataPool, type TickResult } from './data-pool/pool';
import { NotSchedulerError } from './data-pool/scheduling/scheduler-lease';

export interface DataPoolRuntimeOptions {
  bus: MessageBus;
  dataSource: DataSource;
  /** Scheduling, filters, advantages, timeouts (validated; see DataPoolConfig). */
  config?: DataPoolConfigInput;
  /** Consumer group of the ingestion (default 'anvil.middleware.data-pool'). */
  group?: string;
  concurrency?: number;
  /** Apply committed migrations before subscribing (default false: the host decides). */
  migrate?: boolean;
  /** Scheduler round every this many ms even without new events (timeouts, lease renewal). Default 500. */
  tickIntervalMs?: number;
  /**
   * Rounds asked for by events start at least this many ms apart (default 50). Under load every
   * ingested event asks for one; run back to back they would keep the database busy with rounds
   * that find nothing new, while a batch cut 50 ms later changes nothing.
   */
  minRoundIntervalMs?: number;
  /** Prune the call tokens and blobs of batches behind the newest full checkpoint (the trainer's resume point) every this many ms (default 60 s; 0 = never). */
  pruneIntervalMs?: number;
  /** Outbox sweeper knobs (produce-after-write of trajectory.ready, rollout_group.settled, train_batch.created). */
  outbox?: { staleAfterMs?: number; sweepIntervalMs?: number };
  /**
   * Run a scheduler round inside the event handler, before the consumed offsets are committed
   * (lower latency; the crash tests use it to die between a batch's commit and the offsets').
   */
  roundInHandler?: boolean;
  /** Called after a batch's transaction committed. */
  onBatch?: (batchId: string, stats: TrainBatchStats) => void;
  logger?: Logger;
  metrics?: ServiceMetrics;
}

/**
 * The Data Pool as a plain object (no Nest): what the middleware service, the tests, the
 * benchmark and the one-process main job all run.
 *  - ingests llm-call, rollout, weights and train-batch events (idempotent by event id, one
 *    transaction per fetched run of events) into PostgreSQL, call tokens as deltas;
 *  - settles groups (libs/rl's filters: compact filtering, env-failure drop + retry up to
 *    maxEnvRetries, over-long outputs masked or kept, zero-variance drop; then advantages) and
 *    publishes trajectory.ready and rollout_group.settled;
 *  - as the run's one active scheduler (a lease row in data_pool_scheduler, fenced per batch),
 *    cuts Windowed-FIFO batches into claim-checked train_batch.created v2 events.
 * Events are produced through the transactional outbox (event_outbox, producer config.producer).
 */
export class DataPoolRuntime {
  readonly pool: DataPool;
  readonly outbox: Outbox;
  readonly config: DataPoolConfig;
  private readonly ingestion: DataPoolIngestion;
  private subscription: Subscription | null = null;
  private timer: NodeJS.Timeout | null = null;
  private pruneTimer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  private again = false;
  private gaugesAt = 0;
  private roundStartedAt = -Infinity;
  private stopped = false;
  private readonly m;
  /** Last tick's result (for tests and /readyz). */
  lastTick: TickResult | null = null;

  constructor(private readonly opts: DataPoolRuntimeOptions) {
    this.config = dataPoolConfig(opts.config);
    this.outbox = new Outbox(opts.dataSource, opts.bus, {
      producer: this.config.producer,
      staleAfterMs: opts.outbox?.staleAfterMs ?? 10_000,
      sweepIntervalMs: opts.outbox?.sweepIntervalMs ?? 5_000,
      warn: (msg, f) => opts.logger?.warn(msg, f),
    });
    const metrics = opts.metrics;
    this.m = metrics
      ? {
          ingested: metrics.counter('data_pool_events_ingested_total', 'Events written to the Data Pool', ['type']),
          duplicates: metrics.counter('data_pool_events_duplicate_total', 'Redelivered events that changed nothing', ['type']),
          lag: metrics.histogram(
            'data_pool_ingest_lag_seconds',
            'From an event being produced to its row being committed',
            ['type'],
            [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
          ),
          groups: metrics.counter('data_pool_groups_settled_total', 'Rollout groups settled', ['status', 'reason']),
          dropped: metrics.counter('data_pool_rollouts_dropped_total', 'Rollouts dropped from the queue', ['reason']),
          batches: metrics.counter('data_pool_batches_total', 'Train batches cut'),
          scheduledTrajectories: metrics.counter('data_pool_trajectories_scheduled_total', 'Trajectories put into train batches'),
          staleness: metrics.histogram(
            'data_pool_batch_staleness_versions',
            'Mean staleness (policy versions per output token) of each batch',
            [],
            [0, 0.5, 1, 2, 3, 4, 6, 8, 12, 16],
          ),
          stalenessMax: metrics.histogram(
            'data_pool_batch_staleness_max_versions',
            'Max staleness of each batch',
            [],
            [0, 1, 2, 3, 4, 6, 8, 12, 16],
          ),
          sharing: metrics.histogram(
            'data_pool_batch_sharing',
            '1 - unique/total tokens of each batch',
            [],
            [0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99],
          ),
          groupsWaiting: metrics.gauge('data_pool_groups_waiting', 'Groups not settled yet'),
          ready: metrics.gauge('data_pool_trajectories_ready', 'Trajectories ready and not in a batch yet'),
          pending: metrics.gauge('data_pool_rollouts_pending', 'Queued rollouts not completed yet'),
          window: metrics.gauge('data_pool_window', 'Current Windowed-FIFO W'),
          active: metrics.gauge('data_pool_scheduler_active', '1 when this instance holds the run scheduler lease'),
        }
      : null;
    this.pool = new DataPool(opts.dataSource, this.outbox, this.config, {
      onBatch: (id, s) => {
        this.onBatch(s);
        opts.onBatch?.(id, s);
      },
      onSettled: (status, reason) => this.m?.groups.inc({ status, reason: (reason ?? 'none').split(':')[0] }),
      onDropped: (reason) => this.m?.dropped.inc({ reason }),
      warn: (msg, f) => opts.logger?.warn(msg, f),
    });
    this.ingestion = new DataPoolIngestion(opts.dataSource, opts.group ?? 'anvil.middleware.data-pool', this.config.runId);
  }

  private onBatch(s: TrainBatchStats): void {
    if (!this.m) return;
    this.m.batches.inc();
    this.m.scheduledTrajectories.inc(s.trajectories);
    this.m.staleness.observe(s.staleness.mean);
    this.m.stalenessMax.observe(s.staleness.max);
    this.m.sharing.observe(s.sharing);
  }

  /** Migrates (if asked), starts the outbox sweeper, subscribes, and runs scheduler rounds. */
  async start(): Promise<void> {
    const { dataSource: ds, bus } = this.opts;
    if (!ds.isInitialized) await ds.initialize();
    if (this.opts.migrate) await runMigrations(ds);
    this.outbox.start();
    const observe = (e: { type: string; occurredAt: number }, fresh: boolean) => {
      if (!this.m) return;
      (fresh ? this.m.ingested : this.m.duplicates).inc({ type: e.type });
      if (fresh) this.m.lag.observe({ type: e.type }, Math.max(0, Date.now() - e.occurredAt) / 1000);
    };
    this.subscription = await bus.subscribe({
      group: this.opts.group ?? 'anvil.middleware.data-pool',
      topics: [TOPICS.llmCalls, TOPICS.rollouts, TOPICS.weights, TOPICS.trainBatches],
      concurrency: this.opts.concurrency ?? 3,
      fromBeginning: true,
      handler: async (event) => {
        observe(event, await this.ingestion.ingest(event));
        if (this.opts.roundInHandler)
          await this.pool.tick().catch((err) => (err instanceof NotSchedulerError ? undefined : Promise.reject(err)));
        this.kick();
      },
      batchHandler: async (items) => {
        const fresh = await this.ingestion.ingestBatch(items.map((i) => i.event));
        for (const { event } of items) observe(event, fresh.has(event.id));
        if (this.opts.roundInHandler)
          await this.pool.tick().catch((err) => (err instanceof NotSchedulerError ? undefined : Promise.reject(err)));
        this.kick();
      },
    });
    const every = this.opts.tickIntervalMs ?? 500;
    this.timer = setInterval(() => this.kick(), every);
    this.timer.unref();
    const pruneEvery = this.opts.pruneIntervalMs ?? 60_000;
    if (pruneEvery > 0) {
      this.pruneTimer = setInterval(
        () => void this.pool.prune().catch((err) => this.opts.logger?.warn('prune failed', { err })),
        pruneEvery,
      );
      this.pruneTimer.unref();
    }
    this.kick();
  }

  /** Asks for a scheduler round (coalesced: at most one runs, one more follows if asked meanwhile). */
  kick(): void {
    if (this.stopped) return;
    if (this.ticking) {
      this.again = true;
      return;
    }
    this.ticking = (async () => {
      const spacing = this.opts.minRoundIntervalMs ?? 50;
      do {
        this.again = false;
        const wait = this.roundStartedAt + spacing - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        if (this.stopped) break;
        this.roundStartedAt = performance.now();
        try {
          this.lastTick = await this.pool.tick();
          // gauges are for /metrics: once a second is plenty (three counting queries a round was not)
          if (this.m && Date.now() - this.gaugesAt >= 1000) {
            this.gaugesAt = Date.now();
            this.m.active.set(this.lastTick.active ? 1 : 0);
            const g = await this.pool.gauges();
            this.m.groupsWaiting.set(g.groupsWaiting);
            this.m.ready.set(g.ready);
            this.m.pending.set(g.pending);
            if (this.pool.window !== null) this.m.window.set(this.pool.window);
          }
        } catch (err) {
          if (!(err instanceof NotSchedulerError)) this.opts.logger?.warn('data pool round failed; retried on the next one', { err });
        }
      } while (this.again && !this.stopped);
    })().finally(() => (this.ticking = null));
  }

  /** Runs rounds until nothing changes (tests, benches): returns the batch ids cut. */
  async settle(maxRounds = 20): Promise<string[]> {
    const out: string[] = [];
    while (this.ticking) await this.ticking;
    for (let i = 0; i < maxRounds; i++) {
      let r: TickResult;
      try {
        r = await this.pool.tick();
      } catch (err) {
        if (err instanceof NotSchedulerError) continue;
        throw err;
      }
      out.push(...r.batches);
      if (!r.batches.length && !r.settledGroups && !r.requeued) break;
    }
    return out;
  }

  /** Leaves the group (committing what was handled), publishes what the outbox holds, gives the lease up. */
  async stop(timeoutMs = 10_000): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    if (this.pruneTimer) clearInterval(this.pruneTimer);
    await this.subscription?.stop({ timeoutMs });
    while (this.ticking) await this.ticking;
    await this.outbox.stop(timeoutMs);
    await this.pool.releaseLease().catch(() => undefined);
  }
}
