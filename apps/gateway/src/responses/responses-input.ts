import type { z } from 'zod';
import { GatewayError } from '../errors';
import { checkToolResults, schemaProblem, type ChatForm, type ChatFormAssistant, type ChatFormMessage } from '../adapters/chat-form';
import {
  functionCallItemSchema,
  functionCallOutputItemSchema,
  functionToolSchema,
  inputPartSchema,
  messageItemSchema,
  reasoningItemSchema,
  TEXT_PART_TYPES,
  type ResponsesRequest,
} from './responses-request';

/** A Responses request in the call service's chat form, and what of it is stored with the response. */
export interface ResponsesInput {
  chat: ChatForm;
  /** The messages this request adds to its previous response's conversation (its input items; never the instructions). */
  added: ChatFormMessage[];
  /** Tools of other types than function (hosted tools): not offered to the model. */
  ignoredTools: string[];
}

const ITEM_TYPES = 'message, function_call, function_call_output and reasoning';

function parse<T extends z.ZodType>(schema: T, value: unknown, at: string): z.infer<T> {
  const r = schema.safeParse(value);
  if (!r.success) throw schemaProblem(r.error, at);
  return r.data;
}

/** Text of content parts; only text parts are supported (input_text, output_text, refusal). */
function partsText(parts: unknown[], at: string): { type: 'text'; text: string }[] {
  return parts.map((p, j) => {
    const type = p && typeof p === 'object' ? (p as { type?: unknown }).type : undefined;
    if (typeof type !== 'string' || !TEXT_PART_TYPES.includes(type)) {
      throw GatewayError.invalid(
        `${at}[${j}]: content part type \`${String(type).slice(0, 64)}\` is not supported; only ${TEXT_PART_TYPES.join(', ')} parts are`,
        `${at}[${j}].type`,
      );
    }
    const part = parse(inputPartSchema, p, `${at}[${j}]`);
    return { type: 'text' as const, text: part.type === 'refusal' ? part.refusal : part.text };
  });
}

/** One part as the plain string (what chat agents send), several as text parts (the template joins them). */
const content = (parts: { type: 'text'; text: string }[]) => (parts.length === 1 ? parts[0].text : parts);

/**
 * Input items as chat messages, keeping the assistant turns and the tool-call ids exactly as the
 * gateway answered them: a reasoning item, an assistant message and the function_call items
 * after it are one assistant turn (reasoning_content, content, tool_calls), as the reply was; a
 * function_call_output is a tool message. So a client that re-sends the whole history (Codex
 * with store: false) sends the very messages the previous call recorded, and extends it.
 * `itemOf[k]` is the input index message k came from (for errors).
 */
export function itemsToMessages(input: ResponsesRequest['input']): { messages: ChatFormMessage[]; itemOf: number[] } {
  if (typeof input === 'string') return { messages: [{ role: 'user', content: input }], itemOf: [0] };
  const messages: ChatFormMessage[] = [];
  const itemOf: number[] = [];
  const push = (m: ChatFormMessage, i: number) => {
    messages.push(m);
    itemOf.push(i);
  };
  let reasoning: string | undefined;
  /** The assistant turn later function_call items belong to (until another item ends it). */
  let turn: ChatFormAssistant | null = null;
  input.forEach((raw, i) => {
    const at = `input[${i}]`;
    if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw GatewayError.invalid(`${at}: must be an object`, at);
    const item = raw as { type?: unknown; role?: unknown };
    const type = item.type ?? (item.role !== undefined ? 'message' : undefined);
    switch (type) {
      case 'message': {
        const m = parse(messageItemSchema, raw, at);
        const text = typeof m.content === 'string' ? m.content : content(partsText(m.content, `${at}.content`));
        if (m.role === 'assistant') {
          turn = { role: 'assistant', content: text, ...(reasoning ? { reasoning_content: reasoning } : {}) };
          push(turn, i);
        } else {
          push({ role: m.role === 'developer' ? 'system' : m.role, content: text }, i);
          turn = null;
        }
        reasoning = undefined;
        return;
      }
      case 'function_call': {
        const c = parse(functionCallItemSchema, raw, at);
        const call = { id: c.call_id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } };
        if (turn) turn.tool_calls = [...(turn.tool_calls ?? []), call];
        else {
          turn = { role: 'assistant', content: null, tool_calls: [call], ...(reasoning ? { reasoning_content: reasoning } : {}) };
          push(turn, i);
        }
        reasoning = undefined;
        return;
      }
      case 'function_call_output': {
        const o = parse(functionCallOutputItemSchema, raw, at);
        const text = typeof o.output === 'string' ? o.output : partsText(o.output, `${at}.output`).map((p) => p.text);
        push({ role: 'tool', tool_call_id: o.call_id, content: typeof text === 'string' ? text : text.join('\n') }, i);
        turn = null;
        return;
      }
      case 'reasoning': {
        // The reasoning text the gateway answered is in `content` (reasoning_text); a summary is not
        // the reasoning, and encrypted_content is opaque: without content the stored reply's
        // reasoning is restored when the turn extends it.
        const r = parse(reasoningItemSchema, raw, at);
        const t = (r.content ?? []).map((c) => c.text).join('');
        reasoning = t === '' ? undefined : t;
        turn = null;
        return;
      }
      case 'item_reference':
        throw GatewayError.invalid(`${at}: item_reference must be resolved first`, `${at}.type`);
      default:
        throw GatewayError.invalid(
          `${at}: item type \`${String(type).slice(0, 64)}\` is not supported; the gateway takes ${ITEM_TYPES} items`,
          `${at}.type`,
          'unsupported_item_type',
        );
    }
  });
  return { messages, itemOf };
}

