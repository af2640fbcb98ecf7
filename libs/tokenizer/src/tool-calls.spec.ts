import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ChatTemplate } from './chat-template';
import { QWEN3_DIR } from './testing/qwen3';
import { TINY_CHAT_TEMPLATE } from './tiny-template';
import { parseAssistantOutput, splitReasoning, toolCallId, topLevelValueSpans } from './tool-calls';
import type { ChatMessage, ToolDefinition } from './types';

const tools: ToolDefinition[] = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  { type: 'function', function: { name: 'search', parameters: { type: 'object', properties: { q: { type: 'string' } } } } },
];

describe('parseAssistantOutput (hermes)', () => {
  it('extracts several <tool_call> blocks with deterministic ids and the content before them', () => {
    const text =
      'Let me check both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"q": "Tokyo \\"weather\\"", "n": [1, {"x": "}"}]}}\n</tool_call>';
    const out = parseAssistantOutput(text, { format: 'hermes', tools, idSeed: 'req-1' });
    expect(out.content).toBe('Let me check both.');
    expect(out.toolCalls.map((c) => [c.name, c.arguments])).toEqual([
      ['get_weather', '{"city": "Paris"}'],
      ['search', '{"q": "Tokyo \\"weather\\"", "n": [1, {"x": "}"}]}'],
    ]);
    expect(JSON.parse(out.toolCalls[1].arguments)).toEqual({ q: 'Tokyo "weather"', n: [1, { x: '}' }] });
    expect(out.toolCalls[0].id).toMatch(/^call_0_[0-9a-f]{16}$/);
    expect(out.toolCalls[1].id).toMatch(/^call_1_[0-9a-f]{16}$/);
    expect(out.issues).toEqual([]);
    expect(out.malformed).toBe(false);
    // Same output, same seed: same ids (retries are stable); another seed: other ids.
    expect(parseAssistantOutput(text, { format: 'hermes', tools, idSeed: 'req-1' }).toolCalls.map((c) => c.id)).toEqual(
      out.toolCalls.map((c) => c.id),
    );
    expect(parseAssistantOutput(text, { format: 'hermes', tools, idSeed: 'req-2' }).toolCalls[0].id).not.toBe(out.toolCalls[0].id);
    expect(toolCallId(0, 'get_weather', '{"city": "Paris"}', 'req-1')).toBe(out.toolCalls[0].id);
  });

  it('gives null content when there is only a call', () => {
    const out = parseAssistantOutput('<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>', { format: 'hermes' });
    expect(out.content).toBeNull();
    expect(out.toolCalls).toHaveLength(1);
  });

  it('reports unknown tool names and keeps the call', () => {
    const out = parseAssistantOutput('<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>', { format: 'hermes', tools });
    expect(out.toolCalls.map((c) => c.name)).toEqual(['rm_rf']);
    expect(out.unknownTools).toEqual(['rm_rf']);
    expect(out.issues.map((i) => i.kind)).toEqual(['unknown-tool']);
    expect(out.malformed).toBe(false);
  });

  it('leaves malformed blocks in content with a flag, and still takes the good ones', () => {
    const bad = '<tool_call>\n{"name": "search", "arguments": {"q": }\n</tool_call>';
    const good = '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>';
    const out = parseAssistantOutput(`Hi\n${bad}\n${good}`, { format: 'hermes', tools });
    expect(out.malformed).toBe(true);
    expect(out.issues.map((i) => [i.kind, i.index])).toEqual([['malformed-json', 0]]);
    expect(out.content).toBe(`Hi\n${bad}`);
    expect(out.toolCalls.map((c) => c.arguments)).toEqual(['{"q": "x"}']);
  });

  it('flags a cut-off call, a call without a name, and arguments that are not an object', () => {
    expect(parseAssistantOutput('<tool_call>\n{"name": "se', { format: 'hermes' }).issues.map((i) => i.kind)).toEqual(['unterminated']);
    expect(parseAssistantOutput('<tool_call>\n{"arguments": {}}\n</tool_call>', { format: 'hermes' }).issues.map((i) => i.kind)).toEqual([
      'missing-name',
    ]);
    expect(
      parseAssistantOutput('<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>', { format: 'hermes' }).issues.map((i) => i.kind),
    ).toEqual(['bad-arguments']);
    const cut = parseAssistantOutput('ok <tool_call>\n{"name"', { format: 'hermes' });
    expect(cut.content).toBe('ok <tool_call>\n{"name"');
    expect(cut.malformed).toBe(true);
  });

  it('accepts arguments written as a JSON string, "parameters", and a missing arguments key', () => {
    const s = parseAssistantOutput('<tool_call>\n{"name": "f", "arguments": "{\\"a\\": 1}"}\n</tool_call>', { format: 'hermes' });
    expect(s.toolCalls[0].arguments).toBe('{"a": 1}');
    expect(
      parseAssistantOutput('<tool_call>{"name": "f", "parameters": {"a": 2}}</tool_call>', { format: 'hermes' }).toolCalls[0].arguments,
    ).toBe('{"a": 2}');
    expect(parseAssistantOutput('<tool_call>{"name": "f"}</tool_call>', { format: 'hermes' }).toolCalls[0].arguments).toBe('{}');
  });

  it('format none parses no calls', () => {
    const text = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>';
    expect(parseAssistantOutput(text, { format: 'none' })).toMatchObject({ content: text, toolCalls: [] });
  });
});

