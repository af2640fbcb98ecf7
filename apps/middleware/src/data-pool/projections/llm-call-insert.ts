import type { EntityManager } from 'typeorm';
import { encodeTokenArray, type LlmCall } from '@anvil/persistence';

/** llm_calls columns a call event fills (recorded_at takes its default). */
const COLUMNS = [
  'id',
  'event_id',
  'session_id',
  'rollout_id',
  'group_id',
  'task_id',
  'branch_id',
  'parent_call_id',
  'turn_index',
  'model',
  'prompt_ids',
  'reused_prompt_tokens',
  'prompt_prefix_tokens',
  'output_ids',
  'output_logprobs',
  'output_versions',
  'prompt_tokens',
  'output_tokens',
  'finish_reason',
  'sampling',
  'received_at',
  'first_token_at',
  'finished_at',
] as const;

/** What a call event fills in (recorded_at takes its default). */
export type LlmCallRow = Omit<LlmCall, 'recordedAt' | 'rollout'>;

/** PostgreSQL takes at most 65535 parameters a statement. */
export const MAX_ROWS_PER_INSERT = Math.floor(65_535 / COLUMNS.length);

function valuesOf(r: LlmCallRow): unknown[] {
  return [
    r.id,
    r.eventId,
    r.sessionId,
    r.rolloutId,
    r.groupId,
    r.taskId,
    r.branchId,
    r.parentCallId,
    r.turnIndex,
    r.model,
    encodeTokenArray(r.promptIds),
    r.reusedPromptTokens,
    r.promptPrefixTokens,
    encodeTokenArray(r.outputIds),
    encodeTokenArray(r.outputLogprobs),
    encodeTokenArray(r.outputVersions),
    r.promptTokens,
    r.outputTokens,
    r.finishReason,
    JSON.stringify(r.sampling),
    r.receivedAt,
    r.firstTokenAt,
    r.finishedAt,
  ];
}

/**
 * One multi-row INSERT ... ON CONFLICT DO NOTHING of call rows, written as SQL rather than through
 * TypeORM's insert builder: the builder scans the statement for every parameter it adds, so a run
 * of a few hundred calls (23 parameters each) cost more Node CPU than the rows themselves (the
 * Data Pool bench's profile). Returns how many rows were new (a duplicate id or event id is skipped).
 */
export async function insertLlmCalls(m: Pick<EntityManager, 'query'>, rows: readonly LlmCallRow[]): Promise<number> {
  let inserted = 0;
  for (let from = 0; from < rows.length; from += MAX_ROWS_PER_INSERT) {
    const chunk = rows.slice(from, from + MAX_ROWS_PER_INSERT);
    const params: unknown[] = [];
    const tuples = chunk.map((r) => {
      const at = params.length;
      params.push(...valuesOf(r));
      return `(${COLUMNS.map((_, i) => `$${at + i + 1}`).join(',')})`;
    });
    const out: unknown[] = await m.query(
      `INSERT INTO "llm_calls" (${COLUMNS.map((c) => `"${c}"`).join(',')}) VALUES ${tuples.join(',')} ON CONFLICT DO NOTHING RETURNING 1`,
      params,
    );
    inserted += out.length;
  }
  return inserted;
}
