import { Template } from '@huggingface/jinja';
import { renderToolsAsText } from './tool-prompt';
import type { ChatMessage, TextPart, ToolDefinition } from './types';

export interface ChatTemplateOptions {
  /**
   * Variables Hugging Face passes to every template from tokenizer_config.json: bos_token,
   * eos_token, pad_token, unk_token (strings), additional_special_tokens.
   */
  specialTokens?: Record<string, unknown>;
  /**
   * How assistant tool-call arguments (a JSON string in OpenAI messages) reach the template.
   * 'auto' (default): the string itself when the template has its own `arguments is string`
   * branch (Qwen3: the model's exact text is then reproduced), else the parsed object (what
   * Hugging Face templates expect, e.g. Qwen2.5 and Llama 3.1 apply `tojson`).
   */
  toolArguments?: 'auto' | 'object' | 'string';
  /**
   * Where tools, tool calls and tool results come from in the rendered text: 'template' (the
   * template renders them itself; default), or 'system' for a template without tool support:
   * the conversation is rewritten first (tool-prompt.ts: tools described in the system message,
   * calls as Hermes `<tool_call>` text, results as `<tool_response>` user turns).
   */
  toolPrompt?: 'template' | 'system';
}

export interface RenderOptions {
  tools?: readonly ToolDefinition[] | null;
  addGenerationPrompt?: boolean;
  /** Extra template variables (enable_thinking, date_string, ...). */
  extra?: Record<string, unknown>;
}

/**
 * Messages a chat template cannot render: an unsupported role or content part, or the
 * template's own refusal (`raise_exception`, a Jinja error). The gateway answers it with 422.
 */
export class ChatTemplateError extends Error {
  override readonly name = 'ChatTemplateError';
}

/** Text of a message's content: a string as is, text parts joined with '\n' (as vLLM does), none -> ''. */
export function contentText(content: ChatMessage['content']): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw new ChatTemplateError('message content must be a string, an array of text parts, or null');
  return content
    .map((p: TextPart) => {
      if (p === null || typeof p !== 'object' || p.type !== 'text' || typeof p.text !== 'string') {
        throw new ChatTemplateError(
          `unsupported content part ${JSON.stringify((p as { type?: unknown })?.type)}: only text parts are supported`,
        );
      }
      return p.text;
    })
    .join('\n');
}

/** The reasoning of an assistant message, from `reasoning_content` or `reasoning`. */
export function messageReasoning(m: ChatMessage): string | undefined {
  if (typeof m.reasoning_content === 'string') return m.reasoning_content;
  if (typeof m.reasoning === 'string') return m.reasoning;
  return undefined;
}

/**
 * A Hugging Face chat template (Jinja, rendered by @huggingface/jinja) taking OpenAI-shaped
 * messages. Parsed once; `render` is pure (no state between calls).
 */
export class ChatTemplate {
  readonly source: string;
  readonly argumentsAsString: boolean;
  readonly toolPrompt: 'template' | 'system';
  private readonly template: Template;
  private readonly specialTokens: Record<string, unknown>;

  constructor(source: string, options: ChatTemplateOptions = {}) {
    if (typeof source !== 'string' || source.length === 0) throw new Error('chat template: empty source');
    this.source = source;
    this.template = new Template(source);
    this.specialTokens = { ...(options.specialTokens ?? {}) };
    const mode = options.toolArguments ?? 'auto';
    this.argumentsAsString = mode === 'string' || (mode === 'auto' && /arguments\s+is\s+string/.test(source));
    this.toolPrompt = options.toolPrompt ?? 'template';
  }

  /** OpenAI-shaped messages -> the dicts Hugging Face templates read. */
  toTemplateMessages(messages: readonly ChatMessage[]): Record<string, unknown>[] {
    return messages.map((m, i) => {
      if (m === null || typeof m !== 'object') throw new ChatTemplateError(`message ${i}: not an object`);
      if (!['system', 'user', 'assistant', 'tool'].includes(m.role))
        throw new ChatTemplateError(`message ${i}: unsupported role ${JSON.stringify(m.role)}`);
      const out: Record<string, unknown> = { role: m.role, content: contentText(m.content) };
      if (m.role === 'assistant') {
        const reasoning = messageReasoning(m);
        if (reasoning !== undefined) out.reasoning_content = reasoning;
        if (m.tool_calls && m.tool_calls.length > 0) {
          out.tool_calls = m.tool_calls.map((tc) => ({
            id: tc.id,
            type: 'function',
            function: { name: tc.function.name, arguments: this.templateArguments(tc.function.arguments) },
          }));
        }
      }
      if (m.role === 'tool' && m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
      if (m.name !== undefined) out.name = m.name;
      return out;
    });
  }

  render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
    const asText = this.toolPrompt === 'system';
    const ctx: Record<string, unknown> = {
      ...(options.extra ?? {}),
      messages: this.toTemplateMessages(asText ? renderToolsAsText(messages, options.tools) : messages),
      add_generation_prompt: options.addGenerationPrompt === true,
    };
    if (!asText && options.tools && options.tools.length > 0) ctx.tools = options.tools;
    return this.renderContext(ctx);
  }

  /** Renders with a context already in Hugging Face's shape (messages as templates read them). */
  renderContext(context: Record<string, unknown>): string {
    try {
      return this.template.render({ ...this.specialTokens, ...context });
    } catch (err) {
      throw new ChatTemplateError(`chat template: ${(err as Error).message}`, { cause: err });
    }
  }

  private templateArguments(args: string): unknown {
    if (this.argumentsAsString) return args;
    try {
      return JSON.parse(args);
    } catch {
      return args;
    }
  }
}
