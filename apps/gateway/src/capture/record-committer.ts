import type { EventEnvelope } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import type { SqlClient } from '../db/sql-client';
import type { StoredCapture } from './capture-store';

/** The call could not be made durable (database or broker): it must not be answered. */
export class RecordNotDurableError extends Error {
  override readonly name = 'RecordNotDurableError';
}

/** The calls of one answered request (its n choices), waiting to be recorded. */
export interface CommitRequest {
  sessionId: string;
  /** Turn indexes to reserve (one per choice). */
  calls: number;
  /** 1 when the request starts a branch. */
  newBranches: number;
  /** Capture rows, with `turn` = the choice's position (0..calls-1). */
  captures: readonly { turn: number; row: StoredCapture }[];
  /** The llm_call.recorded events once the first turn index is known. */
  events(firstTurn: number): EventEnvelope[];
}

/** null: the session was closed meanwhile (nothing recorded, nothing to answer). */
export type CommitResult = { firstTurn: number } | null;

interface Pending {
  req: CommitRequest;
  resolve(r: CommitResult): void;
  reject(err: Error): void;
  /** Offset of this request's turns among its session's calls in the same batch. */
  offset: number;
  firstTurn?: number;
}

/**
 * Group commit of answered calls (DESIGN.md: no answer before its record is durable). Calls
 * that finish while a batch is being written wait and go together in the next one:
 *  1. ONE SQL statement per batch reserves the turn indexes of every call (only while its
 *     session is open) and inserts their capture rows;
 *  2. ONE acks=all publish per batch makes their llm_call.recorded events durable in Kafka;
 *  3. only then is each call released to answer. A failed publish fails every call of the batch
 *     (each gets an error, none is answered) and their capture rows are removed again.
 * The two stages overlap (a batch publishes while the next one's statement runs), and batches
 * keep their order, so a rollout's records reach Kafka in the order its calls were reserved.
 * Under light load a batch is a single call and nothing waits; under heavy load the per-call
 * cost of both round trips is shared by everything that finished meanwhile.
 */
export class RecordCommitter {
  private waiting: Pending[] = [];
  private writing = false;
  private toPublish: Pending[] = [];
  private publishing = false;
  private inFlight = 0;
  private idle: (() => void)[] = [];

  constructor(
    private readonly sql: SqlClient,
    private readonly bus: MessageBus,
    private readonly opts: { maxBatch?: number; onForgetFailed?: (err: unknown) => void; onRowsWritten?: (reqs: CommitRequest[]) => void } = {},
  ) {}

  /** Calls queued or being recorded. */
  get pending(): number {
    return this.waiting.length + this.toPublish.length + this.inFlight;
  }

  commit(req: CommitRequest): Promise<CommitResult> {
    return new Promise<CommitResult>((resolve, reject) => {
      this.waiting.push({ req, resolve, reject, offset: 0 });
      this.pumpWrites();
    });
  }

  /** Resolves once nothing is queued or in flight (graceful shutdown). */
  whenIdle(): Promise<void> {
    if (this.pending === 0) return Promise.resolve();
    return new Promise((r) => this.idle.push(r));
  }

  private get maxBatch(): number {
    return this.opts.maxBatch ?? 256;
  }

  private pumpWrites(): void {
    if (this.writing || this.waiting.length === 0) return;
    const batch = this.waiting.splice(0, this.maxBatch);
    this.writing = true;
    this.inFlight += batch.length;
    void this.write(batch).finally(() => {
      this.writing = false;
      this.inFlight -= batch.length;
      this.pumpWrites();
      this.checkIdle();
    });
  }

  private pumpPublishes(): void {
    if (this.publishing || this.toPublish.length === 0) return;
    const batch = this.toPublish.splice(0, this.maxBatch);
    this.publishing = true;
    this.inFlight += batch.length;
    void this.publish(batch).finally(() => {
      this.publishing = false;
      this.inFlight -= batch.length;
      this.pumpPublishes();
      this.checkIdle();
    });
  }

  private checkIdle(): void {
    if (this.pending === 0) for (const r of this.idle.splice(0)) r();
  }

