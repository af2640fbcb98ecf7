import { closeSync, openSync } from 'node:fs';
import { resolveSpec, type ResolvedSpec } from '../spec';
import type { SandboxLogger, SandboxResult, SandboxSpec } from '../types';
import type { Launch, RelayCounters } from './supervised-run';
import { WallClock } from './wall-clock';

/**
 * What every backend's run() starts with: the wall clock first (it covers all that follows), then
 * the checked spec (a bad one rejects, with the clock stopped), and the relay's counters for a run
 * that ends before a relay exists.
 */
export async function beginRun(
  input: SandboxSpec,
  signal?: AbortSignal,
): Promise<{ clock: WallClock; spec: ResolvedSpec; counters: RelayCounters }> {
  const clock = new WallClock(input?.limits?.wallMs, signal);
  try {
    return { clock, spec: await resolveSpec(input), counters: { forwarded: 0, refused: 0, refusedRequests: [] } };
  } catch (e) {
    clock.dispose();
    throw e;
  }
}

/** The program's stdin: a text to pipe, a file opened here (close() it after the run), or nothing. */
export function openStdin(spec: ResolvedSpec): { stdin: Launch['stdin']; close(): void } {
  if (!spec.stdin) return { stdin: null, close: () => undefined };
  if ('text' in spec.stdin) return { stdin: { text: spec.stdin.text }, close: () => undefined };
  const fd = openSync(spec.stdin.file, 'r');
  return { stdin: { fd }, close: () => closeSync(fd) };
}

/** A run that did not simply exit is worth a line naming it (a plain exit is the caller's to log). */
export function logEnd(logger: SandboxLogger, label: string, r: SandboxResult): void {
  if (r.reason === 'exit') return;
  logger.info(`sandbox ${r.backend}: ${label} ended: ${r.reason}${r.detail ? ` (${r.detail})` : ''}`, {
    label,
    reason: r.reason,
    limit: r.limit,
    wallMs: Math.round(r.wallMs),
  });
}
