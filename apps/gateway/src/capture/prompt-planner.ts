import {
  fingerprintMessages,
  planContinuation,
  type BranchReason,
  type ChatFormat,
  type ChatMessage,
  type ToolDefinition,
} from '@anvil/tokenizer';
import type { CaptureRow, CaptureState, CaptureStore } from './capture-store';
import { RenderCache } from './render-cache';

export type BranchCause = BranchReason | 'first-call' | 'no-matching-call';

/** The prompt of one request and where it sits in the session's capture. */
export interface PlannedPrompt {
  promptIds: number[];
  /** The canonical history the prompt renders: what is stored for the next call to extend. */
  messages: ChatMessage[];
  /** The call this one extends token-exactly, or null when it starts a branch. */
  parent: CaptureState | null;
  reusedTokens: number;
  /** Why a branch starts (null when extending). */
  branchCause: BranchCause | null;
  /** Whether the rendered prompt ends inside an open `<think>` block (templates that open reasoning in the generation prompt). */
  promptOpensThink: boolean;
  /** The rendering the prompt ids encode (kept with the capture state: the next turn's prevText). */
  text: string;
}

/**
 * Token-exact capture (DESIGN.md): find the answered call whose messages + reply are the longest
 * prefix of the request's messages (by fingerprint), and let planContinuation build the prompt as
 * its prompt ids + its output ids + the encoding of only what is new. Anything else (the first
 * call, no matching call, an edited history, changed tools, a template that rewrites history)
 * starts a branch: the whole conversation is rendered and encoded afresh, with no parent.
 */
export async function planPrompt(input: {
  format: ChatFormat;
  store: CaptureStore;
  sessionId: string;
  isFirstCall: boolean;
  messages: ChatMessage[];
  tools: ToolDefinition[] | null;
  extra: Record<string, unknown>;
  /** fingerprintMessages(messages, tools, extra), when the caller has them. */
  fingerprints?: readonly string[];
  /** The matching capture row when the caller already looked it up (null: none), else the store is asked. */
  match?: CaptureRow | null;
  /** Renderings of whole conversations, for prompts that start a branch. */
  renders?: RenderCache;
}): Promise<PlannedPrompt> {
  const { format, messages, tools, extra } = input;
  const fps = input.fingerprints ?? fingerprintMessages(messages, tools, extra);
  const prev = input.isFirstCall
    ? null
    : input.match !== undefined
      ? input.match && (await input.store.resolve(input.match))
      : await input.store.findLongestPrefix(input.sessionId, fps);
  let branchCause: BranchCause = input.isFirstCall ? 'first-call' : 'no-matching-call';
  if (prev) {
    const plan = planContinuation({
      template: format.template,
      tokenizer: format.tokenizer,
      prevMessages: prev.messages,
      prevPromptIds: prev.promptIds,
      prevOutputIds: prev.outputIds,
      assistantMessage: prev.assistantMessage,
      newMessages: messages,
      tools,
      prevTools: prev.tools,
      extra,
      prevExtra: prev.templateExtra,
      droppableStopIds: format.stopTokenIds,
      prevText: prev.promptText,
    });
    if (plan.kind === 'extend') {
      return {
        promptIds: plan.promptIds,
        messages: plan.messages,
        parent: prev,
        reusedTokens: plan.reusedTokens,
        branchCause: null,
        promptOpensThink: opensThink(plan.text),
        text: plan.text,
      };
    }
    branchCause = plan.reason;
  }
  const key = input.renders ? RenderCache.key(messages, tools, extra) : '';
  let rendered = input.renders?.get(key);
  if (!rendered) {
    const text = format.template.render(messages, { tools, addGenerationPrompt: true, extra });
    rendered = { text, promptIds: format.tokenizer.encode(text) };
    input.renders?.put(key, rendered);
  }
  // A copy: the ids go on into requests and records, the cached ones must stay as they are.
  return {
    promptIds: rendered.promptIds.slice(),
    messages,
    parent: null,
    reusedTokens: 0,
    branchCause,
    promptOpensThink: opensThink(rendered.text),
    text: rendered.text,
  };
}

function opensThink(text: string): boolean {
  const open = text.lastIndexOf('<think>');
  return open !== -1 && text.indexOf('</think>', open) === -1;
}
