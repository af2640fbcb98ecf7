import { spawn, type StdioOptions } from 'node:child_process';
import { constants } from 'node:os';
import type { Readable } from 'node:stream';
import type { ResolvedSpec } from '../spec';
import type { SandboxEndReason, SandboxLimitName, SandboxResult } from '../types';
import { OutputCapture } from './output-capture';
import { applyReportLine, emptyReport, lineReader, type SupervisorReport } from './supervisor-protocol';
import type { WallClock } from './wall-clock';

/** How to start a sandbox's supervisor, and how it is stopped. */
export interface Launch {
  backend: string;
  file: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  cwd: string;
  /**
   * The host uid and gid to run as (the host is root): set in the forked child before exec, with
   * its supplementary groups cleared, so no setuid helper (another exec per run) is needed.
   */
  ids?: { uid: number; gid: number };
  /** stdin: a pipe for text, an open fd for a file, or nothing. */
  stdin: { text: string } | { fd: number } | null;
  /**
   * 'pid-namespace': the supervisor is PID 1 of a namespace whose host pid bwrap reports on fd 4
   * (SIGTERM it to stop gracefully, SIGKILL it and bwrap to end everything).
   * 'subreaper': the supervisor is the spawned process itself (SIGTERM, then SIGUSR1 to kill
   * everything it started; its process group is the last resort).
   */
  mode: 'pid-namespace' | 'subreaper';
  /** How long to wait for the pipes to close once the supervisor is gone, before giving up on them. */
  drainMs?: number;
}

export interface RelayCounters {
  forwarded: number;
  refused: number;
  refusedRequests: string[];
}

const signalName = (n: number | null): string | null =>
  n === null ? null : (Object.entries(constants.signals).find(([, v]) => v === n)?.[0] ?? `SIG${n}`);

const kill = (pid: number | null | undefined, sig: NodeJS.Signals | number) => {
  if (!pid) return;
  try {
    process.kill(pid, sig);
  } catch {
    /* gone */
  }
};

/**
 * Runs one supervised sandbox to its end: the caps on its output, the wall clock (already
 * running: it covers the caller's preparation), the abort signal, the stop sequence (SIGTERM to
 * everything inside, SIGKILL after the grace), and the result with its reason.
 */
