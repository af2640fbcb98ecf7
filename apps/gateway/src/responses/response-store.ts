import type { ChatFormMessage } from '../adapters/chat-form';
import type { SessionStateRow } from '../capture/record-committer';
import type { SqlClient } from '../db/sql-client';

export interface StoredResponse {
  id: string;
  sessionId: string;
  previousResponseId: string | null;
  callId: string;
  /** What this response added to its previous response's conversation: the request's input items, then the reply. */
  conversation: ChatFormMessage[];
  response: unknown;
}

/** A response as the statement that records its call stores it (RecordCommitter). */
export const storedResponseRow = (r: StoredResponse): SessionStateRow => ({
  id: r.id,
  sessionId: r.sessionId,
  previousResponseId: r.previousResponseId,
  callId: r.callId,
  conversationJson: JSON.stringify(r.conversation),
  responseJson: JSON.stringify(r.response),
});

/**
 * The Responses API's stored responses (gateway_responses), in PostgreSQL like every other piece
 * of session state, so any gateway instance continues a chain another one started. They are
 * written by the statement that records their call (storedResponseRow); every lookup is scoped
 * to the session the request's key names: a response of another session is as absent as one
 * that never existed.
 */
export class ResponseStore {
  constructor(private readonly sql: SqlClient) {}

  /** The response object as it was answered, or null. */
  async get(sessionId: string, id: string): Promise<unknown> {
    const rows = await this.sql.query<{ response_json: string }>(
      'gw_response_get',
      `SELECT response_json FROM gateway_responses WHERE id = $1 AND session_id = $2`,
      [id, sessionId],
    );
    return rows.length > 0 ? (JSON.parse(rows[0].response_json) as unknown) : null;
  }

  /** The stored output items among `itemIds` (by id), for item_reference inputs; items of other sessions are not found. */
  async outputItems(sessionId: string, itemIds: readonly string[]): Promise<Map<string, unknown>> {
    const responseIds = [...new Set(itemIds.map(responseOfItem).filter((id): id is string => id !== null))];
    const found = new Map<string, unknown>();
    if (responseIds.length === 0) return found;
    const rows = await this.sql.query<{ response_json: string }>(
      'gw_response_items',
      `SELECT response_json FROM gateway_responses WHERE id = ANY($1) AND session_id = $2`,
      [responseIds, sessionId],
    );
    for (const r of rows) {
      const response = JSON.parse(r.response_json) as { output?: { id?: unknown }[] };
      for (const item of response.output ?? []) if (typeof item.id === 'string') found.set(item.id, item);
    }
    return found;
  }

  /**
   * The whole conversation through response `id` (its chain's conversations, oldest first): what
   * a follow-up with previous_response_id continues. Null when the session has no such response.
   */
  async conversation(sessionId: string, id: string): Promise<ChatFormMessage[] | null> {
    const rows = await this.sql.query<{ conversation_json: string }>(
      'gw_response_chain',
      `WITH RECURSIVE chain AS (
         SELECT id, previous_response_id, conversation_json, 0 AS depth FROM gateway_responses WHERE id = $1 AND session_id = $2
         UNION ALL
         SELECT r.id, r.previous_response_id, r.conversation_json, c.depth + 1
           FROM gateway_responses r JOIN chain c ON r.id = c.previous_response_id AND r.session_id = $2
       )
       SELECT conversation_json FROM chain ORDER BY depth DESC`,
      [id, sessionId],
    );
    if (rows.length === 0) return null;
    return rows.flatMap((r) => JSON.parse(r.conversation_json) as ChatFormMessage[]);
  }
}

/** The response an output item belongs to: item ids carry their response's (msg_<hex>, rs_<hex>, fc_<hex>_<k> of resp_<hex>, responseIds). */
export function responseOfItem(itemId: string): string | null {
  const m = /^(?:msg|rs|fc)_([0-9a-f]{32})(?:_\d+)?$/.exec(itemId);
  return m ? `resp_${m[1]}` : null;
}
