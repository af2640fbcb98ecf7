import { decodeTokenArray, encodeTokenArray } from '@anvil/persistence';
import type { ChatMessage, ToolDefinition } from '@anvil/tokenizer';
import type { SqlClient } from '../db/sql-client';
import { CaptureCache } from './capture-cache';

/** What the next call of a session needs from an answered one to extend it token-exactly (always whole in memory). */
export interface CaptureState {
  callId: string;
  sessionId: string;
  branchId: string;
  parentCallId: string | null;
  turnIndex: number;
  replyFingerprint: string;
  messages: ChatMessage[];
  assistantMessage: ChatMessage;
  tools: ToolDefinition[] | null;
  templateExtra: Record<string, unknown>;
  promptIds: readonly number[];
  outputIds: readonly number[];
  /** The rendering the prompt ids encode, when this instance still has it (never stored: the next turn re-renders without it). */
  promptText?: string;
}

/**
 * A capture state as one gateway_calls row stores it: relative to its parent when it extends
 * one (DESIGN.md "Token-exact capture": its prompt is the parent's prompt + output ids + what is
 * new, its history the parent's history + reply + what is new), so a session of n turns stores
 * each token and message once instead of n times.
 */
export interface StoredCapture {
  callId: string;
  sessionId: string;
  branchId: string;
  parentCallId: string | null;
  replyFingerprint: string;
  /** Messages after the first `messagesPrefixCount` (which are the parent's messages + its reply). */
  messagesJson: string;
  assistantMessageJson: string;
  toolsJson: string | null;
  templateExtraJson: string;
  /** Prompt ids after the first `promptPrefixTokens` (which are the parent's prompt + output ids). */
  promptIds: Buffer;
  outputIds: Buffer;
  promptPrefixTokens: number;
  messagesPrefixCount: number;
}

/** Encodes a state for storage; `parent` is the state it extends (null or another call: stored whole). */
export function storedCapture(s: CaptureState, parent: CaptureState | null): StoredCapture {
  let promptPrefix = 0;
  let messagesPrefix = 0;
  if (parent && s.parentCallId === parent.callId) {
    const pp = parent.promptIds;
    const po = parent.outputIds;
    const max = Math.min(s.promptIds.length, pp.length + po.length);
    while (promptPrefix < max && s.promptIds[promptPrefix] === (promptPrefix < pp.length ? pp[promptPrefix] : po[promptPrefix - pp.length]))
      promptPrefix++;
    const history = [...parent.messages, parent.assistantMessage];
    const same = (a: ChatMessage, b: ChatMessage) => a === b || JSON.stringify(a) === JSON.stringify(b);
    while (
      messagesPrefix < history.length &&
      messagesPrefix < s.messages.length &&
      same(s.messages[messagesPrefix], history[messagesPrefix])
    )
      messagesPrefix++;
  }
  return {
    callId: s.callId,
    sessionId: s.sessionId,
    branchId: s.branchId,
    parentCallId: s.parentCallId,
    replyFingerprint: s.replyFingerprint,
    messagesJson: JSON.stringify(messagesPrefix ? s.messages.slice(messagesPrefix) : s.messages),
    assistantMessageJson: JSON.stringify(s.assistantMessage),
    toolsJson: s.tools ? JSON.stringify(s.tools) : null,
    templateExtraJson: JSON.stringify(s.templateExtra),
    promptIds: encodeTokenArray(Int32Array.from(promptPrefix ? s.promptIds.slice(promptPrefix) : s.promptIds)),
    outputIds: encodeTokenArray(Int32Array.from(s.outputIds)),
    promptPrefixTokens: promptPrefix,
    messagesPrefixCount: messagesPrefix,
  };
}

/** A gateway_calls row as read (COLUMNS). */
export interface CaptureRow {
  id: string;
  session_id: string;
  branch_id: string;
  parent_call_id: string | null;
  turn_index: number;
  reply_fingerprint: string;
  messages_json: string;
  assistant_message_json: string;
  tools_json: string | null;
  template_extra_json: string;
  prompt_ids: Buffer;
  output_ids: Buffer;
  prompt_prefix_tokens: number;
  messages_prefix_count: number;
}

export const CAPTURE_COLUMNS = `"id", "session_id", "branch_id", "parent_call_id", "turn_index", "reply_fingerprint", "messages_json", "assistant_message_json",
  "tools_json", "template_extra_json", "prompt_ids", "output_ids", "prompt_prefix_tokens", "messages_prefix_count"`;

/** The deepest answered call whose reply fingerprint is one of the request's prefix fingerprints (latest among equals). */
const MATCH_SQL = `SELECT ${CAPTURE_COLUMNS} FROM "gateway_calls" WHERE "session_id" = $1 AND "reply_fingerprint" = ANY($2::varchar[])
  ORDER BY array_position($2::varchar[], "reply_fingerprint") DESC, "created_at" DESC, "turn_index" DESC LIMIT 1`;

/** A call and its ancestors up to the nearest whole row, root first. */
const CHAIN_SQL = `WITH RECURSIVE "chain" AS (
    SELECT ${CAPTURE_COLUMNS}, 0 AS "depth" FROM "gateway_calls" WHERE "id" = $1
    UNION ALL
    SELECT ${CAPTURE_COLUMNS.replace(/"(\w+)"/g, 'p."$1"')}, c."depth" + 1 FROM "gateway_calls" p JOIN "chain" c ON p."id" = c."parent_call_id"
    WHERE c."prompt_prefix_tokens" > 0 OR c."messages_prefix_count" > 0
  ) SELECT ${CAPTURE_COLUMNS} FROM "chain" ORDER BY "depth" DESC`;