export function superviseRun(launch: Launch, spec: ResolvedSpec, clock: WallClock, relay: RelayCounters): Promise<SandboxResult> {
  const { limits } = spec;
  const out = new OutputCapture(limits.stdoutBytes);
  const err = new OutputCapture(limits.stderrBytes);
  const report = emptyReport();
  let stopReason: { reason: SandboxEndReason; limit: SandboxLimitName | null } | null = null;
  let supervisorPid: number | null = null;
  let stopping = false;
  let exited = false;
  let hardTimer: NodeJS.Timeout | undefined;
  let lastResortTimer: NodeJS.Timeout | undefined;

  const stdio: StdioOptions = [
    launch.stdin === null ? 'ignore' : 'fd' in launch.stdin ? launch.stdin.fd : 'pipe',
    'pipe',
    'pipe',
    'pipe', // fd 3: the supervisor's reports
    ...(launch.mode === 'pid-namespace' ? (['pipe'] as const) : []), // fd 4: bwrap's JSON (child-pid)
  ];
  const ids = launch.ids ? { uid: launch.ids.uid, gid: launch.ids.gid } : {};
  const child = spawn(launch.file, launch.args, { env: launch.env, cwd: launch.cwd, detached: true, stdio, ...ids });
  const outerPid = child.pid ?? null;
  if (launch.mode === 'subreaper') supervisorPid = outerPid;

  const hardKill = () => {
    if (launch.mode === 'pid-namespace') {
      // The namespace's PID 1 dying takes every process inside with it; bwrap may not have started it yet.
      kill(supervisorPid, 'SIGKILL');
      kill(outerPid, 'SIGKILL');
    } else {
      kill(supervisorPid, 'SIGUSR1');
      lastResortTimer = setTimeout(() => kill(outerPid ? -outerPid : null, 'SIGKILL'), 2000);
    }
  };
  const stop = (reason: SandboxEndReason, limit: SandboxLimitName | null = null) => {
    if (stopping || exited) return; // once it exited by itself, a late clock changes nothing
    stopping = true;
    stopReason = { reason, limit };
    if (supervisorPid === null) return hardKill(); // still setting up: nothing there to be graceful to
    kill(supervisorPid, 'SIGTERM');
    hardTimer = setTimeout(hardKill, limits.killGraceMs);
  };
  clock.onEnd((why) => stop(why));

  const count = (cap: OutputCapture) => (d: Buffer) => {
    cap.push(d);
    if (limits.outputBytes !== undefined && out.total + err.total > limits.outputBytes) stop('limit', 'output');
  };
  (child.stdio[1] as Readable).on('data', count(out));
  (child.stdio[2] as Readable).on('data', count(err));
  const info = child.stdio[3] as Readable;
  info.on(
    'data',
    lineReader((line) => applyReportLine(report, line, clock.elapsed())),
  );
  if (launch.mode === 'pid-namespace') {
    let json = '';
    (child.stdio[4] as Readable).on('data', (d: Buffer) => {
      json += d.toString('utf8');
      const m = /"child-pid"\s*:\s*(\d+)/.exec(json);
      if (m && supervisorPid === null) {
        supervisorPid = Number(m[1]);
        // The clock ran out while bwrap was setting up: it was killed; make sure its child is too.
        if (stopping) hardKill();
      }
    });
  }
  if (launch.stdin && 'text' in launch.stdin && child.stdin) {
    child.stdin.on('error', () => undefined); // a program that never reads its stdin closes it early
    child.stdin.end(launch.stdin.text);
  }

  return new Promise<SandboxResult>((resolve) => {
    let spawnError: string | null = null;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      clearTimeout(hardTimer);
      clearTimeout(lastResortTimer);
      clock.dispose();
      for (const s of child.stdio) (s as Readable | null)?.destroy();
      resolve(resultOf({ launch, limits, report, stopReason, spawnError, exit, out, err, clock, relay }));
    };
    child.on('error', (e) => {
      spawnError = e.message;
      finish();
    });
    child.on('exit', (code, signal) => {
      exit = { code, signal };
      // The supervisor is gone (bwrap only exits after it): its pid may be reused, never signal it again.
      clearTimeout(hardTimer);
      clearTimeout(lastResortTimer);
      supervisorPid = null;
      exited = true;
      // Normally the pipes close with the last process inside; one that escaped (a none-mode
      // program that killed its supervisor) may hold them: its group is killed, and we stop waiting.
      if (launch.mode === 'subreaper') kill(outerPid ? -outerPid : null, 'SIGKILL');
      setTimeout(finish, launch.drainMs ?? 2000).unref();
    });
    child.on('close', finish);
  });
}

interface ResultInputs {
  launch: Launch;
  limits: ResolvedSpec['limits'];
  report: SupervisorReport;
  stopReason: { reason: SandboxEndReason; limit: SandboxLimitName | null } | null;
  spawnError: string | null;
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
  out: OutputCapture;
  err: OutputCapture;
  clock: WallClock;
  relay: RelayCounters;
}

