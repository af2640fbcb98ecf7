// Context managers as environment dynamics: given the full history of a trajectory, what the
// policy sees on its next call, and whether that view rewrote what it saw before (the call is
// then a branch, not an extension of the previous call).
//
// Head and turns:
//  - the HEAD is every message before the first assistant message: the system prompt(s) and the
//    task (the first user message, with any further user messages sent before the model first
//    answered). It must contain a user message. Managers never drop or change the head.
//  - a TURN is one assistant message together with every non-assistant message that follows it up
//    to the next assistant message (the tool results and user messages that answer it).
//  So [system, user, assistant, tool, tool, assistant, user] has head [system, user] and turns
//  [[assistant, tool, tool], [assistant, user]].
//
// `rewritten` compares the view with the previous view the same manager returned: false when the
// new view is the previous one with messages appended (or the first view is the whole history),
// true otherwise. Use one manager per trajectory.

export interface ContextManager<M extends { role: string }> {
  readonly kind: 'append_only' | 'sliding_window' | 'summarize';
  view(history: readonly M[]): Promise<{ messages: M[]; rewritten: boolean }>;
}

export type ContextManagerSpec =
  { kind: 'append_only' } | { kind: 'sliding_window'; lastTurns: number } | { kind: 'summarize'; maxTurns: number; keepLastTurns: number };

/** Bad context-manager input or configuration; `field` names it. */
export class ContextInputError extends Error {
  override name = 'ContextInputError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

/** Splits a history into its head (before the first assistant message) and its turns. */
export function splitTurns<M extends { role: string }>(history: readonly M[]): { head: M[]; turns: M[][] } {
  if (!Array.isArray(history) || history.length === 0) throw new ContextInputError('history', 'must be a non-empty array of messages');
  history.forEach((m, i) => {
    if (!m || typeof m !== 'object' || typeof m.role !== 'string' || m.role === '')
      throw new ContextInputError(`history[${i}].role`, 'must be a non-empty string');
  });
  let first = history.findIndex((m) => m.role === 'assistant');
  if (first < 0) first = history.length;
  const head = history.slice(0, first);
  if (!head.some((m) => m.role === 'user'))
    throw new ContextInputError('history', 'has no user message (the task) before the first assistant message');
  const turns: M[][] = [];
  for (let i = first; i < history.length; i++) {
    if (history[i].role === 'assistant') turns.push([]);
    turns[turns.length - 1].push(history[i]);
  }
  return { head, turns };
}

function sameMessage(a: unknown, b: unknown): boolean {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}

/** Tracks the previous view; `rewritten` is "not an extension of the previous view" (first view: "not the whole history"). */
class ViewTracker<M> {
  private previous: M[] | null = null;

  record(history: readonly M[], messages: M[]): boolean {
    const base = this.previous ?? history;
    const rewritten =
      this.previous === null
        ? messages.length !== history.length
        : !(base.length <= messages.length && base.every((m, i) => sameMessage(m, messages[i])));
    this.previous = messages;
    return rewritten;
  }
}

function positiveInt(v: unknown, field: string, min: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min)
    throw new ContextInputError(field, `must be an integer >= ${min}, got ${String(v)}`);
  return v;
}

/** The whole history, every time: never rewrites. */
export function appendOnly<M extends { role: string }>(): ContextManager<M> {
  const tracker = new ViewTracker<M>();
  return {
    kind: 'append_only',
    async view(history) {
      splitTurns(history);
      const messages = [...history];
      return { messages, rewritten: tracker.record(history, messages) };
    },
  };
}

/** The head and the last `lastTurns` turns. */
export function slidingWindow<M extends { role: string }>(opts: { lastTurns: number }): ContextManager<M> {
  const k = positiveInt(opts?.lastTurns, 'lastTurns', 1);
  const tracker = new ViewTracker<M>();
  return {
    kind: 'sliding_window',
    async view(history) {
      const { head, turns } = splitTurns(history);
      const messages = [...head, ...turns.slice(Math.max(0, turns.length - k)).flat()];
      return { messages, rewritten: tracker.record(history, messages) };
    },
  };
}

