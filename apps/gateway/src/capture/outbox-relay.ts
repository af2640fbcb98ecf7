import { decodeEvent, llmCallDelta, type EventEnvelope } from '@anvil/contracts';
import { OutboxRelay as EventOutboxRelay, type MessageBus, type OutboxRelayOptions as EventOutboxRelayOptions, type OutboxRow as EventOutboxRow, type OutboxStorage } from '@anvil/messaging';
import type { SqlClient } from '../db/sql-client';

export interface OutboxRelayOptions extends EventOutboxRelayOptions {
  /** The prompt ids of a call from its capture row (rows stored with prompt_from_capture); null when it cannot be rebuilt. */
  promptOf?: (callId: string) => Promise<readonly number[] | null>;
  /** false while the schema is not migrated yet (the sweeper waits). */
  isReady?: () => boolean;
}

interface OutboxRow {
  event_id: string;
  turn_index: number;
  frame: Buffer;
  prompt_from_capture: boolean;
  reused_prompt_tokens: number;
}

const STALE_SQL = `SELECT "event_id", "turn_index", "frame", "prompt_from_capture", "reused_prompt_tokens" FROM "gateway_outbox"
  WHERE "created_at" < now() - make_interval(secs => $1::float8)
  ORDER BY "created_at", "session_id", "turn_index" LIMIT $2`;

export const OUTBOX_DELETE_SQL = `DELETE FROM "gateway_outbox" WHERE "event_id" = ANY($1::varchar[])`;

/**
 * Publishes the llm_call.recorded events whose outbox rows the RecordCommitter has committed
 * (their calls are answered already), then has the rows deleted. The relaying itself (commit
 * order, retry through broker outages, delayed batched deletes, the sweeper) is the generic
 * OutboxRelay of @anvil/messaging; what is the gateway's own:
 *  - the ids of published events ride along with the next commit statement, which deletes
 *    their rows in the same write (`takePublished` / `returnPublished`: under load, deleting
 *    costs no round trip);
 *  - its rows (gateway_outbox) are read with raw SQL and rebuilt by `rebuild` below: the turn is
 *    stored relative to the request, and the prompt ids of a captured call are left out and
 *    rebuilt from its capture chain.
 * The event id is the call id and every consumer is idempotent by it.
 */
export class OutboxRelay extends EventOutboxRelay {
  constructor(sql: SqlClient, bus: MessageBus, opts: OutboxRelayOptions = {}) {
    super(new GatewayOutboxStorage(sql, opts), bus, opts);
  }
}

class GatewayOutboxStorage implements OutboxStorage {
  constructor(
    private readonly sql: SqlClient,
    private readonly opts: OutboxRelayOptions,
  ) {}

  isReady(): boolean {
    return this.opts.isReady ? this.opts.isReady() : true;
  }

  async staleRows(staleAfterMs: number, limit: number): Promise<EventOutboxRow[]> {
    const rows = await this.sql.query<OutboxRow>('gw_outbox_stale', STALE_SQL, [staleAfterMs / 1000, limit]);
    return rows.map((r) => ({ id: r.event_id, event: () => this.rebuild(r) }));
  }

  async deleteRows(ids: readonly string[]): Promise<void> {
    await this.sql.query('gw_outbox_delete', OUTBOX_DELETE_SQL, [ids]);
  }

  /**
   * The event a row stores: its frame carries the turn relative to its request (the row holds
   * the reserved absolute turn) and, with prompt_from_capture, no prompt ids (rebuilt from the
   * call's capture chain, see the migration).
   */
  private async rebuild(r: OutboxRow): Promise<EventEnvelope> {
    const event = decodeEvent(r.frame);
    if (event.type !== 'llm_call.recorded') return event;
    const payload = { ...event.payload, turnIndex: Number(r.turn_index) };
    if (r.prompt_from_capture) {
      const prompt = await this.opts.promptOf?.(r.event_id);
      if (!prompt) throw new Error(`the prompt of ${r.event_id} cannot be rebuilt from its capture row`);
      // v1 rows (written before llm_call.recorded v2) carried whole prompts; v2 carries the delta.
      if (event.version === 1) Object.assign(payload, { promptIds: Int32Array.from(prompt), reusedPromptTokens: Number(r.reused_prompt_tokens) });
      else Object.assign(payload, llmCallDelta(prompt, Number(r.reused_prompt_tokens)));
    }
    return { ...event, payload } as unknown as EventEnvelope;
  }
}
