import {
  checkUserNamespaces,
  createSandbox,
  ensureSandboxTools,
  SandboxUnavailableError,
  type LocalBackendOptions,
  type SandboxBackend,
  type SandboxKind,
  type SandboxLogger,
} from '@anvil/sandbox';

/** Where sandboxes run: the uid range and runtime directory of the local backend (defaults: @anvil/sandbox's). */
export type SandboxOptions = Pick<LocalBackendOptions, 'uidBase' | 'uidCount' | 'runtimeDir'>;

/**
 * The manager's sandbox backends, one of each kind, created on first use: creating one installs
 * what it needs and proves this machine can run it (SandboxUnavailableError otherwise, with what
 * to do). A failure is not kept, so fixing the machine needs no restart. The backends log through
 * the manager's logger, so the none backend's warning that it runs agents unsandboxed is in the
 * run's log.
 */
export class Sandboxes {
  private readonly made = new Map<SandboxKind, Promise<SandboxBackend>>();

  constructor(
    private readonly logger: SandboxLogger,
    private readonly options: SandboxOptions = {},
  ) {}

  get(kind: SandboxKind): Promise<SandboxBackend> {
    let backend = this.made.get(kind);
    if (!backend) {
      backend = createSandbox(kind, { ...this.options, logger: this.logger });
      this.made.set(kind, backend);
      backend.catch(() => this.made.delete(kind));
    }
    return backend;
  }
}

/** The uid the synchronous probe builds its empty sandbox as, when root: `nobody`, which no sandbox's uid lease can collide with. */
const PROBE_UID = 65534;
let probed: string | null | undefined;

/**
 * Whether this machine can run the local sandbox, synchronously (for checks that run before
 * anything starts): null when it can, else what stands in the way and what to do. Installs the
 * tools the run would install, then starts one empty sandbox as an unprivileged uid, as every
 * sandbox runs. The answer is kept for the life of the process.
 */
export function localSandboxProblem(): string | null {
  if (probed !== undefined) return probed;
  try {
    const tools = ensureSandboxTools({ local: true, log: () => undefined });
    if (!tools.bwrap) throw new SandboxUnavailableError('bubblewrap (bwrap) is missing: apt-get install bubblewrap');
    const root = process.getuid?.() === 0;
    checkUserNamespaces(tools.bwrap, root ? PROBE_UID : null);
    probed = null;
  } catch (e) {
    if (!(e instanceof SandboxUnavailableError)) throw e;
    probed = e.message;
  }
  return probed;
}
