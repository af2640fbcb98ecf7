import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChatMessage, EnvTask } from '../environments/types';
import type { AgentSpec } from '../tasks/task-set';

type BlackBoxSpec = Extract<AgentSpec, { kind: 'black-box' }>;

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
  pid: number | null;
  /** The workspace the agent left (for workspace verifiers); call cleanup() once verified. */
  workspace: string;
  cleanup(): Promise<void>;
}

// The rule of which agent.env names pass (agent-env.ts), where it has always been imported from.
export { AgentSpecError, checkAgentEnv } from './agent-env';

/** Keeps the first `cap` bytes, and the last few KiB apart (the answer is usually the last line). */
function capped(cap: number, tailCap = Math.min(cap, 64 * 1024)) {
  const chunks: Buffer[] = [];
  let kept = 0;
  let total = 0;
  let tail = Buffer.alloc(0);
  return {
    push(d: Buffer) {
      total += d.length;
      tail = tail.length + d.length <= tailCap ? Buffer.concat([tail, d]) : Buffer.concat([tail, d]).subarray(-tailCap);
      if (kept < cap) {
        const part = d.subarray(0, cap - kept);
        chunks.push(part);
        kept += part.length;
      }
    },
    text: () => Buffer.concat(chunks).toString('utf8'),
    tail: () => tail.toString('utf8'),
    get total() {
      return total;
    },
  };
}

function killGroup(pid: number | undefined, sig: NodeJS.Signals): void {
  if (!pid) return;
  try {
    process.kill(-pid, sig);
  } catch {
    /* the group is gone */
  }
}

/** Live (not zombie) members of process group `pgid`, from /proc (Linux); elsewhere, whether the group answers signal 0. */
export function groupMembers(pgid: number): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    try {
      process.kill(-pgid, 0);
      return [pgid];
    } catch {
      return [];
    }
  }
  const out: number[] = [];
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // fields[0] = state, fields[2] = pgrp
      if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') out.push(Number(e));
    } catch {
      /* exited meanwhile */
    }
  }
  return out;
}

/**
 * Kills a process group a previous manager process left behind, if it still is an agent of
 * ours (its leader's environment has ANVIL_TASK_FILE: a recycled pid is left alone).
 */
export function killLeftoverAgent(pgid: number): boolean {
  try {
    const environ = readFileSync(`/proc/${pgid}/environ`, 'utf8');
    if (!environ.split('\0').some((kv) => kv.startsWith('ANVIL_TASK_FILE='))) return false;
  } catch {
    // The leader is gone; its group may still hold children.
    if (!groupAlive(pgid)) return false;
  }
  killGroup(pgid, 'SIGKILL');
  return true;
}

/** Whether any process of group `pid` is still running (zombies awaiting a reaper do not count). */
export function groupAlive(pid: number): boolean {
  return groupMembers(pid).length > 0;
}

function answerOf(answerText: string | null, stdout: string): { finalAnswer: string | null; messages: ChatMessage[] | null } {
  if (answerText !== null) {
    try {
      const v = JSON.parse(answerText) as { finalAnswer?: unknown; messages?: unknown };
      if (v && typeof v === 'object' && !Array.isArray(v)) {
        const messages = Array.isArray(v.messages) ? (v.messages as ChatMessage[]) : null;
        let finalAnswer = typeof v.finalAnswer === 'string' ? v.finalAnswer : null;
        if (finalAnswer === null && messages) {
          const last = [...messages].reverse().find((m) => m.role === 'assistant');
          finalAnswer = last && !last.tool_calls?.length ? last.content : null;
        }
        return { finalAnswer, messages };
      }
    } catch {
      /* plain text answer */
    }
    return { finalAnswer: answerText.trim(), messages: null };
  }
  const lines = stdout
    .trim()
    .split('\n')
    .filter((l) => l.trim() !== '');
  const last = lines[lines.length - 1] ?? null;
  if (last === null) return { finalAnswer: null, messages: null };
  try {
    const v = JSON.parse(last) as { finalAnswer?: unknown };
    if (v && typeof v === 'object' && 'finalAnswer' in v)
      return { finalAnswer: v.finalAnswer === null || v.finalAnswer === undefined ? null : String(v.finalAnswer), messages: null };
  } catch {
    /* not JSON */
  }
  return { finalAnswer: last.trim(), messages: null };
}

