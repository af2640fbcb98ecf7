/**
 * What the supervisor (native/sandbox-init.c) reports on its info fd, one line per event:
 *   listening | setup-start | setup-end exit N | setup-end signal N | command-start
 *   command-end exit N cpu SECONDS | command-end signal N cpu SECONDS | error PHASE MESSAGE
 */
export interface SupervisorReport {
  listening: boolean;
  setupStarted: boolean;
  setupEnd: { exitCode: number | null; signal: number | null } | null;
  /** ms from the run's start, when the command was started. */
  commandStartMs: number | null;
  commandEnd: { exitCode: number | null; signal: number | null; cpuSeconds: number } | null;
  /** The first error the supervisor reported: the phase (rlimit, setup, command, listen, init) and its message. */
  error: { phase: string; message: string } | null;
}

export function emptyReport(): SupervisorReport {
  return { listening: false, setupStarted: false, setupEnd: null, commandStartMs: null, commandEnd: null, error: null };
}

/** Applies one line to the report (unknown lines are ignored: the protocol may grow). */
export function applyReportLine(report: SupervisorReport, line: string, nowMs: number): void {
  const words = line.trim().split(' ');
  const status = (kind: string | undefined, n: string | undefined) => {
    const v = Number(n);
    if (!Number.isInteger(v)) return null;
    if (kind === 'exit') return { exitCode: v, signal: null };
    if (kind === 'signal') return { exitCode: null, signal: v };
    return null;
  };
  switch (words[0]) {
    case 'listening':
      report.listening = true;
      break;
    case 'setup-start':
      report.setupStarted = true;
      break;
    case 'setup-end':
      report.setupEnd ??= status(words[1], words[2]);
      break;
    case 'command-start':
      report.commandStartMs ??= nowMs;
      break;
    case 'command-end': {
      const s = status(words[1], words[2]);
      const cpu = words[3] === 'cpu' ? Number(words[4]) : NaN;
      if (s && !report.commandEnd) report.commandEnd = { ...s, cpuSeconds: Number.isFinite(cpu) ? cpu : 0 };
      break;
    }
    case 'error':
      if (words.length >= 3) report.error ??= { phase: words[1], message: words.slice(2).join(' ') };
      break;
  }
}

/** Splits a byte stream into lines, calling `onLine` for each complete one. */
export function lineReader(onLine: (line: string) => void): (chunk: Buffer) => void {
  let rest = '';
  return (chunk) => {
    rest += chunk.toString('utf8');
    let nl: number;
    while ((nl = rest.indexOf('\n')) >= 0) {
      onLine(rest.slice(0, nl));
      rest = rest.slice(nl + 1);
    }
  };
}
