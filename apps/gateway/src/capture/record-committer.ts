import type { EventEnvelope } from '@anvil/contracts';
import { bindTraceContext } from '@anvil/messaging';
import type { Context } from '@opentelemetry/api';
import type { SqlClient } from '../db/sql-client';
import type { StoredCapture } from './capture-store';
import type { OutboxRelay } from './outbox-relay';
import { encodeOutboxRow, withAbsoluteTurn, type OutboxEntry } from './outbox-row';

/** Session state an answer depends on, written by the statement that records its calls (a stored Responses API response). */
export interface SessionStateRow {
  id: string;
  sessionId: string;
  previousResponseId: string | null;
  callId: string;
  conversationJson: string;
  responseJson: string;
}

/** The call could not be made durable (the database refused it): it must not be answered. */
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
  /**
   * The llm_call.recorded events, one per choice, with `turnIndex` = the choice's position
   * (0..calls-1): the committer publishes copies numbered from the first turn it reserves.
   */
  records: readonly EventEnvelope<'llm_call.recorded'>[];
  /** Stored responses of these calls (gateway_responses): durable with them, or not at all. */
  responses?: readonly SessionStateRow[];
  /** The trace the published events carry (the call's, although the relay publishes them later, in a batch with others). */
  trace?: Context;
}

/** null: the session was closed meanwhile (nothing recorded, nothing to answer). */
export type CommitResult = { firstTurn: number } | null;

interface Pending {
  req: CommitRequest;
  resolve(r: CommitResult): void;
  reject(err: Error): void;
  /** Offset of this request's turns among its session's calls in the same batch. */
  offset: number;
}

/**
 * Group commit of answered calls (DESIGN.md: no answer before its record is durable). Calls
 * that finish while a batch is being written wait and go together in the next one, as ONE SQL
 * statement per batch that
 *  - reserves the turn indexes of every call (only while its session is open),
 *  - inserts their capture rows,
 *  - inserts their llm_call.recorded events into the outbox (gateway_outbox), and
 *  - deletes the outbox rows of events published since the previous statement.
 * Once it commits, the records are durable and each call is released to answer at once; the
 * OutboxRelay then publishes the events to Kafka in commit order and has their rows deleted. A
 * gateway that dies between the two leaves its rows to another gateway's (or its own next
 * start's) sweeper, so a crash after answering loses no record. Under light load a batch is a
 * single call and nothing waits; under heavy load everything that finished meanwhile shares
 * one round trip and one WAL flush.
 */
export class RecordCommitter {
  private waiting: Pending[] = [];
  private writing = false;
  private inFlight = 0;
  private idle: (() => void)[] = [];

  constructor(
    private readonly sql: SqlClient,
    private readonly relay: OutboxRelay,
    private readonly opts: { maxBatch?: number } = {},
  ) {}

  /** Calls queued or being written. */
  get pending(): number {
    return this.waiting.length + this.inFlight;
  }

  commit(req: CommitRequest): Promise<CommitResult> {
    return new Promise<CommitResult>((resolve, reject) => {
      this.waiting.push({ req, resolve, reject, offset: 0 });
      this.pumpWrites();
    });
  }

