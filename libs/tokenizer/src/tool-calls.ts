import { createHash } from 'node:crypto';
import type { ToolCallFormat, ToolDefinition } from './types';

export interface ParsedToolCall {
  id: string;
  name: string;
  /** JSON text of the arguments object, as the model wrote it when that text is valid JSON. */
  arguments: string;
}

export type ToolCallIssueKind = 'malformed-json' | 'missing-name' | 'bad-arguments' | 'unterminated' | 'unknown-tool';

export interface ToolCallIssue {
  kind: ToolCallIssueKind;
  /** Index of the tool-call block in the output (in order of appearance). */
  index: number;
  /** The block's text. */
  text: string;
  message: string;
}

export interface ParsedAssistantOutput {
  /** Text outside tool-call blocks and reasoning; null when there is none. */
  content: string | null;
  toolCalls: ParsedToolCall[];
  /** The `<think>` block's text, when the output has one. */
  reasoning?: string;
  /** True when the reasoning block was cut off (no `</think>`): the whole output was reasoning. */
  reasoningUnterminated?: boolean;
  /** Problems found; blocks that could not be parsed are left in `content`. */
  issues: ToolCallIssue[];
  /** Names called that are not among `tools` (the calls are still in toolCalls). */
  unknownTools: string[];
  /** True when some tool-call block could not be parsed (it stays in content). */
  malformed: boolean;
}

export interface ParseOptions {
  format: ToolCallFormat;
  /** Tools offered in the request: calls to other names are reported in unknownTools. */
  tools?: readonly ToolDefinition[] | null;
  /**
   * Reasoning extraction: 'auto' (default) takes a leading `<think>...</think>` block, or the
   * text before a `</think>` that has no opening tag (templates that open the block in the
   * generation prompt); 'none' leaves the text alone.
   */
  reasoning?: 'auto' | 'none';
  /**
   * Mixed into generated call ids (e.g. the request id). Ids are `call_<index>_<hash>` of
   * (seed, index, name, arguments): a retried request that produces the same output gets the
   * same ids.
   */
  idSeed?: string;
}

const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';

/** Splits a leading reasoning block off; the shapes Qwen3's template renders are reproduced. */
export function splitReasoning(text: string): { reasoning?: string; rest: string; unterminated?: boolean } {
  const lead = text.length - text.trimStart().length;
  const opened = text.startsWith(THINK_OPEN, lead);
  const close = text.indexOf(THINK_CLOSE);
  if (opened) {
    const body = text.slice(lead + THINK_OPEN.length, close === -1 ? undefined : close);
    if (close === -1) return { reasoning: stripNewlines(body), rest: '', unterminated: true };
    return { reasoning: stripNewlines(body), rest: text.slice(close + THINK_CLOSE.length).replace(/^\n+/, '') };
  }
  if (close !== -1 && !text.slice(0, close).includes(THINK_OPEN)) {
    return { reasoning: stripNewlines(text.slice(0, close)), rest: text.slice(close + THINK_CLOSE.length).replace(/^\n+/, '') };
  }
  return { rest: text };
}

const stripNewlines = (s: string) => s.replace(/^\n+/, '').replace(/\n+$/, '');

/** Deterministic tool-call id: `call_<index>_<first 16 hex of sha256(seed, index, name, arguments)>`. */
export function toolCallId(index: number, name: string, args: string, seed = ''): string {
  const h = createHash('sha256').update(`${seed}\u0000${index}\u0000${name}\u0000${args}`).digest('hex');
  return `call_${index}_${h.slice(0, 16)}`;
}

/**
 * Spans of the values of a JSON object's top-level keys, in `text` (which must be valid JSON
 * for an object: check with JSON.parse first). Used to keep the model's own spelling of the
 * arguments object.
 */
