// A host process for the tests that kill it: runs one sandbox (SANDBOX_TEST_BACKEND, local by
// default) on the workspace given as argv[2] — a program and a setsid child that ignores SIGTERM,
// which write their pids to the workspace — and never returns on its own.
import { LocalSandbox } from '../local/local-backend';
import { NoneSandbox } from '../none/none-backend';

const quiet = { info: () => undefined, warn: () => undefined };

void (async () => {
  const ws = process.argv[2];
  const backend =
    process.env.SANDBOX_TEST_BACKEND === 'none'
      ? await NoneSandbox.create({ logger: quiet })
      : await LocalSandbox.create({
          uidBase: Number(process.env.SANDBOX_TEST_UID_BASE),
          uidCount: Number(process.env.SANDBOX_TEST_UID_COUNT),
          logger: quiet,
        });
  await backend.run({
    label: 'host-that-dies',
    workspace: ws,
    limits: { wallMs: 600_000 },
    argv: [
      'sh',
      '-c',
      `setsid sh -c "trap '' TERM HUP; echo \\$\\$ > ${ws}/child.pid; exec sleep 1000" & echo $$ > ${ws}/main.pid; sleep 0.2; touch ${ws}/started; sleep 1000`,
    ],
  });
})();
