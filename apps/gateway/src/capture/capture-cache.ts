import type { CaptureState } from './capture-store';

/**
 * Whole capture states of recent calls, by call id, least recently used out first, bounded by
 * the tokens they hold. A capture row never changes once written, so a cached state is never
 * stale: it only saves rebuilding a delta row's history from its ancestors (capture-store.ts)
 * when the next turn of a conversation comes to this instance, as it usually does.
 */
export class CaptureCache {
  private readonly states = new Map<string, CaptureState>();
  private tokens = 0;

  constructor(private readonly maxTokens: number) {}

  get size(): number {
    return this.states.size;
  }

  get(callId: string): CaptureState | undefined {
    const s = this.states.get(callId);
    if (s) {
      this.states.delete(callId);
      this.states.set(callId, s);
    }
    return s;
  }

  put(state: CaptureState): void {
    const cost = weight(state);
    if (cost > this.maxTokens) return;
    const had = this.states.get(state.callId);
    if (had) {
      this.states.delete(state.callId);
      this.tokens -= weight(had);
    }
    this.states.set(state.callId, state);
    this.tokens += cost;
    for (const [id, s] of this.states) {
      if (this.tokens <= this.maxTokens) break;
      this.states.delete(id);
      this.tokens -= weight(s);
    }
  }

  delete(callId: string): void {
    const s = this.states.get(callId);
    if (!s) return;
    this.states.delete(callId);
    this.tokens -= weight(s);
  }
}

/** Prompt + output ids, plus a token per message for the history's JSON and one per 4 characters of kept prompt text. */
const weight = (s: CaptureState) =>
  s.promptIds.length + s.outputIds.length + s.messages.length + 1 + Math.ceil((s.promptText?.length ?? 0) / 4);
