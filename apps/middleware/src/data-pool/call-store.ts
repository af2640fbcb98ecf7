import type { DataSource, EntityManager } from 'typeorm';
import { decodeTokenArray } from '@anvil/persistence';
import { PrefixTreeBuilder, type CallSegment, type PrefixTree, type SampleMeta } from '@anvil/train-batch';

type Db = Pick<DataSource | EntityManager, 'query'>;

/**
 * One query that rebuilds any call's whole prompt from the delta rows: walk up the parent
 * chain while a row reuses a prefix, then back down, each step taking the first
 * `prompt_prefix_tokens` ids (4 bytes each) of its parent's prompt + output and appending its own.
 */
const FULL_PROMPT_SQL = `
WITH RECURSIVE up AS (
  SELECT "id", "parent_call_id", "prompt_prefix_tokens", "prompt_ids", "output_ids", 0 AS depth FROM "llm_calls" WHERE "id" = $1
  UNION ALL
  SELECT p."id", p."parent_call_id", p."prompt_prefix_tokens", p."prompt_ids", p."output_ids", up.depth + 1
  FROM "llm_calls" p JOIN up ON p."id" = up."parent_call_id" WHERE up."prompt_prefix_tokens" > 0
), down AS (
  SELECT depth, "prompt_ids" AS prompt, "prompt_ids" || "output_ids" AS seq FROM up WHERE depth = (SELECT max(depth) FROM up)
  UNION ALL
  SELECT up.depth, substring(down.seq FROM 1 FOR up."prompt_prefix_tokens" * 4) || up."prompt_ids",
         substring(down.seq FROM 1 FOR up."prompt_prefix_tokens" * 4) || up."prompt_ids" || up."output_ids"
  FROM down JOIN up ON up.depth = down.depth - 1
)
SELECT prompt, (SELECT max(depth) FROM up) AS chain,
       (SELECT bool_and(u."prompt_prefix_tokens" = 0 OR u."parent_call_id" IS NOT NULL) FROM up u) AS complete,
       (SELECT "prompt_tokens" FROM "llm_calls" WHERE "id" = $1) AS expected
FROM down WHERE depth = 0`;

export class MissingParentError extends Error {
  override name = 'MissingParentError';
  constructor(
    readonly callId: string,
    message: string,
  ) {
    super(message);
  }
}

interface SegmentRow {
  id: string;
  rollout_id: string;
  parent_call_id: string | null;
  prompt_prefix_tokens: number;
  prompt_ids: Buffer;
  output_ids: Buffer;
  output_logprobs: Buffer;
  output_versions: Buffer;
  prompt_tokens: number;
  turn_index: number;
}

export function segmentOf(r: SegmentRow): CallSegment {
  return {
    callId: r.id,
    parentCallId: r.parent_call_id,
    reusedPromptTokens: r.prompt_prefix_tokens,
    promptDeltaIds: decodeTokenArray(Int32Array, r.prompt_ids),
    outputIds: decodeTokenArray(Int32Array, r.output_ids),
    outputLogprobs: decodeTokenArray(Float32Array, r.output_logprobs),
    outputVersions: decodeTokenArray(Uint32Array, r.output_versions),
  };
}

/** The Data Pool's reads of call tokens (delta rows, never whole prompts). */
export class CallStore {
  constructor(private readonly db: Db) {}

  /** The whole prompt of a call, rebuilt in one query; throws MissingParentError when a parent row is missing. */
  async fullPrompt(callId: string, db: Db = this.db): Promise<Int32Array> {
    const rows: { prompt: Buffer; complete: boolean; expected: number }[] = await db.query(FULL_PROMPT_SQL, [callId]);
    if (rows.length === 0) throw new MissingParentError(callId, `call ${callId} is not stored, or a call on its parent chain is missing`);
    const prompt = decodeTokenArray(Int32Array, rows[0].prompt);
    if (prompt.length !== Number(rows[0].expected))
      throw new MissingParentError(
        callId,
        `call ${callId}: rebuilt ${prompt.length} prompt ids, the row says ${rows[0].expected} (a parent on its chain is missing)`,
      );
    return prompt;
  }

  /** Call segments of rollouts in turn order (turn, then arrival), for the tree builder. */
  async segmentsOf(
    rolloutIds: readonly string[],
    db: Db = this.db,
  ): Promise<Map<string, (CallSegment & { turnIndex: number; promptLength: number })[]>> {
    const rows: SegmentRow[] = await db.query(
      `SELECT "id", "rollout_id", "parent_call_id", "prompt_prefix_tokens", "prompt_ids", "output_ids", "output_logprobs", "output_versions", "prompt_tokens", "turn_index"
       FROM "llm_calls" WHERE "rollout_id" = ANY($1::varchar[]) ORDER BY "rollout_id", "turn_index", "received_at", "id"`,
      [rolloutIds],
    );
    const out = new Map<string, (CallSegment & { turnIndex: number; promptLength: number })[]>();
    for (const id of rolloutIds) out.set(id, []);
    for (const r of rows) out.get(r.rollout_id)?.push({ ...segmentOf(r), turnIndex: r.turn_index, promptLength: r.prompt_tokens });
    return out;
  }

  /**
   * One query returning a trajectory's calls as a token tree (unique nodes, pre-order, per-node
   * behaviour logprobs and versions, one sample per call with weight `lossWeight`).
   */
  async treeOf(
    rolloutId: string,
    meta: Omit<SampleMeta, 'sampleId'> = { trajectoryId: rolloutId, groupId: '', advantage: 0, lossWeight: 1 },
    db: Db = this.db,
  ): Promise<PrefixTree> {
    const calls = (await this.segmentsOf([rolloutId], db)).get(rolloutId) ?? [];
    const b = new PrefixTreeBuilder();
    for (const c of orderParentsFirst(calls)) b.add(c, { ...meta, sampleId: c.callId });
    return b.build();
  }
}

/** Turn order, except that a call whose parent comes later (an outbox recovery reordered turns) waits for it. */
export function orderParentsFirst<T extends { callId: string; parentCallId: string | null; reusedPromptTokens: number }>(
  calls: readonly T[],
): T[] {
  const ids = new Set(calls.map((c) => c.callId));
  const done = new Set<string>();
  const out: T[] = [];
  let rest = [...calls];
  while (rest.length) {
    const next: T[] = [];
    for (const c of rest) {
      const needs = c.reusedPromptTokens > 0 && c.parentCallId !== null && ids.has(c.parentCallId) && !done.has(c.parentCallId);
      if (needs) next.push(c);
      else {
        out.push(c);
        done.add(c.callId);
      }
    }
    if (next.length === rest.length)
      throw new MissingParentError(next[0].callId, `calls ${next.map((c) => c.callId).join(', ')} form a parent cycle`);
    rest = next;
  }
  return out;
}
