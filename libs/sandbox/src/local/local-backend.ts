import { chmodSync, chownSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxUnavailableError } from '../errors';
import { removeDeadHostsDirs } from '../host/proc-scan';
import { beginRun, logEnd, openStdin } from '../host/run-start';
import { resultWithoutProcess, superviseRun } from '../host/supervised-run';
import { isRoot, runtimeBase, traversableBy } from '../install/paths';
import { ensureSandboxTools, type SandboxTools } from '../install/tools';
import { startSessionRelay, type SessionRelay } from '../relay/session-relay';
import { sessionEnv, stderrLogger, type SandboxBackend, type SandboxLogger, type SandboxResult, type SandboxSpec } from '../types';
import { bwrapArgs, GATEWAY_SOCKET, RELAY_PORT, SANDBOX_HOME } from './bwrap-args';
import { checkUserNamespaces, detectCgroups, type CgroupSupport } from './probe';
import { SandboxEtc } from './sandbox-etc';
import { DEFAULT_UID_BASE, DEFAULT_UID_COUNT, UidPool, type UidLease } from './uid-pool';
import { chownTree, ownerOf, type Owner } from './workspace-owner';

export interface LocalBackendOptions {
  /** Host uids handed to sandboxes (root only): [uidBase, uidBase + uidCount). */
  uidBase?: number;
  uidCount?: number;
  /** Where sockets, generated /etc files and uid locks live (default /run/anvil-sandbox as root). */
  runtimeDir?: string;
  /** Install bubblewrap with apt-get when missing (default true). */
  install?: boolean;
  logger?: SandboxLogger;
}

/**
 * The `local` backend: each run in its own bubblewrap sandbox (user, mount, PID, network, IPC and
 * UTS namespaces) as a host uid of its own, with the supervisor as the PID namespace's init.
 * README.md says what it guarantees and how.
 */
export class LocalSandbox implements SandboxBackend {
  readonly kind = 'local';
  /** Whether whole-sandbox limits through cgroup v2 would be possible here (the limits are rlimits either way). */
  readonly cgroups: CgroupSupport;
  private readonly pool: UidPool | null;
  private readonly base: string;
  /** Workspaces of running sandboxes: each is owned by its sandbox's uid while it runs, so it cannot be shared. */
  private readonly busy = new Set<string>();
  private readonly etc: SandboxEtc;

  private constructor(
    private readonly tools: SandboxTools & { bwrap: string },
    opts: LocalBackendOptions,
    private readonly logger: SandboxLogger,
  ) {
    this.base = runtimeBase(opts.runtimeDir);
    this.pool = isRoot()
      ? new UidPool(join(this.base, 'uids'), opts.uidBase ?? DEFAULT_UID_BASE, opts.uidCount ?? DEFAULT_UID_COUNT)
      : null;
    this.cgroups = detectCgroups();
    this.etc = SandboxEtc.shared(this.base, RUN_PREFIX);
  }

  /** Installs what is missing, then proves that this kernel lets bwrap build a sandbox (else SandboxUnavailableError). */
  static async create(opts: LocalBackendOptions = {}): Promise<LocalSandbox> {
    const logger = opts.logger ?? stderrLogger;
    const tools = ensureSandboxTools({ install: opts.install, local: true, runtimeDir: opts.runtimeDir, log: (l) => logger.info(l) });
    const { bwrap } = tools;
    if (!bwrap) throw new SandboxUnavailableError('bubblewrap (bwrap) is missing: apt-get install bubblewrap');
    const backend = new LocalSandbox({ ...tools, bwrap }, opts, logger);
    removeDeadHostsDirs(backend.base, RUN_PREFIX);
    const lease = await backend.pool?.acquire();
    try {
      checkUserNamespaces(bwrap, lease?.uid ?? null);
    } finally {
      await lease?.release();
    }
    if (!backend.pool)
      logger.warn('sandbox local: not root, so every sandbox runs as this user: the process limit is shared with its other processes', {
        uid: process.getuid?.(),
      });
    return backend;
  }