/** The ids an input's item_reference items name. */
export function referencedItems(input: ResponsesRequest['input']): string[] {
  if (typeof input === 'string') return [];
  return input.flatMap((raw) => {
    const item = raw as { type?: unknown; id?: unknown } | null;
    return item && typeof item === 'object' && item.type === 'item_reference' && typeof item.id === 'string' ? [item.id] : [];
  });
}

/**
 * The input with every item_reference replaced by the stored output item it names (what the
 * Vercel AI SDK sends for earlier assistant text when `store` is on); one naming no stored item
 * of this session is refused.
 */
export function resolveReferences(input: ResponsesRequest['input'], stored: ReadonlyMap<string, unknown>): ResponsesRequest['input'] {
  if (typeof input === 'string') return input;
  return input.map((raw, i) => {
    const item = raw as { type?: unknown; id?: unknown } | null;
    if (!item || typeof item !== 'object' || item.type !== 'item_reference') return raw;
    const found = typeof item.id === 'string' ? stored.get(item.id) : undefined;
    if (found === undefined)
      throw GatewayError.invalid(
        `input[${i}]: item_reference \`${String(item.id).slice(0, 64)}\` names no stored output item of this session`,
        `input[${i}].id`,
        'item_not_found',
      );
    return found;
  });
}

/** Function tools in the chat form; tools of other types (hosted: web_search, file_search, ...) are not offered, and returned by name. */
export function toChatTools(tools: ResponsesRequest['tools']): { tools: NonNullable<ChatForm['tools']> | null; ignored: string[] } {
  if (!tools || tools.length === 0) return { tools: null, ignored: [] };
  const out: NonNullable<ChatForm['tools']> = [];
  const ignored: string[] = [];
  tools.forEach((raw, i) => {
    const type = raw && typeof raw === 'object' ? (raw as { type?: unknown }).type : undefined;
    if (typeof type !== 'string') throw GatewayError.invalid(`tools[${i}]: must be an object with a type`, `tools[${i}].type`);
    if (type !== 'function') {
      const name = (raw as { name?: unknown }).name;
      ignored.push(typeof name === 'string' ? `${type}:${name}` : type);
      return;
    }
    const t = parse(functionToolSchema, raw, `tools[${i}]`);
    out.push({
      type: 'function',
      function: {
        name: t.name,
        ...(typeof t.description === 'string' ? { description: t.description } : {}),
        ...(t.parameters ? { parameters: t.parameters } : {}),
      },
    });
  });
  return { tools: out.length > 0 ? out : null, ignored };
}

function toChatToolChoice(choice: ResponsesRequest['tool_choice']): ChatForm['tool_choice'] {
  if (choice === null || choice === undefined || typeof choice === 'string') return choice ?? undefined;
  if (choice.type === 'function' && typeof choice.name === 'string') return { type: 'function', function: { name: choice.name } };
  throw GatewayError.invalid(
    `tool_choice of type \`${choice.type.slice(0, 64)}\` is not supported: use "none", "auto", "required" or {"type": "function", "name": ...}`,
    'tool_choice',
  );
}

/**
 * The request in the chat form: the instructions as the first system message (they are not
 * carried over from a previous response, as in OpenAI's API), then the previous response's
 * conversation (`history`), then the new input items.
 */
export function toChatForm(req: ResponsesRequest, history: readonly ChatFormMessage[] = []): ResponsesInput {
  const { messages: added, itemOf } = itemsToMessages(req.input);
  const system: ChatFormMessage[] =
    typeof req.instructions === 'string' && req.instructions !== '' ? [{ role: 'system', content: req.instructions }] : [];
  const messages = [...system, ...history, ...added];
  if (added.length === 0) throw GatewayError.invalid('input must hold at least one item', 'input');
  const offset = system.length + history.length;
  checkToolResults(messages, (k) => (k < offset ? 'previous_response_id' : `input[${itemOf[k - offset]}]`), 'call_id');
  const { tools, ignored } = toChatTools(req.tools);
  const toolChoice = toChatToolChoice(req.tool_choice);
  return {
    chat: {
      model: req.model,
      messages,
      ...(tools ? { tools } : {}),
      ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
      ...(req.parallel_tool_calls === false ? { parallel_tool_calls: false } : {}),
      max_tokens: req.max_output_tokens ?? null,
      temperature: req.temperature ?? null,
      top_p: req.top_p ?? null,
      stream: req.stream === true,
    },
    added,
    ignoredTools: ignored,
  };
}
