import { describe, expect, it } from 'vitest';
import { loadChatFormat, tinyChatFormat } from './chat-format';
import { forcedToolCallOpening } from './forced-tool-call';
import { parseAssistantOutput } from './tool-calls';
import { QWEN3_DIR } from './testing/qwen3';
import type { ToolDefinition } from './types';

const tools: ToolDefinition[] = [{ type: 'function', function: { name: 'add', parameters: { type: 'object' } } }];
const messages = [{ role: 'user' as const, content: '12+7' }];

describe('forcedToolCallOpening', () => {
  it.each([
    ['tiny', tinyChatFormat()],
    ['Qwen3', loadChatFormat(QWEN3_DIR)],
  ])("%s: the generation prompt + the opening is where the template's rendering of a call of that tool continues", (_name, format) => {
    const prompt = format.template.render(messages, { tools, addGenerationPrompt: true });
    const named = forcedToolCallOpening(format.template, { messages, tools }, 'add');
    const any = forcedToolCallOpening(format.template, { messages, tools }, null);
    expect(named).toMatch(/<tool_call>\n\{"name": "add$/);
    expect(any).toBe(named!.slice(0, -'add'.length));
    const call = {
      role: 'assistant' as const,
      content: '',
      tool_calls: [{ id: 'c1', type: 'function' as const, function: { name: 'add', arguments: '{"a": 12, "b": 7}' } }],
    };
    const rendered = format.template.render([...messages, call], { tools });
    expect(rendered.startsWith(prompt + named)).toBe(true);
    // what follows the opening, as a model would write it, parses back to the call
    const output = rendered.slice(prompt.length).replace(/<\|im_end\|>\n?$/, '');
    const parsed = parseAssistantOutput(output, { format: 'hermes', tools, reasoning: 'none', idSeed: 'x' });
    expect(parsed.toolCalls.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual([['add', { a: 12, b: 7 }]]);
  });
});
