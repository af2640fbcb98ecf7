/**
 * The stack's state file, <dataDir>/stack/current.json: which run is up, the pid of the command
 * driving it, and each service's pid, address and log file, so `anvil stack status` and
 * `down` (from another terminal) find them. Holds no secret: the admin token lives only in the
 * environments of the gateway and the rollout-manager.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { alive, commandLine, type ServiceHandle } from './service-process';

export interface StackState {
  runId: string;
  /** The `stack up` process driving the run. */
  driverPid: number;
  phase: 'starting' | 'running' | 'finished' | 'stopping' | 'stopped' | 'failed';
  /** 'local': Kafka and PostgreSQL from tools/infra (stopped by `down`); 'external': given with --brokers/--database (left alone). */
  infra: 'local' | 'external';
  kafkaBrokers: string;
  /** The run's database (a fresh one per run on the server) without credentials. */
  database: string;
  topicPrefix: string;
  runDir: string;
  services: ServiceHandle[];
  report: string | null;
  startedAt: string;
}

export const stateFile = (dataDir: string) => join(dataDir, 'stack', 'current.json');

export function readState(dataDir: string): StackState | null {
  const f = stateFile(dataDir);
  if (!existsSync(f)) return null;
  return JSON.parse(readFileSync(f, 'utf8')) as StackState;
}

/** Written atomically (temporary file + rename), so a reader never sees half a file. */
export function writeState(dataDir: string, s: StackState): void {
  const f = stateFile(dataDir);
  mkdirSync(dirname(f), { recursive: true });
  writeFileSync(`${f}.tmp`, JSON.stringify(s, null, 2) + '\n');
  renameSync(`${f}.tmp`, f);
}

export function clearState(dataDir: string): void {
  rmSync(stateFile(dataDir), { force: true });
}

/** Whether the recorded driver still runs (the pid alive and still a stack command: pids are reused). */
export const driverAlive = (s: StackState) => alive(s.driverPid) && (commandLine(s.driverPid) ?? 'stack').includes('stack');

/** Whether a recorded service still runs (the pid alive and still that service's entry point). */
export const serviceAlive = (h: ServiceHandle) => alive(h.pid) && (commandLine(h.pid) ?? `apps/${h.app}/`).includes(`apps/${h.app}/`);

/** A recorded run that is still going: its driver or any of its services. */
export const liveRun = (s: StackState) => driverAlive(s) || s.services.some(serviceAlive);
