import type { Logger } from '@anvil/observability';
import { runBlackBox, type BlackBoxResult } from '../../agents/black-box';
import { EnvironmentError, type ChatMessage } from '../../environments/types';
import type { ClosedSession } from '../../gateway-client';
import type { RolloutStateStore } from '../../state-store';
import type { AgentSpec } from '../../tasks/task-set';
import type { BudgetWatch } from '../budget-watch';
import type { AgentRun, AgentStep, AgentStepInput } from './agent-step';

export interface BlackBoxStepDeps {
  state: RolloutStateStore;
  logger: Logger;
  /** cwd of agents without their own. */
  repoRoot: string;
  closeSession(sessionId: string, withCalls: boolean): Promise<ClosedSession | null>;
  /** Tells when the agent has been refused a call over its session's budget. */
  budget: BudgetWatch;
}

type BlackBoxAgent = Extract<AgentSpec, { kind: 'black-box' }>;

/**
 * A third-party agent program (agents/black-box.ts) given only its session's base URL and key.
 * Its session is closed as soon as it exits, before its calls are counted and scored, so nothing
 * is recorded after; its process group is durable (rm_rollouts.agent_pgid) so a restart can kill it.
 * An agent refused a call over its session's call budget is stopped then, and its rollout ends as
 * max_steps (the budget bounds its LLM calls as maxSteps bounds the white-box loop's).
 */
export class BlackBoxStep implements AgentStep<'black-box'> {
  constructor(private readonly d: BlackBoxStepDeps) {}

  async run(agent: BlackBoxAgent, { ctx, session }: AgentStepInput): Promise<AgentRun> {
    const rolloutId = ctx.rollout.id;
    // An agent refused a call over its budget is stopped then, whether it would retry, wait or loop.
    const budget = this.d.budget.watch(session.sessionId);
    let blackBox: BlackBoxResult;
    try {
      blackBox = await runBlackBox(agent, ctx.task, session, {
        timeoutMs: ctx.limits.timeoutMs,
        signal: AbortSignal.any([ctx.stopSignal, budget.signal]),
        repoRoot: this.d.repoRoot,
        onSpawn: (pgid) =>
          void this.d.state
            .setAgentPgid(rolloutId, pgid)
            .catch((err: unknown) => this.d.logger.warn('agent pgid write failed', { rolloutId, err })),
      });
    } finally {
      budget.done();
    }
    // The agent is gone: close its door before counting and scoring what it recorded, so nothing is added after (one round trip).
    const closed = await this.d.closeSession(session.sessionId, true);
    const callsRefused = closed?.callsRefused;
    // Asked past its budget (stopped for it, or ended on its own after the refusal): the run is cut at its limit.
    const budgetSpent = budget.signal.aborted || (callsRefused?.budget ?? 0) > 0;
    return {
      ...(budgetSpent && !ctx.stopSignal.aborted && blackBox.signal !== 'spawn-error'
        ? { finishReason: 'max_steps' as const, error: null }
        : howItEnded(agent, blackBox)),
      ...(callsRefused ? { callsRefused } : {}),
      numCalls: closed?.callCount ?? 0,
      agentMs: blackBox.wallMs,
      transcript: { messages: blackBox.messages ?? ctx.task.messages, finalAnswer: blackBox.finalAnswer },
      agent: {
        exitCode: blackBox.exitCode,
        stdout: blackBox.stdout,
        stderr: blackBox.stderr,
        answerFile: blackBox.answerFile,
        workspace: blackBox.workspace,
      },
      // Scored without them if they could not be read: process rewards then cannot be placed.
      calls: closed?.calls?.map((c) => ({ callId: c.callId, message: c.message as ChatMessage })),
      sessionClosed: true,
      blackBox,
    };
  }
}

/** The finish reason an agent's exit gives; an agent that could not be started is an environment failure. */
function howItEnded(agent: BlackBoxAgent, bb: BlackBoxResult): Pick<AgentRun, 'finishReason' | 'error' | 'failure'> {
  if (bb.timedOut) return { finishReason: 'timeout', error: null };
  if (bb.aborted) return { finishReason: 'aborted', error: null };
  if (bb.signal === 'spawn-error')
    return {
      finishReason: 'completed',
      error: null,
      failure: new EnvironmentError(`agent ${agent.name}: ${bb.stderr.trim().slice(0, 500)}`),
    };
  if (bb.exitCode !== 0)
    return {
      finishReason: 'env_error',
      error: `agent ${agent.name} exited with ${bb.exitCode ?? bb.signal}: ${bb.stderr.trim().slice(-2000)}`,
    };
  return { finishReason: 'completed', error: null };
}
