import type { DataSource } from 'typeorm';
import type { MessageBus } from '@anvil/messaging';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import type { EnvironmentFactory } from './environments/registry';
import type { SandboxOptions } from './sandbox/sandboxes';
import type { VerifierFn } from './verifiers/verifiers';

export interface RolloutRuntimeConfig {
  /** Producer name on the events. */
  producer: string;
  /** Model name sent to the gateway. */
  model: string;
  /** Default G (a task set may declare its own). */
  groupSize: number;
  /** N: rollouts running at once. */
  concurrency: number;
  /** Staleness bound η. */
  eta: number;
  /** B: groups per training step (capacity (η + 1)·B groups). */
  groupsPerStep: number;
  initialPolicyVersion: number;
  /** Durable consumer group for rollout_group.settled, train_batch.trained and evaluation.requested; also this instance's identity in rm_groups (a restart recovers the groups of its own name). */
  consumerGroup: string;
  /** How often a refused admission is retried when no event wakes it. */
  admissionPollMs: number;
  requestTimeoutMs: number;
  /** Stop: how long running rollouts get before they are aborted. */
  stopGraceMs: number;
  /** The directory of black-box agents without their own (the base of their relative paths), and of verifier commands. */
  repoRoot: string;
  /** Rollouts, the next to start, whose gateway sessions are opened while they wait for a slot (see SessionLookahead); default ⌈N/4⌉, 0 = none. */
  sessionLookahead?: number;
  /** How much longer than its rollout's timeout a session opened ahead lives (it may wait that long for its slot; older ones are replaced at the start). */
  sessionLookaheadTtlMs: number;
  /** How often the running black-box agents' sessions are checked for a spent call budget (one admin request for all of them). */
  budgetPollMs: number;
}

export const RUNTIME_DEFAULTS: RolloutRuntimeConfig = {
  producer: 'rollout-manager',
  model: 'anvil-tiny',
  groupSize: 8,
  concurrency: 64,
  eta: 4,
  groupsPerStep: 8,
  initialPolicyVersion: 0,
  consumerGroup: 'anvil.rollout-manager',
  admissionPollMs: 500,
  requestTimeoutMs: 120_000,
  stopGraceMs: 0,
  repoRoot: process.cwd(),
  sessionLookaheadTtlMs: 600_000,
  budgetPollMs: 500,
};

export interface RolloutRuntimeOptions {
  gatewayUrl: string;
  adminToken: string;
  bus: MessageBus;
  dataSource: DataSource;
  config?: Partial<RolloutRuntimeConfig>;
  /** Extra environments (name → factory of a task set's envConfig). */
  environments?: Record<string, EnvironmentFactory>;
  /** TypeScript verifier functions by name (verifier kind 'function'). */
  verifiers?: Record<string, VerifierFn>;
  logger?: Logger;
  metrics?: ServiceMetrics;
  /** Where the local sandboxes of agents and verifier commands run (uid range, runtime directory); default @anvil/sandbox's. */
  sandbox?: SandboxOptions;
}