/**
 * When more than `maxTurns` turns would be visible, every visible turn but the last
 * `keepLastTurns` is replaced (together with the previous summary, if any) by one summary message
 * right after the head: summarize(dropped) produces its text (the rollout manager backs it with the
 * policy), makeSummaryMessage wraps it (default { role: 'user', content: text }). The summary is
 * kept until the next one, so views between two summaries extend each other.
 */
export function summarizing<M extends { role: string }>(opts: {
  summarize: (dropped: M[]) => Promise<string>;
  maxTurns: number;
  keepLastTurns: number;
  makeSummaryMessage?: (text: string) => M;
}): ContextManager<M> {
  if (!opts || typeof opts.summarize !== 'function') throw new ContextInputError('summarize', 'must be a function');
  const maxTurns = positiveInt(opts.maxTurns, 'maxTurns', 1);
  const keep = positiveInt(opts.keepLastTurns, 'keepLastTurns', 0);
  if (keep > maxTurns) throw new ContextInputError('keepLastTurns', `must be <= maxTurns (${maxTurns}), got ${keep}`);
  if (opts.makeSummaryMessage !== undefined && typeof opts.makeSummaryMessage !== 'function')
    throw new ContextInputError('makeSummaryMessage', 'must be a function');
  const make = opts.makeSummaryMessage ?? ((text: string) => ({ role: 'user', content: text }) as unknown as M);
  const tracker = new ViewTracker<M>();
  let summary: M | null = null;
  let summarizedTurns = 0;
  let seenLength = 0;
  return {
    kind: 'summarize',
    async view(history) {
      const { head, turns } = splitTurns(history);
      if (history.length < seenLength)
        throw new ContextInputError(
          'history',
          `has ${history.length} messages, fewer than the ${seenLength} this manager already saw (one manager per trajectory)`,
        );
      seenLength = history.length;
      let visible = turns.slice(summarizedTurns);
      if (visible.length > maxTurns) {
        const drop = visible.length - keep;
        const dropped = [...(summary ? [summary] : []), ...visible.slice(0, drop).flat()];
        const text = await opts.summarize(dropped);
        if (typeof text !== 'string') throw new ContextInputError('summarize', `must resolve to a string, got ${typeof text}`);
        summary = make(text);
        if (!summary || typeof summary.role !== 'string')
          throw new ContextInputError('makeSummaryMessage', 'must return a message with a role');
        summarizedTurns += drop;
        visible = turns.slice(summarizedTurns);
      }
      const messages = [...head, ...(summary ? [summary] : []), ...visible.flat()];
      return { messages, rewritten: tracker.record(history, messages) };
    },
  };
}

/** Builds the manager a task set declares. 'summarize' needs deps.summarize. */
export function contextManager<M extends { role: string }>(
  spec: ContextManagerSpec,
  deps: { summarize?: (dropped: M[]) => Promise<string>; makeSummaryMessage?: (text: string) => M } = {},
): ContextManager<M> {
  if (!spec || typeof spec !== 'object') throw new ContextInputError('spec', 'must be an object');
  switch (spec.kind) {
    case 'append_only':
      return appendOnly<M>();
    case 'sliding_window':
      return slidingWindow<M>({ lastTurns: spec.lastTurns });
    case 'summarize':
      if (typeof deps.summarize !== 'function') throw new ContextInputError('deps.summarize', "is required by kind 'summarize'");
      return summarizing<M>({
        summarize: deps.summarize,
        maxTurns: spec.maxTurns,
        keepLastTurns: spec.keepLastTurns,
        ...(deps.makeSummaryMessage ? { makeSummaryMessage: deps.makeSummaryMessage } : {}),
      });
    default:
      throw new ContextInputError(
        'spec.kind',
        `must be append_only, sliding_window or summarize, got ${String((spec as { kind?: unknown }).kind)}`,
      );
  }
}