  /** Resolves once nothing is queued or being written (graceful shutdown; the relay drains separately). */
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
      if (this.pending === 0) for (const r of this.idle.splice(0)) r();
    });
  }

  /** The whole batch in one statement; answers are released as soon as it commits. */
  private async write(all: Pending[]): Promise<void> {
    // A record the contract rejects fails its own call only, not the others written with it.
    const encoded = new Map<Pending, OutboxEntry[]>();
    const batch: Pending[] = [];
    for (const p of all) {
      try {
        encoded.set(p, outboxEntries(p.req));
        batch.push(p);
      } catch (err) {
        p.reject(new RecordNotDurableError(`the call's record is invalid: ${(err as Error).message}`, { cause: err }));
      }
    }
    if (batch.length === 0) return;
    const sessions = new Map<string, { calls: number; branches: number }>();
    for (const p of batch) {
      const s = sessions.get(p.req.sessionId) ?? { calls: 0, branches: 0 };
      p.offset = s.calls;
      s.calls += p.req.calls;
      s.branches += p.req.newBranches;
      sessions.set(p.req.sessionId, s);
    }
    const rows = batch.flatMap((p) => p.req.captures.map((c) => ({ k: p.offset + c.turn, row: c.row })));
    const outbox = batch.flatMap((p) => (encoded.get(p) ?? []).map((o) => ({ ...o, k: p.offset + o.k })));
    const responses = batch.flatMap((p) => p.req.responses ?? []);
    const published = this.relay.takePublished();
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
        outbox.map((o) => o.id),
        outbox.map((o) => o.sessionId),
        outbox.map((o) => o.k),
        outbox.map((o) => o.frame),
        outbox.map((o) => o.promptFromCapture),
        outbox.map((o) => o.reusedPromptTokens),
        published,
        responses.map((r) => r.id),
        responses.map((r) => r.sessionId),
        responses.map((r) => r.previousResponseId),
        responses.map((r) => r.callId),
        responses.map((r) => r.conversationJson),
        responses.map((r) => r.responseJson),
      ]);
    } catch (err) {
      this.relay.returnPublished(published);
      const e = new RecordNotDurableError(`the call could not be recorded: ${(err as Error).message}`, { cause: err });
      for (const p of batch) p.reject(e);
      return;
    }
    const firstTurn = new Map(reserved.map((r) => [r.id, Number(r.first_turn)]));
    const toPublish: EventEnvelope[] = [];
    for (const p of batch) {
      const first = firstTurn.get(p.req.sessionId);
      if (first === undefined) {
        p.resolve(null);
        continue;
      }
      const callFirst = first + p.offset;
      for (const e of p.req.records) {
        const numbered = withAbsoluteTurn(e, callFirst);
        toPublish.push(p.req.trace ? bindTraceContext(numbered, p.req.trace) : numbered);
      }
      p.resolve({ firstTurn: callFirst });
    }
    this.relay.enqueue(toPublish);
  }
}

/** A request's outbox rows (the encoding and its rule: outbox-row.ts). */
function outboxEntries(req: CommitRequest): OutboxEntry[] {
  const captured = new Set(req.captures.map((c) => c.row.callId));
  return req.records.map((e) => encodeOutboxRow(e, req.sessionId, captured.has(e.id)));
}

/**
 * Reserves turns for each session of the batch (v: session, calls, new branches; an UPDATE
 * only of open sessions), inserts the capture rows and outbox events of the sessions it
 * reserved for (a row of a closed session finds no `r` and is dropped), numbering each
 * first_turn + k, stores the Responses API responses of those sessions ($25-$30), and deletes
 * the outbox rows of published events ($24). Data-modifying CTEs run whether or not the final
 * SELECT reads them.
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
  ), "ob" AS (
    INSERT INTO "gateway_outbox" ("event_id", "session_id", "turn_index", "frame", "prompt_from_capture", "reused_prompt_tokens")
    SELECT o."id", o."session_id", r."first_turn" + o."k", o."frame", o."pfc", o."rpt"
    FROM unnest($18::varchar[], $19::varchar[], $20::int[], $21::bytea[], $22::bool[], $23::int[]) AS o("id", "session_id", "k", "frame", "pfc", "rpt")
    JOIN "r" ON r."id" = o."session_id"
  ), "del" AS (
    DELETE FROM "gateway_outbox" WHERE "event_id" = ANY($24::varchar[])
  ), "resp" AS (
    INSERT INTO "gateway_responses" ("id", "session_id", "previous_response_id", "call_id", "conversation_json", "response_json")
    SELECT x."id", x."session_id", x."prev", x."call_id", x."cj", x."rj"
    FROM unnest($25::varchar[], $26::varchar[], $27::varchar[], $28::varchar[], $29::text[], $30::text[]) AS x("id", "session_id", "prev", "call_id", "cj", "rj")
    JOIN "r" ON r."id" = x."session_id"
  )
  SELECT "id", "first_turn" FROM "r"`;
