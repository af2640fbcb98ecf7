import type { EventEnvelope, RolloutFinishReason } from '@anvil/contracts';
import type { Logger } from '@anvil/observability';
import { runBlackBox, type BlackBoxResult } from '../agents/black-box';
import { MemoryStore, runWhiteBoxLoop, type LoopResult } from '../agents/white-box';
import { EnvironmentError, type ChatMessage, type Environment, type Episode, type Transcript } from '../environments/types';
import type { EventBatcher } from '../event-batcher';
import type { ClosedSession, GatewayClient } from '../gateway-client';
import type { RolloutMetrics } from '../metrics';
import type { RolloutRow, RolloutStateStore } from '../state-store';
import type { TaskSetSpec, VerifierSpec } from '../tasks/task-set';
import { runVerifier, VerifierError, type VerifierDeps, type VerifierInput } from '../verifiers/verifiers';
import { completedEvent, startedEvent, versionsSpanned, type CompletedFields } from './events';
import type { GroupState, LoadedTaskSet } from './group-state';
import { samplerSeed } from './sampler-seed';
import type { OpenedSession, SessionLookahead } from './session-lookahead';

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
  config: { producer: string; model: string; repoRoot: string };
  gateway: GatewayClient;
  state: RolloutStateStore;
  events: EventBatcher;
  metrics: RolloutMetrics;
  logger: Logger;
  lookahead: SessionLookahead;
  version(): number;
  taskSet(id: string): Promise<LoadedTaskSet>;
  verifierDeps(spec: TaskSetSpec, env: Environment | null): VerifierDeps;
}

/** The outcome, and the session close and state write still running after it. */
export interface ExecutedRollout {
  outcome: Omit<RolloutOutcome, 'cleanupMs'>;
  cleanup: Promise<number>;
}

/** Past this much left of its life at the start, a session opened ahead is replaced by a fresh one. */
const SESSION_MARGIN_MS = 30_000;

/**
 * Runs one rollout, from its slot to its durable rollout.completed: a gateway session (opened
 * ahead by the lookahead, or here), the agent, the verifier, the events. Only what the outcome
 * depends on is on that path. The running-state write and rollout.started travel beside the agent
 * (the session id is durable before it starts, so a restart can always close the session);
 * rollout.started is durable before rollout.completed is published (same key, same topic: in
 * order for consumers); a white-box session is closed and the rollout's row marked completed
 * after the outcome (`cleanup`). A black-box session is closed as soon as the agent exits, before
 * its calls are counted and scored, so nothing is recorded after.
 */
export class RolloutExecutor {
  constructor(private readonly d: ExecutorDeps) {}

  /** Opens a session for `r` and makes its id durable (rm_rollouts.session_id). */
  async openSession(g: GroupState, r: RolloutRow, lifeMs: number): Promise<OpenedSession> {
    const t0 = performance.now();
    const { spec, row } = g;
    const expiresAt = Date.now() + lifeMs;
    const session = await this.d.gateway.openSession({
      rolloutId: r.id,
      groupId: row.id,
      taskId: row.taskId,
      model: this.d.config.model,
      ...(spec.limits.maxContextTokens ? { maxContextTokens: spec.limits.maxContextTokens } : {}),
      ...(spec.weightSwap ? { weightSwap: spec.weightSwap } : {}),
      expiresAt,
    });
    try {
      await this.d.state.sessionOpened(r.id, session.sessionId);
    } catch (err) {
      await this.closeSession(session.sessionId);
      throw err;
    }
    return { ...session, expiresAt, openMs: performance.now() - t0 };
  }

