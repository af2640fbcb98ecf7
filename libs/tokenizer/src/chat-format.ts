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

function chatFormatFrom(name: string, tokenizer: Tokenizer, source: string, specialTokens: Record<string, unknown>): ChatFormat {
  const template = new ChatTemplate(source, { specialTokens });
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
    toolCallFormat: detectToolCallFormat(source),
    reasoning: source.includes('<think>'),
    stopTokenIds: [...stop],
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
export function chatFormatFromFiles(files: ChatFormatFiles, name = 'hf'): ChatFormat {
  const tokenizer = new HfTokenizer(files);
  const source = files.chatTemplate ?? configChatTemplate(tokenizer.config);
  if (source === null) throw new Error(`${name}: no chat template (tokenizer_config.json chat_template or chat_template.jinja)`);
  return chatFormatFrom(name, tokenizer, source, templateSpecialTokens(tokenizer.config));
}

/**
 * The chat format of a Hugging Face model directory: tokenizer.json, tokenizer_config.json,
 * generation_config.json (EOS ids) and the chat template (chat_template.jinja, chat_template.json,
 * or tokenizer_config.json's chat_template).
 */
export function loadChatFormat(dir: string): ChatFormat {
  const files: ChatFormatFiles = readHfTokenizerFiles(dir);
  const jinja = join(dir, 'chat_template.jinja');
  const json = join(dir, 'chat_template.json');
  if (existsSync(jinja)) files.chatTemplate = readFileSync(jinja, 'utf8');
  else if (existsSync(json)) {
    const t = (JSON.parse(readFileSync(json, 'utf8')) as { chat_template?: unknown }).chat_template;
    if (typeof t === 'string') files.chatTemplate = t;
  }
  return chatFormatFromFiles(files, dir);
}

/** The built-in tiny model's format: byte-level tokenizer (see ByteTokenizer) and its ChatML template. */
export function tinyChatFormat(): ChatFormat {
  return chatFormatFrom('tiny', new ByteTokenizer(), TINY_CHAT_TEMPLATE, { eos_token: '<|im_end|>', pad_token: '<|endoftext|>' });
}
