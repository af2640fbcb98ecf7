import { fingerprintMessages, planContinuation, type BranchReason, type ChatFormat, type ChatMessage, type ToolDefinition } from '@anvil/tokenizer';
import type { CaptureRow, CaptureState, CaptureStore } from './capture-store';

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
}): Promise<PlannedPrompt> {
  const { format, messages, tools, extra } = input;
  const fps = input.fingerprints ?? fingerprintMessages(messages, tools, extra);
  const prev = input.isFirstCall ? null : input.match !== undefined ? input.match && (await input.store.resolve(input.match)) : await input.store.findLongestPrefix(input.sessionId, fps);
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
    });
    if (plan.kind === 'extend') {
      const text = format.tokenizer.decode(plan.promptIds);
      return { promptIds: plan.promptIds, messages: plan.messages, parent: prev, reusedTokens: plan.reusedTokens, branchCause: null, promptOpensThink: opensThink(text) };
    }
    branchCause = plan.reason;
  }
  const text = format.template.render(messages, { tools, addGenerationPrompt: true, extra });
  return { promptIds: format.tokenizer.encode(text), messages, parent: null, reusedTokens: 0, branchCause, promptOpensThink: opensThink(text) };
}

function opensThink(text: string): boolean {
  const open = text.lastIndexOf('<think>');
  return open !== -1 && text.indexOf('</think>', open) === -1;
}
