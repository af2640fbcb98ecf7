/**
 * `anvil stack status`: Kafka and PostgreSQL, the run the state file records, and each
 * service's pid and readiness. Exit 0 when the infrastructure and the run's services are up, 3 otherwise.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { driverAlive, readState, serviceAlive } from './stack-state';

export async function status(opts: { dataDir: string }): Promise<number> {
  const state = readState(resolve(opts.dataDir));
  let up = true;
  if (!state || state.infra === 'local') {
    const { kafkaStatus, postgresStatus } = await import('@anvil/infra');
    const k = kafkaStatus();
    const p = postgresStatus();
    console.log(`kafka:    ${k.running ? `running pid ${k.pid}` : 'stopped'} ${k.brokers}`);
    console.log(`postgres: ${p.running ? `running pid ${p.pid}` : 'stopped'} ${p.url}`);
    up = k.running && p.running;
  } else console.log(`infrastructure: given (--brokers ${state.kafkaBrokers}, database ${state.database})`);
  if (!state) {
    console.log('run: none recorded (`anvil stack up` starts one)');
    return up ? 0 : 3;
  }
  const driver = driverAlive(state);
  console.log(`run:      ${state.runId} (${state.phase}${driver ? `, driven by pid ${state.driverPid}` : ''}), started ${state.startedAt}`);
  console.log(`          ${state.runDir} (logs/, checkpoints/), database ${state.database}, topics ${state.topicPrefix}*`);
  if (state.report && existsSync(state.report)) console.log(`report:   ${state.report}`);
  for (const s of state.services) {
    const running = serviceAlive(s);
    let ready = '';
    if (running) {
      try {
        const r = await fetch(`${s.url}/readyz`, { signal: AbortSignal.timeout(3_000) });
        ready = r.status === 200 ? 'ready' : `not ready (${r.status})`;
      } catch (e) {
        ready = `no answer (${(e as Error).message})`;
      }
    }
    console.log(`  ${s.app.padEnd(16)} ${running ? `pid ${String(s.pid).padEnd(7)} ${s.url} ${ready}` : 'stopped'}  log ${s.logFile}`);
    up &&= running;
  }
  return up && (state.services.length > 0 || state.phase === 'finished') ? 0 : 3;
}