export function topLevelValueSpans(text: string): Map<string, [number, number]> {
  const spans = new Map<string, [number, number]>();
  let i = 0;
  const ws = () => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\n' || text[i] === '\r' || text[i] === '\t')) i++;
  };
  const str = (): string => {
    const start = i;
    i++; // opening quote
    while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    i++;
    return JSON.parse(text.slice(start, i)) as string;
  };
  const value = () => {
    if (text[i] === '"') {
      str();
      return;
    }
    if (text[i] === '{' || text[i] === '[') {
      let depth = 0;
      while (i < text.length) {
        const c = text[i];
        if (c === '"') {
          str();
          continue;
        }
        if (c === '{' || c === '[') depth++;
        else if (c === '}' || c === ']') depth--;
        i++;
        if (depth === 0) return;
      }
      return;
    }
    while (i < text.length && !/[\s,}\]]/.test(text[i])) i++;
  };
  ws();
  if (text[i] !== '{') return spans;
  i++;
  for (;;) {
    ws();
    if (text[i] !== '"') break;
    const key = str();
    ws();
    i++; // ':'
    ws();
    const start = i;
    value();
    spans.set(key, [start, i]);
    ws();
    if (text[i] === ',') i++;
    else break;
  }
  return spans;
}

interface CallCandidate {
  name: string;
  arguments: string;
}

/** Reads `{"name": ..., "arguments"|"parameters": {...}}`; returns the call or why it is not one. */
function readCall(body: string): CallCandidate | { kind: ToolCallIssueKind; message: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (err) {
    return { kind: 'malformed-json', message: (err as Error).message };
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
    return { kind: 'malformed-json', message: 'not a JSON object' };
  const obj = parsed as Record<string, unknown>;
  if (typeof obj.name !== 'string' || obj.name.length === 0) return { kind: 'missing-name', message: 'no "name" string' };
  const key = 'arguments' in obj ? 'arguments' : 'parameters' in obj ? 'parameters' : null;
  if (key === null) return { name: obj.name, arguments: '{}' };
  let args = obj[key];
  let raw: string | null = null;
  if (typeof args === 'string') {
    // Some models write the arguments as a JSON string: accept it when it holds an object.
    try {
      const inner = JSON.parse(args) as unknown;
      if (inner !== null && typeof inner === 'object' && !Array.isArray(inner)) {
        raw = args;
        args = inner;
      }
    } catch {
      /* reported below */
    }
  } else {
    const span = topLevelValueSpans(body).get(key);
    if (span) raw = body.slice(span[0], span[1]);
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args))
    return { kind: 'bad-arguments', message: `"${key}" is not a JSON object` };
  return { name: obj.name, arguments: raw ?? JSON.stringify(args) };
}

const TOOL_OPEN = '<tool_call>';
const TOOL_CLOSE = '</tool_call>';

function parseHermes(text: string, issues: ToolCallIssue[]): { content: string; calls: CallCandidate[] } {
  const calls: CallCandidate[] = [];
  const kept: string[] = [];
  let pos = 0;
  let index = 0;
  let firstBlock = -1;
  for (;;) {
    const open = text.indexOf(TOOL_OPEN, pos);
    if (open === -1) {
      kept.push(text.slice(pos));
      break;
    }
    kept.push(text.slice(pos, open));
    const close = text.indexOf(TOOL_CLOSE, open + TOOL_OPEN.length);
    const end = close === -1 ? text.length : close + TOOL_CLOSE.length;
    const block = text.slice(open, end);
    if (close === -1) {
      issues.push({ kind: 'unterminated', index, text: block, message: 'no </tool_call>' });
      kept.push(block);
      break;
    }
    const r = readCall(text.slice(open + TOOL_OPEN.length, close).trim());
    if ('name' in r) {
      calls.push(r);
      if (firstBlock === -1) firstBlock = kept.length;
    } else {
      issues.push({ kind: r.kind, index, text: block, message: r.message });
      kept.push(block);
    }
    index++;
    pos = end;
  }
  // Templates write `content + '\n' + <tool_call>...`: the newline before the first call is the
  // template's, not the content's. Whitespace between and after the calls is dropped.
  if (firstBlock !== -1) {
    kept[firstBlock - 1] = kept[firstBlock - 1].replace(/\n$/, '');
    for (let k = firstBlock; k < kept.length; k++) if (kept[k].trim() === '') kept[k] = '';
  }
  return { content: kept.join(''), calls };
}