  /** Closes a session (with the others closing in the same tick; idempotent at the gateway, retried); its final state (and calls, `withCalls`), or null when it is gone or the close failed. */
  async closeSession(sessionId: string, withCalls = false): Promise<ClosedSession | null> {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        return await this.d.gateway.closeSessionBatched(sessionId, withCalls);
      } catch (err) {
        if (attempt === 2) this.d.logger.error('session close failed', { sessionId, err });
        else await new Promise((res) => setTimeout(res, 200 * 2 ** attempt));
      }
    }
    return null;
  }

  /** Publishes until the event is durable (a few tries with backoff; then the error). */
  async publishDurably(event: EventEnvelope): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.d.events.publish(event);
        return;
      } catch (err) {
        if (attempt >= 5) throw err;
        await new Promise((res) => setTimeout(res, 200 * 2 ** attempt));
      }
    }
  }

  async run(g: GroupState, r: RolloutRow, stopSignal: AbortSignal): Promise<ExecutedRollout> {
    const { spec, task } = g;
    const { env } = await this.d.taskSet(spec.id);
    const purpose = g.row.purpose;
    const t0 = performance.now();
    const versionAtStart = this.d.version();
    const limits = spec.limits;
    const maxSteps = limits.maxSteps ?? env?.limits(task).maxSteps ?? 16;
    const verifier: VerifierSpec = task.verifier ?? spec.verifier ?? { kind: 'env' };
    const seed = samplerSeed(purpose, task.id, r);
    const res: Omit<CompletedFields, 'rolloutId' | 'groupId' | 'taskId' | 'versionAtStart'> = {
      finishReason: 'completed',
      outcomeReward: null,
      processRewards: [],
      numCalls: 0,
      error: null,
      success: null,
    };
    let loop: LoopResult | undefined;
    let blackBox: BlackBoxResult | undefined;
    let sessionId: string | null = null;
    let sessionClosed = false;
    let sessionMs = 0;
    let sessionOpenedAhead = false;
    let agentMs = 0;
    let started: Promise<unknown> | null = null;
    let runningWrite: Promise<void> = Promise.resolve();
    let ahead = this.d.lookahead.take(r.id);

    for (let attempt = 0; ; attempt++) {
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort('timeout'), limits.timeoutMs);
      const signal = AbortSignal.any([stopSignal, timeout.signal]);
      let episode: Episode | null = null;
      let retry = false;
      try {
        const session = await this.sessionFor(g, r, ahead, limits.timeoutMs);
        ahead = undefined;
        sessionId = session.sessionId;
        sessionClosed = false;
        sessionMs = session.openMs;
        sessionOpenedAhead = session.ahead;
        // Stopped or timed out while its session opened: no agent is started for it.
        if (signal.aborted) throw new Error(`${String(signal.reason)} before the agent started`);
        // Beside the agent: the session id is already durable, so these are not needed to recover it.
        runningWrite = this.d.state
          .rolloutRunning(r.id, session.sessionId, versionAtStart, attempt + 1)
          .catch((err: unknown) => this.d.logger.warn('rollout state write failed', { rolloutId: r.id, err }));
        if (!started) {
          started = this.publishDurably(
            startedEvent({ producer: this.d.config.producer, spec, group: g.row, rollout: r, versionAtStart }),
          ).catch((err: unknown) => err as Error);
          this.d.metrics.started.inc({ purpose, agent: spec.agent.kind });
        }
        episode = env ? env.reset(task, { rolloutId: r.id, seed, signal }) : noToolsEpisode();
        let transcript: Transcript;
        let agentInfo: VerifierInput['agent'];
        let calls: VerifierInput['calls'];
        if (spec.agent.kind === 'white-box') {
          const a0 = performance.now();
          loop = await runWhiteBoxLoop(
            { gateway: this.d.gateway, baseUrl: session.baseUrl, episode, signal },
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
          res.numCalls = loop.callIds.length;
          res.finishReason = loop.finish;
          transcript = { messages: loop.messages, finalAnswer: loop.finalAnswer };
        } else {
          blackBox = await runBlackBox(spec.agent, task, session, {
            timeoutMs: limits.timeoutMs,
            signal: stopSignal,
            repoRoot: this.d.config.repoRoot,
            onSpawn: (pgid) =>
              void this.d.state
                .setAgentPgid(r.id, pgid)
                .catch((err: unknown) => this.d.logger.warn('agent pgid write failed', { rolloutId: r.id, err })),
          });
          agentMs += blackBox.wallMs;
          // The agent is gone: close its door before counting and scoring what it recorded, so nothing is added after (one round trip).
          const closed = await this.closeSession(session.sessionId, true);
          sessionClosed = true;
          res.numCalls = closed?.callCount ?? 0;
          if (blackBox.timedOut) res.finishReason = 'timeout';
          else if (blackBox.aborted) res.finishReason = 'aborted';
          else if (blackBox.signal === 'spawn-error')
            throw new EnvironmentError(`agent ${spec.agent.name}: ${blackBox.stderr.trim().slice(0, 500)}`);
          else if (blackBox.exitCode !== 0) {
            res.finishReason = 'env_error';
            res.error = `agent ${spec.agent.name} exited with ${blackBox.exitCode ?? blackBox.signal}: ${blackBox.stderr.trim().slice(-2000)}`;
          }
          transcript = { messages: blackBox.messages ?? task.messages, finalAnswer: blackBox.finalAnswer };
          agentInfo = {
            exitCode: blackBox.exitCode,
            stdout: blackBox.stdout,
            stderr: blackBox.stderr,
            answerFile: blackBox.answerFile,
            workspace: blackBox.workspace,
          };
          // Scored without them if they could not be read: process rewards then cannot be placed.
          calls = closed?.calls?.map((c) => ({ callId: c.callId, message: c.message as ChatMessage }));
        }
        if (res.finishReason !== 'aborted' && res.finishReason !== 'env_error') {
          try {
            const v = await runVerifier(
              verifier,
              spec.env,
              { task, transcript, agent: agentInfo, ...(calls ? { calls } : {}) },
              this.d.verifierDeps(spec, env),
              stopSignal,
            );
            res.outcomeReward = v.outcomeReward;
            res.success = v.success;
            res.processRewards = v.processRewards ? attachProcessRewards(v.processRewards, loop, calls ?? [], verifier.kind === 'env') : [];
          } catch (err) {
            res.finishReason = 'env_error';
            res.error = (err as Error).message;
            res.outcomeReward = null;
            res.success = null;
            res.processRewards = [];
          }
        }
      } catch (err) {
        // Closed first, so the count the retry decision reads is final.
        const closed = sessionId && !sessionClosed ? await this.closeSession(sessionId) : null;
        if (sessionId) sessionClosed = true;
        const calls = closed?.callCount ?? res.numCalls;
        if (stopSignal.aborted) res.finishReason = 'aborted';
        else if (timeout.signal.aborted) res.finishReason = 'timeout';
        else if (err instanceof EnvironmentError && calls === 0 && attempt < limits.maxEnvRetries) {
          // Nothing was recorded under this rollout id yet: run it again, with a session of its own.
          retry = true;
          this.d.metrics.envRetries.inc();
        } else res.finishReason = 'env_error';
        if (err instanceof VerifierError) res.finishReason = 'env_error';
        res.numCalls = calls;
        res.error = `${(err as Error).name}: ${(err as Error).message}`;
      } finally {
        clearTimeout(timer);
        await Promise.resolve(episode?.close?.()).catch(() => undefined);
        void blackBox?.cleanup();
      }
      if (!retry) break;
      sessionId = null;
      res.error = null;
    }
    if (ahead) void this.discard(ahead);
    this.d.metrics.agentSeconds.observe({ agent: spec.agent.kind }, agentMs / 1000);

    // rollout.started is durable first; one that never went out (no session, or its publish
    // failed) goes out now, so every rollout of the group is reported.
    const startErr = started ? await started : null;
    if (!started || startErr) {
      if (!started) {
        res.finishReason = stopSignal.aborted ? 'aborted' : 'env_error';
        res.outcomeReward = null;
        res.success = null;
        res.processRewards = [];
        res.numCalls = 0;
        this.d.metrics.started.inc({ purpose, agent: spec.agent.kind });
      }
      await this.publishDurably(startedEvent({ producer: this.d.config.producer, spec, group: g.row, rollout: r, versionAtStart }));
    }
    const versionAtEnd = this.d.version();
    await this.publishDurably(
      completedEvent({
        ...res,
        rolloutId: r.id,
        groupId: g.row.id,
        taskId: task.id,
        versionAtStart,
        producer: this.d.config.producer,
        versionAtEnd,
      }),
    );
    const wallMs = performance.now() - t0;
    this.d.metrics.overheadSeconds.observe({ agent: spec.agent.kind }, Math.max(0, wallMs - agentMs) / 1000);

    const openSession = sessionId && !sessionClosed ? sessionId : null;
    const c0 = performance.now();
    const cleanup = (async () => {
      if (openSession) await this.closeSession(openSession);
      await runningWrite;
      await this.d.state.rolloutCompleted(r.id, res.finishReason);
      return performance.now() - c0;
    })();
    const { cleanup: _drop, ...bb } = blackBox ?? ({} as Partial<BlackBoxResult>);
    return {
      outcome: {
        rolloutId: r.id,
        groupId: g.row.id,
        taskId: task.id,
        purpose,
        finishReason: res.finishReason,
        outcomeReward: res.outcomeReward,
        success: res.success,
        numCalls: res.numCalls,
        error: res.error,
        versionsSpanned: versionsSpanned(versionAtStart, versionAtEnd),
        wallMs,
        agentMs,
        sessionMs,
        sessionOpenedAhead,
        loop,
        blackBox: blackBox ? (bb as Omit<BlackBoxResult, 'cleanup'>) : undefined,
      },
      cleanup,
    };
  }

  /** The session opened ahead when it is usable (opened, and long enough to live), else one opened now. */
  private async sessionFor(
    g: GroupState,
    r: RolloutRow,
    ahead: Promise<OpenedSession | null> | undefined,
    timeoutMs: number,
  ): Promise<OpenedSession & { ahead: boolean }> {
    const opened = ahead ? await ahead : null;
    if (opened && opened.expiresAt - Date.now() >= timeoutMs + SESSION_MARGIN_MS) return { ...opened, ahead: true };
    if (opened) void this.closeSession(opened.sessionId);
    return { ...(await this.openSession(g, r, timeoutMs + 60_000)), ahead: false };
  }

  private async discard(ahead: Promise<OpenedSession | null>): Promise<void> {
    const opened = await ahead;
    if (opened) await this.closeSession(opened.sessionId);
  }
}

/**
 * Process rewards onto call ids. White-box: per assistant turn of the main loop (its step
 * calls). Black-box: per call the gateway recorded, in order. A verifier that sees those calls
 * (`calls`) and returns more values than there are is answering garbage. An environment's
 * verifier scores the agent's own transcript, one value per assistant turn there: they are placed
 * only when that transcript has one turn per recorded call; otherwise (an agent that left only its
 * answer, say) they cannot be, and the rollout has none.
 */
function attachProcessRewards(
  values: number[],
  loop: LoopResult | undefined,
  calls: { callId: string }[],
  fromTranscript: boolean,
): { callId: string; value: number }[] {
  if (loop) {
    return values.flatMap((value, i) => {
      const callId = loop.stepCallIds[i];
      return callId ? [{ callId, value }] : [];
    });
  }
  if (fromTranscript && values.length !== calls.length) return [];
  if (values.length > calls.length)
    throw new VerifierError(`verifier answered garbage: ${values.length} process rewards for ${calls.length} recorded calls`);
  return values.map((value, i) => ({ callId: calls[i].callId, value }));
}

function noToolsEpisode(): Episode {
  return { executeTool: async (call) => ({ content: `error: unknown tool ${call.name}` }) };
}
