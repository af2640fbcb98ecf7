import type { SandboxLimits } from '@anvil/sandbox';
import type { SandboxLimitsSpec } from '../tasks/task-set';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

/**
 * The limits of a sandbox whose task set names none. They are rlimits, so each is per process
 * (whole-sandbox cgroup limits need a delegated cgroup v2, which the sandbox library does not use
 * yet), and they are set to stop a runaway without getting in the way of a real coding agent:
 *  - memoryBytes 4 GiB of private writable memory per process (RLIMIT_DATA): Node's and Python's
 *    heaps, a compiler, a test runner fit; an allocation loop stops long before the machine swaps.
 *  - processes 1024 at once, threads included, for the whole sandbox (its own uid): an agent CLI
 *    with a worker pool per core and the test suite it runs fit; a fork bomb stops there, within
 *    its own count, so it cannot take another sandbox's.
 *  - fileSizeBytes 1 GiB: a checkout's build output fits; one file that fills the disk does not.
 *  - tmpfsBytes 512 MiB each for the private /tmp and $HOME (memory-backed).
 * cpuSeconds defaults to the rollout's timeout: one core's worth for a process's whole life, so a
 * process spinning threads on every core is stopped before the wall clock would stop it.
 */
export const SANDBOX_LIMIT_DEFAULTS = {
  memoryBytes: 4 * GiB,
  processes: 1024,
  fileSizeBytes: GiB,
  tmpfsBytes: 512 * MiB,
} as const;

/**
 * A run's limits: the task set's overrides, else the defaults; `wallMs` the time left of the
 * rollout's timeout (it covers the sandbox's own setup and the setup command), `timeoutMs` the
 * whole timeout (the CPU default), `outputCapBytes` what is kept of stdout and of stderr.
 */
export function sandboxLimitsOf(spec: SandboxLimitsSpec, t: { wallMs: number; timeoutMs: number; outputCapBytes: number }): SandboxLimits {
  return {
    wallMs: Math.max(1, Math.round(t.wallMs)),
    cpuSeconds: spec.cpuSeconds ?? Math.max(1, Math.ceil(t.timeoutMs / 1000)),
    memoryBytes: spec.memoryBytes ?? SANDBOX_LIMIT_DEFAULTS.memoryBytes,
    processes: spec.processes ?? SANDBOX_LIMIT_DEFAULTS.processes,
    fileSizeBytes: spec.fileSizeBytes ?? SANDBOX_LIMIT_DEFAULTS.fileSizeBytes,
    tmpfsBytes: spec.tmpfsBytes ?? SANDBOX_LIMIT_DEFAULTS.tmpfsBytes,
    stdoutBytes: t.outputCapBytes,
    stderrBytes: t.outputCapBytes,
    ...(spec.outputBytes !== undefined ? { outputBytes: spec.outputBytes } : {}),
  };
}