describe('reasoning extraction (Qwen3 <think>)', () => {
  it('splits a leading think block; content after it loses its leading newlines', () => {
    const out = parseAssistantOutput('<think>\nLet me think.\nMore.\n</think>\n\nThe answer is 4.', { format: 'hermes' });
    expect(out.reasoning).toBe('Let me think.\nMore.');
    expect(out.content).toBe('The answer is 4.');
  });

  it('handles an empty think block, a block opened by the prompt, an unterminated block, and none', () => {
    expect(parseAssistantOutput('<think>\n\n</think>\n\nHi', { format: 'hermes' })).toMatchObject({ reasoning: '', content: 'Hi' });
    expect(parseAssistantOutput('reasoning here\n</think>\n\nHi', { format: 'none' })).toMatchObject({
      reasoning: 'reasoning here',
      content: 'Hi',
    });
    expect(parseAssistantOutput('<think>\ncut off', { format: 'hermes' })).toMatchObject({
      reasoning: 'cut off',
      content: null,
      reasoningUnterminated: true,
    });
    const plain = parseAssistantOutput('no reasoning', { format: 'hermes' });
    expect(plain.reasoning).toBeUndefined();
    expect(parseAssistantOutput('<think>\nx\n</think>\n\ny', { format: 'hermes', reasoning: 'none' }).content).toBe(
      '<think>\nx\n</think>\n\ny',
    );
    expect(splitReasoning('a <think> b')).toEqual({ rest: 'a <think> b' });
  });

  it('combines reasoning and tool calls', () => {
    const out = parseAssistantOutput(
      '<think>\nneed weather\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
      { format: 'hermes', tools },
    );
    expect(out).toMatchObject({ reasoning: 'need weather', content: null });
    expect(out.toolCalls[0].arguments).toBe('{"city": "Oslo"}');
  });
});

describe('parseAssistantOutput (llama3-json)', () => {
  it('reads a JSON reply with "parameters", with or without <|python_tag|>, several separated by ;', () => {
    const one = parseAssistantOutput('{"name": "get_weather", "parameters": {"city": "Rome"}}', { format: 'llama3-json', tools });
    expect(one.content).toBeNull();
    expect(one.toolCalls.map((c) => [c.name, c.arguments])).toEqual([['get_weather', '{"city": "Rome"}']]);
    const two = parseAssistantOutput(
      '<|python_tag|>{"name": "search", "parameters": {"q": "a;b"}}; {"name": "get_weather", "parameters": {"city": "X"}}',
      { format: 'llama3-json', tools },
    );
    expect(two.toolCalls.map((c) => c.name)).toEqual(['search', 'get_weather']);
    expect(JSON.parse(two.toolCalls[0].arguments)).toEqual({ q: 'a;b' });
  });

  it('treats prose and plain JSON that is not a call as content', () => {
    expect(parseAssistantOutput('The weather is fine.', { format: 'llama3-json' })).toMatchObject({
      content: 'The weather is fine.',
      toolCalls: [],
      malformed: false,
    });
    expect(parseAssistantOutput('{"answer": 42}', { format: 'llama3-json' })).toMatchObject({
      content: '{"answer": 42}',
      toolCalls: [],
      malformed: true,
    });
    expect(parseAssistantOutput('<|python_tag|>{"name": "f", "parameters": {', { format: 'llama3-json' })).toMatchObject({
      toolCalls: [],
      malformed: true,
    });
  });
});

describe('topLevelValueSpans', () => {
  it('finds the raw text of each top-level value', () => {
    const text = ' {"name" : "f", "arguments":{"a":"}\\"","b":[1,{}]} , "n": -1.5e3, "t": true}';
    const spans = topLevelValueSpans(text);
    const get = (k: string) => {
      const s = spans.get(k) as [number, number];
      return text.slice(s[0], s[1]);
    };
    expect(get('name')).toBe('"f"');
    expect(get('arguments')).toBe('{"a":"}\\"","b":[1,{}]}');
    expect(get('n')).toBe('-1.5e3');
    expect(get('t')).toBe('true');
  });
});

describe('parsing then rendering reproduces the model output', () => {
  const qwenConfig = JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer_config.json'), 'utf8')) as { chat_template: string };
  const templates = { qwen3: new ChatTemplate(qwenConfig.chat_template), tiny: new ChatTemplate(TINY_CHAT_TEMPLATE) };
  const outputs = [
    'Plain answer.',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"q": "é 😀"}}\n</tool_call>',
    '<think>\nI need the tool.\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>',
    '<think>\nshort\n</think>\n\nFinal answer.',
  ];
  for (const [name, template] of Object.entries(templates)) {
    it.each(outputs)(`${name}: %j`, (output) => {
      const parsed = parseAssistantOutput(output, { format: 'hermes', tools });
      const reply: ChatMessage = {
        role: 'assistant',
        content: parsed.content,
        tool_calls: parsed.toolCalls.length
          ? parsed.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }))
          : undefined,
        ...(parsed.reasoning !== undefined ? { reasoning_content: parsed.reasoning } : {}),
      };
      const user: ChatMessage = { role: 'user', content: 'q' };
      const prompt = template.render([user], { tools, addGenerationPrompt: true });
      // The reply followed by a tool result (Qwen3 renders an empty <think> block for a reply
      // that is the last message, so it is checked where a continuation sees it: in history).
      const full = template.render([user, reply, { role: 'tool', tool_call_id: 'x', content: 'r' }], { tools });
      expect(full.startsWith(`${prompt}${output}<|im_end|>\n`)).toBe(true);
    });
  }
});
