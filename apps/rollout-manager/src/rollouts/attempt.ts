import type { BlackBoxResult } from '../agents/black-box';
import type { LoopResult } from '../agents/white-box';
import { EnvironmentError, type Episode } from '../environments/types';
import type { RolloutMetrics } from '../metrics';
import { VerifierError, type VerifierDeps } from '../verifiers/verifiers';
import { runAgentStep, type AgentRun, type AgentSteps } from './agent-steps/agent-step';
import type { RolloutContext, RolloutResult } from './rollout-context';
import { unscored } from './rollout-context';
import type { AttemptSession, RolloutSessions } from './rollout-sessions';
import type { RolloutStart } from './rollout-start';
import type { OpenedSession } from './session-lookahead';
import { verifyStep } from './verify-step';

export interface AttemptDeps {
  sessions: RolloutSessions;
  steps: AgentSteps;
  metrics: RolloutMetrics;
  verifierDeps: VerifierDeps;
}

/** How one attempt of a rollout went. */
export interface Attempt {
  result: RolloutResult;
  /** An environment failure before anything was recorded: run the rollout again, with a session of its own. */
  retry: boolean;
  /** The session it used (null: none could be opened). */
  session: AttemptSession | null;
  /** Its session when still open (the runtime closes it after rollout.completed). */
  openSessionId: string | null;
  agentMs: number;
  loop?: LoopResult;
  blackBox?: BlackBoxResult;
}

/**
 * One attempt, within the rollout's timeout: a session (the one opened ahead, or a new one), the
 * running report, the environment's episode, the agent, the verifier. Whatever fails, its session
 * is closed before the failure is judged, so the call count the retry decision reads is final.
 */
export async function runAttempt(
  d: AttemptDeps,
  ctx: RolloutContext,
  start: RolloutStart,
  n: number,
  ahead: Promise<OpenedSession | null> | undefined,
): Promise<Attempt> {
  const timeout = new AbortController();
  const timer = setTimeout(() => timeout.abort('timeout'), ctx.limits.timeoutMs);
  const signal = AbortSignal.any([ctx.stopSignal, timeout.signal]);
  let session: AttemptSession | null = null;
  let episode: Episode | null = null;
  let run: AgentRun | null = null;
  try {
    session = await d.sessions.forAttempt(ctx.group, ctx.rollout, ahead, ctx.limits.timeoutMs);
    // Stopped or timed out while its session opened: no agent is started for it.
    if (signal.aborted) throw new Error(`${String(signal.reason)} before the agent started`);
    start.attempt(session.sessionId, n + 1);
    episode = ctx.env ? ctx.env.reset(ctx.task, { rolloutId: ctx.rollout.id, seed: ctx.seed, signal }) : noToolsEpisode();
    run = await runAgentStep(d.steps, { ctx, session, episode, signal });
    if (run.failure) throw run.failure;
    return {
      result: await verifyStep(ctx, run, d.verifierDeps),
      retry: false,
      session,
      openSessionId: run.sessionClosed ? null : session.sessionId,
      agentMs: run.agentMs,
      loop: run.loop,
      blackBox: run.blackBox,
    };
  } catch (err) {
    return await failedAttempt(d, ctx, n, err, { session, run, timedOut: timeout.signal });
  } finally {
    clearTimeout(timer);
    await Promise.resolve(episode?.close?.()).catch(() => undefined);
    void run?.blackBox?.cleanup();
  }
}

/** An attempt that threw: its session closed, then ended as aborted, timeout or env_error, or retried. */
async function failedAttempt(
  d: AttemptDeps,
  ctx: RolloutContext,
  n: number,
  err: unknown,
  at: { session: AttemptSession | null; run: AgentRun | null; timedOut: AbortSignal },
): Promise<Attempt> {
  const { session, run } = at;
  const closed = session && !run?.sessionClosed ? await d.sessions.close(session.sessionId) : null;
  const numCalls = closed?.callCount ?? run?.numCalls ?? 0;
  const retry = !ctx.stopSignal.aborted && !at.timedOut.aborted && retriable(err, numCalls, n, ctx.limits.maxEnvRetries);
  if (retry) d.metrics.envRetries.inc();
  return {
    result: {
      ...unscored(),
      finishReason: failureReason(err, ctx.stopSignal.aborted, at.timedOut.aborted, retry),
      numCalls,
      error: `${(err as Error).name}: ${(err as Error).message}`,
      ...(run?.callsRefused ? { callsRefused: run.callsRefused } : {}),
    },
    retry,
    session,
    openSessionId: null,
    agentMs: run?.agentMs ?? 0,
    loop: run?.loop,
    blackBox: run?.blackBox,
  };
}

/** Nothing was recorded under this rollout id yet, and retries are left. */
function retriable(err: unknown, numCalls: number, n: number, maxEnvRetries: number): boolean {
  return err instanceof EnvironmentError && numCalls === 0 && n < maxEnvRetries;
}

function failureReason(err: unknown, stopped: boolean, timedOut: boolean, retry: boolean): RolloutResult['finishReason'] {
  if (err instanceof VerifierError) return 'env_error';
  if (stopped) return 'aborted';
  if (timedOut) return 'timeout';
  // A retried attempt's result is replaced by the next attempt's.
  return retry ? 'completed' : 'env_error';
}

function noToolsEpisode(): Episode {
  return { executeTool: async (call) => ({ content: `error: unknown tool ${call.name}` }) };
}
