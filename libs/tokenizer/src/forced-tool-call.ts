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
