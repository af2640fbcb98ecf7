import type { z } from 'zod';
import { GatewayError } from '../errors';
import { checkToolResults, schemaProblem, type ChatForm, type ChatFormMessage } from '../adapters/chat-form';
import {
  customToolSchema,
  textBlockSchema,
  thinkingBlockSchema,
  toolResultBlockSchema,
  toolUseBlockSchema,
  type CountTokensRequest,
  type MessagesRequest,
} from './messages-request';

/** A Messages request in the call service's chat form. */
export interface MessagesInput {
  chat: ChatForm;
  /** Server tools (web_search_..., bash_..., ...): not offered to the model. */
  ignoredTools: string[];
}

type Text = { type: 'text'; text: string };

function parse<T extends z.ZodType>(schema: T, value: unknown, at: string): z.infer<T> {
  const r = schema.safeParse(value);
  if (!r.success) throw schemaProblem(r.error, at);
  return r.data;
}

const blockType = (b: unknown) => (b && typeof b === 'object' ? (b as { type?: unknown }).type : undefined);

function unsupported(at: string, type: unknown, allowed: string): GatewayError {
  return GatewayError.invalid(
    `${at}: content block type \`${String(type).slice(0, 64)}\` is not supported here; ${allowed}`,
    `${at}.type`,
    'unsupported_block_type',
  );
}

/** One text part as the plain string, several as text parts (the template joins them). */
const content = (parts: Text[]) => (parts.length === 1 ? parts[0].text : parts);

function textBlocks(blocks: unknown[], at: string): Text[] {
  return blocks.map((b, j) => {
    if (blockType(b) !== 'text') throw unsupported(`${at}[${j}]`, blockType(b), 'only text blocks are');
    return { type: 'text', text: parse(textBlockSchema, b, `${at}[${j}]`).text };
  });
}

/**
 * A user turn's blocks, in order: each tool_result becomes a tool message (its text blocks
 * joined), and each run of text blocks a user message. (is_error has no field in chat templates:
 * the error text is what the model reads, as in the peers' adapters.)
 */
function userMessages(blocks: unknown[], at: string, push: (m: ChatFormMessage) => void): void {
  let text: Text[] = [];
  const flush = () => {
    if (text.length > 0) push({ role: 'user', content: content(text) });
    text = [];
  };
  blocks.forEach((b, j) => {
    const where = `${at}[${j}]`;
    const type = blockType(b);
    if (type === 'text') text.push({ type: 'text', text: parse(textBlockSchema, b, where).text });
    else if (type === 'tool_result') {
      flush();
      const r = parse(toolResultBlockSchema, b, where);
      const out =
        r.content === undefined
          ? ''
          : typeof r.content === 'string'
            ? r.content
            : textBlocks(r.content, `${where}.content`)
                .map((t) => t.text)
                .join('\n');
      push({ role: 'tool', tool_call_id: r.tool_use_id, content: out });
    } else throw unsupported(where, type, 'user turns take text and tool_result blocks');
  });
  flush();
}

/**
 * An assistant turn's blocks as one assistant message, the way the gateway answered it:
 * thinking as reasoning_content, text as content, tool_use blocks as tool_calls with their ids
 * (the input object as JSON arguments; a turn the gateway answered extends from the stored reply,
 * so the model's own spacing is kept). redacted_thinking is opaque and dropped.
 */
function assistantMessage(blocks: unknown[], at: string): ChatFormMessage {
  const text: Text[] = [];
  let reasoning: string | undefined;
  const calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[] = [];
  blocks.forEach((b, j) => {
    const where = `${at}[${j}]`;
    const type = blockType(b);
    if (type === 'text') text.push({ type: 'text', text: parse(textBlockSchema, b, where).text });
    else if (type === 'thinking') reasoning = (reasoning ?? '') + parse(thinkingBlockSchema, b, where).thinking;
    else if (type === 'redacted_thinking') return;
    else if (type === 'tool_use') {
      const u = parse(toolUseBlockSchema, b, where);
      calls.push({ id: u.id, type: 'function', function: { name: u.name, arguments: JSON.stringify(u.input) } });
    } else throw unsupported(where, type, 'assistant turns take text, thinking, redacted_thinking and tool_use blocks');
  });
  return {
    role: 'assistant',
    content: calls.length > 0 && text.length === 0 ? null : text.map((t) => t.text).join(''),
    ...(calls.length > 0 ? { tool_calls: calls } : {}),
    ...(reasoning !== undefined && reasoning !== '' ? { reasoning_content: reasoning } : {}),
  };
}

