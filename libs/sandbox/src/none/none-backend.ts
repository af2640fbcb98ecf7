import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeDeadHostsDirs } from '../host/proc-scan';
import { beginRun, logEnd, openStdin } from '../host/run-start';
import { resultWithoutProcess, superviseRun } from '../host/supervised-run';
import { ensureSandboxTools, type SandboxTools } from '../install/tools';
import { startSessionRelay, type SessionRelay } from '../relay/session-relay';
import { rlimitArgs } from '../spec';
import { sessionEnv, stderrLogger, type SandboxBackend, type SandboxLogger, type SandboxResult, type SandboxSpec } from '../types';

export interface NoneBackendOptions {
  install?: boolean;
  logger?: SandboxLogger;
}

/**
 * The `none` backend, for trusted programs: no isolation at all (the program sees the host's
 * files, network and processes, as the caller's uid), but the same interface and what can be
 * enforced without namespaces: the wall clock, the stop sequence, rlimits (the process limit does
 * not bind root), output caps, the session relay, and a supervisor that adopts orphans and kills
 * everything the program started when it ends.
 */
export class NoneSandbox implements SandboxBackend {
  readonly kind = 'none';

  private constructor(
    private readonly tools: SandboxTools,
    private readonly logger: SandboxLogger,
  ) {}

  static async create(opts: NoneBackendOptions = {}): Promise<NoneSandbox> {
    const logger = opts.logger ?? stderrLogger;
    const tools = ensureSandboxTools({ install: opts.install, local: false, log: (l) => logger.info(l) });
    logger.warn(
      "sandbox none: programs run UNSANDBOXED (the host's files, network and processes, as this uid); only trusted agents belong here",
      { uid: process.getuid?.() },
    );
    removeDeadHostsDirs(tmpdir(), 'anvil-none-');
    return new NoneSandbox(tools, logger);
  }

  async run(input: SandboxSpec, signal?: AbortSignal): Promise<SandboxResult> {
    const { clock, spec, counters } = await beginRun(input, signal);
    let privateDir: string | undefined;
    let relay: SessionRelay | undefined;
    let stdinOf: ReturnType<typeof openStdin> | undefined;
    try {
      if (clock.ended) return resultWithoutProcess(this.kind, clock.ended, clock, spec.limits, counters, '');
      // A HOME and TMPDIR of its own, removed afterwards, as the local backend's tmpfs are.
      privateDir = await mkdtemp(join(tmpdir(), `anvil-none-${process.pid}-`));
      await Promise.all([mkdir(join(privateDir, 'home')), mkdir(join(privateDir, 'tmp'))]);
      if (spec.session) relay = await startSessionRelay(spec.session, { loopbackPort: 0 });
      stdinOf = openStdin(spec);
      if (clock.ended) return resultWithoutProcess(this.kind, clock.ended, clock, spec.limits, counters, '');
      const env = {
        PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
        LANG: 'C.UTF-8',
        HOME: join(privateDir, 'home'),
        TMPDIR: join(privateDir, 'tmp'),
        ...spec.env,
        ...(relay ? sessionEnv(relay.address) : {}),
      };
      const args = ['--info-fd', '3', '--subreaper', '--parent-pid', String(process.pid)];
      if (spec.setup) args.push('--setup', String(spec.setup.length));
      args.push(...rlimitArgs(spec.limits), '--', ...(spec.setup ?? []), ...spec.argv);
      const result = await superviseRun(
        {
          backend: this.kind,
          file: this.tools.init,
          args,
          env,
          cwd: spec.cwd ?? spec.workspace,
          stdin: stdinOf.stdin,
          mode: 'subreaper',
        },
        spec,
        clock,
        relay?.stats ?? counters,
      );
      logEnd(this.logger, spec.label, result);
      return result;
    } finally {
      clock.dispose();
      stdinOf?.close();
      await relay?.close();
      if (privateDir) await rm(privateDir, { recursive: true, force: true });
    }
  }
}
