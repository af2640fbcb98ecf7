import { contentText } from './chat-template';
import type { ChatMessage, ToolDefinition } from './types';

/**
 * How tools reach a model whose chat template does not render them (SmolLM2-135M-Instruct's plain
 * ChatML): the gateway rewrites the conversation into messages such a template does render, in
 * the Hermes style Qwen's templates use, before the template runs:
 *
 *  - the tools are described in the system message (appended to the first system message, or as
 *    a new one at the start) by TOOLS_PREAMBLE, one JSON signature per line inside `<tools>`;
 *  - an assistant message's tool calls become its text: `<tool_call>\n{"name": "f", "arguments":
 *    {...}}\n</tool_call>` per call (after the content and a newline), which is also what the
 *    model is asked to write and what parseAssistantOutput reads back;
 *  - tool results become one user message per run of consecutive results, each
 *    `<tool_response>\n...\n</tool_response>`, joined by newlines.
 *
 * The rewrite is a pure function of the messages and tools, applied inside ChatTemplate.render,
 * so every rendering of a conversation (the prompt, the forced tool-call opening, the extension
 * check of the next turn) sees the same text, and a conversation's rendering is a prefix of its
 * continuation's: capture stays token-exact.
 */
export const TOOLS_PREAMBLE =
  '# Tools\n\n' + 'You can call the functions described below. Their signatures, one per line, are inside <tools></tools>:\n';

export const TOOLS_INSTRUCTION =
  'To call a function, write a JSON object with its name and its arguments inside <tool_call></tool_call> tags, one block per call:\n' +
  '<tool_call>\n{"name": <function name>, "arguments": <arguments as a JSON object>}\n</tool_call>';

/** JSON as chat templates' `tojson` writes it (", " and ": " separators). */
function tojson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(tojson).join(', ')}]`;
  if (value !== null && typeof value === 'object')
    return `{${Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => `${JSON.stringify(k)}: ${tojson(v)}`)
      .join(', ')}}`;
  return JSON.stringify(value) ?? 'null';
}

/** The system text that describes `tools`. */
export function toolsSystemText(tools: readonly ToolDefinition[]): string {
  return `${TOOLS_PREAMBLE}<tools>\n${tools.map((t) => tojson(t)).join('\n')}\n</tools>\n\n${TOOLS_INSTRUCTION}`;
}

/** One tool call as the model is asked to write it (arguments as given: the model's own spelling). */
export function toolCallText(name: string, args: string): string {
  return `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": ${args.trim() === '' ? '{}' : args}}\n</tool_call>`;
}

/** The conversation rewritten so that a template without tool support renders tools, calls and results (see above). */
export function renderToolsAsText(messages: readonly ChatMessage[], tools: readonly ToolDefinition[] | null | undefined): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === 'assistant' && m.tool_calls && m.tool_calls.length > 0) {
      const text = contentText(m.content);
      const calls = m.tool_calls.map((c) => toolCallText(c.function.name, c.function.arguments)).join('\n');
      const { tool_calls: _calls, ...rest } = m;
      out.push({ ...rest, content: text ? `${text}\n${calls}` : calls });
    } else if (m.role === 'tool') {
      const results: string[] = [];
      while (i < messages.length && messages[i].role === 'tool') {
        results.push(`<tool_response>\n${contentText(messages[i].content)}\n</tool_response>`);
        i++;
      }
      i--;
      out.push({ role: 'user', content: results.join('\n') });
    } else out.push(m);
  }
  if (tools && tools.length > 0) {
    const system = toolsSystemText(tools);
    if (out[0]?.role === 'system') out[0] = { ...out[0], content: `${contentText(out[0].content)}\n\n${system}` };
    else out.unshift({ role: 'system', content: system });
  }
  return out;
}
