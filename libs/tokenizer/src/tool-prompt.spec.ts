import { describe, expect, it } from 'vitest';
import { ByteTokenizer } from './byte-tokenizer';
import { chatFormatOf, loadChatFormat, templateRendersTools, tinyChatFormat, type ChatFormat } from './chat-format';
import { planContinuation } from './continuation';
import { forcedToolCallOpening, toolCallFrame } from './forced-tool-call';
import { QWEN3_DIR } from './testing/qwen3';
import { parseAssistantOutput } from './tool-calls';
import { TOOLS_INSTRUCTION, TOOLS_PREAMBLE } from './tool-prompt';
import type { ChatMessage, ToolDefinition } from './types';

/**
 * A plain ChatML template without tool support: SmolLM2-135M-Instruct's (tokenizer_config.json of
 * HuggingFaceTB/SmolLM2-135M-Instruct), which renders every message as role + content and knows
 * nothing of tools, tool calls or tool results.
 */
const CHATML_NO_TOOLS =
  "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const smol = (toolPrompt?: 'auto' | 'template' | 'system') =>
  chatFormatOf('chatml-no-tools', new ByteTokenizer(), CHATML_NO_TOOLS, { eos_token: '<|im_end|>' }, { toolPrompt });
const tools: ToolDefinition[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];
const user: ChatMessage = { role: 'user', content: 'Weather in Paris?' };
const callMsg: ChatMessage = {
  role: 'assistant',
  content: 'Checking.',
  tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }],
};

describe('tools for a chat template without tool support (written into the system prompt)', () => {
  it('is detected from the template (and can be overridden either way)', () => {
    expect(smol().toolPrompt).toBe('system');
    expect(smol().toolCallFormat).toBe('hermes');
    expect(smol('template').toolPrompt).toBe('template');
    expect(smol('template').toolCallFormat).toBe('none');
    expect(tinyChatFormat().toolPrompt).toBe('template');
    expect(loadChatFormat(QWEN3_DIR).toolPrompt).toBe('template');
    expect(templateRendersTools(smol('template').template)).toBe(false);
    expect(loadChatFormat(QWEN3_DIR, { toolPrompt: 'system' }).toolCallFormat).toBe('hermes');
  });

  it('renders the documented format: tools in the system message, calls as <tool_call> text, results as <tool_response> user turns', () => {
    const f = smol();
    const text = f.template.render(
      [
        { role: 'system', content: 'Be brief.' },
        user,
        callMsg,
        { role: 'tool', tool_call_id: 'c1', content: '21°C' },
        { role: 'tool', tool_call_id: 'c2', content: 'sunny' },
      ],
      { tools, addGenerationPrompt: true },
    );
    const signature =
      '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}';
    expect(text).toBe(
      `<|im_start|>system\nBe brief.\n\n${TOOLS_PREAMBLE}<tools>\n${signature}\n</tools>\n\n${TOOLS_INSTRUCTION}<|im_end|>\n` +
        '<|im_start|>user\nWeather in Paris?<|im_end|>\n' +
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\n21°C\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
    // without a system message the tools make one (the template's default system prompt gives way to it)
    expect(f.template.render([user], { tools, addGenerationPrompt: true })).toMatch(/^<\|im_start\|>system\n# Tools\n/);
    // no tools, no tool messages: exactly the template's own rendering
    expect(f.template.render([user], { addGenerationPrompt: true })).toBe(
      smol('template').template.render([user], { addGenerationPrompt: true }),
    );
  });

  it('the model answers in that format and the Hermes parser reads it back; the forced tool-call frame is found', () => {
    const f = smol();
    const output = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
    const parsed = parseAssistantOutput(output, { format: f.toolCallFormat, tools });
    expect(parsed.toolCalls.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual([['get_weather', { city: 'Oslo' }]]);
    expect(parsed.content).toBe('Sure.');
    expect(forcedToolCallOpening(f.template, { messages: [user], tools }, 'get_weather')).toBe('<tool_call>\n{"name": "get_weather');
    expect(toolCallFrame(f.template, { messages: [user], tools }, f.endOfTurn as string)).toEqual({
      opening: '<tool_call>\n{"name": "',
      afterName: '", "arguments": ',
      afterArguments: '}\n</tool_call>',
    });
  });

  it('stays token-exact: each turn extends the previous call (prompt + output + only what is new)', () => {
    const f: ChatFormat = smol();
    const messages: ChatMessage[] = [user];
    const promptIds = f.tokenizer.encode(f.template.render(messages, { tools, addGenerationPrompt: true }));
    const output = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
    const outputIds = [...f.tokenizer.encode(output), 258];
    const parsed = parseAssistantOutput(output, { format: 'hermes', tools });
    const reply: ChatMessage = {
      role: 'assistant',
      content: parsed.content,
      tool_calls: parsed.toolCalls.map((c) => ({
        id: c.id,
        type: 'function' as const,
        function: { name: c.name, arguments: c.arguments },
      })),
    };
    // the agent echoes the call re-serialised compactly, as OpenAI clients do
    const echo: ChatMessage = {
      ...reply,
      tool_calls: reply.tool_calls?.map((c) => ({ ...c, function: { ...c.function, arguments: '{"city":"Paris"}' } })),
    };
    const plan = planContinuation({
      template: f.template,
      tokenizer: f.tokenizer,
      prevMessages: messages,
      prevPromptIds: promptIds,
      prevOutputIds: outputIds,
      assistantMessage: reply,
      newMessages: [user, echo, { role: 'tool', tool_call_id: 'x', content: '21°C' }],
      tools,
    });
    if (plan.kind !== 'extend') throw new Error(`branched: ${plan.reason} ${plan.detail}`);
    expect(plan.promptIds.slice(0, promptIds.length + outputIds.length)).toEqual([...promptIds, ...outputIds]);
    const full = f.template.render([user, reply, { role: 'tool', tool_call_id: 'x', content: '21°C' }], {
      tools,
      addGenerationPrompt: true,
    });
    expect(f.tokenizer.decode(plan.promptIds)).toBe(full);
  });

  it('finds the forced tool-call frame of templates that render tools themselves (tiny, Qwen3: after its empty think block)', () => {
    for (const f of [tinyChatFormat(), loadChatFormat(QWEN3_DIR)])
      expect(toolCallFrame(f.template, { messages: [user], tools }, f.endOfTurn as string)).toEqual({
        opening: expect.stringMatching(/^(<think>\n\n<\/think>\n\n)?<tool_call>\n\{"name": "$/),
        afterName: '", "arguments": ',
        afterArguments: '}\n</tool_call>',
      });
  });
});
