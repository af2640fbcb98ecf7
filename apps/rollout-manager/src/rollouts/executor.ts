import type { CallsRefused, RolloutFinishReason } from '@anvil/contracts';
import type { Logger } from '@anvil/observability';
import type { BlackBoxResult } from '../agents/black-box';
import type { LoopResult } from '../agents/white-box';
import type { Environment } from '../environments/types';
import type { EventBatcher } from '../event-batcher';
import type { GatewayClient } from '../gateway-client';
import type { RolloutMetrics } from '../metrics';
import type { Sandboxes } from '../sandbox/sandboxes';
import type { RolloutRow, RolloutStateStore } from '../state-store';
import type { TaskSetSpec } from '../tasks/task-set';
import type { VerifierDeps } from '../verifiers/verifiers';
import type { AgentSteps } from './agent-steps/agent-step';
import { BlackBoxStep } from './agent-steps/black-box-step';
import { WhiteBoxStep } from './agent-steps/white-box-step';
import type { BudgetWatch } from './budget-watch';
import { runAttempt, type Attempt, type AttemptDeps } from './attempt';
import { completedEvent, versionsSpanned } from './events';
import type { GroupState, LoadedTaskSet } from './group-state';
import { rolloutContext, type RolloutContext, type RolloutResult } from './rollout-context';
import type { RolloutSessions } from './rollout-sessions';
import { RolloutStart } from './rollout-start';
import type { SessionLookahead } from './session-lookahead';

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
  /** Calls its gateway session's call limits refused (over the budget: it ended as max_steps; over the rate). */
  callsRefused?: CallsRefused;
  error: string | null;
  versionsSpanned: number;
  /** From the slot being taken to rollout.completed being durable (session, events, agent, verifier: everything on the rollout's path). */
  wallMs: number;
  /** The agent's own time: the white-box loop (policy calls and tools) or the black-box process, start to exit. */
  agentMs: number;
  /** How long opening its session took, and whether that happened ahead, while the rollout waited for a slot (then it is not in wallMs). */
  sessionMs: number;
  sessionOpenedAhead: boolean;
  /** After rollout.completed: closing the session (white-box) and the state write, off the rollout's path. */
  cleanupMs: number;
  /** White-box only: the loop's record (messages sent per call, call ids). */
  loop?: LoopResult;
  blackBox?: Omit<BlackBoxResult, 'cleanup'>;
}

export interface ExecutorDeps {
  config: { producer: string; repoRoot: string };
  gateway: GatewayClient;
  sessions: RolloutSessions;
  state: RolloutStateStore;
  events: EventBatcher;
  metrics: RolloutMetrics;
  logger: Logger;
  lookahead: SessionLookahead;
  budget: BudgetWatch;
  sandboxes: Sandboxes;
  version(): number;
  taskSet(id: string): Promise<LoadedTaskSet>;
  verifierDeps(spec: TaskSetSpec, env: Environment | null): VerifierDeps;
}

/** The outcome, and the session close and state write still running after it. */
export interface ExecutedRollout {
  outcome: Omit<RolloutOutcome, 'cleanupMs'>;
  cleanup: Promise<number>;
}

/**
 * Runs one rollout, from its slot to its durable rollout.completed: attempts (attempt.ts: a
 * session, the agent of its kind, the verifier; an environment failure before anything was
 * recorded runs it again), then the events. Only what the outcome depends on is on that path:
 * rollout.started and the running-state write travel beside the agent (rollout-start.ts), and
 * rollout.started is durable before rollout.completed is published (same key, same topic: in
 * order for consumers); a white-box session is closed and the rollout's row marked completed
 * after the outcome (`cleanup`).
 */
export class RolloutExecutor {
  private readonly steps: AgentSteps;

  constructor(private readonly d: ExecutorDeps) {
    this.steps = {
      'white-box': new WhiteBoxStep(d.gateway),
      'black-box': new BlackBoxStep({
        logger: d.logger,
        repoRoot: d.config.repoRoot,
        sandboxes: d.sandboxes,
        model: d.gateway.model,
        closeSession: (id, withCalls) => d.sessions.close(id, withCalls),
        budget: d.budget,
      }),
    };
  }

