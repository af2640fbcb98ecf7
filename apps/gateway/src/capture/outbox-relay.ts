import {
  OutboxRelay as EventOutboxRelay,
  type MessageBus,
  type OutboxRelayOptions as EventOutboxRelayOptions,
  type OutboxRow as EventOutboxRow,
  type OutboxStorage,
} from '@anvil/messaging';
import type { SqlClient } from '../db/sql-client';
import { decodeOutboxRow, type StoredOutboxRow } from './outbox-row';

export interface OutboxRelayOptions extends EventOutboxRelayOptions {
  /** The prompt ids of a call from its capture row (rows stored with prompt_from_capture); null when it cannot be rebuilt. */
  promptOf?: (callId: string) => Promise<readonly number[] | null>;
  /** false while the schema is not migrated yet (the sweeper waits). */
  isReady?: () => boolean;
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
 *  - its rows (gateway_outbox) are read with raw SQL and decoded by outbox-row.ts, which owns
 *    how an event is stored there.
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
    const rows = await this.sql.query<StoredOutboxRow>('gw_outbox_stale', STALE_SQL, [staleAfterMs / 1000, limit]);
    return rows.map((r) => ({ id: r.event_id, event: () => decodeOutboxRow(r, this.opts.promptOf) }));
  }

  async deleteRows(ids: readonly string[]): Promise<void> {
    await this.sql.query('gw_outbox_delete', OUTBOX_DELETE_SQL, [ids]);
  }
}