/**
 * Llama 3.1 JSON tool calls: the whole reply is `{"name": ..., "parameters": {...}}` (optionally
 * after `<|python_tag|>`, several separated by ';'). Anything else is content.
 */
function parseLlama3(text: string, issues: ToolCallIssue[]): { content: string; calls: CallCandidate[] } {
  const trimmed = text.trim();
  const tagged = trimmed.startsWith('<|python_tag|>');
  const body = tagged ? trimmed.slice('<|python_tag|>'.length).trim() : trimmed;
  if (!body.startsWith('{')) return { content: text, calls: [] };
  const pieces = splitTopLevel(body);
  const calls: CallCandidate[] = [];
  for (const piece of pieces) {
    const r = readCall(piece);
    if (!('name' in r)) {
      // Plain JSON that is not a call is content; a tagged one was meant as a call.
      if (tagged || pieces.length > 1 || r.kind !== 'malformed-json')
        issues.push({ kind: r.kind, index: 0, text: trimmed, message: r.message });
      return { content: text, calls: [] };
    }
    calls.push(r);
  }
  return { content: '', calls };
}

/** Splits `{...}; {...}` into the objects (top level, outside strings). */
function splitTopLevel(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  let inStr = false;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (inStr) {
      if (c === '\\') i++;
      else if (c === '"') inStr = false;
      continue;
    }
    if (c === '"') inStr = true;
    else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') depth--;
    else if (c === ';' && depth === 0) {
      out.push(s.slice(start, i).trim());
      start = i + 1;
    }
  }
  out.push(s.slice(start).trim());
  return out.filter((p) => p.length > 0);
}

/**
 * Parses a model's reply text (decoded with special tokens skipped) into OpenAI-shaped parts:
 * content, tool calls and reasoning. Blocks that fail to parse stay in content and are reported
 * in `issues`; calls to tools that were not offered are kept and listed in `unknownTools` (the
 * gateway decides what that means).
 */
export function parseAssistantOutput(text: string, options: ParseOptions): ParsedAssistantOutput {
  const issues: ToolCallIssue[] = [];
  let rest = text;
  let reasoning: string | undefined;
  let unterminated = false;
  if ((options.reasoning ?? 'auto') === 'auto') {
    const r = splitReasoning(text);
    reasoning = r.reasoning;
    rest = r.rest;
    unterminated = r.unterminated === true;
  }
  let content = rest;
  let calls: CallCandidate[] = [];
  if (options.format === 'hermes') ({ content, calls } = parseHermes(rest, issues));
  else if (options.format === 'llama3-json') ({ content, calls } = parseLlama3(rest, issues));

  const offered = options.tools ? new Set(options.tools.map((t) => t.function.name)) : null;
  const unknownTools: string[] = [];
  const toolCalls = calls.map((c, index) => {
    if (offered && !offered.has(c.name)) {
      unknownTools.push(c.name);
      issues.push({ kind: 'unknown-tool', index, text: c.name, message: `tool ${JSON.stringify(c.name)} was not offered` });
    }
    return { id: toolCallId(index, c.name, c.arguments, options.idSeed), name: c.name, arguments: c.arguments };
  });
  const out: ParsedAssistantOutput = {
    content: content.length > 0 ? content : null,
    toolCalls,
    issues,
    unknownTools,
    malformed: issues.some((i) => i.kind !== 'unknown-tool'),
  };
  if (reasoning !== undefined) out.reasoning = reasoning;
  if (unterminated) out.reasoningUnterminated = true;
  return out;
}