  async run(g: GroupState, r: RolloutRow, stopSignal: AbortSignal): Promise<ExecutedRollout> {
    const { env } = await this.d.taskSet(g.spec.id);
    const ctx = rolloutContext(g, r, env, this.d.version(), stopSignal);
    const start = new RolloutStart(
      { events: this.d.events, state: this.d.state, metrics: this.d.metrics, logger: this.d.logger, producer: this.d.config.producer },
      ctx,
    );
    const attempts = await this.attempts(ctx, start);
    const agentMs = attempts.reduce((ms, a) => ms + a.agentMs, 0);
    this.d.metrics.agentSeconds.observe({ agent: ctx.spec.agent.kind }, agentMs / 1000);

    const last = attempts[attempts.length - 1];
    const result = start.happened ? last.result : neverStarted(last.result, stopSignal.aborted);
    const versionAtEnd = await this.report(ctx, start, result);
    const wallMs = performance.now() - ctx.t0;
    this.d.metrics.overheadSeconds.observe({ agent: ctx.spec.agent.kind }, Math.max(0, wallMs - agentMs) / 1000);
    return {
      outcome: outcomeOf(ctx, attempts, result, { versionAtEnd, wallMs, agentMs }),
      cleanup: this.cleanup(r, last.openSessionId, start, result.finishReason),
    };
  }

  /** rollout.started durable, then rollout.completed: the version current at the end. */
  private async report(ctx: RolloutContext, start: RolloutStart, result: RolloutResult): Promise<number> {
    await start.durable();
    const versionAtEnd = this.d.version();
    await this.d.events.publishDurably(
      completedEvent({
        ...result,
        rolloutId: ctx.rollout.id,
        groupId: ctx.group.row.id,
        taskId: ctx.task.id,
        versionAtStart: ctx.versionAtStart,
        producer: this.d.config.producer,
        versionAtEnd,
      }),
    );
    return versionAtEnd;
  }

  /** Attempts until one is not retried; the first takes the session opened ahead, if any. */
  private async attempts(ctx: RolloutContext, start: RolloutStart): Promise<Attempt[]> {
    const deps: AttemptDeps = {
      sessions: this.d.sessions,
      steps: this.steps,
      metrics: this.d.metrics,
      verifierDeps: this.d.verifierDeps(ctx.spec, ctx.env),
    };
    const attempts: Attempt[] = [];
    for (let n = 0; ; n++) {
      const ahead = n === 0 ? this.d.lookahead.take(ctx.rollout.id) : undefined;
      const a = await runAttempt(deps, ctx, start, n, ahead);
      attempts.push(a);
      if (!a.retry) return attempts;
    }
  }

  /** After rollout.completed: the session still open closed, then the rollout's row marked completed (after its running write). */
  private async cleanup(
    r: RolloutRow,
    openSessionId: string | null,
    start: RolloutStart,
    finishReason: RolloutFinishReason,
  ): Promise<number> {
    const c0 = performance.now();
    if (openSessionId) await this.d.sessions.close(openSessionId);
    await start.lastWrite;
    await this.d.state.rolloutCompleted(r.id, finishReason);
    return performance.now() - c0;
  }
}

/** No attempt got a session (or it stopped before): reported as aborted or env_error, with the last attempt's error. */
function neverStarted(result: RolloutResult, stopped: boolean): RolloutResult {
  return {
    ...result,
    finishReason: stopped ? 'aborted' : 'env_error',
    outcomeReward: null,
    success: null,
    processRewards: [],
    numCalls: 0,
  };
}

/** What listeners hear of a rollout: its result, its timings, and the last session, loop and agent process its attempts had. */
function outcomeOf(
  ctx: RolloutContext,
  attempts: Attempt[],
  result: RolloutResult,
  t: { versionAtEnd: number; wallMs: number; agentMs: number },
): ExecutedRollout['outcome'] {
  const session = attempts.findLast((a) => a.session !== null)?.session;
  const blackBox = attempts.findLast((a) => a.blackBox)?.blackBox;
  return {
    rolloutId: ctx.rollout.id,
    groupId: ctx.group.row.id,
    taskId: ctx.task.id,
    purpose: ctx.purpose,
    finishReason: result.finishReason,
    outcomeReward: result.outcomeReward,
    success: result.success,
    numCalls: result.numCalls,
    ...(result.callsRefused ? { callsRefused: result.callsRefused } : {}),
    error: result.error,
    versionsSpanned: versionsSpanned(ctx.versionAtStart, t.versionAtEnd),
    wallMs: t.wallMs,
    agentMs: t.agentMs,
    sessionMs: session?.openMs ?? 0,
    sessionOpenedAhead: session?.ahead ?? false,
    loop: attempts.findLast((a) => a.loop)?.loop,
    blackBox: blackBox ? withoutCleanup(blackBox) : undefined,
  };
}

function withoutCleanup(bb: BlackBoxResult): Omit<BlackBoxResult, 'cleanup'> {
  const { cleanup: _cleanup, ...rest } = bb;
  return rest;
}
