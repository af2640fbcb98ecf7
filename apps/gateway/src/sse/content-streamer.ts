import { parseAssistantOutput, type ChatFormat, type ChatMessage, type ToolDefinition } from '@anvil/tokenizer';
import { parsesToolCalls } from '../openai/assistant-reply';
import type { ChatRequest } from '../openai/chat-request';
import type { PreparedCall } from '../chat/prepared-call';
import { StopStringMatcher } from '../generation/stop-strings';

const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';
const TOOL_OPEN = '<tool_call>';

/** How many trailing characters of `text` could begin `marker` (held back until they cannot). */
function partialMarker(text: string, marker: string): number {
  for (let k = Math.min(marker.length - 1, text.length); k > 0; k--) if (text.endsWith(marker.slice(0, k))) return k;
  return 0;
}

/**
 * Streams one choice's text as SSE deltas while guaranteeing that what was sent is never taken
 * back: every content delta is a prefix of the content the finished reply will have (the same
 * parse the JSON answer uses, buildAssistantReply). Text that might still turn out to be
 * reasoning, a tool call, or a stop string is held back until the generation says what it is.
 * Reasoning goes out as one `reasoning_content` delta once its block closes.
 */
export class ContentStreamer {
  private sentContent = '';
  private reasoningSent = false;
  private readonly stops: StopStringMatcher;
  private readonly toolCalls: boolean;

  constructor(
    private readonly o: {
      format: ChatFormat;
      tools: ToolDefinition[] | null;
      toolChoice: ChatRequest['tool_choice'];
      promptOpensThink: boolean;
      stop: readonly string[];
    },
  ) {
    this.stops = new StopStringMatcher(o.stop);
    this.toolCalls = parsesToolCalls(o);
  }

  /** The streamer of one choice of a prepared chat call (its format, tools, tool_choice, open reasoning, stop strings). */
  static forCall(call: PreparedCall): ContentStreamer {
    return new ContentStreamer({
      format: call.model.format,
      tools: call.tools,
      toolChoice: call.toolChoice,
      promptOpensThink: call.plan.promptOpensThink,
      stop: call.stop,
    });
  }

  /** Deltas that became safe to send, given the text so far. */
  update(text: string): { reasoning?: string; content?: string } {
    const out: { reasoning?: string; content?: string } = {};
    let rest: string | null = text;
    if (this.o.format.reasoning) {
      const lead = text.trimStart();
      const inBlock = this.o.promptOpensThink || lead.startsWith(THINK_OPEN);
      if (!inBlock && lead.length < THINK_OPEN.length && THINK_OPEN.startsWith(lead)) rest = null;
      else if (inBlock) {
        const close = text.indexOf(THINK_CLOSE);
        if (close === -1) rest = null;
        else {
          if (!this.reasoningSent) {
            const r = parseAssistantOutput(text.slice(0, close + THINK_CLOSE.length), { format: 'none', reasoning: 'auto' }).reasoning;
            if (r !== undefined) out.reasoning = r;
            this.reasoningSent = true;
          }
          rest = text.slice(close + THINK_CLOSE.length).replace(/^\n+/, '');
        }
      }
    }
    if (rest === null) return out;
    if (this.toolCalls) {
      if (this.o.format.toolCallFormat !== 'hermes') return out; // whole-reply JSON calls: nothing is safe before the end
      const at = rest.indexOf(TOOL_OPEN);
      rest = at !== -1 ? rest.slice(0, at) : rest.slice(0, rest.length - partialMarker(rest, TOOL_OPEN));
      rest = rest.replace(/\n+$/, '');
    }
    if (this.stops.active) rest = rest.slice(0, rest.length - this.stops.pendingSuffix(rest));
    if (rest.length > this.sentContent.length && rest.startsWith(this.sentContent)) {
      out.content = rest.slice(this.sentContent.length);
      this.sentContent = rest;
    }
    return out;
  }

  /** What is left to send once the reply is final. */
  finish(message: ChatMessage): { reasoning?: string; content?: string } {
    const out: { reasoning?: string; content?: string } = {};
    if (!this.reasoningSent && typeof message.reasoning_content === 'string') out.reasoning = message.reasoning_content;
    this.reasoningSent = true;
    const content = typeof message.content === 'string' ? message.content : '';
    if (content.startsWith(this.sentContent) && content.length > this.sentContent.length)
      out.content = content.slice(this.sentContent.length);
    this.sentContent = content;
    return out;
  }
}
