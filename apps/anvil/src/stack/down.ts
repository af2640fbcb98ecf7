/**
 * `anvil stack down`: stops what `up` started. A run still being driven is stopped through its
 * driver (SIGTERM: the same graceful path as Ctrl-C, services in order); services left running
 * (--keep-services, or a driver that died) are sent SIGTERM themselves; then Kafka and PostgreSQL,
 * when the stack started them (not --brokers/--database ones; --keep-infra leaves them up).
 */
import { resolve } from 'node:path';
import { STOP_WAVES } from '../config/service-settings';
import { alive, sleep, STOP_TIMEOUT_MS, stopProcess } from './service-process';
import { clearState, driverAlive, readState, serviceAlive } from './stack-state';

/** How long the driver may take to stop its services (each gets 20 s, four waves). */
const DRIVER_STOP_MS = 100_000;

export async function down(opts: { dataDir: string; keepInfra: boolean }): Promise<number> {
  const { keepInfra } = opts;
  const dataDir = resolve(opts.dataDir);
  const state = readState(dataDir);
  let ok = true;
  if (state) {
    if (driverAlive(state)) {
      console.log(`stopping run ${state.runId} (driver pid ${state.driverPid}) ...`);
      process.kill(state.driverPid, 'SIGTERM');
      const deadline = Date.now() + DRIVER_STOP_MS;
      while (alive(state.driverPid) && Date.now() < deadline) await sleep(200);
      if (alive(state.driverPid)) {
        console.log(
          `the driver (pid ${state.driverPid}) is still stopping after ${DRIVER_STOP_MS / 1000} s; stopping its services directly`,
        );
        ok = false;
      }
    }
    // The services as recorded (the driver clears them once stopped), in the stop order; a pid is
    // only signalled while it is still that service.
    const left = readState(dataDir)?.services ?? [];
    for (const wave of STOP_WAVES) {
      const group = left.filter((s) => wave.includes(s.app) && serviceAlive(s));
      const codes = await Promise.all(group.map((s) => stopProcess(s.pid, STOP_TIMEOUT_MS)));
      group.forEach((s, i) =>
        console.log(`${s.app} (pid ${s.pid}): ${codes[i] === 'killed' ? `killed after ${STOP_TIMEOUT_MS / 1000} s` : 'stopped'}`),
      );
      if (codes.includes('killed')) ok = false;
    }
  } else console.log('no stack run recorded');
  if ((!state || state.infra === 'local') && !keepInfra) {
    const { stopStack } = await import('@anvil/infra');
    await stopStack();
    console.log('Kafka and PostgreSQL stopped');
  }
  clearState(dataDir);
  return ok ? 0 : 1;
}
