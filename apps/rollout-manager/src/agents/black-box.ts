import { cp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  SandboxBreachError,
  SandboxSpecError,
  type SandboxBackend,
  type SandboxEndReason,
  type SandboxLimitName,
  type SandboxResult,
  type SandboxSession,
  type SandboxSpec,
} from '@anvil/sandbox';
import type { ChatMessage, EnvTask } from '../environments/types';
import { sandboxLimitsOf } from '../sandbox/limits';
import { cwdInside, pathInside } from '../sandbox/mounts';
import { answerOf, readAnswerFile } from './answer';
import type { BlackBoxLaunch } from './black-box-launch';
import { newWorkspace } from './workspaces';

/** How an agent's sandbox ended, as the sandbox library tells it (kept in the rollout's outcome). */
export interface BlackBoxSandbox {
  backend: string;
  reason: SandboxEndReason;
  limit: SandboxLimitName | null;
  /** A sentence for every end but a plain exit: which limit, why the setup failed, where the clock ran out. */
  detail: string;
  /** From the start of the run until the agent's command started (workspace, sandbox and setup command); null if it never did. */
  startMs: number | null;
  /** Requests the session relay forwarded and refused (a local sandbox's only way out). */
  relay: { forwarded: number; refused: number; refusedRequests: string[] };
}

export interface BlackBoxResult {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  aborted: boolean;
  stdout: string;
  stderr: string;
  /** Bytes the agent wrote, including what the cap dropped. */
  stdoutBytes: number;
  stderrBytes: number;
  answerFile: string | null;
  finalAnswer: string | null;
  /** A transcript the agent left in its answer file ({"messages": [...]}) , if any. */
  messages: ChatMessage[] | null;
  wallMs: number;
  sandbox: BlackBoxSandbox;
  /** The workspace the agent left (for workspace verifiers); call cleanup() once verified. */
  workspace: string;
  cleanup(): Promise<void>;
}

// The rule of which agent.env names pass (agent-env.ts), where it has always been imported from.
export { AgentSpecError, checkAgentEnv } from './agent-env';

/** What an environment that fills a black-box agent's workspace asks of its run (see BlackBoxRunOptions.prepare). */
export interface WorkspacePreparation {
  /** Where the agent starts: a directory in its workspace (a checkout), instead of its own cwd. */
  cwd?: string;
  /** Run first in its sandbox, on its clock, instead of the task's setup. */
  setup?: string[];
}

export interface BlackBoxRunOptions {
  /** The rollout's wall clock: from this call, the workspace, the sandbox's setup and the setup command included. */
  timeoutMs: number;
  signal?: AbortSignal;
  /** Names the run in the sandbox's log lines (the rollout id). */
  label: string;
  /** Fills the fresh workspace after the task's snapshot is copied in (an environment's checkout); a throw is a setup failure. */
  prepare?(workspace: string): Promise<WorkspacePreparation>;
}

/** The session's variables for an agent outside a sandbox: its own URL and key, under the names the sandbox's relay uses. */
function directSessionEnv(session: SandboxSession): Record<string, string> {
  return {
    OPENAI_BASE_URL: session.baseUrl,
    OPENAI_API_BASE: session.baseUrl,
    OPENAI_API_KEY: session.apiKey,
    ANTHROPIC_BASE_URL: session.baseUrl.replace(/\/v1\/?$/, ''),
    ANTHROPIC_API_KEY: session.apiKey,
  };
}

/**
 * Runs a black-box agent in a sandbox of its launch's kind, in a fresh workspace (a task's
 * snapshot copied in first), and reads what it answered. Its environment is exactly: its launch's
 * variables, PATH (the manager's entries the sandbox shows, unless the launch names one), LANG,
 * ANVIL_TASK_FILE / ANVIL_ANSWER_FILE / ANVIL_WORKSPACE (in the workspace, at the same path inside),
 * and its session: in a local sandbox the relay's address (http://127.0.0.1:8080/v1) and a
 * placeholder key, the relay adding the real one; unsandboxed ('none', for trusted agents) the
 * session's own URL and key, since a relay there would protect nothing (any process of the machine
 * could reach it). The task goes on stdin (JSON {id, messages, tools, prompt}) or stays in the task
 * file. Whatever the agent does ends in a result with the sandbox's reason, and nothing it started
 * survives the call; a sandbox that cannot be had or started is a result with reason
 * 'setup-failed' too.
 */