/**
 * Runs a black-box agent: `command` as a child process in its own process group and a fresh
 * workspace, with OPENAI_BASE_URL / OPENAI_API_KEY for its own session and nothing else of the
 * manager's environment (PATH, LANG, HOME = the workspace, and the spec's checked extras). The
 * task goes on stdin (JSON: {id, messages, tools, prompt}) or in $ANVIL_TASK_FILE. stdout and
 * stderr are kept up to the cap. On timeout or abort the whole group gets SIGTERM, then SIGKILL
 * after `killGraceMs`; after a normal exit the group is killed too, so forked children never
 * outlive their rollout.
 */
export async function runBlackBox(
  spec: BlackBoxSpec,
  task: EnvTask,
  session: { baseUrl: string; apiKey: string },
  opts: { timeoutMs: number; signal?: AbortSignal; killGraceMs?: number; repoRoot?: string; onSpawn?: (pgid: number) => void },
): Promise<BlackBoxResult> {
  const workspace = await mkdtemp(join(tmpdir(), 'anvil-agent-'));
  const taskFile = join(workspace, 'task.json');
  const answerPath = join(workspace, 'answer');
  const prompt = [...task.messages].reverse().find((m) => m.role === 'user')?.content ?? '';
  const taskJson = JSON.stringify({ id: task.id, messages: task.messages, tools: task.tools, prompt });
  await writeFile(taskFile, taskJson);
  const argv = spec.command.map((a) =>
    a.replaceAll('{taskFile}', taskFile).replaceAll('{answerFile}', answerPath).replaceAll('{prompt}', prompt),
  );
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
    LANG: process.env.LANG ?? 'C.UTF-8',
    HOME: workspace,
    TMPDIR: workspace,
    ...spec.env,
    OPENAI_BASE_URL: session.baseUrl,
    OPENAI_API_KEY: session.apiKey,
    ANVIL_TASK_FILE: taskFile,
    ANVIL_ANSWER_FILE: answerPath,
    ANVIL_WORKSPACE: workspace,
  };
  const started = performance.now();
  const out = capped(spec.outputCapBytes);
  const err = capped(spec.outputCapBytes);
  let timedOut = false;
  let aborted = false;
  const result = await new Promise<{ code: number | null; sig: string | null; pid: number | null }>((resolve) => {
    const child = spawn(argv[0], argv.slice(1), {
      cwd: spec.cwd ?? opts.repoRoot ?? process.cwd(),
      env,
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const pid = child.pid;
    if (pid) opts.onSpawn?.(pid);
    let killTimer: NodeJS.Timeout | undefined;
    const stop = () => {
      killGroup(pid, 'SIGTERM');
      killTimer = setTimeout(() => killGroup(pid, 'SIGKILL'), opts.killGraceMs ?? 1000);
    };
    const timer = setTimeout(() => {
      timedOut = true;
      stop();
    }, opts.timeoutMs);
    const onAbort = () => {
      aborted = true;
      stop();
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.stdin.on('error', () => undefined);
    if (spec.taskInput === 'stdin') child.stdin.end(taskJson);
    else child.stdin.end();
    child.on('error', (e) => {
      err.push(Buffer.from(`spawn failed: ${e.message}\n`));
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      resolve({ code: null, sig: 'spawn-error', pid: pid ?? null });
    });
    // An agent that exits on its own takes its forked children along (they may hold its pipes open).
    child.on('exit', () => killGroup(pid, 'SIGKILL'));
    child.on('close', (code, sig) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      clearTimeout(killTimer);
      resolve({ code, sig, pid: pid ?? null });
    });
  });
  let answerText: string | null = null;
  try {
    answerText = (await readFile(answerPath, 'utf8')).slice(0, spec.outputCapBytes);
  } catch {
    /* no answer file */
  }
  const stdout = out.text();
  const { finalAnswer, messages } = answerOf(answerText, out.tail());
  return {
    workspace,
    cleanup: () => rm(workspace, { recursive: true, force: true }).catch(() => undefined),
    exitCode: result.code,
    signal: result.sig,
    timedOut,
    aborted,
    stdout,
    stderr: err.text(),
    stdoutBytes: out.total,
    stderrBytes: err.total,
    answerFile: answerText,
    finalAnswer,
    messages,
    wallMs: performance.now() - started,
    pid: result.pid,
  };
}
