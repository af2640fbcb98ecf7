import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ChatTemplate, contentText } from './chat-template';
import { loadGolden, QWEN3_DIR } from './testing/qwen3';
import { TINY_CHAT_TEMPLATE } from './tiny-template';
import type { ChatMessage, ToolDefinition } from './types';

const qwenConfig = JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer_config.json'), 'utf8')) as {
  chat_template: string;
  eos_token: string;
};
const qwen = new ChatTemplate(qwenConfig.chat_template, { specialTokens: { eos_token: qwenConfig.eos_token } });
const tiny = new ChatTemplate(TINY_CHAT_TEMPLATE);
const golden = loadGolden();

const weather: ToolDefinition = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

describe('ChatTemplate on the real Qwen3 chat_template', () => {
  it('passes tool-call arguments as the string itself (the template has an `arguments is string` branch)', () => {
    expect(qwen.argumentsAsString).toBe(true);
  });

  it.each(golden.templates.map((c) => [`${c.name} gen=${c.addGenerationPrompt} ${JSON.stringify(c.extra)}`, c] as const))(
    'renders like transformers.apply_chat_template: %s',
    (_, c) => {
      const text =
        c.name === 'dict-arguments'
          ? qwen.renderContext({ ...c.extra, messages: c.messages, tools: c.tools, add_generation_prompt: c.addGenerationPrompt }) // tojson parity
          : qwen.render(c.messages as unknown as ChatMessage[], {
              tools: c.tools as unknown as ToolDefinition[] | null,
              addGenerationPrompt: c.addGenerationPrompt,
              extra: c.extra,
            });
      expect(text).toBe(c.text);
    },
  );

  it('converts OpenAI messages: null content, text parts, arguments strings, reasoning fields', () => {
    const msgs: ChatMessage[] = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'a' },
          { type: 'text', text: 'b' },
        ],
      },
      {
        role: 'assistant',
        content: null,
        reasoning: 'thinking',
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
    ];
    expect(qwen.toTemplateMessages(msgs)).toEqual([
      { role: 'user', content: 'a\nb' },
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'thinking',
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', content: 'sunny', tool_call_id: 'c1' },
    ]);
    const text = qwen.render(msgs, { tools: [weather], addGenerationPrompt: true });
    expect(text).toContain('<|im_start|>user\na\nb<|im_end|>\n');
    expect(text).toContain(
      '<|im_start|>assistant\n<think>\nthinking\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call><|im_end|>\n',
    );
    expect(text).toContain('<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n');
  });

  it('parses arguments into objects for templates that apply tojson themselves', () => {
    const t = new ChatTemplate(
      '{% for m in messages %}{% for tc in m.tool_calls %}{{ tc.function.arguments | tojson }}{% endfor %}{% endfor %}',
    );
    expect(t.argumentsAsString).toBe(false);
    const msgs: ChatMessage[] = [
      {
        role: 'assistant',
        content: '',
        tool_calls: [{ id: 'x', type: 'function', function: { name: 'f', arguments: '{"b":1,"a":"é"}' } }],
      },
    ];
    expect(t.render(msgs)).toBe('{"b": 1, "a": "é"}');
    expect(new ChatTemplate(t.source, { toolArguments: 'string' }).render(msgs)).toBe('"{\\"b\\":1,\\"a\\":\\"é\\"}"');
  });

  it('rejects what it cannot render', () => {
    expect(() => contentText([{ type: 'image_url' } as never])).toThrow(/only text parts/);
    expect(() => qwen.render([{ role: 'developer' } as never])).toThrow(/unsupported role/);
    expect(() => new ChatTemplate('')).toThrow(/empty/);
    expect(() => new ChatTemplate("{{ raise_exception('nope') }}").render([])).toThrow(/chat template: nope/);
  });
});

describe('the tiny model template', () => {
  it('renders system, user, assistant with reasoning and tool calls, tool results, and the generation prompt', () => {
    const msgs: ChatMessage[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: 'Checking.',
        reasoning_content: 'use the tool',
        tool_calls: [
          { id: 'c0', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
          { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Lyon"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c0', content: '21C' },
      { role: 'tool', tool_call_id: 'c1', content: '23C' },
      { role: 'assistant', content: 'Paris 21C.' },
      { role: 'user', content: 'Thanks' },
    ];
    expect(tiny.render(msgs, { addGenerationPrompt: true })).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n' +
        '<|im_start|>user\nWeather in Paris?<|im_end|>\n' +
        '<|im_start|>assistant\n<think>\nuse the tool\n</think>\n\nChecking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\n21C\n</tool_response>\n<tool_response>\n23C\n</tool_response><|im_end|>\n' +
        '<|im_start|>assistant\nParis 21C.<|im_end|>\n' +
        '<|im_start|>user\nThanks<|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
  });

  it('lists tools in the system turn, with or without a system message', () => {
    const withSystem = tiny.render(
      [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'u' },
      ],
      { tools: [weather] },
    );
    expect(withSystem.startsWith('<|im_start|>system\nS\n\n# Tools\n')).toBe(true);
    expect(withSystem).toContain(`<tools>\n${JSON.stringify(weather).replace(/":/g, '": ').replace(/,"/g, ', "')}\n</tools>`);
    expect(withSystem.endsWith('\n</tools><|im_end|>\n<|im_start|>user\nu<|im_end|>\n')).toBe(true);
    const noSystem = tiny.render([{ role: 'user', content: 'u' }], { tools: [weather], addGenerationPrompt: true });
    expect(noSystem.startsWith('<|im_start|>system\n# Tools\n')).toBe(true);
    expect(tiny.render([{ role: 'user', content: 'u' }])).toBe('<|im_start|>user\nu<|im_end|>\n');
    expect(tiny.render([], { addGenerationPrompt: true })).toBe('<|im_start|>assistant\n');
  });

  it('writes an assistant turn without content or with empty content the same way', () => {
    const call = { id: 'c', type: 'function' as const, function: { name: 'f', arguments: '{}' } };
    const a = tiny.render([{ role: 'assistant', content: null, tool_calls: [call] }]);
    expect(a).toBe('<|im_start|>assistant\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n');
    expect(tiny.render([{ role: 'assistant', content: '', tool_calls: [call] }])).toBe(a);
  });
});
