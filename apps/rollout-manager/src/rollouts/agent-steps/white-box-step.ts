import { MemoryStore, runWhiteBoxLoop } from '../../agents/white-box';
import type { GatewayClient } from '../../gateway-client';
import type { AgentSpec } from '../../tasks/task-set';
import type { AgentRun, AgentStep, AgentStepInput } from './agent-step';

/** Anvil's own agent loop (agents/white-box.ts) against the session, with the environment's tools. */
export class WhiteBoxStep implements AgentStep<'white-box'> {
  constructor(private readonly gateway: GatewayClient) {}

  async run(_agent: Extract<AgentSpec, { kind: 'white-box' }>, { ctx, session, episode, signal }: AgentStepInput): Promise<AgentRun> {
    const { spec, task, group } = ctx;
    const a0 = performance.now();
    const loop = await runWhiteBoxLoop(
      { gateway: this.gateway, baseUrl: session.baseUrl, episode, signal },
      {
        opening: task.messages,
        tools: task.tools,
        context: spec.context,
        maxSteps: ctx.maxSteps,
        maxContextTokens: ctx.limits.maxContextTokens,
        temperature: group.evalTemperature ?? spec.sampling.temperature,
        maxTokens: spec.sampling.maxTokens,
        builtinTools: spec.builtinTools,
        memory: new MemoryStore(),
        seed: ctx.seed % 1_000_000,
      },
    );
    return {
      finishReason: loop.finish,
      error: null,
      numCalls: loop.callIds.length,
      agentMs: performance.now() - a0,
      transcript: { messages: loop.messages, finalAnswer: loop.finalAnswer },
      callsRefused: loop.callsRefused,
      sessionClosed: false,
      loop,
    };
  }
}
