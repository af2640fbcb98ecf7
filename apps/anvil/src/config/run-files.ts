/**
 * The files a run configuration names (a Hugging Face model directory, a task JSONL, an agent's
 * and a verifier's commands, a task environment), checked before anything starts with every
 * problem listed at once, together with the knobs; and whether this machine can start the
 * sandbox its agent and verifier commands run in. The built-in model ('tiny') and task set
 * ('chain-add') need no files.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { z } from 'zod';
import { LORA_TARGETS, LoraConfigError, normalizeLoraOptions, parseHfConfig, tinyConfig } from '@anvil/engine';
import { loadChatFormat } from '@anvil/tokenizer';
import { vocabularyMismatch } from '@anvil/gateway';
import {
  AgentSpecError,
  blackBoxAgentProblems,
  checkAgentEnv,
  commandVerifierProblems,
  localSandboxProblem,
  taskWorkspaceProblems,
  BUILTIN_ENVIRONMENTS,
  parseTaskJsonl,
  TaskFileError,
  type StoredTask,
  agentSpecSchema,
  verifierSpecSchema,
  type AgentSpec,
  type VerifierSpec,
  type Environment,
  BUILTIN_VERIFIERS,
} from '@anvil/rollout-manager';
import { taskEnvConfig } from '../run/task-set';
import { isKnownModelName, knownModelPlace } from './known-models';
import { BUILTIN_TASK_SETS, parseRunConfig, RunConfigError, runConfigInput, type RunConfig, type RunConfigSource } from './run-config';

/** A task line's problems listed per file, at most this many (the count of the rest follows). */
const MAX_LINE_PROBLEMS = 20;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Problems with a Hugging Face model directory the embedded job would serve and train (none: it can). */
export function checkModelDir(dir: string): string[] {
  if (!existsSync(dir) || !statSync(dir).isDirectory())
    return [`model: ${dir} is not a directory (give 'tiny' or a Hugging Face model directory)`];
  const problems: string[] = [];
  let vocab: number | null = null;
  try {
    const config = parseHfConfig(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')));
    vocab = config.vocabSize;
  } catch (e) {
    problems.push(`model: ${existsSync(join(dir, 'config.json')) ? (e as Error).message : `${dir}: no config.json`}`);
  }
  if (!existsSync(join(dir, 'model.safetensors')) && !existsSync(join(dir, 'model.safetensors.index.json')))
    problems.push(`model: ${dir}: neither model.safetensors nor model.safetensors.index.json`);
  try {
    const format = loadChatFormat(dir);
    const why = vocabularyMismatch(format.tokenizer.vocabSize, vocab);
    if (why) problems.push(`model: config.json vocab_size ${vocab} does not fit the tokenizer's ${format.tokenizer.vocabSize} ids: ${why}`);
  } catch (e) {
    problems.push(`model: tokenizer or chat template: ${(e as Error).message}`);
  }
  return problems;
}

/**
 * algorithm.lora against the starting model's shape (a rank must fit every targeted projection),
 * known from its config.json before anything starts; an unreadable one is checkModelDir's to report.
 */
export function checkLoraShape(cfg: RunConfig): string[] {
  const lora = cfg.algorithm.lora;
  if (!lora) return [];
  let shape;
  try {
    const dir = isKnownModelName(cfg.model) ? knownModelPlace(cfg.model, cfg.dataDir).dir : cfg.model;
    shape = cfg.model === 'tiny' ? tinyConfig() : parseHfConfig(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')));
  } catch {
    return [];
  }
  try {
    normalizeLoraOptions({ ...lora, targets: lora.targets ?? [...LORA_TARGETS] }, shape);
    return [];
  } catch (e) {
    if (!(e instanceof LoraConfigError)) throw e;
    return [`algorithm.lora: ${e.message.replace(/^LoRA: /, '')} (the model's projections)`];
  }
}

/** The parts of a run's task section the file checks need (taken from the raw config when a knob elsewhere is refused). */
export interface TaskFields {
  agent?: AgentSpec;
  verifier?: VerifierSpec;
  env?: string;
  envConfig?: Record<string, unknown>;
}

/** The verifier a task is scored by: its own, the run's task.verifier, or its environment's. */
function verifierOf(t: StoredTask, f: TaskFields): VerifierSpec | undefined {
  return t.verifier ?? f.verifier ?? (f.env ? { kind: 'env' } : undefined);
}

/** The environment a JSONL's tasks are checked against, configured as the run will load it (null: none, or its config is refused, reported apart). */
function taskEnvironment(path: string, f: TaskFields): Environment | null {
  const factory = f.env === undefined ? undefined : BUILTIN_ENVIRONMENTS[f.env];
  try {
    return factory ? factory(taskEnvConfig(f.env, f.envConfig, path) ?? {}) : null;
  } catch {
    return null;
  }
}

/** Problems with a task JSONL under a run configuration (its lines, and a verifier for every task). */
export function checkTaskFile(path: string, f: TaskFields): string[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    return [
      `task.set: ${path}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? `no such file (give ${BUILTIN_TASK_SETS.map((b) => `'${b}'`).join(', ')} or a task JSONL)` : (e as Error).message}`,
    ];
  }
  let tasks: StoredTask[];
  try {
    tasks = parseTaskJsonl(text, path);
  } catch (e) {
    if (!(e instanceof TaskFileError)) throw e;
    const shown = e.problems.slice(0, MAX_LINE_PROBLEMS).map((p) => `task.set: ${path} line ${p.line}: ${p.reason}`);
    return e.problems.length > MAX_LINE_PROBLEMS
      ? [...shown, `task.set: ${path}: ${e.problems.length - MAX_LINE_PROBLEMS} more bad line(s)`]
      : shown;
  }
  const problems: string[] = [];
  if (!tasks.some((t) => t.split === 'train')) problems.push(`task.set: ${path} has no train task (every line says split eval)`);
  const unscored = tasks.filter((t) => verifierOf(t, f) === undefined).map((t) => t.id);
  if (unscored.length)
    problems.push(
      `task.set: ${unscored.length} task(s) have no verifier (${unscored.slice(0, 5).join(', ')}${unscored.length > 5 ? ', ...' : ''}): give task.verifier, a verifier per line, or task.env`,
    );
  const agent = f.agent ?? { kind: 'white-box' as const, name: 'anvil-loop' };
  const environment = taskEnvironment(path, f);
  const machine = tasks.flatMap((t) => [
    ...taskWorkspaceProblems(t, agent, process.cwd()).map((p) => `task.set: ${p}`),
    // What the environment knows a task needs (repo-fix: its snapshot, tarball, repository and ref).
    ...(environment?.checkTask?.({ ...t, env: f.env ?? null }) ?? []).map((p) => `task.set: ${p}`),
    ...(t.verifier ? commandVerifierProblems(t.verifier, process.cwd(), `task.set: task ${t.id}: verifier`) : []),
  ]);
  problems.push(...machine.slice(0, MAX_LINE_PROBLEMS));
  if (machine.length > MAX_LINE_PROBLEMS) problems.push(`task.set: ${path}: ${machine.length - MAX_LINE_PROBLEMS} more such problem(s)`);
  const sandboxed = tasks.find((t) => t.verifier?.kind === 'command' && t.verifier.sandbox === 'local');
  if (sandboxed) problems.push(...sandboxProblem(`task.set: task ${sandboxed.id}: verifier.sandbox`, `its verifier command`));
  for (const t of tasks) {
    const v = verifierOf(t, f);
    if (v?.kind === 'function' && !(v.name in BUILTIN_VERIFIERS)) {
      problems.push(
        `task.set: task ${t.id}: verifier.name ${JSON.stringify(v.name)} is not a built-in verifier function (${Object.keys(BUILTIN_VERIFIERS).join(', ')})`,
      );
      break;
    }
    if (v?.kind === 'function' && (v.name === 'final-answer' || v.name === 'number') && t.data.answer === undefined) {
      problems.push(`task.set: task ${t.id}: the ${v.name} verifier needs data.answer`);
      break;
    }
    if (v?.kind === 'env' && t.verifier && !f.env) {
      problems.push(`task.set: task ${t.id}: verifier kind env needs task.env`);
      break;
    }
  }
  return problems;
}

/**
 * Every problem of a run configuration at once: its knobs (schema and ranges), then its files —
 * the model directory, the task JSONL, the agent's and verifiers' commands, the task environment.
 * Files are checked even when a knob is refused, as far as their own fields allow.
 */
export function runConfigProblems(raw: Record<string, unknown>): { cfg: RunConfig | null; problems: string[] } {
  const problems: string[] = [];
  let cfg: RunConfig | null = null;
  try {
    cfg = parseRunConfig(raw);
  } catch (e) {
    if (!(e instanceof RunConfigError)) throw e;
    problems.push(...e.issues);
  }
  const rawTask = isObject(raw.task) ? raw.task : {};
  const part = <T>(schema: z.ZodType<T>, v: unknown): T | undefined => {
    const r = schema.safeParse(v);
    return r.success ? r.data : undefined;
  };
  const f: TaskFields = cfg
    ? cfg.task
    : {
        agent: part(agentSpecSchema, rawTask.agent),
        verifier: part(verifierSpecSchema, rawTask.verifier),
        env: typeof rawTask.env === 'string' ? rawTask.env : undefined,
        envConfig: isObject(rawTask.envConfig) ? rawTask.envConfig : undefined,
      };
  const model = raw.model;
  if (typeof model === 'string' && isKnownModelName(model)) {
    // Fetched on first use; once there it is checked like any model directory.
    const place = knownModelPlace(model, typeof raw.dataDir === 'string' ? raw.dataDir : '.anvil');
    if (place.fetched) problems.push(...checkModelDir(place.dir));
  } else if (typeof model === 'string' && model !== 'tiny' && model !== '') problems.push(...checkModelDir(model));
  if (cfg) problems.push(...checkLoraShape(cfg));
  if (typeof rawTask.set === 'string' && !BUILTIN_TASK_SETS.includes(rawTask.set) && rawTask.set !== '')
    problems.push(...checkTaskFile(rawTask.set, f));
  if (f.agent?.kind === 'black-box') {
    try {
      checkAgentEnv(f.agent.env);
    } catch (e) {
      if (!(e instanceof AgentSpecError)) throw e;
      problems.push(`task.${e.message}`);
    }
    problems.push(...blackBoxAgentProblems(f.agent, process.cwd(), 'task.agent'));
    if (f.agent.sandbox === 'local') problems.push(...sandboxProblem('task.agent.sandbox', `agent ${f.agent.name ?? f.agent.preset}`));
  }
  if (f.verifier?.kind === 'command') {
    problems.push(...commandVerifierProblems(f.verifier, process.cwd(), 'task.verifier'));
    if (f.verifier.sandbox === 'local') problems.push(...sandboxProblem('task.verifier.sandbox', 'the verifier command'));
  }
  if (f.verifier?.kind === 'function' && !(f.verifier.name in BUILTIN_VERIFIERS))
    problems.push(
      `task.verifier.name: ${JSON.stringify(f.verifier.name)} is not a built-in verifier function (${Object.keys(BUILTIN_VERIFIERS).join(', ')})`,
    );
  if (f.env !== undefined) {
    const factory = BUILTIN_ENVIRONMENTS[f.env];
    if (!factory)
      problems.push(`task.env: unknown environment ${JSON.stringify(f.env)} (known: ${Object.keys(BUILTIN_ENVIRONMENTS).join(', ')})`);
    else {
      try {
        factory(f.envConfig ?? {});
      } catch (e) {
        problems.push(`task.envConfig: ${(e as Error).message}`);
      }
    }
  }
  return { cfg, problems: [...new Set(problems)] };
}

/**
 * The local sandbox (every black-box agent's and verifier command's default) probed once: a
 * machine whose kernel forbids it is told so here, before anything starts, never by a run that
 * falls back to running the agent unsandboxed.
 */
function sandboxProblem(field: string, who: string): string[] {
  const why = localSandboxProblem();
  return why
    ? [`${field}: ${who} cannot run in the local sandbox (the default; "none" runs it unsandboxed, for trusted programs only): ${why}`]
    : [];
}

/** A run configuration whose knobs and files all check out (cfg), or every problem at once. */
export function checkRunConfig(src: RunConfigSource): { cfg: RunConfig | null; problems: string[] } {
  try {
    return runConfigProblems(runConfigInput(src));
  } catch (e) {
    if (!(e instanceof RunConfigError)) throw e;
    return { cfg: null, problems: e.issues.length ? e.issues : [e.message] };
  }
}