  /** Stage 1: reserve turns and insert capture rows, for the whole batch in one statement. */
  private async write(batch: Pending[]): Promise<void> {
    const sessions = new Map<string, { calls: number; branches: number }>();
    for (const p of batch) {
      const s = sessions.get(p.req.sessionId) ?? { calls: 0, branches: 0 };
      p.offset = s.calls;
      s.calls += p.req.calls;
      s.branches += p.req.newBranches;
      sessions.set(p.req.sessionId, s);
    }
    const rows = batch.flatMap((p) => p.req.captures.map((c) => ({ k: p.offset + c.turn, row: c.row })));
    let reserved: { id: string; first_turn: number }[];
    try {
      reserved = await this.sql.query('gw_commit_calls', COMMIT_SQL, [
        [...sessions.keys()],
        [...sessions.values()].map((s) => s.calls),
        [...sessions.values()].map((s) => s.branches),
        rows.map((r) => r.row.callId),
        rows.map((r) => r.row.sessionId),
        rows.map((r) => r.row.branchId),
        rows.map((r) => r.row.parentCallId),
        rows.map((r) => r.k),
        rows.map((r) => r.row.replyFingerprint),
        rows.map((r) => r.row.messagesJson),
        rows.map((r) => r.row.assistantMessageJson),
        rows.map((r) => r.row.toolsJson),
        rows.map((r) => r.row.templateExtraJson),
        rows.map((r) => r.row.promptIds),
        rows.map((r) => r.row.outputIds),
        rows.map((r) => r.row.promptPrefixTokens),
        rows.map((r) => r.row.messagesPrefixCount),
      ]);
    } catch (err) {
      const e = new RecordNotDurableError(`the call could not be recorded: ${(err as Error).message}`, { cause: err });
      for (const p of batch) p.reject(e);
      return;
    }
    const firstTurn = new Map(reserved.map((r) => [r.id, Number(r.first_turn)]));
    for (const p of batch) {
      const first = firstTurn.get(p.req.sessionId);
      if (first === undefined) p.resolve(null);
      else {
        p.firstTurn = first + p.offset;
        this.toPublish.push(p);
      }
    }
    this.opts.onRowsWritten?.(batch.map((p) => p.req));
    this.pumpPublishes();
  }

  /** Stage 2: the records of the batch in one acks=all publish; answers are released only after it. */
  private async publish(batch: Pending[]): Promise<void> {
    let events: EventEnvelope[];
    try {
      events = batch.flatMap((p) => p.req.events(p.firstTurn as number));
      await this.bus.publish(events);
    } catch (err) {
      const e = new RecordNotDurableError(`the call could not be recorded durably: ${(err as Error).message}`, { cause: err });
      for (const p of batch) p.reject(e);
      // Their capture rows describe calls nobody was answered: a later request must not extend them.
      const ids = batch.flatMap((p) => p.req.captures.map((c) => c.row.callId));
      await this.forget(ids).catch((error: unknown) => this.opts.onForgetFailed?.(error));
      return;
    }
    for (const p of batch) p.resolve({ firstTurn: p.firstTurn as number });
  }

  private forget(ids: string[]): Promise<unknown> {
    if (ids.length === 0) return Promise.resolve();
    return this.sql.query('gw_capture_forget', `DELETE FROM "gateway_calls" WHERE "id" = ANY($1::varchar[])`, [ids]);
  }
}

/**
 * Reserves turns for each session of the batch (v: session, calls, new branches; an UPDATE
 * only of open sessions) and inserts the capture rows of the sessions it reserved for (a row
 * of a closed session finds no `r` and is dropped), numbering each row first_turn + k.
 */
const COMMIT_SQL = `WITH "v" AS (
    SELECT * FROM unnest($1::varchar[], $2::int[], $3::int[]) AS v("session_id", "calls", "branches")
  ), "r" AS (
    UPDATE "gateway_sessions" s SET "call_count" = s."call_count" + v."calls", "branch_count" = s."branch_count" + v."branches"
    FROM "v" WHERE s."id" = v."session_id" AND s."status" = 'open'
    RETURNING s."id", s."call_count" - v."calls" AS "first_turn"
  ), "ins" AS (
    INSERT INTO "gateway_calls" ("id", "session_id", "branch_id", "parent_call_id", "turn_index", "reply_fingerprint", "messages_json",
      "assistant_message_json", "tools_json", "template_extra_json", "prompt_ids", "output_ids", "prompt_prefix_tokens", "messages_prefix_count")
    SELECT c."id", c."session_id", c."branch_id", c."parent_call_id", r."first_turn" + c."k", c."fp", c."mj", c."am", c."tj", c."ej", c."pi", c."oi", c."ppt", c."mpc"
    FROM unnest($4::varchar[], $5::varchar[], $6::varchar[], $7::varchar[], $8::int[], $9::varchar[], $10::text[], $11::text[], $12::text[],
      $13::text[], $14::bytea[], $15::bytea[], $16::int[], $17::int[])
      AS c("id", "session_id", "branch_id", "parent_call_id", "k", "fp", "mj", "am", "tj", "ej", "pi", "oi", "ppt", "mpc")
    JOIN "r" ON r."id" = c."session_id"
  )
  SELECT "id", "first_turn" FROM "r"`;
