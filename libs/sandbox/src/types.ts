/**
 * The sandbox interface: one `run(spec, signal)` per program, whatever isolates it. The contract
 * every backend keeps (README.md, "What a backend must guarantee") is what callers rely on; the
 * backends differ only in how much of it the machine lets them enforce.
 */

/** A gateway session the program may reach, and nothing else of the gateway. */
export interface SandboxSession {
  /** The session's own base URL, as the admin API returns it: http://host:port/sessions/<key>/v1. */
  baseUrl: string;
  /** The session's key; the relay puts it on every request (it never enters the sandbox). */
  apiKey: string;
}

export interface SandboxLimits {
  /** Wall clock from the call to run(), the sandbox's setup and the setup command included. */
  wallMs: number;
  /** Between SIGTERM and SIGKILL when the wall clock runs out or the run is aborted (default 1000). */
  killGraceMs?: number;
  /** CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL a second later). */
  cpuSeconds?: number;
  /** Writable private memory per process (RLIMIT_DATA; README.md says why not RLIMIT_AS). */
  memoryBytes?: number;
  /** Processes and threads the program may have at once (RLIMIT_NPROC, counted on the sandbox's own uid). */
  processes?: number;
  /** Largest file the program may write (RLIMIT_FSIZE: SIGXFSZ). */
  fileSizeBytes?: number;
  /** Size of each private tmpfs (/tmp and $HOME) of the local backend (default 512 MiB). */
  tmpfsBytes?: number;
  /** stdout bytes kept in the result (default 1 MiB); the rest is counted and dropped. */
  stdoutBytes?: number;
  /** stderr bytes kept in the result (default 1 MiB). */
  stderrBytes?: number;
  /** stdout + stderr bytes after which the program is stopped (reason 'limit', limit 'output'); default none. */
  outputBytes?: number;
}

export type SandboxStdin = { text: string } | { file: string };

export interface SandboxSpec {
  /** The command and its arguments; argv[0] is looked up on the sandbox's PATH. */
  argv: string[];
  /**
   * Run first, in the same sandbox and under the same wall clock and limits (installing
   * dependencies, building a checkout). A non-zero exit ends the run as 'setup-failed'.
   */
  setup?: string[];
  /**
   * A host directory, writable by the program and at the same absolute path inside the sandbox,
   * so paths into it mean the same thing on both sides. Everything else is read-only or absent.
   */
  workspace: string;
  /** Working directory inside the sandbox (default: the workspace). */
  cwd?: string;
  /**
   * The program's environment, exactly (nothing of the caller's leaks in). The backend adds
   * PATH, LANG, HOME and TMPDIR where absent, and the session variables (see SESSION_ENV).
   */
  env?: Record<string, string>;
  /** stdin: a text, or a regular file on the host; /dev/null when absent. */
  stdin?: SandboxStdin;
  /** The gateway session to expose; without one the sandbox reaches no network at all. */
  session?: SandboxSession;
  /** Host paths the program may read (e.g. an installed agent), mounted read-only at the same path. */
  readOnlyPaths?: string[];
  limits: SandboxLimits;
  /** Names the run in the log (e.g. the rollout id). */
  label: string;
}

export type SandboxEndReason = 'exit' | 'timeout' | 'aborted' | 'limit' | 'setup-failed';
export type SandboxLimitName = 'cpu' | 'file-size' | 'output';

export interface SandboxResult {
  backend: string;
  /**
   * Why it ended: 'exit' (the program ended by itself; exitCode or signal says how), 'timeout'
   * (the wall clock), 'aborted' (the caller's signal), 'limit' (see `limit`), 'setup-failed'
   * (the sandbox or the setup command could not start or failed: `detail` says why).
   */
  reason: SandboxEndReason;
  limit: SandboxLimitName | null;
  /** A sentence for logs and the rollout's record ('' for a plain exit). */
  detail: string;
  exitCode: number | null;
  signal: string | null;
  /** The first `stdoutBytes` bytes, and the last 64 KiB apart (an answer is usually the last line). */
  stdout: string;
  stdoutTail: string;
  stderr: string;
  stderrTail: string;
  /** Bytes the program wrote, including those the caps dropped. */
  stdoutBytes: number;
  stderrBytes: number;
  /** From run() to the end, everything included. */
  wallMs: number;
  /** From run() until the command started (after the sandbox's and the setup command's setup); null if it never did. */
  startMs: number | null;
  /** CPU seconds of the command process itself (not its children), when it ended by itself. */
  cpuSeconds: number | null;
  /** What the session relay did: requests forwarded, and requests refused (the first few named). */
  relay: { forwarded: number; refused: number; refusedRequests: string[] };
}

/** One way of running programs; a Docker or Kubernetes backend is one more implementation. */
export interface SandboxBackend {
  readonly kind: string;
  /**
   * Runs one program to its end. Resolves once nothing it started is still running. Rejects only
   * for a spec that is wrong (SandboxSpecError) or a broken promise of the backend itself;
   * everything the program does ends in a result with a reason.
   */
  run(spec: SandboxSpec, signal?: AbortSignal): Promise<SandboxResult>;
}

/** The variables that tell a program where its session is (set by the backend when a spec has a session). */
export const SESSION_ENV = ['OPENAI_BASE_URL', 'OPENAI_API_BASE', 'OPENAI_API_KEY', 'ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY'] as const;

/**
 * The key a program is given: a placeholder, since the relay puts the session's real key on every
 * request. The real key never enters the sandbox, so a program that leaks its environment leaks
 * nothing. (Not shaped like an Anvil key: the gateway ignores such placeholders.)
 */
export const PLACEHOLDER_KEY = 'sk-anvil-sandbox-placeholder';

/** The session variables for a relay reachable at `origin` (http://127.0.0.1:<port>). */
export function sessionEnv(origin: string): Record<(typeof SESSION_ENV)[number], string> {
  return {
    OPENAI_BASE_URL: `${origin}/v1`,
    OPENAI_API_BASE: `${origin}/v1`,
    OPENAI_API_KEY: PLACEHOLDER_KEY,
    // Anthropic's clients append /v1/messages themselves.
    ANTHROPIC_BASE_URL: origin,
    ANTHROPIC_API_KEY: PLACEHOLDER_KEY,
  };
}

/** Where a backend's log lines go (an @anvil/observability Logger fits). */
export interface SandboxLogger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
}

export const stderrLogger: SandboxLogger = {
  info: (msg, fields) => process.stderr.write(`${JSON.stringify({ level: 'info', msg, ...fields })}\n`),
  warn: (msg, fields) => process.stderr.write(`${JSON.stringify({ level: 'warn', msg, ...fields })}\n`),
};
