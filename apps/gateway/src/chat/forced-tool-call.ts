import type { GenerateConstraint } from '@anvil/contracts';
import { compileGrammar, GrammarError, toolCallGrammar } from '@anvil/guided-decoding';
import { forcedToolCallOpening, toolCallFrame, type ChatMessage, type ToolDefinition } from '@anvil/tokenizer';
import { GatewayError } from '../errors';
import type { ServedModel } from '../models/model-registry';

/** What `tool_choice: "required"` or a named tool does to a call. */
export interface ForcedToolCall {
  /** The opening of the call appended to the prompt (through the name for a named tool); '' when nothing is forced. */
  text: string;
  /**
   * The rest of the call as a grammar the inference engine holds the model to: one of the
   * offered names (for "required"), the template's text around the arguments, arguments valid
   * against the tool's JSON Schema, then the end of turn. Null when nothing is forced, or the
   * template's frame could not be found (then only the opening is forced).
   */
  constraint: GenerateConstraint | null;
}

const NONE: ForcedToolCall = { text: '', constraint: null };

/** Schemas already checked (the calls of a rollout group share their tools): JSON text -> the refusal, or null. */
const checked = new Map<string, GrammarError | null>();

/**
 * The forced part of a chat call: the opening in the prompt (prompt tokens: no loss on them, and
 * exactly what the template renders, so the next turn extends token-exactly) and a constraint
 * for the rest, so the reply is a well-formed call of an offered tool whose arguments validate.
 * A tool whose schema cannot be enforced (e.g. `pattern`) is refused with 400: the guarantee a
 * forced tool choice asks for cannot be given, and answering without it would hide that.
 */
export function forcedToolCall(
  model: ServedModel,
  toolChoice: unknown,
  tools: ToolDefinition[] | null,
  prompt: { messages: ChatMessage[]; extra: Record<string, unknown> },
): ForcedToolCall {
  const format = model.format;
  if (!tools || !toolChoice || toolChoice === 'auto' || toolChoice === 'none' || format.toolCallFormat === 'none') return NONE;
  const name = typeof toolChoice === 'object' ? (toolChoice as { function: { name: string } }).function.name : null;
  const frame =
    format.endOfTurn === null
      ? null
      : toolCallFrame(format.template, { messages: prompt.messages, tools, extra: prompt.extra }, format.endOfTurn);
  if (!frame)
    return {
      text: forcedToolCallOpening(format.template, { messages: prompt.messages, tools, extra: prompt.extra }, name) ?? '',
      constraint: null,
    };
  const offered = name === null ? tools : tools.filter((t) => t.function.name === name);
  for (const t of offered) checkSchema(t);
  const specs = tools.map((t) => ({ name: t.function.name, parameters: t.function.parameters ?? null }));
  return {
    text: frame.opening + (name ?? ''),
    constraint: { grammar: toolCallGrammar(specs, frame, name) as GenerateConstraint['grammar'] },
  };
}

function checkSchema(tool: ToolDefinition): void {
  const schema = tool.function.parameters ?? { type: 'object', properties: {} };
  const key = JSON.stringify(schema);
  let refusal = checked.get(key);
  if (refusal === undefined) {
    refusal = null;
    try {
      compileGrammar({ json: schema });
    } catch (err) {
      if (!(err instanceof GrammarError)) throw err;
      refusal = err;
    }
    checked.set(key, refusal);
    if (checked.size > 1024) checked.delete(checked.keys().next().value as string);
  }
  if (refusal)
    throw GatewayError.invalid(
      `tool \`${tool.function.name}\`: its parameters cannot be enforced for a forced tool call (${refusal.message.replace(/^#\/json/, '#')})`,
      'tools',
      'unsupported_tool_schema',
    );
}
