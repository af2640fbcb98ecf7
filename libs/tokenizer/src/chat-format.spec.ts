import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ChatTemplate } from './chat-template';
import { chatFormatFromFiles, detectEndOfTurn, detectToolCallFormat, loadChatFormat, tinyChatFormat } from './chat-format';
import { readHfTokenizerFiles } from './hf-tokenizer';
import { QWEN3_DIR } from './testing/qwen3';
import { TINY_CHAT_TEMPLATE } from './tiny-template';

const qwenFiles = readHfTokenizerFiles(QWEN3_DIR);

describe('chat formats', () => {
  it('loads the Qwen3 model directory: Hermes tool calls, reasoning, stop ids', () => {
    const f = loadChatFormat(QWEN3_DIR);
    expect(f.toolCallFormat).toBe('hermes');
    expect(f.reasoning).toBe(true);
    expect(f.stopTokenIds.sort()).toEqual([151643, 151645]);
    expect(f.tokenizer.vocabSize).toBe(151669);
    expect(f.template.render([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true })).toBe(
      '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('the tiny format looks the same to the gateway', () => {
    const f = tinyChatFormat();
    expect(f).toMatchObject({ name: 'tiny', toolCallFormat: 'hermes', reasoning: true });
    expect(f.stopTokenIds.sort()).toEqual([256, 258]);
    expect(f.tokenizer.vocabSize).toBe(272);
    const text = f.template.render([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true });
    expect(text).toBe('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
    expect(f.tokenizer.encode(text).filter((id) => id >= 256)).toEqual([257, 258, 257]);
  });

  it('detects tool-call syntax and the end-of-turn token from the template', () => {
    expect(detectToolCallFormat(TINY_CHAT_TEMPLATE)).toBe('hermes');
    expect(detectToolCallFormat('{{ "<|python_tag|>" }}')).toBe('llama3-json');
    expect(detectToolCallFormat('{{ messages }}')).toBe('none');
    const tiny = tinyChatFormat();
    expect(detectEndOfTurn(tiny.template, tiny.tokenizer)).toBe(258);
    expect(detectEndOfTurn(new ChatTemplate('{% for m in messages %}{{ m.content }}\n{% endfor %}'), tiny.tokenizer)).toBeNull();
  });

  describe('model directories', () => {
    const dir = mkdtempSync(join(tmpdir(), 'anvil-fmt-'));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it('prefers chat_template.jinja, and takes EOS ids from generation_config.json', () => {
      writeFileSync(join(dir, 'tokenizer.json'), readFileSync(join(QWEN3_DIR, 'tokenizer.json')));
      writeFileSync(join(dir, 'tokenizer_config.json'), readFileSync(join(QWEN3_DIR, 'tokenizer_config.json')));
      writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: [151645, 151643] }));
      writeFileSync(
        join(dir, 'chat_template.jinja'),
        '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}',
      );
      const f = loadChatFormat(dir);
      // a template without tool support: the gateway writes tools into the system prompt and reads Hermes calls back
      expect(f.toolPrompt).toBe('system');
      expect(f.toolCallFormat).toBe('hermes');
      expect(loadChatFormat(dir, { toolPrompt: 'template' }).toolCallFormat).toBe('none');
      expect(f.reasoning).toBe(false);
      expect(f.tokenizer.eosTokenIds).toEqual([151645, 151643]);
      expect(f.stopTokenIds.sort()).toEqual([151643, 151645]);
    });

    it('takes a named template list (the "default" one) and fails without any template', () => {
      const cfg = {
        ...(qwenFiles.tokenizerConfig as Record<string, unknown>),
        chat_template: [
          { name: 'tool_use', template: 'T' },
          { name: 'default', template: 'D{{ eos_token }}' },
        ],
      };
      const f = chatFormatFromFiles({ ...qwenFiles, tokenizerConfig: cfg });
      expect(f.template.render([])).toBe('D<|im_end|>');
      const none = { ...(qwenFiles.tokenizerConfig as Record<string, unknown>), chat_template: undefined };
      expect(() => chatFormatFromFiles({ ...qwenFiles, tokenizerConfig: none })).toThrow(/no chat template/);
    });
  });
});