/** The system prompt (a string or text blocks) and the turns as chat messages; `where(k)` names the block message k came from. */
export function blocksToMessages(req: Pick<MessagesRequest, 'system' | 'messages'>): { messages: ChatFormMessage[]; where: string[] } {
  const messages: ChatFormMessage[] = [];
  const where: string[] = [];
  if (req.system !== null && req.system !== undefined) {
    const system = typeof req.system === 'string' ? req.system : content(textBlocks(req.system, 'system'));
    if (system !== '') {
      messages.push({ role: 'system', content: system });
      where.push('system');
    }
  }
  req.messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    const push = (msg: ChatFormMessage) => {
      messages.push(msg);
      where.push(at);
    };
    if (m.role === 'assistant')
      push(assistantMessage(typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content, `${at}.content`));
    else if (m.role === 'system')
      push({ role: 'system', content: typeof m.content === 'string' ? m.content : content(textBlocks(m.content, `${at}.content`)) });
    else if (typeof m.content === 'string') push({ role: 'user', content: m.content });
    else userMessages(m.content, `${at}.content`, push);
  });
  return { messages, where };
}

/** Custom tools (name, description, input_schema) as function tools; server tools (a `type` other than custom) are not offered and returned by name. */
export function toChatTools(tools: MessagesRequest['tools']): { tools: NonNullable<ChatForm['tools']> | null; ignored: string[] } {
  if (!tools || tools.length === 0) return { tools: null, ignored: [] };
  const out: NonNullable<ChatForm['tools']> = [];
  const ignored: string[] = [];
  tools.forEach((raw, i) => {
    if (!raw || typeof raw !== 'object') throw GatewayError.invalid(`tools[${i}]: must be an object`, `tools[${i}]`);
    const type = (raw as { type?: unknown }).type;
    if (type !== undefined && type !== null && type !== 'custom') {
      const name = (raw as { name?: unknown }).name;
      ignored.push(typeof name === 'string' ? `${String(type)}:${name}` : String(type));
      return;
    }
    const t = parse(customToolSchema, raw, `tools[${i}]`);
    out.push({
      type: 'function',
      function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.input_schema },
    });
  });
  return { tools: out.length > 0 ? out : null, ignored };
}

/** auto / any / tool / none as the chat form's tool_choice (the call service's forced-call input), and whether several calls may come at once. */
function toChatToolChoice(choice: MessagesRequest['tool_choice']): { toolChoice: ChatForm['tool_choice']; parallel: boolean } {
  const parallel = choice?.disable_parallel_tool_use !== true;
  switch (choice?.type) {
    case undefined:
    case 'auto':
      return { toolChoice: undefined, parallel };
    case 'none':
      return { toolChoice: 'none', parallel };
    case 'any':
      return { toolChoice: 'required', parallel };
    case 'tool':
      if (!choice.name) throw GatewayError.invalid('tool_choice of type "tool" needs a name', 'tool_choice.name');
      return { toolChoice: { type: 'function', function: { name: choice.name } }, parallel };
  }
}

/** The conversation of a Messages or count_tokens request in the chat form, with every tool_result checked against the tool_use blocks before it. */
export function conversation(req: Pick<CountTokensRequest, 'system' | 'messages' | 'tools' | 'tool_choice'>) {
  const { messages, where } = blocksToMessages(req);
  if (req.messages.length === 0) throw GatewayError.invalid('messages: at least one message is required', 'messages');
  checkToolResults(messages, (k) => where[k], 'tool_use_id');
  const { tools, ignored } = toChatTools(req.tools);
  const { toolChoice, parallel } = toChatToolChoice(req.tool_choice);
  return { messages, tools, ignored, toolChoice, parallel };
}

export function toChatForm(req: MessagesRequest): MessagesInput {
  const { messages, tools, ignored, toolChoice, parallel } = conversation(req);
  return {
    chat: {
      model: req.model,
      messages,
      ...(tools ? { tools } : {}),
      ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
      ...(parallel ? {} : { parallel_tool_calls: false }),
      max_tokens: req.max_tokens,
      stop: req.stop_sequences && req.stop_sequences.length > 0 ? req.stop_sequences : null,
      temperature: req.temperature ?? null,
      top_p: req.top_p ?? null,
      top_k: req.top_k ?? null,
      stream: req.stream === true,
    },
    ignoredTools: ignored,
  };
}
