/**
 * The transcripts harnesses leave, as the OpenAI chat messages a verifier reads. Each reader
 * takes what the agent wrote (untrusted: any shape), keeps what it can read, and gives null when
 * there is nothing: the run then keeps the answer it read from the answer file or stdout.
 */
import type { ChatMessage, ToolCall } from '../../environments/types';
import { listAgentFiles, readAgentFile } from './agent-files';
import { PRESET_HOME, type PresetOutput } from './types';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const ROLES = new Set(['system', 'user', 'assistant', 'tool']);

/** Text of a message's content: a string, or the text parts of a list (OpenAI, Anthropic and Responses parts alike). */
export function textOf(content: unknown): string | null {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return null;
  const parts = content.flatMap((p) => (isObject(p) && typeof p.text === 'string' ? [p.text] : typeof p === 'string' ? [p] : []));
  return parts.length ? parts.join('') : null;
}

function toolCallsOf(v: unknown): ToolCall[] {
  if (!Array.isArray(v)) return [];
  return v.flatMap((c, i) => {
    if (!isObject(c) || !isObject(c.function) || typeof c.function.name !== 'string') return [];
    const args = c.function.arguments;
    return [
      {
        id: typeof c.id === 'string' ? c.id : `call_${i}`,
        type: 'function' as const,
        function: { name: c.function.name, arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}) },
      },
    ];
  });
}

/** Chat-format messages (as OpenAI's clients keep them) with anything else dropped. */
export function chatMessages(list: unknown): ChatMessage[] {
  if (!Array.isArray(list)) return [];
  return list.flatMap((m): ChatMessage[] => {
    if (!isObject(m) || typeof m.role !== 'string' || !ROLES.has(m.role)) return [];
    const role = m.role as ChatMessage['role'];
    const calls = role === 'assistant' ? toolCallsOf(m.tool_calls) : [];
    return [
      {
        role,
        content: textOf(m.content),
        ...(calls.length ? { tool_calls: calls } : {}),
        ...(role === 'tool' && typeof m.tool_call_id === 'string' ? { tool_call_id: m.tool_call_id } : {}),
      },
    ];
  });
}

/** Responses API items (messages, function calls and their outputs) as chat messages; consecutive calls join one assistant turn. */
export function responsesItemsToChat(items: unknown[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const item of items) {
    if (!isObject(item)) continue;
    const type = item.type ?? 'message';
    if (type === 'message' && typeof item.role === 'string') {
      const role = item.role === 'developer' ? 'system' : item.role;
      if (ROLES.has(role)) out.push({ role: role as ChatMessage['role'], content: textOf(item.content) });
    } else if ((type === 'function_call' || type === 'custom_tool_call') && typeof item.name === 'string') {
      const call: ToolCall = {
        id: String(item.call_id ?? item.id ?? `call_${out.length}`),
        type: 'function',
        function: { name: item.name, arguments: typeof item.arguments === 'string' ? item.arguments : String(item.input ?? '{}') },
      };
      const last = out.at(-1);
      if (last?.role === 'assistant' && last.tool_calls) last.tool_calls.push(call);
      else out.push({ role: 'assistant', content: null, tool_calls: [call] });
    } else if (type === 'function_call_output' || type === 'custom_tool_call_output') {
      const output = isObject(item.output) ? textOf(item.output.content) : (textOf(item.output) ?? null);
      out.push({ role: 'tool', tool_call_id: String(item.call_id ?? ''), content: output });
    }
  }
  return out;
}

function parseJson(text: string | null): unknown {
  if (text === null) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** mini-swe-agent's trajectory: its messages (the exit record dropped) and its submission. */
export function miniTrajectory(text: string | null): PresetOutput | null {
  const t = parseJson(text);
  if (!isObject(t)) return null;
  const messages = chatMessages(t.messages);
  const submission = isObject(t.info) && typeof t.info.submission === 'string' && t.info.submission !== '' ? t.info.submission : null;
  return messages.length || submission !== null ? { finalAnswer: submission, messages: messages.length ? messages : null } : null;
}

/** Codex CLI's session log (the newest $HOME/.codex/sessions/**\/rollout-*.jsonl): its response items. */
export async function codexSessionMessages(workspace: string): Promise<ChatMessage[] | null> {
  const files = (await listAgentFiles(workspace, `${PRESET_HOME}/.codex/sessions`)).filter((f) => /rollout-[^/]*\.jsonl$/.test(f));
  const newest = files.sort().at(-1);
  if (!newest) return null;
  const text = await readAgentFile(workspace, newest, 32 << 20);
  const items = (text ?? '').split('\n').flatMap((line) => {
    const v = parseJson(line);
    return isObject(v) && v.type === 'response_item' ? [v.payload] : [];
  });
  const messages = responsesItemsToChat(items);
  return messages.length ? messages : null;
}

/**
 * Qwen Code's JSON output: its events (system, user, assistant, result), messages in the
 * Anthropic-like shape its SDK uses ({type, message: {role, content: [blocks]}}); the result
 * event's text is the answer.
 */
export function qwenOutput(text: string | null): PresetOutput | null {
  const events = parseJson(text);
  if (!Array.isArray(events)) return null;
  const messages: ChatMessage[] = [];
  let finalAnswer: string | null = null;
  for (const e of events) {
    if (!isObject(e)) continue;
    if (e.type === 'result' && typeof e.result === 'string') finalAnswer = e.result;
    if ((e.type !== 'assistant' && e.type !== 'user') || !isObject(e.message)) continue;
    const blocks = Array.isArray(e.message.content) ? e.message.content.filter(isObject) : [];
    const text = typeof e.message.content === 'string' ? e.message.content : textOf(blocks.filter((b) => b.type === 'text'));
    if (e.type === 'assistant') {
      const calls: ToolCall[] = blocks
        .filter((b) => b.type === 'tool_use' && typeof b.name === 'string')
        .map((b) => ({
          id: String(b.id ?? ''),
          type: 'function',
          function: { name: b.name as string, arguments: JSON.stringify(b.input ?? {}) },
        }));
      messages.push({ role: 'assistant', content: text, ...(calls.length ? { tool_calls: calls } : {}) });
    } else {
      const results = blocks.filter((b) => b.type === 'tool_result');
      for (const r of results) messages.push({ role: 'tool', tool_call_id: String(r.tool_use_id ?? ''), content: textOf(r.content) });
      if (!results.length && text !== null) messages.push({ role: 'user', content: text });
    }
  }
  return messages.length || finalAnswer !== null ? { finalAnswer, messages: messages.length ? messages : null } : null;
}

/** llm's log of its exchange (`llm logs --json`): system, prompt and response. */
export function llmLog(text: string | null): PresetOutput | null {
  const logs = parseJson(text);
  const entry = Array.isArray(logs) ? logs.filter(isObject).at(-1) : undefined;
  if (!entry || typeof entry.response !== 'string') return null;
  return {
    finalAnswer: entry.response.trim(),
    messages: [
      ...(typeof entry.system === 'string' && entry.system ? [{ role: 'system' as const, content: entry.system }] : []),
      { role: 'user', content: typeof entry.prompt === 'string' ? entry.prompt : null },
      { role: 'assistant', content: entry.response },
    ],
  };
}
