import { EXIT } from '../command';
import type { RunConfig } from '../../config/run-config';

/** A checked run configuration, or (after printing every problem) the exit code 78. */
export function configOrExit(checked: { cfg: RunConfig | null; problems: string[] }): RunConfig | number {
  if (checked.problems.length || !checked.cfg) {
    console.error(`invalid run config:\n${checked.problems.map((p) => `  ${p}`).join('\n')}`);
    return EXIT.config;
  }
  return checked.cfg;
}
