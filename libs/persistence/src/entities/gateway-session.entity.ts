import { Column, CreateDateColumn, Entity, Index, PrimaryColumn } from 'typeorm';
import { idColumn, timeColumn } from './columns';

export type GatewaySessionStatus = 'open' | 'closed';

/**
 * One agent session at the gateway (opened by the rollout manager through the admin API).
 * The agent's key is never stored: only its sha256, compared in constant time. Everything a
 * gateway instance needs to serve the session lives here, so any instance behind the load
 * balancer can serve any call.
 */
@Entity({ name: 'gateway_sessions' })
@Index('idx_gateway_sessions_status', ['status'])
@Index('idx_gateway_sessions_rollout', ['rolloutId'])
export class GatewaySession {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_gateway_sessions' })
  id!: string;

  /** sha256 (hex) of the whole API key. */
  @Column({ name: 'key_hash', type: 'varchar', length: 64 })
  keyHash!: string;

  @Column({ ...idColumn, name: 'rollout_id' })
  rolloutId!: string;

  @Column({ ...idColumn, name: 'group_id' })
  groupId!: string;

  @Column({ ...idColumn, name: 'task_id' })
  taskId!: string;

  @Column({ name: 'model', type: 'text' })
  model!: string;

  @Column({ name: 'max_context_tokens', type: 'integer', nullable: true })
  maxContextTokens!: number | null;

  @Column({ name: 'status', type: 'varchar', length: 16 })
  status!: GatewaySessionStatus;

  @Column({ ...timeColumn, name: 'expires_at', nullable: true })
  expiresAt!: Date | null;

  /**
   * Policy version current when the session's first call was admitted (null until then): the
   * session's "start version" in the staleness bound (DESIGN.md, "Staleness").
   */
  @Column({ name: 'policy_version_at_start', type: 'integer', nullable: true })
  policyVersionAtStart!: number | null;

  /** Calls recorded so far (n > 1 counts each choice); also the next call's turn index. */
  @Column({ name: 'call_count', type: 'integer', default: 0 })
  callCount!: number;

  @Column({ name: 'branch_count', type: 'integer', default: 0 })
  branchCount!: number;

  @CreateDateColumn({ ...timeColumn, name: 'created_at' })
  createdAt!: Date;

  @Column({ ...timeColumn, name: 'closed_at', nullable: true })
  closedAt!: Date | null;

  @Column({ name: 'close_reason', type: 'varchar', length: 32, nullable: true })
  closeReason!: string | null;

  /** What a weight update does to the session's running generations ('finish' | 'abort-and-resume'); null: the inference-proxy's policy. */
  @Column({ name: 'weight_swap', type: 'varchar', length: 16, nullable: true })
  weightSwap!: 'finish' | 'abort-and-resume' | null;

  /** The call budget: calls answered at most (null: none). */
  @Column({ name: 'max_calls', type: 'integer', nullable: true })
  maxCalls!: number | null;

  /** The rate limit: the token bucket's refill per second (null: none). */
  @Column({ name: 'calls_per_second', type: 'double precision', nullable: true })
  callsPerSecond!: number | null;

  /** The token bucket's size (null without a rate limit). */
  @Column({ name: 'call_burst', type: 'integer', nullable: true })
  callBurst!: number | null;

  /** Calls admitted against the budget (a call that fails unanswered gives its place back). */
  @Column({ name: 'calls_admitted', type: 'integer', default: 0 })
  callsAdmitted!: number;

  /** The bucket's tokens as of rate_at (null: full). */
  @Column({ name: 'rate_tokens', type: 'double precision', nullable: true })
  rateTokens!: number | null;

  @Column({ ...timeColumn, name: 'rate_at', nullable: true })
  rateAt!: Date | null;

  /** Calls refused over the budget, and over the rate limit (answered 429, recorded nowhere else). */
  @Column({ name: 'refused_budget', type: 'integer', default: 0 })
  refusedBudget!: number;

  @Column({ name: 'refused_rate', type: 'integer', default: 0 })
  refusedRate!: number;
}
