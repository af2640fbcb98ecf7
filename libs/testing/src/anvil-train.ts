import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from './service-process';

export interface AnvilTrainResult {
  code: number | null;
  out: string;
  err: string;
  /** stdout and stderr interleaved as they arrived (what a user's terminal shows). */
  both: string;
  seconds: number;
}

/** `anvil train --config FILE` as a user runs it: its own process, from the repository root. */
export function anvilTrain(configFile: string): Promise<AnvilTrainResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(repoRoot, 'apps', 'anvil', 'bin', 'anvil.cjs'), 'train', '--config', configFile], {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    let both = '';
    child.stdout.on('data', (d: Buffer) => ((out += d.toString()), (both += d.toString())));
    child.stderr.on('data', (d: Buffer) => ((err += d.toString()), (both += d.toString())));
    child.on('close', (code) => resolve({ code, out, err, both, seconds: (performance.now() - started) / 1000 }));
  });
}
