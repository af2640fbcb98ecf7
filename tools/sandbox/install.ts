/**
 * `npx tsx tools/sandbox/install.ts`: installs what the agent sandboxes need — bubblewrap
 * from apt (as root), the supervisor compiled from
 * libs/sandbox/native/sandbox-init.c into .cache/sandbox/ — then starts one empty local sandbox
 * to prove this kernel allows it. The sandbox library does the same on first use; `npm test`
 * runs this first so no test pays for apt. Exit 1 with what to do when something is missing.
 */
import { LocalSandbox, SandboxUnavailableError } from '@anvil/sandbox';

const log = { info: (msg: string) => console.error(`[sandbox] ${msg}`), warn: (msg: string) => console.error(`[sandbox] ${msg}`) };

LocalSandbox.create({ logger: log }).then(
  (backend) => console.error(`[sandbox] local backend ready (limits: rlimits; ${backend.cgroups.why})`),
  (err: unknown) => {
    console.error(`[sandbox] ${err instanceof SandboxUnavailableError ? err.message : String(err)}`);
    process.exit(1);
  },
);