function resultOf(x: ResultInputs): SandboxResult {
  const { report, limits } = x;
  const end = report.commandEnd;
  let reason: SandboxEndReason;
  let limit: SandboxLimitName | null = null;
  let detail = '';
  const started = report.commandStartMs !== null;
  if (x.stopReason) {
    ({ reason, limit } = x.stopReason);
    if (reason === 'timeout')
      detail = started
        ? `the wall clock (${limits.wallMs} ms) ran out`
        : `the wall clock (${limits.wallMs} ms) ran out before the command started (${report.setupStarted ? 'in the setup command' : "in the sandbox's setup"})`;
    else if (reason === 'aborted') detail = started ? 'aborted by the caller' : 'aborted by the caller before the command started';
    else detail = `more than ${limits.outputBytes} bytes of output`;
  } else if (x.spawnError) {
    reason = 'setup-failed';
    detail = `the sandbox could not be started: ${x.spawnError}`;
  } else if (!started || report.error) {
    // The supervisor reports an error only for what failed before the program ran (exec, rlimits, listen).
    reason = 'setup-failed';
    detail = setupFailure(x);
  } else if (
    end?.signal === constants.signals.SIGXCPU ||
    (end?.signal === constants.signals.SIGKILL && limits.cpuSeconds && end.cpuSeconds >= limits.cpuSeconds)
  ) {
    reason = 'limit';
    limit = 'cpu';
    detail = `more than ${limits.cpuSeconds} CPU seconds`;
  } else if (end?.signal === constants.signals.SIGXFSZ) {
    reason = 'limit';
    limit = 'file-size';
    detail = `a file larger than ${limits.fileSizeBytes} bytes`;
  } else {
    reason = 'exit';
  }
  // The command's own status when the supervisor saw it end; else (the program killed its
  // supervisor) what the outermost process says.
  const fallback = reason === 'exit' && !end;
  const exitCode = end ? end.exitCode : fallback ? (x.exit?.code ?? null) : null;
  const signal = end ? signalName(end.signal) : fallback ? (x.exit?.signal ?? null) : null;
  return {
    backend: x.launch.backend,
    reason,
    limit,
    detail,
    exitCode,
    signal,
    stdout: x.out.text(),
    stdoutTail: x.out.tail(),
    stderr: x.err.text(),
    stderrTail: x.err.tail(),
    stdoutBytes: x.out.total,
    stderrBytes: x.err.total,
    wallMs: x.clock.elapsed(),
    startMs: report.commandStartMs,
    cpuSeconds: end?.cpuSeconds ?? null,
    relay: { forwarded: x.relay.forwarded, refused: x.relay.refused, refusedRequests: [...x.relay.refusedRequests] },
  };
}

function setupFailure(x: ResultInputs): string {
  const { report } = x;
  const lastLine =
    x.err
      .tail()
      .trim()
      .split('\n')
      .filter((l) => l.trim() !== '')
      .at(-1) ?? '';
  if (report.error) {
    const what =
      report.error.phase === 'command'
        ? 'cannot start the command'
        : report.error.phase === 'setup'
          ? 'cannot start the setup command'
          : `the sandbox's ${report.error.phase} failed`;
    return `${what}: ${report.error.message}`;
  }
  if (report.setupEnd) {
    const how =
      report.setupEnd.signal !== null ? `was killed by ${signalName(report.setupEnd.signal)}` : `exited with ${report.setupEnd.exitCode}`;
    return `the setup command ${how}${lastLine ? ` (${lastLine})` : ''}`;
  }
  const how = x.exit?.signal ? `was killed by ${x.exit.signal}` : `exited with ${x.exit?.code}`;
  return `the sandbox could not be started: ${x.launch.file} ${how}${lastLine ? ` (${lastLine})` : ''}`;
}

/** The result of a run that ended before any process was started (the clock, the caller, or the host's preparation). */
export function resultWithoutProcess(
  backend: string,
  reason: 'timeout' | 'aborted' | 'setup-failed',
  clock: WallClock,
  limits: ResolvedSpec['limits'],
  relay: RelayCounters,
  detail: string,
): SandboxResult {
  const why =
    reason === 'timeout'
      ? `the wall clock (${limits.wallMs} ms) ran out before the command started (in the sandbox's setup)`
      : reason === 'aborted'
        ? 'aborted by the caller before the command started'
        : detail;
  return {
    backend,
    reason,
    limit: null,
    detail: why,
    exitCode: null,
    signal: null,
    stdout: '',
    stdoutTail: '',
    stderr: '',
    stderrTail: '',
    stdoutBytes: 0,
    stderrBytes: 0,
    wallMs: clock.elapsed(),
    startMs: null,
    cpuSeconds: null,
    relay: { ...relay, refusedRequests: [...relay.refusedRequests] },
  };
}