export async function runBlackBox(
  launch: BlackBoxLaunch,
  task: EnvTask,
  session: SandboxSession,
  backend: () => Promise<SandboxBackend>,
  opts: BlackBoxRunOptions,
): Promise<BlackBoxResult> {
  const t0 = performance.now();
  const workspace = await newWorkspace('agent');
  const cleanup = () => rm(workspace, { recursive: true, force: true }).catch(() => undefined);
  const taskFile = join(workspace, 'task.json');
  const answerPath = join(workspace, 'answer');
  const prompt = [...task.messages].reverse().find((m) => m.role === 'user')?.content ?? '';
  const taskJson = JSON.stringify({ id: task.id, messages: task.messages, tools: task.tools, prompt });
  const local = launch.sandbox === 'local';
  const mounts = [workspace, ...launch.readOnlyPaths];
  let result: SandboxResult;
  try {
    if (launch.workspaceFrom) await cp(launch.workspaceFrom, workspace, { recursive: true, force: true, preserveTimestamps: true });
    const prepared = (await opts.prepare?.(workspace)) ?? {};
    await writeFile(taskFile, taskJson);
    const setup = prepared.setup ?? launch.setup;
    const spec: SandboxSpec = {
      label: opts.label,
      argv: launch.argv.map((a) =>
        a.replaceAll('{taskFile}', taskFile).replaceAll('{answerFile}', answerPath).replaceAll('{prompt}', prompt),
      ),
      ...(setup ? { setup } : {}),
      workspace,
      cwd: prepared.cwd ?? (local ? cwdInside(launch.cwd, mounts, workspace) : launch.cwd),
      env: {
        ...launch.env,
        PATH: launch.env.PATH ?? (local ? pathInside(process.env.PATH, mounts) : (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin')),
        LANG: launch.env.LANG ?? process.env.LANG ?? 'C.UTF-8',
        ANVIL_TASK_FILE: taskFile,
        ANVIL_ANSWER_FILE: answerPath,
        ANVIL_WORKSPACE: workspace,
        ...(local ? {} : directSessionEnv(session)),
      },
      ...(launch.taskInput === 'stdin' ? { stdin: { text: taskJson } } : {}),
      ...(local ? { session, readOnlyPaths: launch.readOnlyPaths } : {}),
      limits: sandboxLimitsOf(launch.limits, {
        wallMs: opts.timeoutMs - (performance.now() - t0),
        timeoutMs: opts.timeoutMs,
        outputCapBytes: launch.outputCapBytes,
      }),
    };
    result = await (await backend()).run(spec, opts.signal);
  } catch (err) {
    // A broken promise of the sandbox itself (a process outlived it) is no agent's result: loud.
    if (err instanceof SandboxBreachError) {
      await cleanup();
      throw err;
    }
    result = notStarted(launch, err, performance.now() - t0);
  }
  const answerText = await readAnswerFile(answerPath, launch.outputCapBytes);
  const { finalAnswer, messages } = answerOf(answerText, result.stdoutTail);
  return {
    workspace,
    cleanup,
    exitCode: result.exitCode,
    signal: result.signal,
    timedOut: result.reason === 'timeout',
    aborted: result.reason === 'aborted',
    stdout: result.stdout,
    stderr: result.stderr,
    stdoutBytes: result.stdoutBytes,
    stderrBytes: result.stderrBytes,
    answerFile: answerText,
    finalAnswer,
    messages,
    wallMs: performance.now() - t0,
    sandbox: {
      backend: result.backend,
      reason: result.reason,
      limit: result.limit,
      detail: result.detail,
      startMs: result.startMs,
      relay: result.relay,
    },
  };
}

/** The result of a run whose sandbox could not be had or started (no backend on this machine, a snapshot not copied, a spec refused). */
function notStarted(launch: BlackBoxLaunch, err: unknown, wallMs: number): SandboxResult {
  const why = err instanceof SandboxSpecError ? err.problems.join('; ') : (err as Error).message;
  return {
    backend: launch.sandbox,
    reason: 'setup-failed',
    limit: null,
    detail: `the agent could not be started: ${why}`,
    exitCode: null,
    signal: null,
    stdout: '',
    stdoutTail: '',
    stderr: '',
    stderrTail: '',
    stdoutBytes: 0,
    stderrBytes: 0,
    wallMs,
    startMs: null,
    cpuSeconds: null,
    relay: { forwarded: 0, refused: 0, refusedRequests: [] },
  };
}