  async run(input: SandboxSpec, signal?: AbortSignal): Promise<SandboxResult> {
    const { clock, spec, counters } = await beginRun(input, signal);
    const notStarted = (detail: string) =>
      resultWithoutProcess(this.kind, clock.ended ?? 'setup-failed', clock, spec.limits, counters, clock.ended ? '' : detail);
    let lease: UidLease | undefined;
    let runtimeDir: string | undefined;
    let relay: SessionRelay | undefined;
    let restoreOwner: Owner | undefined;
    let stdinOf: ReturnType<typeof openStdin> | undefined;
    let claimed = false;
    try {
      if (clock.ended) return notStarted('');
      if (this.busy.has(spec.workspace)) return notStarted(`the workspace ${spec.workspace} is in use by another running sandbox`);
      this.busy.add(spec.workspace);
      claimed = true;
      lease = await this.pool?.acquire();
      const ids = lease ? { uid: lease.uid, gid: lease.uid } : null;
      // Small synchronous steps (here and below): on a busy host each awaited one waits its turn
      // in the event loop, and a sandbox's start is a dozen of them.
      runtimeDir = mkdtempSync(join(this.base, `${RUN_PREFIX}${process.pid}-`));
      const dir = runtimeDir;
      if (ids) {
        chownSync(dir, ids.uid, ids.gid);
        chmodSync(dir, 0o700);
        for (const p of [spec.workspace, ...spec.readOnlyMounts.map((m) => m.src)]) {
          // The workspace is about to become the sandbox's own; a read-only path must already be readable.
          const blocked = traversableBy(p, ids.uid, ids.gid, p !== spec.workspace);
          if (blocked)
            return notStarted(
              `${p} cannot be mounted: the sandbox's uid cannot ${blocked === p ? 'read' : 'pass through'} ${blocked} (mode ${modeOf(blocked)}); ` +
                'use a path every user may reach (e.g. under /tmp)',
            );
        }
        restoreOwner = ownerOf(spec.workspace);
        await chownTree(spec.workspace, ids);
      }
      if (spec.session) relay = await startSessionRelay(spec.session, { socketPath: join(dir, GATEWAY_SOCKET), owner: ids ?? undefined });
      stdinOf = openStdin(spec);
      if (clock.ended) return notStarted('');
      const env = {
        PATH: '/usr/local/bin:/usr/bin:/bin',
        LANG: 'C.UTF-8',
        USER: 'agent',
        LOGNAME: 'agent',
        HOME: SANDBOX_HOME,
        TMPDIR: '/tmp',
        ...spec.env,
        ...(spec.session ? sessionEnv(`http://127.0.0.1:${RELAY_PORT}`) : {}),
      };
      const args = bwrapArgs({
        spec,
        runtimeDir: dir,
        etcDir: this.etc.current(),
        init: this.tools.init,
        cwd: spec.cwd ?? spec.workspaceAt,
      });
      // As root, bwrap runs as the sandbox's uid (an unprivileged user, so it builds a user
      // namespace); its --die-with-parent ties bwrap itself, not only what it runs, to this process.
      const result = await superviseRun(
        {
          backend: this.kind,
          file: this.tools.bwrap,
          args,
          ids: ids ?? undefined,
          env,
          cwd: '/',
          stdin: stdinOf.stdin,
          mode: 'pid-namespace',
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
      // Nothing of the uid may outlive the run: the PID namespace guarantees it, this proves it.
      const killed = (await lease?.release()) ?? [];
      if (killed.length)
        this.logger.warn('sandbox local: processes outlived their PID namespace and were killed', { label: spec.label, pids: killed });
      if (restoreOwner) await chownTree(spec.workspace, restoreOwner);
      if (runtimeDir) rmSync(runtimeDir, { recursive: true, force: true });
      if (claimed) this.busy.delete(spec.workspace);
    }
  }
}

/** Per-run directories (and the prepared /etc) under the runtime base: `run-<host pid>-*`. */
const RUN_PREFIX = 'run-';

function modeOf(p: string): string {
  try {
    return (statSync(p).mode & 0o777).toString(8);
  } catch {
    return '?';
  }
}
