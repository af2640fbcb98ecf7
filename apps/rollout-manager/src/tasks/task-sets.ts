import type { SandboxKind, SandboxLogger } from '@anvil/sandbox';
import { checkAgentEnv } from '../agents/black-box';
import { BUILTIN_ENVIRONMENTS, type EnvironmentFactory } from '../environments/registry';
import type { Environment } from '../environments/types';
import type { LoadedTaskSet } from '../rollouts/group-state';
import type { Sandboxes } from '../sandbox/sandboxes';
import { checkVerifier, type VerifierDeps, type VerifierFn } from '../verifiers/verifiers';
import { parseTaskJsonl, type StoredTask } from './jsonl';
import { blackBoxAgentProblems, commandVerifierProblems, taskWorkspaceProblems } from './sandbox-checks';
import { agentName, taskSetSpecSchema, type TaskSetSpec, type TaskSetSpecInput, type VerifierSpec } from './task-set';
import type { RolloutTaskStore } from './task-store';

/** What task sets need of the manager besides their store: the sandboxes their programs run in, the base of relative paths, the log. */
export interface TaskSetsDeps {
  sandboxes: Sandboxes;
  repoRoot: string;
  logger: SandboxLogger;
  environments?: Record<string, EnvironmentFactory>;
  verifiers?: Record<string, VerifierFn>;
}

/** A built-in environment's task set: its declaration and how many train and eval tasks its seeded generator makes. */
export type BuiltinTaskSetInput = TaskSetSpecInput & { env: string; seed: number; trainCount: number; evalCount: number };

/**
 * The task sets this manager can run: loaded (checked whole, then stored in PostgreSQL) and
 * looked up, each with its environment built once. Everything a rollout needs of its task set
 * (the environment, the verifier's dependencies) comes from here.
 */
export class TaskSets {
  private readonly loaded = new Map<string, LoadedTaskSet>();
  private readonly envFactories: Record<string, EnvironmentFactory>;
  private readonly verifierFns: Record<string, VerifierFn>;

  constructor(
    private readonly store: RolloutTaskStore,
    private readonly d: TaskSetsDeps,
  ) {
    this.envFactories = { ...BUILTIN_ENVIRONMENTS, ...d.environments };
    this.verifierFns = { ...d.verifiers };
  }

  /**
   * Registers a task set and its tasks (idempotent by id). Refused before anything is written: an
   * unknown environment, agent env or verifier, what its programs need of this machine missing
   * (sandbox-checks.ts), or a sandbox this machine cannot start.
   */
  async load(input: TaskSetSpecInput, tasks: StoredTask[]): Promise<{ taskSetId: string; tasks: number }> {
    const spec = taskSetSpecSchema.parse(input);
    const env = this.check(spec);
    const verifiers: VerifierSpec[] = spec.verifier ? [spec.verifier] : [];
    for (const t of tasks) {
      const v = t.verifier ?? spec.verifier ?? (spec.env ? { kind: 'env' as const } : undefined);
      if (!v) throw new Error(`task ${t.id}: verifier: none given and the task set has no environment`);
      checkVerifier(v, spec.env, this.verifierDeps(spec, env));
      if (t.verifier) verifiers.push(t.verifier);
    }
    await this.checkMachine(spec, env, tasks, verifiers);
    const r = await this.store.load(spec, tasks);
    this.loaded.set(spec.id, { spec, env });
    return r;
  }

  /** Loads a JSONL task file (refused whole, every bad line named) into a task set. */
  async loadJsonl(input: TaskSetSpecInput, text: string, source = '<jsonl>'): Promise<{ taskSetId: string; tasks: number }> {
    return this.load(input, parseTaskJsonl(text, source));
  }

  /** A built-in environment's task set from code: `trainCount` train and `evalCount` eval tasks from its seeded generator. */
  loadBuiltin(input: BuiltinTaskSetInput): Promise<{ taskSetId: string; tasks: number }> {
    const spec = taskSetSpecSchema.parse(input);
    const env = this.envFactory(input.env)(spec.envConfig);
    const tasks = [
      ...env.generate({ seed: input.seed, count: input.trainCount, split: 'train' }),
      ...env.generate({ seed: input.seed, count: input.evalCount, split: 'eval' }),
    ];
    return this.load(input, tasks);
  }

  /** A task set by id: loaded by this process, or stored by an earlier one (checked again, its environment built). */
  async get(taskSetId: string): Promise<LoadedTaskSet> {
    let s = this.loaded.get(taskSetId);
    if (!s) {
      const stored = await this.store.spec(taskSetId);
      if (!stored) throw new Error(`taskSetId: unknown task set ${JSON.stringify(taskSetId)}`);
      const spec = taskSetSpecSchema.parse(stored);
      s = { spec, env: this.check(spec) };
      this.loaded.set(taskSetId, s);
    }
    return s;
  }

  /** A task set's stored tasks, both splits. */
  tasks(taskSetId: string): Promise<StoredTask[]> {
    return this.store.tasks(taskSetId);
  }

  verifierDeps(spec: TaskSetSpec, env: Environment | null): VerifierDeps {
    return {
      environments: new Map(env && spec.env ? [[spec.env, env]] : []),
      functions: this.verifierFns,
      sandboxes: this.d.sandboxes,
      repoRoot: this.d.repoRoot,
    };
  }

  /** What the agent, the tasks' workspaces and the command verifiers need of this machine, and their sandboxes started once. */
  private async checkMachine(spec: TaskSetSpec, env: Environment | null, tasks: StoredTask[], verifiers: VerifierSpec[]): Promise<void> {
    const { agent } = spec;
    const root = this.d.repoRoot;
    const problems = [
      ...(agent.kind === 'black-box' ? blackBoxAgentProblems(agent, root) : []),
      ...tasks.flatMap((t) => taskWorkspaceProblems(t, agent, root)),
      ...[...new Set(verifiers)].flatMap((v) => commandVerifierProblems(v, root)),
      // What the environment can tell of a task before a run (repo-fix: a missing snapshot).
      ...(env?.checkTask ? tasks.flatMap((t) => env.checkTask?.(t) ?? []) : []),
    ];
    if (problems.length) throw new Error(`task set ${spec.id}: ${[...new Set(problems)].join('; ')}`);
    const users = new Map<SandboxKind, string>();
    if (agent.kind === 'black-box') users.set(agent.sandbox, `agent ${agentName(agent)}`);
    for (const v of verifiers) if (v.kind === 'command' && !users.has(v.sandbox)) users.set(v.sandbox, `verifier command ${v.command[0]}`);
    for (const [kind, who] of users) {
      try {
        await this.d.sandboxes.get(kind);
      } catch (e) {
        throw new Error(`task set ${spec.id}: ${who} (sandbox ${kind}): ${(e as Error).message}`);
      }
    }
    if (users.has('none'))
      this.d.logger.warn(`task set ${spec.id}: ${users.get('none')} runs UNSANDBOXED (sandbox 'none'): trusted programs only`, {
        taskSetId: spec.id,
      });
  }

  private check(spec: TaskSetSpec): Environment | null {
    const env = spec.env === null ? null : this.envFactory(spec.env)(spec.envConfig);
    if (spec.agent.kind === 'black-box') checkAgentEnv(spec.agent.env);
    if (spec.verifier) checkVerifier(spec.verifier, spec.env, this.verifierDeps(spec, env));
    return env;
  }

  private envFactory(name: string): EnvironmentFactory {
    const f = this.envFactories[name];
    if (!f) throw new Error(`env: unknown environment ${JSON.stringify(name)} (known: ${Object.keys(this.envFactories).join(', ')})`);
    return f;
  }
}
