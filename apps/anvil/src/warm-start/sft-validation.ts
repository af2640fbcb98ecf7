/**
 * The warm start's stopping rule needs the pass rate of the model being trained on tasks it has not
 * seen: validation tasks, train-split tasks held out of the SFT stream. Never the eval split: the
 * held-out success the main job reports must not steer the warm start.
 *
 * Episodes run directly on the engine (a generator over the live weights, the chat format's
 * template and tool-call parser, the environment's own tools and verifier). This is a measuring
 * harness for supervised training, not the RL loop, whose rollouts go through the gateway.
 */
import { createGenerator, type Model } from '@anvil/engine';
import { parseAssistantOutput, type ChatFormat } from '@anvil/tokenizer';
import type { ChatMessage, Environment, EnvTask } from '@anvil/rollout-manager';

export interface PassRateOptions {
  temperature: number;
  maxTokensPerCall: number;
  /** Seeds each episode's sampler (episode i, turn t: seed * 1_000_003 + i * 64 + t). */
  seed: number;
}

/** Fraction of `tasks` whose episode the verifier counts a success. */
export async function passRate(
  model: Model,
  format: ChatFormat,
  env: Environment,
  tasks: readonly EnvTask[],
  o: PassRateOptions,
): Promise<number> {
  if (tasks.length === 0) throw new Error('passRate: no tasks');
  // The prefix cache reuses each episode's KV from turn to turn (a turn's prompt extends the last):
  // checks took about a third less time with it, with the same pass rates and the same stopping
  // step on the default warm start (identical weights, sha256 checked).
  const gen = await createGenerator(model, { maxBatch: tasks.length });
  try {
    const wins = await Promise.all(
      tasks.map(async (task, i) => {
        const messages: ChatMessage[] = [...task.messages];
        const episode = env.reset(task, { rolloutId: `validation-${i}`, seed: o.seed + i });
        let answer: string | null = null;
        let callIndex = 0;
        for (let turn = 0; turn < env.limits(task).maxSteps; turn++) {
          const prompt = format.tokenizer.encode(
            format.template.render(messages as never, { tools: task.tools as never, addGenerationPrompt: true }),
          );
          const g = await gen.generate(prompt, {
            maxTokens: o.maxTokensPerCall,
            temperature: o.temperature,
            stopIds: format.stopTokenIds,
            seed: o.seed * 1_000_003 + i * 64 + turn,
          });
          const reply = parseAssistantOutput(format.tokenizer.decode(g.outputIds, { skipSpecialTokens: true }), {
            format: format.toolCallFormat,
            tools: task.tools as never,
          });
          if (reply.toolCalls.length === 0) {
            messages.push({ role: 'assistant', content: reply.content });
            answer = reply.content;
            break;
          }
          messages.push({
            role: 'assistant',
            content: null,
            tool_calls: reply.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
          });
          for (const c of reply.toolCalls) {
            const r = await episode.executeTool({ callIndex: callIndex++, id: c.id, name: c.name, arguments: c.arguments });
            messages.push({ role: 'tool', tool_call_id: c.id, content: r.content });
          }
        }
        await episode.close?.();
        return env.verify(task, { messages, finalAnswer: answer }).success ? 1 : 0;
      }),
    );
    return wins.reduce<number>((a, b) => a + b, 0) / tasks.length;
  } finally {
    await gen.close();
  }
}