const isDelta = (r: CaptureRow) => r.prompt_prefix_tokens > 0 || r.messages_prefix_count > 0;

/** A stored row made whole again, given its parent's whole state when the row is a delta. */
function rebuild(r: CaptureRow, parent: CaptureState | null): CaptureState {
  let messages = JSON.parse(r.messages_json) as ChatMessage[];
  let promptIds: number[] = Array.from(decodeTokenArray(Int32Array, r.prompt_ids));
  if (isDelta(r)) {
    if (!parent || parent.callId !== r.parent_call_id)
      throw new Error(`capture row ${r.id} is a delta but its parent ${r.parent_call_id} is missing`);
    const n = r.prompt_prefix_tokens;
    const pp = parent.promptIds;
    const head = n <= pp.length ? pp.slice(0, n) : [...pp, ...parent.outputIds.slice(0, n - pp.length)];
    promptIds = [...head, ...promptIds];
    messages = [...[...parent.messages, parent.assistantMessage].slice(0, r.messages_prefix_count), ...messages];
  }
  return {
    callId: r.id,
    sessionId: r.session_id,
    branchId: r.branch_id,
    parentCallId: r.parent_call_id,
    turnIndex: Number(r.turn_index),
    replyFingerprint: r.reply_fingerprint,
    messages,
    assistantMessage: JSON.parse(r.assistant_message_json) as ChatMessage,
    tools: r.tools_json ? (JSON.parse(r.tools_json) as ToolDefinition[]) : null,
    templateExtra: JSON.parse(r.template_extra_json) as Record<string, unknown>,
    promptIds,
    outputIds: Array.from(decodeTokenArray(Int32Array, r.output_ids)),
  };
}

/**
 * Capture state in PostgreSQL (gateway_calls), so any gateway instance can continue any session.
 * Rows are written by the RecordCommitter (with the turn reservation, in one statement per
 * batch of calls); this reads them back whole. Rows never change once written, so whole states
 * are kept in a small cache: a delta row whose parent is cached is rebuilt without another query.
 */
export class CaptureStore {
  readonly cache: CaptureCache;

  constructor(
    private readonly sql: SqlClient,
    opts: { cacheTokens?: number } = {},
  ) {
    this.cache = new CaptureCache(opts.cacheTokens ?? 4_000_000);
  }

  /** A state that was just stored (its parent chain is then never needed for it). */
  remember(state: CaptureState): void {
    this.cache.put(state);
  }

  /** Removes rows of calls that were not answered after all (their records did not become durable). Best effort. */
  async forget(callIds: readonly string[]): Promise<void> {
    for (const id of callIds) this.cache.delete(id);
    if (callIds.length) await this.sql.query('gw_capture_forget', `DELETE FROM "gateway_calls" WHERE "id" = ANY($1::varchar[])`, [callIds]);
  }

  /** The prompt ids of an answered call (rebuilt from its capture chain); null when its row or chain is gone. */
  async promptIdsOf(callId: string): Promise<readonly number[] | null> {
    const cached = this.cache.get(callId);
    if (cached) return cached.promptIds;
    const [row] = await this.sql.query<CaptureRow>('gw_capture_by_id', `SELECT ${CAPTURE_COLUMNS} FROM "gateway_calls" WHERE "id" = $1`, [
      callId,
    ]);
    return row ? ((await this.resolve(row))?.promptIds ?? null) : null;
  }

  /**
   * The answered call whose (messages + reply) fingerprint is the longest prefix of a request's
   * message fingerprints (`prefixFingerprints[k]` = first k messages), or null. Among equal
   * matches (a retried request) the latest wins.
   */
  async findLongestPrefix(sessionId: string, prefixFingerprints: readonly string[]): Promise<CaptureState | null> {
    const candidates = prefixFingerprints.slice(1);
    if (candidates.length === 0) return null;
    const [row] = await this.sql.query<CaptureRow>('gw_capture_match', MATCH_SQL, [sessionId, candidates]);
    return row ? this.resolve(row) : null;
  }

  /** The whole state of a matched row (rebuilt from its parent when it is a delta); null when its chain is broken. */
  async resolve(row: CaptureRow): Promise<CaptureState | null> {
    const cached = this.cache.get(row.id);
    if (cached) return cached;
    let state: CaptureState;
    const parent = isDelta(row) && row.parent_call_id ? this.cache.get(row.parent_call_id) : null;
    if (!isDelta(row) || parent) state = rebuild(row, parent ?? null);
    else {
      // Another instance answered the parent (or it left the cache): walk up to a whole row.
      const chain = await this.sql.query<CaptureRow>('gw_capture_chain', CHAIN_SQL, [row.id]);
      // A chain that does not start at a whole row lost an ancestor: nothing to extend token-exactly (a branch).
      if (chain.length === 0 || isDelta(chain[0])) return null;
      let prev: CaptureState | null = null;
      for (const r of chain) prev = rebuild(r, prev);
      state = prev as CaptureState;
    }
    this.cache.put(state);
    return state;
  }
}
