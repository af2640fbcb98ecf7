import type { CallsRefused, RolloutFinishReason } from '@anvil/contracts';
import type { BlackBoxResult } from '../../agents/black-box';
import type { LoopResult } from '../../agents/white-box';
import type { EnvironmentError, Episode, Transcript } from '../../environments/types';
import type { AgentSpec } from '../../tasks/task-set';
import type { VerifierInput } from '../../verifiers/verifiers';
import type { RolloutContext } from '../rollout-context';
import type { AttemptSession } from '../rollout-sessions';

/** What an agent step gets: the rollout, this attempt's session and episode, and the signal that ends the attempt (stop or its timeout). */
export interface AgentStepInput {
  ctx: RolloutContext;
  session: AttemptSession;
  episode: Episode;
  signal: AbortSignal;
}

/** How an agent's run went, and what the verifier is to score. */
export interface AgentRun {
  finishReason: RolloutFinishReason;
  error: string | null;
  numCalls: number;
  /** The agent's own time (the loop, or the process from start to exit). */
  agentMs: number;
  transcript: Transcript;
  agent?: VerifierInput['agent'];
  calls?: VerifierInput['calls'];
  /** Calls its session's call limits refused (over the budget: the run ended as max_steps; over the rate). */
  callsRefused?: CallsRefused;
  /** The step closed the session itself (a black-box session closes as its agent exits). */
  sessionClosed: boolean;
  /** The environment failed (the agent never ran): the attempt ends as if it threw this, retried when nothing was recorded. */
  failure?: EnvironmentError;
  loop?: LoopResult;
  blackBox?: BlackBoxResult;
}

/** One kind of agent: runs it for one attempt against its session. A new kind is one file implementing this, and a line in runAgentStep. */
export interface AgentStep<K extends AgentSpec['kind']> {
  run(agent: Extract<AgentSpec, { kind: K }>, input: AgentStepInput): Promise<AgentRun>;
}

export interface AgentSteps {
  'white-box': AgentStep<'white-box'>;
  'black-box': AgentStep<'black-box'>;
}

/** The step of the rollout's agent kind. */
export function runAgentStep(steps: AgentSteps, input: AgentStepInput): Promise<AgentRun> {
  const agent = input.ctx.spec.agent;
  switch (agent.kind) {
    case 'white-box':
      return steps['white-box'].run(agent, input);
    case 'black-box':
      return steps['black-box'].run(agent, input);
  }
}
