import type { GenerationResult } from '../generation/generation-runner';
import { buildAssistantReply, type AssistantReply } from '../openai/assistant-reply';
import type { PreparedCall } from './prepared-call';

/** One generated choice, with the reply it became (chat) and what was recorded. */
export interface ChoiceResult {
  index: number;
  callId: string;
  generation: GenerationResult;
  reply: AssistantReply | null;
  /** finish_reason as answered (OpenAI's vocabulary). */
  finishReason: 'stop' | 'length' | 'tool_calls';
  turnIndex: number;
  branchId: string;
}

/** A call's generations as they will be answered: each choice's reply and finish reason, the choices once their turns are known. */
export interface AssembledAnswer {
  /** Chat: the reply each choice's text (after the forced opening of a tool call) parses into; completions: null. */
  replies: (AssistantReply | null)[];
  finishReasons: ChoiceResult['finishReason'][];
  /** The choices, their turn indexes counted from `firstTurn`. */
  choices(firstTurn: number): ChoiceResult[];
}

export function assembleAnswer(call: PreparedCall, generations: readonly GenerationResult[]): AssembledAnswer {
  const replies = generations.map((g, i) =>
    call.kind === 'chat'
      ? buildAssistantReply(call.forcedText + g.text, {
          format: call.model.format,
          tools: call.tools,
          toolChoice: call.toolChoice,
          parallelToolCalls: call.parallelToolCalls,
          promptOpensThink: call.plan.promptOpensThink,
          idSeed: call.callIds[i],
        })
      : null,
  );
  const finishReasons = generations.map((g, i) =>
    g.finishReason === 'stop' && replies[i]?.hasToolCalls ? 'tool_calls' : g.finishReason === 'stop' ? 'stop' : 'length',
  );
  const choices = (firstTurn: number): ChoiceResult[] =>
    generations.map((g, i) => ({
      index: i,
      callId: call.callIds[i],
      generation: g,
      reply: replies[i],
      finishReason: finishReasons[i],
      turnIndex: firstTurn + i,
      branchId: call.branchId,
    }));
  return { replies, finishReasons, choices };
}
