/**
 * The task set a run trains on: a built-in set (chain-add, repo-fix), or a task JSONL with the run's agent,
 * verifier, context management and limits, as one spec the rollout-manager loads (in process, or
 * over its internal HTTP API in a distributed run), and the name the gateway serves the model under.
 */
import { readFileSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { parseTaskJsonl, type TaskSetSpecInput } from '@anvil/rollout-manager';
import { chainAddConfigOf, type RunConfig } from '../config/run-config';

/** What loading a task set needs of the rollout-manager (the RolloutRuntime in process, its HTTP API in a stack). */
export interface TaskSetLoader {
  loadBuiltin(spec: TaskSetSpecInput & { env: string; seed: number; trainCount: number; evalCount: number }): Promise<unknown>;
  /** A task JSONL's text (its lines are validated again where they are loaded). */
  loadJsonl(spec: TaskSetSpecInput, jsonl: string, source: string): Promise<unknown>;
}

export interface RlTaskSet {
  spec: TaskSetSpecInput & { id: string };
  /** The task set held-out evaluations run on, when not `spec.id` (the same eval tasks without the train set's tool delays). */
  evalTaskSetId?: string;
  /** Loads the task set's tasks into the rollout-manager; returns how many train and eval tasks it holds. */
  load(rollouts: TaskSetLoader): Promise<{ train: number; eval: number }>;
}

export function taskSetOf(cfg: RunConfig): RlTaskSet {
  const t = cfg.task;
  const common: Omit<TaskSetSpecInput, 'id' | 'name' | 'env' | 'envConfig'> = {
    groupSize: cfg.rollouts.groupSize,
    sampling: { temperature: cfg.rollouts.temperature, maxTokens: cfg.rollouts.maxTokensPerCall },
    ...(t.agent ? { agent: t.agent } : {}),
    ...(t.verifier ? { verifier: t.verifier } : {}),
    ...(t.context ? { context: t.context } : {}),
    ...(t.limits ? { limits: t.limits } : {}),
    ...(t.builtinTools ? { builtinTools: t.builtinTools } : {}),
    ...(t.weightSwap ? { weightSwap: t.weightSwap } : {}),
  };
  if (t.set === 'chain-add') {
    // The built-in set's spec as the main job has always declared it; the run's agent, verifier, context and limits join it when given.
    const spec = { id: 'chain-add', name: 'chain-add (built in)', env: 'chain-add', envConfig: chainAddConfigOf(cfg), ...common };
    // Tool delays are environment dynamics of the rollouts, not of the policy: held-out tasks are
    // the same tasks (same generator seed) in a twin set without them, so an evaluation takes the
    // policy's time, not the tail of the slowest tool call, and scores the same.
    const { toolDelay: _delay, ...evalEnvConfig } = spec.envConfig as typeof spec.envConfig & { toolDelay?: unknown };
    const evalSpec = t.toolDelay
      ? { ...spec, id: 'chain-add-eval', name: 'chain-add (built in, held-out, no tool delay)', envConfig: evalEnvConfig }
      : null;
    return {
      spec,
      ...(evalSpec ? { evalTaskSetId: evalSpec.id } : {}),
      async load(rollouts) {
        await rollouts.loadBuiltin({ ...spec, seed: cfg.seed, trainCount: t.trainTasks, evalCount: t.evalTasks });
        if (evalSpec) await rollouts.loadBuiltin({ ...evalSpec, seed: cfg.seed, trainCount: 0, evalCount: t.evalTasks });
        return { train: t.trainTasks, eval: t.evalTasks };
      },
    };
  }
  if (t.set === 'repo-fix') {
    // Generated from the run's seed like chain-add: trainTasks and evalTasks of its splits (held-out bugs apart).
    const spec = { id: 'repo-fix', name: 'repo-fix (built in)', env: 'repo-fix', envConfig: t.envConfig ?? {}, ...common };
    return {
      spec,
      async load(rollouts) {
        await rollouts.loadBuiltin({ ...spec, seed: cfg.seed, trainCount: t.trainTasks, evalCount: t.evalTasks });
        return { train: t.trainTasks, eval: t.evalTasks };
      },
    };
  }
  const path = t.set;
  const envConfig = taskEnvConfig(t.env, t.envConfig, path);
  const spec = {
    id: `jsonl-${basename(path)
      .replace(/\.jsonl$/, '')
      .slice(0, 100)}`,
    name: path,
    env: t.env ?? null,
    ...(envConfig ? { envConfig } : {}),
    ...common,
  };
  return {
    spec,
    async load(rollouts) {
      const text = readFileSync(path, 'utf8');
      const all = parseTaskJsonl(text, path);
      const train = all.filter((x) => x.split === 'train');
      const heldOut = all.filter((x) => x.split === 'eval').slice(0, t.evalTasks);
      const keep = new Set([...train, ...heldOut].map((x) => x.id));
      // The file's own lines, those of the tasks this run uses (the train split and the first evalTasks held-out tasks).
      const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '' && keep.has((JSON.parse(l) as { id: string }).id));
      await rollouts.loadJsonl(spec, `${lines.join('\n')}\n`, path);
      return { train: train.length, eval: heldOut.length };
    },
  };
}

/**
 * A task JSONL's environment config as the run loads it: repo-fix's relative snapshot paths are
 * relative to the file's directory unless envConfig.root says otherwise.
 */
export function taskEnvConfig(env: string | undefined, envConfig: Record<string, unknown> | undefined, file: string) {
  return env === 'repo-fix' && envConfig?.root === undefined ? { ...envConfig, root: dirname(resolve(file)) } : envConfig;
}

/** The served model name: the run's servedModelName, else 'anvil-tiny' for the tiny model or the model directory's name. */
export function servedModelName(cfg: RunConfig): string {
  if (cfg.servedModelName) return cfg.servedModelName;
  return cfg.model === 'tiny' ? 'anvil-tiny' : basename(resolve(cfg.model)).slice(0, 128) || 'model';
}
