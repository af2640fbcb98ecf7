import { Column, CreateDateColumn, Entity, Index, JoinColumn, ManyToOne, PrimaryColumn, Unique, type Relation } from 'typeorm';
import type { FINISH_REASONS_LLM } from '@anvil/contracts';
import { tokenArrayTransformer } from '../codec/token-bytea';
import { idColumn, timeColumn } from './columns';
import { Rollout } from './rollout.entity';

export type LlmFinishReason = (typeof FINISH_REASONS_LLM)[number];

export interface SamplingParams {
  temperature: number;
  topP: number;
  topK: number;
  seed: number | null;
}

/**
 * One LLM call recorded token-exactly (one training sample). The token arrays are bytea of
 * little-endian elements (see codec/token-bytea), decoded to typed arrays on load.
 */
@Entity({ name: 'llm_calls' })
@Index('idx_llm_calls_rollout_turn', ['rolloutId', 'turnIndex'])
@Index('idx_llm_calls_session', ['sessionId'])
@Index('idx_llm_calls_group', ['groupId'])
@Unique('uq_llm_calls_event', ['eventId'])
export class LlmCall {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_llm_calls' })
  id!: string;

  @Column({ ...idColumn, name: 'event_id' })
  eventId!: string;

  @Column({ ...idColumn, name: 'session_id' })
  sessionId!: string;

  /**
   * No foreign key to rollouts: calls travel on their own topic, so a call may be stored
   * before the rollout.started that creates its rollout row.
   */
  @Column({ ...idColumn, name: 'rollout_id' })
  rolloutId!: string;

  @Column({ ...idColumn, name: 'group_id' })
  groupId!: string;

  @Column({ ...idColumn, name: 'task_id' })
  taskId!: string;

  @Column({ ...idColumn, name: 'branch_id' })
  branchId!: string;

  @Column({ ...idColumn, name: 'parent_call_id', nullable: true })
  parentCallId!: string | null;

  @Column({ name: 'turn_index', type: 'integer' })
  turnIndex!: number;

  @Column({ name: 'model', type: 'text' })
  model!: string;

  @Column({ name: 'prompt_ids', type: 'bytea', transformer: tokenArrayTransformer(Int32Array) })
  promptIds!: Int32Array;

  @Column({ name: 'reused_prompt_tokens', type: 'integer' })
  reusedPromptTokens!: number;

  /**
   * Leading prompt ids not stored here: they are the parent call's prompt + output ids
   * (`promptIds` holds the rest; `promptTokens` is the full length). 0 = whole row.
   */
  @Column({ name: 'prompt_prefix_tokens', type: 'integer', default: 0 })
  promptPrefixTokens!: number;

  @Column({ name: 'output_ids', type: 'bytea', transformer: tokenArrayTransformer(Int32Array) })
  outputIds!: Int32Array;

  @Column({ name: 'output_logprobs', type: 'bytea', transformer: tokenArrayTransformer(Float32Array) })
  outputLogprobs!: Float32Array;

  @Column({ name: 'output_versions', type: 'bytea', transformer: tokenArrayTransformer(Uint32Array) })
  outputVersions!: Uint32Array;

  /** Lengths kept beside the blobs so statistics never have to load them. */
  @Column({ name: 'prompt_tokens', type: 'integer' })
  promptTokens!: number;

  @Column({ name: 'output_tokens', type: 'integer' })
  outputTokens!: number;

  @Column({ name: 'finish_reason', type: 'varchar', length: 32 })
  finishReason!: LlmFinishReason;

  @Column({ name: 'sampling', type: 'jsonb' })
  sampling!: SamplingParams;

  @Column({ ...timeColumn, name: 'received_at' })
  receivedAt!: Date;

  @Column({ ...timeColumn, name: 'first_token_at', nullable: true })
  firstTokenAt!: Date | null;

  @Column({ ...timeColumn, name: 'finished_at' })
  finishedAt!: Date;

  @CreateDateColumn({ ...timeColumn, name: 'recorded_at' })
  recordedAt!: Date;

  @ManyToOne(() => Rollout, { createForeignKeyConstraints: false })
  @JoinColumn({ name: 'rollout_id' })
  rollout?: Relation<Rollout>;
}
