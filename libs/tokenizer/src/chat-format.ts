import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ByteTokenizer } from './byte-tokenizer';
import { ChatTemplate } from './chat-template';
import { configTokenContent, HfTokenizer, readHfTokenizerFiles, type HfTokenizerFiles } from './hf-tokenizer';
import { TINY_CHAT_TEMPLATE } from './tiny-template';
import type { Tokenizer, ToolCallFormat } from './types';

/** Everything the gateway needs to talk to one model family. */
export interface ChatFormat {
  name: string;
  tokenizer: Tokenizer;
  template: ChatTemplate;
  toolCallFormat: ToolCallFormat;
  /** Whether the template knows `<think>` reasoning blocks (parse replies with reasoning: 'auto'). */
  reasoning: boolean;
  /** Ids that end generation: the tokenizer's EOS ids and the template's end-of-turn token. */
  stopTokenIds: number[];
  /** The template's end-of-turn token (its text), which closes an assistant turn; null when it has none. */
  endOfTurn: string | null;
  /** Whether the template renders tools itself or the gateway writes them into the system prompt (tool-prompt.ts). */
  toolPrompt: 'template' | 'system';
}

/** How tools reach the model: 'auto' detects whether the template renders them (else 'system'). */
export type ToolPromptMode = 'auto' | 'template' | 'system';

export interface ChatFormatOptions {
  /** Default 'auto'. */
  toolPrompt?: ToolPromptMode;
}

const TOOL_PROBE = 'anvil_tool_support_probe';

/** Whether a template renders the tools it is given (a probe tool's name shows up in its text). */
export function templateRendersTools(template: ChatTemplate): boolean {
  try {
    const text = template.render([{ role: 'user', content: 'u' }], {
      tools: [{ type: 'function', function: { name: TOOL_PROBE, parameters: { type: 'object', properties: {} } } }],
      addGenerationPrompt: true,
    });
    return text.includes(TOOL_PROBE);
  } catch {
    return false;
  }
}

/** Tool-call syntax a template teaches the model. */
export function detectToolCallFormat(templateSource: string): ToolCallFormat {
  if (templateSource.includes('<tool_call>')) return 'hermes';
  if (templateSource.includes('<|python_tag|>') || /"parameters"|ipython/.test(templateSource)) return 'llama3-json';
  return 'none';
}

/**
 * The end-of-turn token of a template: the added token it writes right after an assistant
 * message's content (`<|im_end|>`, `<|eot_id|>`), or null.
 */
export function detectEndOfTurn(template: ChatTemplate, tokenizer: Tokenizer): number | null {
  const marker = 'ANVIL_END_OF_TURN_PROBE';
  let text: string;
  try {
    text = template.render([
      { role: 'user', content: 'u' },
      { role: 'assistant', content: marker },
    ]);
  } catch {
    return null;
  }
  const at = text.lastIndexOf(marker);
  if (at === -1) return null;
  const after = text.slice(at + marker.length);
  let best: string | null = null;
  for (const t of tokenizer.addedTokens.keys()) if (after.startsWith(t) && (best === null || t.length > best.length)) best = t;
  return best === null ? null : (tokenizer.addedTokens.get(best) ?? null);
}

/** A chat format from a tokenizer and a template's source (`specialTokens`: the variables Hugging Face passes to templates). */
export function chatFormatOf(
  name: string,
  tokenizer: Tokenizer,
  source: string,
  specialTokens: Record<string, unknown>,
  options: ChatFormatOptions = {},
): ChatFormat {
  let template = new ChatTemplate(source, { specialTokens });
  const mode = options.toolPrompt ?? 'auto';
  const toolPrompt = mode === 'auto' ? (templateRendersTools(template) ? 'template' : 'system') : mode;
  if (toolPrompt === 'system') template = new ChatTemplate(source, { specialTokens, toolPrompt });
  const stop = new Set(tokenizer.eosTokenIds);
  const eot = detectEndOfTurn(template, tokenizer);
  if (eot !== null) stop.add(eot);
  // The end-of-document token also ends a reply (Qwen's generation_config lists <|endoftext|>
  // next to <|im_end|>; without that file only tokenizer_config's eos_token would be known).
  for (const doc of ['<|endoftext|>', '<|end_of_text|>']) {
    const id = tokenizer.specialTokens.get(doc);
    if (id !== undefined) stop.add(id);
  }
  return {
    name,
    tokenizer,
    template,
    // tools written by the gateway ask for Hermes calls, whatever else the template mentions
    toolCallFormat: toolPrompt === 'system' ? 'hermes' : detectToolCallFormat(source),
    reasoning: source.includes('<think>'),
    stopTokenIds: [...stop],
    endOfTurn: eot === null ? null : (tokenizer.idToToken(eot) ?? null),
    toolPrompt,
  };
}

/** The special-token variables Hugging Face passes to chat templates. */
function templateSpecialTokens(cfg: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'sep_token', 'cls_token', 'mask_token']) {
    const v = configTokenContent(cfg[key]);
    if (v !== null) out[key] = v;
  }
  if (Array.isArray(cfg.additional_special_tokens))
    out.additional_special_tokens = cfg.additional_special_tokens.map(configTokenContent).filter((v) => v !== null);
  return out;
}

/** tokenizer_config.json's chat_template: a string, or a list of named templates ('default' is taken). */
function configChatTemplate(cfg: Record<string, unknown>): string | null {
  const t = cfg.chat_template;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) {
    const named = t.filter(
      (x): x is { name: string; template: string } => typeof x === 'object' && x !== null && typeof x.template === 'string',
    );
    return (named.find((x) => x.name === 'default') ?? named[0])?.template ?? null;
  }
  return null;
}

export interface ChatFormatFiles extends HfTokenizerFiles {
  /** A chat template given separately (chat_template.jinja): wins over tokenizer_config's. */
  chatTemplate?: string;
}

/** A chat format from parsed Hugging Face files. */
export function chatFormatFromFiles(files: ChatFormatFiles, name = 'hf', options: ChatFormatOptions = {}): ChatFormat {
  const tokenizer = new HfTokenizer(files);
  const source = files.chatTemplate ?? configChatTemplate(tokenizer.config);
  if (source === null) throw new Error(`${name}: no chat template (tokenizer_config.json chat_template or chat_template.jinja)`);
  return chatFormatOf(name, tokenizer, source, templateSpecialTokens(tokenizer.config), options);
}

/**
 * The chat format of a Hugging Face model directory: tokenizer.json, tokenizer_config.json,
 * generation_config.json (EOS ids) and the chat template (chat_template.jinja, chat_template.json,
 * or tokenizer_config.json's chat_template).
 */
export function loadChatFormat(dir: string, options: ChatFormatOptions = {}): ChatFormat {
  const files: ChatFormatFiles = readHfTokenizerFiles(dir);
  const jinja = join(dir, 'chat_template.jinja');
  const json = join(dir, 'chat_template.json');
  if (existsSync(jinja)) files.chatTemplate = readFileSync(jinja, 'utf8');
  else if (existsSync(json)) {
    const t = (JSON.parse(readFileSync(json, 'utf8')) as { chat_template?: unknown }).chat_template;
    if (typeof t === 'string') files.chatTemplate = t;
  }
  return chatFormatFromFiles(files, dir, options);
}

/** The built-in tiny model's format: byte-level tokenizer (see ByteTokenizer) and its ChatML template. */
export function tinyChatFormat(): ChatFormat {
  return chatFormatOf('tiny', new ByteTokenizer(), TINY_CHAT_TEMPLATE, { eos_token: '<|im_end|>', pad_token: '<|endoftext|>' });
}
