import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The Data Pool schema: tasks and task sets, rollout groups and rollouts, token-exact LLM
 * calls, rewards, trajectories, train batches, checkpoints, policy versions and their
 * activations, and the processed_events dedupe table. Written out by hand from the entities
 * (names and types match them exactly; a test asserts TypeORM sees no drift).
 *
 * Foreign keys exist only where one writer creates parent and child in causal order
 * (rollout.started creates group then rollout; rollout.completed adds rewards to its
 * rollout). Rows fed by other topics (llm_calls, trajectories, activations) carry plain
 * indexed ids, because Kafka orders events only within one topic partition.
 */
export class InitialSchema1795987110915 implements MigrationInterface {
  name = 'InitialSchema1795987110915';

  async up(queryRunner: QueryRunner): Promise<void> {
    const statements = [
      `CREATE TABLE "task_sets" (
        "id" character varying(128) NOT NULL,
        "name" text NOT NULL,
        "config" jsonb NOT NULL,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_task_sets" PRIMARY KEY ("id"))`,
      `CREATE TABLE "tasks" (
        "id" character varying(128) NOT NULL,
        "task_set_id" character varying(128) NOT NULL,
        "spec" jsonb NOT NULL,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_tasks" PRIMARY KEY ("id"),
        CONSTRAINT "fk_tasks_task_set" FOREIGN KEY ("task_set_id") REFERENCES "task_sets"("id") ON DELETE CASCADE ON UPDATE NO ACTION)`,
      `CREATE INDEX "idx_tasks_task_set" ON "tasks" ("task_set_id")`,

      `CREATE TABLE "rollout_groups" (
        "id" character varying(128) NOT NULL,
        "task_id" character varying(128) NOT NULL,
        "group_size" integer NOT NULL,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_rollout_groups" PRIMARY KEY ("id"),
        CONSTRAINT "fk_rollout_groups_task" FOREIGN KEY ("task_id") REFERENCES "tasks"("id") ON DELETE NO ACTION ON UPDATE NO ACTION)`,
      `CREATE INDEX "idx_rollout_groups_task" ON "rollout_groups" ("task_id")`,

      `CREATE TABLE "rollouts" (
        "id" character varying(128) NOT NULL,
        "group_id" character varying(128) NOT NULL,
        "task_id" character varying(128) NOT NULL,
        "sample_index" integer NOT NULL,
        "agent_kind" character varying(16) NOT NULL,
        "agent_name" text NOT NULL,
        "policy_version_at_start" integer NOT NULL,
        "status" character varying(16) NOT NULL,
        "finish_reason" character varying(32),
        "outcome_reward" double precision,
        "num_calls" integer,
        "error" text,
        "started_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        "completed_at" TIMESTAMP WITH TIME ZONE,
        "started_event_id" character varying(128) NOT NULL,
        "completed_event_id" character varying(128),
        "recorded_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_rollouts" PRIMARY KEY ("id"),
        CONSTRAINT "uq_rollouts_started_event" UNIQUE ("started_event_id"),
        CONSTRAINT "uq_rollouts_completed_event" UNIQUE ("completed_event_id"),
        CONSTRAINT "fk_rollouts_group" FOREIGN KEY ("group_id") REFERENCES "rollout_groups"("id") ON DELETE CASCADE ON UPDATE NO ACTION)`,
      `CREATE INDEX "idx_rollouts_group" ON "rollouts" ("group_id")`,
      `CREATE INDEX "idx_rollouts_status" ON "rollouts" ("status")`,

      `CREATE TABLE "rewards" (
        "id" bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
        "rollout_id" character varying(128) NOT NULL,
        "call_id" character varying(128),
        "kind" character varying(16) NOT NULL,
        "value" double precision NOT NULL,
        "label" character varying(200),
        "event_id" character varying(128) NOT NULL,
        "ordinal" integer NOT NULL,
        "recorded_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_rewards" PRIMARY KEY ("id"),
        CONSTRAINT "uq_rewards_event_ordinal" UNIQUE ("event_id", "ordinal"),
        CONSTRAINT "fk_rewards_rollout" FOREIGN KEY ("rollout_id") REFERENCES "rollouts"("id") ON DELETE CASCADE ON UPDATE NO ACTION)`,
      `CREATE INDEX "idx_rewards_rollout" ON "rewards" ("rollout_id")`,

      `CREATE TABLE "llm_calls" (
        "id" character varying(128) NOT NULL,
        "event_id" character varying(128) NOT NULL,
        "session_id" character varying(128) NOT NULL,
        "rollout_id" character varying(128) NOT NULL,
        "group_id" character varying(128) NOT NULL,
        "task_id" character varying(128) NOT NULL,
        "branch_id" character varying(128) NOT NULL,
        "parent_call_id" character varying(128),
        "turn_index" integer NOT NULL,
        "model" text NOT NULL,
        "prompt_ids" bytea NOT NULL,
        "reused_prompt_tokens" integer NOT NULL,
        "output_ids" bytea NOT NULL,
        "output_logprobs" bytea NOT NULL,
        "output_versions" bytea NOT NULL,
        "prompt_tokens" integer NOT NULL,
        "output_tokens" integer NOT NULL,
        "finish_reason" character varying(32) NOT NULL,
        "sampling" jsonb NOT NULL,
        "received_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        "first_token_at" TIMESTAMP WITH TIME ZONE,
        "finished_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        "recorded_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_llm_calls" PRIMARY KEY ("id"),
        CONSTRAINT "uq_llm_calls_event" UNIQUE ("event_id"))`,
      `CREATE INDEX "idx_llm_calls_rollout_turn" ON "llm_calls" ("rollout_id", "turn_index")`,
      `CREATE INDEX "idx_llm_calls_session" ON "llm_calls" ("session_id")`,
      `CREATE INDEX "idx_llm_calls_group" ON "llm_calls" ("group_id")`,

      `CREATE TABLE "train_batches" (
        "id" character varying(128) NOT NULL,
        "event_id" character varying(128) NOT NULL,
        "step" integer NOT NULL,
        "policy_version" integer NOT NULL,
        "trajectory_ids" text array NOT NULL,
        "sample_ids" text array NOT NULL,
        "num_samples" integer NOT NULL,
        "num_tokens" bigint NOT NULL,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        "recorded_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_train_batches" PRIMARY KEY ("id"),
        CONSTRAINT "uq_train_batches_event" UNIQUE ("event_id"))`,
      `CREATE INDEX "idx_train_batches_step" ON "train_batches" ("step")`,

      `CREATE TABLE "trajectories" (
        "id" character varying(128) NOT NULL,
        "event_id" character varying(128) NOT NULL,
        "rollout_id" character varying(128) NOT NULL,
        "group_id" character varying(128) NOT NULL,
        "task_id" character varying(128) NOT NULL,
        "call_ids" text array NOT NULL,
        "finish_reason" character varying(32) NOT NULL,
        "reward" double precision NOT NULL,
        "advantage" double precision NOT NULL,
        "loss_masked" boolean NOT NULL,
        "min_policy_version" integer NOT NULL,
        "max_policy_version" integer NOT NULL,
        "prompt_tokens" integer NOT NULL,
        "output_tokens" integer NOT NULL,
        "ready_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        "status" character varying(16) NOT NULL,
        "train_batch_id" character varying(128),
        "recorded_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_trajectories" PRIMARY KEY ("id"),
        CONSTRAINT "uq_trajectories_event" UNIQUE ("event_id"),
        CONSTRAINT "fk_trajectories_train_batch" FOREIGN KEY ("train_batch_id") REFERENCES "train_batches"("id") ON DELETE SET NULL ON UPDATE NO ACTION)`,
      `CREATE INDEX "idx_trajectories_rollout" ON "trajectories" ("rollout_id")`,
      `CREATE INDEX "idx_trajectories_group" ON "trajectories" ("group_id")`,
      `CREATE INDEX "idx_trajectories_status_ready" ON "trajectories" ("status", "ready_at")`,
      `CREATE INDEX "idx_trajectories_train_batch" ON "trajectories" ("train_batch_id")`,

      `CREATE TABLE "checkpoints" (
        "id" character varying(128) NOT NULL,
        "event_id" character varying(128) NOT NULL,
        "version" integer NOT NULL,
        "step" integer NOT NULL,
        "uri" text NOT NULL,
        "format" character varying(32) NOT NULL,
        "sha256" character varying(64) NOT NULL,
        "published_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        "recorded_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_checkpoints" PRIMARY KEY ("id"),
        CONSTRAINT "uq_checkpoints_event" UNIQUE ("event_id"))`,
      `CREATE INDEX "idx_checkpoints_version" ON "checkpoints" ("version")`,

      `CREATE TABLE "policy_versions" (
        "version" integer NOT NULL,
        "parent_version" integer,
        "step" integer NOT NULL,
        "checkpoint_id" character varying(128) NOT NULL,
        "published_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        "event_id" character varying(128) NOT NULL,
        "recorded_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_policy_versions" PRIMARY KEY ("version"),
        CONSTRAINT "uq_policy_versions_event" UNIQUE ("event_id"),
        CONSTRAINT "fk_policy_versions_checkpoint" FOREIGN KEY ("checkpoint_id") REFERENCES "checkpoints"("id") ON DELETE NO ACTION ON UPDATE NO ACTION)`,

      `CREATE TABLE "policy_activations" (
        "event_id" character varying(128) NOT NULL,
        "version" integer NOT NULL,
        "deployment" character varying(128) NOT NULL,
        "swap_policy" character varying(32) NOT NULL,
        "activated_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        "recorded_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_policy_activations" PRIMARY KEY ("event_id"))`,
      `CREATE INDEX "idx_policy_activations_version" ON "policy_activations" ("version")`,

      `CREATE TABLE "processed_events" (
        "consumer" character varying(128) NOT NULL,
        "event_id" character varying(128) NOT NULL,
        "processed_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_processed_events" PRIMARY KEY ("consumer", "event_id"))`,
    ];
    for (const sql of statements) await queryRunner.query(sql);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    // Children before parents; each table takes its indexes and constraints with it.
    const tables = [
      'processed_events',
      'policy_activations',
      'policy_versions',
      'checkpoints',
      'trajectories',
      'train_batches',
      'llm_calls',
      'rewards',
      'rollouts',
      'rollout_groups',
      'tasks',
      'task_sets',
    ];
    for (const table of tables) await queryRunner.query(`DROP TABLE "${table}"`);
  }
}
