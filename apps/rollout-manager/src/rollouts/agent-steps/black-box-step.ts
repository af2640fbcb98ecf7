import type { Logger } from '@anvil/observability';
import { runBlackBox, type BlackBoxResult } from '../../agents/black-box';
import { blackBoxLaunch } from '../../agents/black-box-launch';
import { readPresetOutput } from '../../agents/presets/launch';
import { EnvironmentError, type ChatMessage } from '../../environments/types';
import type { ClosedSession } from '../../gateway-client';
import type { Sandboxes } from '../../sandbox/sandboxes';
import { agentName, type AgentSpec } from '../../tasks/task-set';
import type { BudgetWatch } from '../budget-watch';
import type { AgentRun, AgentStep, AgentStepInput } from './agent-step';

export interface BlackBoxStepDeps {
  logger: Logger;
  /** The base of agents' relative paths (their cwd when they name none). */
  repoRoot: string;
  sandboxes: Sandboxes;
  /** The model the gateway serves (a preset's agent asks for it by name). */
  model: string;
  closeSession(sessionId: string, withCalls: boolean): Promise<ClosedSession | null>;
  /** Tells when the agent has been refused a call over its session's budget. */
  budget: BudgetWatch;
}

type BlackBoxAgent = Extract<AgentSpec, { kind: 'black-box' }>;

/**
 * A third-party agent program (agents/black-box.ts) in a sandbox of its task set's kind, given
 * only its session. Its session is closed as soon as it exits, before its calls are counted and
 * scored, so nothing is recorded after. Nothing it started outlives its run, and nothing outlives
 * this process either (the sandbox's supervisor dies with its host: bwrap --die-with-parent, which
 * covers bwrap itself, or the none backend's parent-death signal), so a restart has no agent left
 * to kill. An agent refused a call over its session's call budget is stopped then, and its rollout
 * ends as max_steps (the budget bounds its LLM calls as maxSteps bounds the white-box loop's).
 */
export class BlackBoxStep implements AgentStep<'black-box'> {
  constructor(private readonly d: BlackBoxStepDeps) {}

  async run(agent: BlackBoxAgent, { ctx, session, episode }: AgentStepInput): Promise<AgentRun> {
    const rolloutId = ctx.rollout.id;
    const name = agentName(agent);
    // The environment's checkout (repo-fix) is where the agent starts; a preset otherwise starts in its workspace.
    const envPrepare = episode.prepareWorkspace?.bind(episode);
    const prepare = envPrepare
      ? async (workspace: string) => {
          const plan = await envPrepare(workspace);
          return { cwd: plan.workdir, ...(plan.setup ? { setup: plan.setup } : {}) };
        }
      : agent.preset
        ? async (workspace: string) => ({ cwd: workspace })
        : undefined;
    // An agent refused a call over its budget is stopped then, whether it would retry, wait or loop.
    const budget = this.d.budget.watch(session.sessionId);
    let blackBox: BlackBoxResult;
    try {
      blackBox = await runBlackBox(
        blackBoxLaunch(agent, ctx.task, this.d.repoRoot, { model: this.d.model, maxSteps: ctx.maxSteps }),
        ctx.task,
        session,
        () => this.d.sandboxes.get(agent.sandbox),
        {
          timeoutMs: ctx.limits.timeoutMs,
          signal: AbortSignal.any([ctx.stopSignal, budget.signal]),
          label: `${rolloutId} ${name}`,
          ...(prepare ? { prepare } : {}),
        },
      );
      // A preset's agent keeps its answer and transcript in files of its own: what they say replaces the run's guess from stdout.
      const left = agent.preset ? await readPresetOutput(agent.preset, blackBox.workspace) : null;
      if (left) {
        blackBox.finalAnswer = left.finalAnswer;
        blackBox.messages = left.messages ?? blackBox.messages;
      }
    } finally {
      budget.done();
    }
    const { relay } = blackBox.sandbox;
    if (relay.refused > 0)
      this.d.logger.warn('a black-box agent asked its session relay for what it may not reach (refused)', {
        rolloutId,
        agent: name,
        refused: relay.refused,
        requests: relay.refusedRequests,
      });
    // The agent is gone: close its door before counting and scoring what it recorded, so nothing is added after (one round trip).
    const closed = await this.d.closeSession(session.sessionId, true);
    const callsRefused = closed?.callsRefused;
    // Asked past its budget (stopped for it, or ended on its own after the refusal): the run is cut at its limit.
    const budgetSpent = budget.signal.aborted || (callsRefused?.budget ?? 0) > 0;
    return {
      ...(budgetSpent && !ctx.stopSignal.aborted && blackBox.sandbox.reason !== 'setup-failed'
        ? { finishReason: 'max_steps' as const, error: null }
        : howItEnded(agent, ctx.task.id, blackBox)),
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

/** The finish reason (and error) its sandbox's end gives; an agent whose sandbox or setup could not start is an environment failure (retried). */
function howItEnded(agent: BlackBoxAgent, taskId: string, bb: BlackBoxResult): Pick<AgentRun, 'finishReason' | 'error' | 'failure'> {
  const what = `task ${taskId}: agent ${agentName(agent)}`;
  const { reason, detail } = bb.sandbox;
  switch (reason) {
    case 'timeout':
      return { finishReason: 'timeout', error: `${what}: ${detail}` };
    case 'aborted':
      return { finishReason: 'aborted', error: null };
    case 'setup-failed':
      return {
        finishReason: 'completed',
        error: null,
        failure: new EnvironmentError(`${what} (${bb.sandbox.backend} sandbox): ${detail}`),
      };
    case 'limit':
      return { finishReason: 'env_error', error: `${what} was stopped: ${detail}: ${bb.stderr.trim().slice(-1500)}`.trim() };
    case 'exit':
      if (bb.exitCode === 0) return { finishReason: 'completed', error: null };
      return {
        finishReason: 'env_error',
        error: `${what} exited with ${bb.exitCode ?? bb.signal}: ${bb.stderr.trim().slice(-2000)}`,
      };
  }
}
