import { Column, CreateDateColumn, Entity, Index, PrimaryColumn } from 'typeorm';
import { tokenArrayTransformer } from '../codec/token-bytea';
import { idColumn, timeColumn } from './columns';

/**
 * The capture state of one answered call: what the next call of the session needs to extend it
 * token-exactly (DESIGN.md, "Token-exact capture"). The training record itself is the
 * llm_call.recorded event; this row is the gateway's working state, found by the fingerprint
 * of (tools, template variables, messages + the reply) that a later request's message prefix
 * reproduces.
 */
@Entity({ name: 'gateway_calls' })
@Index('idx_gateway_calls_session_fingerprint', ['sessionId', 'replyFingerprint'])
export class GatewayCall {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_gateway_calls' })
  id!: string;

  @Column({ ...idColumn, name: 'session_id' })
  sessionId!: string;

  @Column({ ...idColumn, name: 'branch_id' })
  branchId!: string;

  @Column({ ...idColumn, name: 'parent_call_id', nullable: true })
  parentCallId!: string | null;

  @Column({ name: 'turn_index', type: 'integer' })
  turnIndex!: number;

  /** sha256 (hex) of the messages plus the reply (fingerprintMessages' last entry). */
  @Column({ name: 'reply_fingerprint', type: 'varchar', length: 64 })
  replyFingerprint!: string;

  /**
   * The canonical history the prompt renders (planContinuation's `messages`, not the agent's
   * echo), after the first `messagesPrefixCount` messages, as JSON text: jsonb cannot hold
   * U+0000, which a model's reply may contain.
   */
  @Column({ name: 'messages_json', type: 'text' })
  messagesJson!: string;

  /** The reply as returned to the agent (reasoning included), as JSON text. */
  @Column({ name: 'assistant_message_json', type: 'text' })
  assistantMessageJson!: string;

  /**
   * The tools as JSON text, not jsonb: templates print them with `tojson` in their key order,
   * which jsonb would not keep, and the previous prompt must re-render to the same text.
   */
  @Column({ name: 'tools_json', type: 'text', nullable: true })
  toolsJson!: string | null;

  /** Template variables (chat_template_kwargs) the prompt was rendered with, as JSON text (key order kept, as for tools). */
  @Column({ name: 'template_extra_json', type: 'text' })
  templateExtraJson!: string;

  /**
   * The prompt ids after the first `promptPrefixTokens` (all of them when that is 0). Those
   * leading ids are the parent call's prompt + output ids, so a long session stores each token
   * once rather than once per later call.
   */
  @Column({ name: 'prompt_ids', type: 'bytea', transformer: tokenArrayTransformer(Int32Array) })
  promptIds!: Int32Array;

  /** How many leading prompt ids are the parent's prompt + output ids (0: `promptIds` is the whole prompt). */
  @Column({ name: 'prompt_prefix_tokens', type: 'integer', default: 0 })
  promptPrefixTokens!: number;

  /** How many leading messages are the parent's messages + its reply (0: `messagesJson` is the whole history). */
  @Column({ name: 'messages_prefix_count', type: 'integer', default: 0 })
  messagesPrefixCount!: number;

  @Column({ name: 'output_ids', type: 'bytea', transformer: tokenArrayTransformer(Int32Array) })
  outputIds!: Int32Array;

  @CreateDateColumn({ ...timeColumn, name: 'created_at' })
  createdAt!: Date;
}
