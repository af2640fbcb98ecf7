import type { ChatTemplate } from './chat-template';
import type { ChatMessage, ToolDefinition } from './types';

const NAME_PROBE = 'anvil_forced_tool_probe';

/**
 * The text a model family's template writes at the start of an assistant turn that calls a
 * tool, up to where the tool's name begins (`tool_choice: "required"`), or through the name
 * (a named `tool_choice`): e.g. Hermes `<tool_call>\n{"name": "` / `<tool_call>\n{"name": "add`.
 * Appended to the prompt, it makes the model's continuation a call of that tool; the forced
 * tokens are prompt tokens (sampled by nobody, trained on by nobody), and because the text is
 * exactly what the template renders for such a call, the next turn still extends token-exactly.
 *
 * Found by rendering the conversation with a probe call after it; null when the template does
 * not render a tool call as a continuation of its generation prompt (nothing can be forced).
 */
export function forcedToolCallOpening(
  template: ChatTemplate,
  prompt: { messages: readonly ChatMessage[]; tools: readonly ToolDefinition[] | null; extra?: Record<string, unknown> },
  toolName: string | null,
): string | null {
  const options = { tools: prompt.tools ? [...prompt.tools] : undefined, extra: prompt.extra };
  let prefix: string;
  let full: string;
  try {
    prefix = template.render(prompt.messages, { ...options, addGenerationPrompt: true });
    const call: ChatMessage = {
      role: 'assistant',
      content: '',
      tool_calls: [{ id: 'call_probe', type: 'function', function: { name: NAME_PROBE, arguments: '{}' } }],
    };
    full = template.render([...prompt.messages, call], { ...options, addGenerationPrompt: false });
  } catch {
    return null;
  }
  if (!full.startsWith(prefix)) return null;
  const tail = full.slice(prefix.length);
  const at = tail.indexOf(NAME_PROBE);
  if (at <= 0) return null;
  return tail.slice(0, at) + (toolName ?? '');
}

const ARGS_PROBE = 'anvil_forced_args_probe';

/** How a template writes one tool call: the opening (before the name), between name and arguments, after the arguments. */
export interface ToolCallTemplateFrame {
  /** Hermes: `<tool_call>\n{"name": "` (what forcedToolCallOpening appends for "required"). */
  opening: string;
  /** Hermes: `", "arguments": `. */
  afterName: string;
  /** Hermes: `}\n</tool_call>`: after the arguments object up to the end-of-turn token (excluded). */
  afterArguments: string;
}

/**
 * The whole frame of a tool call as the template renders it at the start of an assistant turn,
 * so that constrained decoding can hold the model to exactly that text: rendered with a probe call
 * whose arguments are a one-key object, split at the name, at the arguments object, and at the
 * end-of-turn token's text (`endOfTurn`, e.g. `<|im_end|>`). Null when the template does not
 * render a call as a continuation of its generation prompt, or the pieces cannot be told apart.
 */
export function toolCallFrame(
  template: ChatTemplate,
  prompt: { messages: readonly ChatMessage[]; tools: readonly ToolDefinition[] | null; extra?: Record<string, unknown> },
  endOfTurn: string,
): ToolCallTemplateFrame | null {
  const options = { tools: prompt.tools ? [...prompt.tools] : undefined, extra: prompt.extra };
  let prefix: string;
  let full: string;
  try {
    prefix = template.render(prompt.messages, { ...options, addGenerationPrompt: true });
    const call: ChatMessage = {
      role: 'assistant',
      content: '',
      tool_calls: [{ id: 'call_probe', type: 'function', function: { name: NAME_PROBE, arguments: `{"${ARGS_PROBE}": 1}` } }],
    };
    full = template.render([...prompt.messages, call], { ...options, addGenerationPrompt: false });
  } catch {
    return null;
  }
  if (!full.startsWith(prefix)) return null;
  const tail = full.slice(prefix.length);
  const name = tail.indexOf(NAME_PROBE);
  const key = tail.indexOf(ARGS_PROBE);
  if (name <= 0 || key === -1) return null;
  const open = tail.lastIndexOf('{', key);
  const close = tail.indexOf('}', key);
  const end = tail.indexOf(endOfTurn, close);
  if (open < name + NAME_PROBE.length || close === -1 || end === -1) return null;
  return {
    opening: tail.slice(0, name),
    afterName: tail.slice(name + NAME_PROBE.length, open),
    afterArguments: tail.slice(close + 1, end),
  };
}
